"""Runs (and sessions): who drives each, its budget and result, and its live status read back.

A run row records its owner (pid, host) and a heartbeat, so a "running" run whose process is gone reads as
"interrupted"; an unfinished run's ``spent`` is counted from the ledger, the only count that survives a kill.
"""

from __future__ import annotations

import json
import os
import socket
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlite_utils
from pydantic import ValidationError

from kernelcast.tools.store.errors import DamagedRow, InvalidRunId
from kernelcast.tools.store.ledger import Ledger
from kernelcast.tools.store.records import RunRecord
from kernelcast.tools.store.sql import now, where

MAX_RUN_ID_CHARS = 1024  # ids are "<task>-<time>-<16 hex>"; LIKE patterns over 50,000 bytes fail in SQLite

HEARTBEAT_STALE_S = 900.0  # a run on another host is presumed dead after this long without a heartbeat


def _owner_alive(row: dict[str, Any]) -> bool:
    """Is the process that drives this run still there? (pid on this host, else a recent heartbeat)"""
    pid, host = row.get("owner_pid"), row.get("owner_host")
    if pid and host == socket.gethostname():
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    beat = row.get("heartbeat")
    if not beat:
        return False
    age = (datetime.now(UTC) - datetime.fromisoformat(beat)).total_seconds()
    return age < HEARTBEAT_STALE_S


class Runs:
    """The ``runs`` table; ``ledger`` counts an unfinished run's spending."""

    def __init__(self, db: sqlite_utils.Database, path: Path, ledger: Ledger) -> None:
        self.db = db
        self.path = path
        self.ledger = ledger

    def create(self, task: str, device: str, config: dict[str, Any], budget: int, folder: str = "",
               run_id: str | None = None) -> str:
        """A new run, driven by this process; returns its id."""
        # 64 random bits: ids are guessable by nobody and never collide across machines sharing a store
        run_id = run_id or f"{task}-{datetime.now(UTC).strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:16]}"
        with self.db.conn:
            self.db.table("runs").insert({"id": run_id, "task": task, "device": device, "status": "running",
                                          "config": json.dumps(config), "budget": budget, "spent": 0,
                                          "best_candidate": None, "best_speedup": None, "summary": "{}",
                                          "folder": folder, "created_at": now(), "updated_at": now(),
                                          "owner_pid": os.getpid(), "owner_host": socket.gethostname(),
                                          "heartbeat": now()}, pk="id")
        return run_id

    def claim(self, run_id: str) -> None:
        """This process now drives the run (a resume): owner and heartbeat are ours."""
        self.update(run_id, status="running", owner_pid=os.getpid(), owner_host=socket.gethostname(), heartbeat=now())

    def heartbeat(self, run_id: str) -> None:
        """The run's owner is alive now."""
        with self.db.conn:
            self.db.execute("update runs set heartbeat = ? where id = ?", [now(), run_id])

    def update(self, run_id: str, **fields: Any) -> None:
        """Set columns of a run (a ``summary`` given as a dict is stored as JSON)."""
        if "summary" in fields and not isinstance(fields["summary"], str):
            fields["summary"] = json.dumps(fields["summary"])
        with self.db.conn:
            self.db.table("runs").update(run_id, {**fields, "updated_at": now()})

    def get(self, run_id: str) -> RunRecord | None:
        """The run with this id, or the only run whose id starts with it (wildcards are literal)."""
        if not run_id.strip():
            return None
        if len(run_id) > MAX_RUN_ID_CHARS:
            raise InvalidRunId(f"not a valid run id ({len(run_id):,} characters; run ids are at most "
                               f"{MAX_RUN_ID_CHARS:,}): see `kernelcast runs`")
        pattern = run_id.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        rows = list(self.db.query("select * from runs where id = ? or id like ? escape '\\' "
                                  "order by created_at desc limit 2", [run_id, pattern]))
        exact = [r for r in rows if r["id"] == run_id]
        if exact:
            rows = exact
        if len(rows) != 1:
            return None
        return self._record(rows[0])

    def recent(self, task: str | None = None, limit: int = 50) -> list[RunRecord]:
        """The most recent runs first (ties in creation time: the later inserted first); rows that do not parse
        are left out (:meth:`listing` names them)."""
        return self.listing(task, limit)[0]

    def listing(self, task: str | None = None, limit: int = 50) -> tuple[list[RunRecord], list[DamagedRow]]:
        """:meth:`recent`, and what is wrong with each row among them that does not parse (left out: one
        damaged row never stops a listing)."""
        condition, args = where(task=task)
        query = f"select * from runs {condition} order by created_at desc, rowid desc limit ?"
        records: list[RunRecord] = []
        damaged: list[DamagedRow] = []
        for row in self.db.query(query, [*args, limit]):
            try:
                records.append(self._record(row))
            except DamagedRow as exc:
                damaged.append(exc)
        return records, damaged

    def _record(self, row: dict[str, Any]) -> RunRecord:
        """The typed run with its live status: a "running" run whose owner is gone is "interrupted"; spent is
        read from the ledger. The one place a runs row is parsed."""
        row = dict(row)
        try:
            if row["status"] in ("running", "interrupted", "failed"):  # a finished run recorded its own total
                row["spent"] = self.ledger.totals(row["id"])[0]
            if row["status"] == "running" and not _owner_alive(row):
                row["status"] = "interrupted"
            return RunRecord.model_validate(row)
        except ValueError as exc:  # a ValidationError, or a heartbeat that is no time
            problem = (f"field '{'.'.join(map(str, exc.errors()[0]['loc']))}': {exc.errors()[0]['msg']}"
                       if isinstance(exc, ValidationError) else str(exc))
            raise DamagedRow(f"{self.path}: the row of run {str(row.get('id'))[:80]!r} does not parse "
                             f"({' '.join(problem.split())[:200]})") from None
