"""Devices and what was learned about them once: their specs, the probe verdict per driver version (may this
device run kernels at all), and once-per-device measurements such as the triad bandwidth."""

from __future__ import annotations

import json
from typing import Any

import sqlite_utils

from kernelcast.tools.core.measurement import HardwareSpec
from kernelcast.tools.store.records import DeviceProbeRecord, ProbeVerdictRecord
from kernelcast.tools.store.sql import now, parsed


def device_row(spec: HardwareSpec, at: str) -> dict[str, Any]:
    return {"key": spec.key, "spec": spec.model_dump_json(), "updated_at": at}


class Devices:
    """The ``devices`` and ``device_probes`` tables, and the ``probe:NAME:DEVICE`` entries of ``meta``."""

    def __init__(self, db: sqlite_utils.Database) -> None:
        self.db = db

    def upsert(self, spec: HardwareSpec) -> None:
        """Remember a device's spec so forecasters trained later see the hardware of each measurement."""
        with self.db.conn:
            self.db.table("devices").upsert(device_row(spec, now()), pk="key")

    def add_if_unknown(self, spec: HardwareSpec) -> bool:
        """Remember a device's spec only when this store has none under its key (an import never rewrites what the
        device itself reported); returns whether it was added."""
        with self.db.conn:
            cursor = self.db.execute("insert or ignore into devices (key, spec, updated_at) values (?, ?, ?)",
                                     [spec.key, spec.model_dump_json(), now()])
            return cursor.rowcount > 0

    def all(self) -> dict[str, HardwareSpec]:
        """Every known device's spec by its key."""
        return {r["key"]: HardwareSpec.model_validate_json(r["spec"]) for r in self.db.table("devices").rows}

    def record_verdict(self, key: str, driver: str, reason: str) -> None:
        """A device's probe verdict ("" = healthy) for this driver version (a new driver is probed again)."""
        with self.db.conn:
            self.db.table("device_probes").upsert({"key": key, "driver": driver, "reason": reason, "checked_at": now()},
                                                  pk=("key", "driver"))

    def verdict(self, key: str, driver: str) -> str | None:
        """The cached verdict, or None when this device and driver were never probed or the row is no verdict (a
        NULL or non-text reason): the caller probes again and overwrites it."""
        rows = self.db.query("select * from device_probes where key = ? and driver = ?", [key, driver])
        record = next((parsed(ProbeVerdictRecord, row) for row in rows), None)
        return None if record is None else record.reason

    def set_probe(self, device: str, name: str, value: float, detail: dict[str, Any] | None = None) -> None:
        """Remember a once-per-device measurement (e.g. the triad bandwidth the roofline prior uses)."""
        payload = json.dumps({"value": value, "detail": detail or {}, "measured_at": now()})
        with self.db.conn:
            self.db.table("meta").upsert({"key": f"probe:{name}:{device}", "value": payload}, pk="key")

    def probe(self, device: str, name: str) -> float | None:
        """The probe's value, or None when it was never stored or its row does not parse (not JSON, no finite
        value): the caller probes again and overwrites it, rather than every forecast failing on it."""
        row = self.db.execute("select value from meta where key = ?", [f"probe:{name}:{device}"]).fetchone()
        record = None if row is None else parsed(DeviceProbeRecord, row[0])
        return None if record is None else record.value
