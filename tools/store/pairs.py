"""Portable datasets: measured (candidate, measurement) pairs with their devices' specs as gzipped JSON lines,
written by ``kernelcast dataset export`` and loaded by ``dataset import`` as ``imported`` rows."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.errors import InputError
from kernelcast.tools.core.measurement import HardwareSpec, Measurement
from kernelcast.tools.store.candidates import Candidates
from kernelcast.tools.store.devices import Devices
from kernelcast.tools.store.errors import ImportConflict
from kernelcast.tools.store.ledger import Ledger

#: An imported speedup this many times off the device's own live measurement of the same candidate contradicts it
#: (a busy CPU moved one kernel's speedup 2x between runs: NOTES.md; a forged 0.02x against 1x is 50x).
CONTRADICTION_FACTOR = 3.0


def contradicts(theirs: Measurement, own: Measurement) -> str:
    """What ``theirs`` claims that ``own`` (a live measurement of the same candidate) refutes, or "": correct
    against failed either way, or speedups more than :data:`CONTRADICTION_FACTOR` apart."""
    if theirs.ok != own.ok:
        return _said(theirs)
    if theirs.ok and own.ok and theirs.speedup and own.speedup:
        ratio = theirs.speedup / own.speedup
        if not 1 / CONTRADICTION_FACTOR <= ratio <= CONTRADICTION_FACTOR:
            return _said(theirs)
    return ""


def _said(m: Measurement) -> str:
    return f"{m.speedup:.3g}x" if m.ok and m.speedup else m.status.value


def read_pairs(path: str | Path) -> tuple[list[tuple[Candidate, Measurement]], dict[str, HardwareSpec]]:
    """The pairs and device specs of a dataset file; anything else is one :class:`InputError` naming the line."""
    pairs, devices = [], {}
    number = 0
    try:
        with gzip.open(path, "rt") as fh:
            for line in fh:
                number += 1
                row = json.loads(line)
                cand = Candidate.model_validate(row["candidate"])
                # identities are recomputed: a file written before the hash changed (e.g. preprocessing
                # joined the identity) must still join its measurements to its candidates
                m = Measurement.model_validate(row["measurement"]).model_copy(update={"candidate_hash": cand.hash})
                pairs.append((cand, m))
                if row.get("device"):
                    devices[m.device] = HardwareSpec.model_validate(row["device"])
    except (OSError, EOFError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as exc:
        where = f" line {number}" if number else ""
        problem = " ".join(str(exc).split())[:160] or type(exc).__name__
        raise InputError(f"{path}{where}: not a dataset written by `kernelcast dataset export` ({problem})") from None
    return pairs, devices


class Pairs:
    """Export and import of measured pairs, over the store's ledger, candidates and devices."""

    def __init__(self, ledger: Ledger, candidates: Candidates, devices: Devices) -> None:
        self.ledger = ledger
        self.candidates = candidates
        self.devices = devices

    def export_to(self, path: str | Path, device: str | None = None) -> int:
        """Measured pairs (+ the specs of their devices) as gzipped JSON lines, to seed another store; returns
        how many."""
        devices = self.devices.all()
        pairs = self.ledger.measured_pairs(device=device, sizes="full")
        with gzip.open(path, "wt") as fh:
            for cand, m in pairs:
                spec = devices.get(m.device)
                fh.write(json.dumps({"candidate": cand.model_dump(), "measurement": m.model_dump(mode="json"),
                                     "device": spec.model_dump() if spec else None}) + "\n")
        return len(pairs)

    def import_from(self, path: str | Path) -> int:
        """Load an exported dataset as ``imported`` rows (training data, never "already measured", calibration or
        trust); pairs already present (same candidate, device, time) are skipped. A device this store knows keeps
        its own spec. Refused whole (:class:`ImportConflict`, nothing written) when a pair contradicts this
        store's live measurement of the same candidate on the same device, task and sizes. Returns the rows added."""
        pairs, devices = read_pairs(path)
        conflict = self._contradiction(pairs)
        if conflict is not None:
            raise ImportConflict(f"{path}: not imported: {conflict}")
        have = {(m.candidate_hash, m.device, m.created_at) for m in self.ledger.find(provenance=("live", "imported"))}
        added = 0
        for spec in devices.values():
            self.devices.add_if_unknown(spec)
        for cand, m in pairs:
            if (m.candidate_hash, m.device, m.created_at) in have:
                continue
            self.candidates.add(cand)
            self.ledger.add(m.model_copy(update={"provenance": "imported"}))
            added += 1
        return added

    def _contradiction(self, pairs: list[tuple[Candidate, Measurement]]) -> str | None:
        """The first imported pair that this store's own live measurements refute, said in one line, or None."""
        for _, m in pairs:
            own = self.ledger.latest(m.candidate_hash, m.device, m.sizes, fingerprint=m.task_fingerprint)
            if own is None or own.created_at == m.created_at:
                continue  # nothing measured here, or the very row (a store's own export read back)
            why = contradicts(m, own)
            if why:
                return (f"candidate {m.candidate_hash[:12]} of task {m.task} on {m.device}: the file says {why}, "
                        f"this device measured {_said(own)}")
        return None
