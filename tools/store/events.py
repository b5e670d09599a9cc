"""A run's event log: numbered entries in order, what progress views and the report replay."""

from __future__ import annotations

import json
from typing import Any

import sqlite_utils

from kernelcast.tools.store.records import EventRecord
from kernelcast.tools.store.sql import now, where


class Events:
    """The ``events`` table."""

    def __init__(self, db: sqlite_utils.Database) -> None:
        self.db = db

    def add(self, run_id: str, kind: str, payload: dict[str, Any] | None = None,
            candidate_hash: str | None = None) -> int:
        """Append an event to a run's log; the sequence number is assigned in the same transaction."""
        with self.db.conn:
            seq = self.db.execute("select coalesce(max(seq), 0) + 1 from events where run_id = ?", [run_id]).fetchone()[0]
            self.db.table("events").insert({"run_id": run_id, "seq": seq, "kind": kind, "candidate_hash": candidate_hash,
                                            "payload": json.dumps(payload or {}, default=str), "created_at": now()})
        return int(seq)

    def find(self, run_id: str, kind: str | None = None) -> list[EventRecord]:
        """A run's log in order (``kind``: only events of that kind)."""
        condition, args = where(run_id=run_id, kind=kind)
        return [EventRecord.model_validate(r)
                for r in self.db.query(f"select * from events {condition} order by seq", args)]
