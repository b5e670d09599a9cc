"""The SQLite store: the system of record of every task, candidate, measurement, forecast, run and event.

One file in WAL mode through sqlite-utils. Writes are single transactions, so a killed process leaves either the
whole row or nothing; a measurement is written before anybody reports it, so searches also produce the training
and calibration data for the next one.

This module opens the database (writable, or read-only without writing anything), brings its schema up to date
(``migrations.py``) and hands out one object per concept, each in its own module:

- ``store.tasks`` (:class:`~kernelcast.tools.store.tasks.Tasks`), ``store.devices`` (specs, probe verdicts,
  device probes: :class:`~kernelcast.tools.store.devices.Devices`), ``store.candidates``
  (:class:`~kernelcast.tools.store.candidates.Candidates`);
- ``store.ledger`` (measurements and a run's totals: :class:`~kernelcast.tools.store.ledger.Ledger`),
  ``store.forecasts`` (:class:`~kernelcast.tools.store.forecasts.Forecasts`);
- ``store.runs`` (:class:`~kernelcast.tools.store.runs.Runs`), ``store.events``
  (:class:`~kernelcast.tools.store.events.Events`), ``store.decisions`` (each routing decision:
  :class:`~kernelcast.tools.store.decisions.Decisions`);
- ``store.pairs`` (dataset export and import: :class:`~kernelcast.tools.store.pairs.Pairs`).
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from urllib.parse import quote

import sqlite_utils

from kernelcast.tools.store.candidates import Candidates
from kernelcast.tools.store.decisions import Decisions
from kernelcast.tools.store.devices import Devices
from kernelcast.tools.store.errors import DamagedRow, ImportConflict, InvalidRunId, StoreError
from kernelcast.tools.store.events import Events
from kernelcast.tools.store.forecasts import Forecasts
from kernelcast.tools.store.ledger import TRAINING_PROVENANCE, Ledger
from kernelcast.tools.store.migrations import MIGRATIONS, SCHEMA_VERSION, migrate, schema_version
from kernelcast.tools.store.pairs import Pairs
from kernelcast.tools.store.records import EventRecord, ForecastRecord, MeasuredForecast, RunRecord
from kernelcast.tools.store.runs import Runs
from kernelcast.tools.store.tasks import Tasks

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "TRAINING_PROVENANCE", "DamagedRow", "EventRecord", "ForecastRecord",
           "ImportConflict", "InvalidRunId", "MeasuredForecast", "RunRecord", "Store", "StoreError"]


class Store:
    """An open kernelcast database and its concepts (see the module docstring)."""

    def __init__(self, path: str | Path, read_only: bool = False) -> None:
        """``read_only`` opens an existing store without writing anything (commands that only read, stores
        on read-only media); writes then fail (``sqlite3.OperationalError``: readonly database)."""
        self.path = Path(path)
        self.read_only = read_only
        if read_only:
            if not self.path.exists():
                raise StoreError(f"{path}: no kernelcast database here")
            try:
                conn = _connect_read_only(self.path)
            except sqlite3.DatabaseError as exc:
                raise StoreError(f"{path}: not a usable kernelcast database ({exc})") from None
        else:
            if str(path) != ":memory:":
                try:
                    self.path.parent.mkdir(parents=True, exist_ok=True)
                except OSError as exc:
                    raise StoreError(f"{path}: its folder cannot be created ({exc.strerror or exc})") from None
            conn = sqlite3.connect(str(path), timeout=30.0, check_same_thread=False)
        conn.execute("PRAGMA busy_timeout = 30000")
        self.db = sqlite_utils.Database(conn)
        try:
            if str(path) != ":memory:" and not read_only:
                self.db.enable_wal()
            conn.execute("PRAGMA synchronous = NORMAL")
            migrate(self.db, self.path, read_only)
        except sqlite3.DatabaseError as exc:
            if not read_only and str(path) != ":memory:" and not all(
                    os.access(p, os.W_OK) for p in (self.path, self.path.parent) if p.exists()):
                raise self._not_writable(exc) from None  # SQLite cannot make its journal beside the file
            raise StoreError(f"{path}: not a usable kernelcast database ({exc})") from None
        self.tasks = Tasks(self.db)
        self.devices = Devices(self.db)
        self.candidates = Candidates(self.db)
        self.ledger = Ledger(self.db)
        self.forecasts = Forecasts(self.db)
        self.runs = Runs(self.db, self.path, self.ledger)
        self.events = Events(self.db)
        self.decisions = Decisions(self.db)
        self.pairs = Pairs(self.ledger, self.candidates, self.devices)

    def close(self) -> None:
        self.db.conn.close()

    def check_writable(self) -> None:
        """Raise :class:`StoreError` unless this store can be written: SQLite opens a file it may not write
        (read-only file, immutable, a folder without room for the journal) read-only without a word, and the
        first write would fail in the middle of a command, after the hardware was spent. A write that changes
        nothing, rolled back."""
        try:
            self.db.conn.execute("delete from meta where 0")
        except sqlite3.Error as exc:
            raise self._not_writable(exc) from None
        finally:
            self.db.conn.rollback()

    def _not_writable(self, exc: sqlite3.Error) -> StoreError:
        return StoreError(f"{self.path}: the database cannot be written ({' '.join(str(exc).split())}); commands "
                          "that record need a writable database file and folder")

    @property
    def schema_version(self) -> int:
        return schema_version(self.db)

    def integrity_ok(self) -> bool:
        return self.db.execute("pragma integrity_check").fetchone()[0] == "ok"


def _connect_read_only(path: Path) -> sqlite3.Connection:
    """A read-only connection, also where the database's folder cannot be written.

    ``mode=ro`` reads a WAL database while a writer is active, but it needs the ``-shm`` index beside the
    file, which a folder nobody may write to cannot hold. There no writer can be active either (a writer needs
    that folder for its own ``-wal``), so the file is opened ``immutable``: unless a leftover ``-wal`` holds
    writes that were never checkpointed, which immutable reading would silently miss.
    """
    uri = f"file:{quote(str(path.resolve()))}?mode=ro"
    conn = sqlite3.connect(uri, uri=True, timeout=30.0, check_same_thread=False)
    try:
        conn.execute("select count(*) from sqlite_master").fetchone()
        return conn
    except sqlite3.OperationalError:
        conn.close()
        if os.access(path.parent, os.W_OK):
            raise
    wal = path.with_name(path.name + "-wal")
    if wal.exists() and wal.stat().st_size > 0:
        raise StoreError(f"{path}: its folder is read-only and {wal.name} holds writes never checkpointed into "
                         "the database; open it once where it can be written")
    return sqlite3.connect(uri + "&immutable=1", uri=True, timeout=30.0, check_same_thread=False)
