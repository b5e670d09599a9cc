"""The SQLite store: the system of record of every task, candidate, measurement,
forecast, run and event.

One file in WAL mode through sqlite-utils. Writes are single transactions, so
a killed process leaves either the whole row or nothing; a measurement is
written before anybody reports it, so searches also produce the training and
calibration data for the next one.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sqlite3
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import sqlite_utils
from pydantic import BaseModel, ValidationError

from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.edit import Edit
from kernelcast.tools.core.errors import InputError
from kernelcast.tools.core.legacy_intent import parse_legacy_intent
from kernelcast.tools.core.measurement import HardwareSpec, Measurement, Provenance
from kernelcast.tools.core.task import Task
from kernelcast.tools.store.records import (
    DeviceProbeRecord,
    EventRecord,
    ForecastRecord,
    MeasuredForecast,
    ProbeVerdictRecord,
    RunRecord,
)

__all__ = ["DamagedRow", "EventRecord", "ForecastRecord", "ImportConflict", "InvalidRunId", "MeasuredForecast", "RunRecord",
           "SCHEMA_VERSION", "Store", "StoreError"]

RecordT = TypeVar("RecordT", bound=BaseModel)

SCHEMA_VERSION = 6  # = len(MIGRATIONS); add a step there before changing the schema


def _now() -> str:
    return datetime.now(UTC).isoformat()


class StoreError(InputError, RuntimeError):
    """The store file is unusable (wrong schema version, not a database)."""


class DamagedRow(StoreError):
    """One row does not parse (bad JSON, an unknown status: written by hand or by another program); listings
    leave it out and say so, a read of that row is this error."""


class ImportConflict(InputError, ValueError):
    """An import whose rows contradict this store's own live measurements: refused whole, nothing written."""


class InvalidRunId(InputError, ValueError):
    """A run id that no run can have (far too long): bad input, not a store problem."""


MAX_RUN_ID_CHARS = 1024  # ids are "<task>-<time>-<16 hex>"; LIKE patterns over 50,000 bytes fail in SQLite


class Store:
    """Typed access to the kernelcast database."""

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
            self._migrate()
        except sqlite3.DatabaseError as exc:
            if not read_only and str(path) != ":memory:" and not all(
                    os.access(p, os.W_OK) for p in (self.path, self.path.parent) if p.exists()):
                raise self._not_writable(exc) from None  # SQLite cannot make its journal beside the file
            raise StoreError(f"{path}: not a usable kernelcast database ({exc})") from None

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

    # ---- schema ---------------------------------------------------------------------
    def _migrate(self) -> None:
        """Apply the migrations this database has not had yet, each once, in order, in one transaction.

        A database already at the current version is not written to, so read-only stores open."""
        db = self.db
        has_meta = db.table("meta").exists()
        row = db.execute("select value from meta where key = 'schema_version'").fetchone() if has_meta else None
        current = int(row[0]) if row is not None else 0
        if current > SCHEMA_VERSION:
            raise StoreError(f"database schema version {current} is newer than this kernelcast ({SCHEMA_VERSION})")
        if current == SCHEMA_VERSION:
            return
        if self.read_only:
            raise StoreError(f"{self.path}: schema version {current} needs an upgrade to {SCHEMA_VERSION}; "
                             "open it writable once")
        with db.conn:
            db.table("meta").create({"key": str, "value": str}, pk="key", if_not_exists=True)
            for step in MIGRATIONS[current:]:
                step(db)
            db.table("meta").upsert({"key": "schema_version", "value": str(SCHEMA_VERSION)}, pk="key")

    @property
    def schema_version(self) -> int:
        return int(self.db.execute("select value from meta where key = 'schema_version'").fetchone()[0])

    # ---- tasks and candidates -----------------------------------------------------------
    def upsert_task(self, task: Task) -> None:
        with self.db.conn:
            self.db.table("tasks").upsert({"name": task.name, "path": str(task.path), "language": task.language,
                                     "spec": task.spec.model_dump_json(by_alias=True),
                                     "source_hash": hashlib.sha256(task.source.encode()).hexdigest()[:16],
                                     "updated_at": _now()}, pk="name")

    def upsert_device(self, spec: HardwareSpec) -> None:
        """Remember a device's spec so forecasters trained later see the hardware of each measurement."""
        with self.db.conn:
            self.db.table("devices").upsert({"key": spec.key, "spec": spec.model_dump_json(), "updated_at": _now()}, pk="key")

    def add_device_if_unknown(self, spec: HardwareSpec) -> bool:
        """Remember a device's spec only when this store has none under its key (an import never rewrites what the
        device itself reported); returns whether it was added."""
        with self.db.conn:
            cursor = self.db.execute("insert or ignore into devices (key, spec, updated_at) values (?, ?, ?)",
                                     [spec.key, spec.model_dump_json(), _now()])
            return cursor.rowcount > 0

    def record_probe_verdict(self, key: str, driver: str, reason: str) -> None:
        """A device's probe verdict ("" = healthy) for this driver version (a new driver is probed again)."""
        with self.db.conn:
            self.db.table("device_probes").upsert({"key": key, "driver": driver, "reason": reason, "checked_at": _now()},
                                            pk=("key", "driver"))

    def probe_verdict(self, key: str, driver: str) -> str | None:
        """The cached verdict, or None when this device and driver were never probed or the row is no verdict (a
        NULL or non-text reason): the caller probes again and overwrites it."""
        rows = self.db.query("select * from device_probes where key = ? and driver = ?", [key, driver])
        record = next((_parsed(ProbeVerdictRecord, row) for row in rows), None)
        return None if record is None else record.reason

    def devices(self) -> dict[str, HardwareSpec]:
        return {r["key"]: HardwareSpec.model_validate_json(r["spec"]) for r in self.db.table("devices").rows}

    def task_paths(self) -> dict[str, str]:
        """Task name -> the task file it was loaded from (so data of tasks loaded from a path can be featurized)."""
        return {r["name"]: r["path"] for r in self.db.query("select name, path from tasks")}

    def set_device_probe(self, device: str, name: str, value: float, detail: dict[str, Any] | None = None) -> None:
        """Remember a once-per-device measurement (e.g. the triad bandwidth the roofline prior uses)."""
        payload = json.dumps({"value": value, "detail": detail or {}, "measured_at": _now()})
        with self.db.conn:
            self.db.table("meta").upsert({"key": f"probe:{name}:{device}", "value": payload}, pk="key")

    def device_probe(self, device: str, name: str) -> float | None:
        """The probe's value, or None when it was never stored or its row does not parse (not JSON, no finite
        value): the caller probes again and overwrites it, rather than every forecast failing on it."""
        row = self.db.execute("select value from meta where key = ?", [f"probe:{name}:{device}"]).fetchone()
        record = None if row is None else _parsed(DeviceProbeRecord, row[0])
        return None if record is None else record.value

    def add_candidate(self, candidate: Candidate) -> str:
        """Insert once by content hash (first parent/edits win); returns the hash. The rendered intent is kept
        beside the edits, for listings that show it without rebuilding candidates."""
        with self.db.conn:
            self.db.table("candidates").insert(_candidate_row(candidate, _now()), pk="hash", ignore=True)
        return candidate.hash

    def candidate(self, hash_or_prefix: str) -> Candidate | None:
        rows = list(self.db.query("select * from candidates where hash like ? limit 2", [hash_or_prefix + "%"]))
        if len(rows) != 1:
            return None
        return _row_to_candidate(rows[0])

    def candidates(self, task: str) -> list[Candidate]:
        return [_row_to_candidate(r) for r in self.db.query("select * from candidates where task = ? order by rowid", [task])]

    def intents(self, task: str) -> dict[str, str]:
        """Each stored candidate of ``task``'s intent by its stored hash (no candidate is rebuilt: recomputing
        a hash preprocesses the source, which took a generation step 20 s on a store of 800 coarsened kernels)."""
        rows = self.db.query("select hash, intent from candidates where task = ?", [task])
        return {r["hash"]: r["intent"] or "" for r in rows}

    def measured_params(self, task: str, device: str, sizes: str = "full",
                        fingerprint: str | None = None, visible_to: str | None = None) -> list[dict[str, Any]]:
        """Template points of ``task`` already measured on ``device`` at ``sizes`` (so generators never repeat
        them); ``fingerprint``: only on the task with that fingerprint (:func:`_on_task`); ``visible_to``: a
        run whose replayed rows count too (:func:`_visible`)."""
        on_task, extra = _on_task(fingerprint, "m.")
        live, visible = _visible(visible_to, "m.")
        rows = self.db.query(
            "select distinct c.params from candidates c join measurements m on m.candidate_hash = c.hash "
            f"where c.task = ? and m.device = ? and m.sizes = ? and c.params != 'null'{on_task}{live}",
            [task, device, sizes, *extra, *visible])
        return [json.loads(r["params"]) for r in rows]

    # ---- measurements ---------------------------------------------------------------
    def add_measurement(self, m: Measurement, run_id: str | None = None) -> int:
        with self.db.conn:
            table = self.db.table("measurements")
            table.insert(_measurement_row(m, run_id))
            return int(table.last_pk or 0)

    def replace_recorded(self, task: Task, device: HardwareSpec, rows: list[tuple[Candidate, Measurement]]) -> int:
        """Store a recording of ``task`` on ``device`` (``recorded`` rows only), replacing an earlier import of the
        same task and device, in one transaction; the device's record is the recording's (its key names a recorded
        platform, never a live one). Returns the rows stored."""
        if any(m.provenance != "recorded" or m.device != device.key for _, m in rows):
            raise ValueError("replace_recorded stores recorded rows of its device only")
        now = _now()
        with self.db.conn:
            self.db.execute("delete from measurements where provenance = 'recorded' and device = ? and task = ? and "
                            "json_extract(data, '$.task_fingerprint') = ?", [device.key, task.name, task.fingerprint])
            self.db.table("devices").upsert({"key": device.key, "spec": device.model_dump_json(), "updated_at": now},
                                            pk="key")
            self.db.table("tasks").upsert({"name": task.name, "path": str(task.path), "language": task.language,
                                           "spec": task.spec.model_dump_json(by_alias=True),
                                           "source_hash": hashlib.sha256(task.source.encode()).hexdigest()[:16],
                                           "updated_at": now}, pk="name")
            unique = {c.hash: c for c, _ in rows}
            self.db.table("candidates").insert_all(
                (_candidate_row(c, now) for c in unique.values()), pk="hash", ignore=True, batch_size=500)
            self.db.table("measurements").insert_all((_measurement_row(m, None) for _, m in rows), batch_size=500)
        return len(rows)

    def measurements(self, task: str | None = None, device: str | None = None, candidate_hash: str | None = None,
                     run_id: str | None = None, sizes: str | None = None,
                     fingerprint: str | None = None, visible_to: str | None = None,
                     provenance: Sequence[Provenance] | None = None) -> list[Measurement]:
        """Measurements matching every filter given; ``fingerprint``: only those measured on the task with
        that fingerprint (:func:`_on_task`), not another task file of the same name. Live rows only, except in a
        run's own reads (:func:`_live`), those of run ``visible_to`` (:func:`_visible`), or rows of the
        ``provenance`` asked for (e.g. ``("recorded",)``: a replay of an imported recording)."""
        where, args = _where(task=task, device=device, candidate_hash=candidate_hash, run_id=run_id, sizes=sizes)
        on_task, extra = _on_task(fingerprint)
        if provenance is not None:
            live, visible = _of_provenance(provenance)
        else:
            live, visible = (_live(run_id), []) if run_id is not None else _visible(visible_to)
        where = (where or "where 1") + on_task + live
        return [Measurement.model_validate_json(r["data"])
                for r in self.db.query(f"select data from measurements {where} order by id", [*args, *extra, *visible])]

    def correct_speedups(self, task: str, fingerprint: str, provenance: Sequence[Provenance],
                         sizes: str = "full") -> list[tuple[str, str, float]]:
        """(device, candidate hash, speedup) of every correct first-phase row of a task of these provenances, oldest
        first, read from the columns without parsing rows (tens of thousands for a recorded GPU space)."""
        kinds, kind_args = _of_provenance(provenance)
        on_task, extra = _on_task(fingerprint)
        rows = self.db.execute(
            "select device, candidate_hash, speedup from measurements where task = ? and sizes = ? and status = "
            f"'correct' and speedup > 0 and json_extract(data, '$.phase') in ('search', 'verify'){on_task}{kinds} "
            "order by id", [task, sizes, *extra, *kind_args]).fetchall()
        return [(str(d), str(h), float(s)) for d, h, s in rows]

    def measurement_totals(self, run_id: str) -> tuple[int, float]:
        """(measurements, device seconds of wall time) of a run: its budget ledger, without parsing rows (rows it
        reused from earlier runs cost it nothing)."""
        count, wall_ms = self.db.execute(
            "select count(*), coalesce(sum(json_extract(data, '$.wall_ms')), 0) from measurements where run_id = ? "
            "and provenance != 'reused'", [run_id]).fetchone()
        return int(count), float(wall_ms) / 1e3

    def latest_measurement(self, candidate_hash: str, device: str, sizes: str = "full",
                           fingerprint: str | None = None, visible_to: str | None = None) -> Measurement | None:
        on_task, extra = _on_task(fingerprint)
        live, visible = _visible(visible_to)
        rows = list(self.db.query("select data from measurements where candidate_hash = ? and device = ? and sizes = ?"
                                  f"{on_task}{live} order by id desc limit 1",
                                  [candidate_hash, device, sizes, *extra, *visible]))
        return Measurement.model_validate_json(rows[0]["data"]) if rows else None

    def measured_pairs(self, device: str | None = None, sizes: str = "full", run_id: str | None = None,
                       provenance: Sequence[Provenance] = ("live",)) -> list[tuple[Candidate, Measurement]]:
        """Every (candidate, latest measurement) pair: the learned forecaster's training data.

        With ``run_id``, only that run's measurements (the latest of each within the run); without, the rows of
        ``provenance`` (live ones unless asked: training passes :data:`TRAINING_PROVENANCE`).
        """
        where, args = _where(device=device, sizes=sizes, run_id=run_id, prefix="m.")
        kinds, kind_args = _of_provenance(provenance)
        in_run = "where run_id = ? " if run_id is not None else f"where 1{kinds} "
        latest = (f"m.id in (select max(id) from measurements {in_run}group by candidate_hash, device, sizes, "
                  "json_extract(data, '$.task_fingerprint'))")  # two tasks of one name may share a kernel
        where = f"{where} and {latest}" if where else f"where {latest}"
        args += [run_id] if run_id is not None else kind_args
        rows = self.db.query(f"select c.*, m.data as mdata from measurements m join candidates c "
                             f"on c.hash = m.candidate_hash {where} order by m.id", args)
        return [(_row_to_candidate(r), Measurement.model_validate_json(r["mdata"])) for r in rows]

    # ---- forecasts ------------------------------------------------------------------
    def add_forecast(self, task: str, candidate_hash: str, device: str, forecaster: str, model: str,
                     probabilities: list[float], predicted_bin: int, confidence: float, failed: bool,
                     reasoning: str = "", provenance: dict[str, Any] | None = None, run_id: str | None = None) -> int:
        with self.db.conn:
            table = self.db.table("forecasts")
            table.insert({"task": task, "candidate_hash": candidate_hash, "device": device, "forecaster": forecaster,
                          "model": model, "probabilities": json.dumps(probabilities), "predicted_bin": predicted_bin,
                          "confidence": confidence, "failed": int(failed), "reasoning": reasoning,
                          "provenance": json.dumps(provenance or {}), "run_id": run_id, "created_at": _now()})
            return int(table.last_pk or 0)

    def forecasts(self, forecaster: str | None = None, model: str | None = None, task: str | None = None,
                  run_id: str | None = None) -> list[ForecastRecord]:
        """Stored forecasts, oldest first."""
        where, args = _where(forecaster=forecaster, model=model, task=task, run_id=run_id, prefix="f.")
        return [ForecastRecord.model_validate(r)
                for r in self.db.query(f"select f.* from forecasts f {where} order by f.id", args)]

    def latest_forecasts(self, run_id: str) -> dict[str, ForecastRecord]:
        """A run's last forecast of each candidate, the one its routing read (a child carried over from round
        to round is forecast again each time)."""
        return {r.candidate_hash: r for r in self.forecasts(run_id=run_id)}

    def measured_forecasts(self, forecaster: str | None = None, model: str | None = None, task: str | None = None,
                           run_id: str | None = None, include_imported: bool = False) -> list[MeasuredForecast]:
        """Stored forecasts whose candidate has a full-size measurement on the forecast's device, each with
        the latest such measurement's speedup, bin and status (the calibration data): of a run's forecasts
        of one candidate by one model on one device, the last only (a child carried over is forecast again each
        round, and one measurement must not count once per round); forecasts outside a run, every one. Live
        measurements only, unless ``include_imported`` (the user asked: imported rows were measured elsewhere)."""
        where, args = _where(forecaster=forecaster, model=model, task=task, run_id=run_id, prefix="f.")
        kinds = ("live", "imported") if include_imported else ("live",)
        join_cond = ("join measurements m on m.id = (select max(id) from measurements mm where "
                     "mm.candidate_hash = f.candidate_hash and mm.device = f.device and mm.sizes = 'full'"
                     f" and mm.provenance in ({', '.join(repr(k) for k in kinds)}))")
        last = ("(f.run_id is null or f.id in (select max(id) from forecasts where run_id is not null "
                "group by run_id, candidate_hash, device, forecaster, model))")
        where = f"{where} and {last}" if where else f"where {last}"
        rows = self.db.query(f"select f.*, m.speedup as speedup, m.bin as true_bin, m.status as status "
                             f"from forecasts f {join_cond} {where} order by f.id", args)
        return [MeasuredForecast.model_validate(r) for r in rows]

    # ---- runs and events --------------------------------------------------------------
    def create_run(self, task: str, device: str, config: dict[str, Any], budget: int, folder: str = "",
                   run_id: str | None = None) -> str:
        # 64 random bits: ids are guessable by nobody and never collide across machines sharing a store
        run_id = run_id or f"{task}-{datetime.now(UTC).strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:16]}"
        with self.db.conn:
            self.db.table("runs").insert({"id": run_id, "task": task, "device": device, "status": "running",
                                    "config": json.dumps(config), "budget": budget, "spent": 0, "best_candidate": None,
                                    "best_speedup": None, "summary": "{}", "folder": folder, "created_at": _now(),
                                    "updated_at": _now(), "owner_pid": os.getpid(), "owner_host": socket.gethostname(),
                                    "heartbeat": _now()}, pk="id")
        return run_id

    def claim_run(self, run_id: str) -> None:
        """This process now drives the run (a resume): owner and heartbeat are ours."""
        self.update_run(run_id, status="running", owner_pid=os.getpid(), owner_host=socket.gethostname(),
                        heartbeat=_now())

    def heartbeat(self, run_id: str) -> None:
        with self.db.conn:
            self.db.execute("update runs set heartbeat = ? where id = ?", [_now(), run_id])

    def _run_record(self, row: dict[str, Any]) -> RunRecord:
        """The typed run with its live status: a "running" run whose owner is gone is "interrupted"; spent is
        read from the measurements. The one place a runs row is parsed."""
        row = dict(row)
        try:
            if row["status"] in ("running", "interrupted", "failed"):  # a finished run recorded its own total
                row["spent"] = self.measurement_totals(row["id"])[0]
            if row["status"] == "running" and not _owner_alive(row):
                row["status"] = "interrupted"
            return RunRecord.model_validate(row)
        except ValueError as exc:  # a ValidationError, or a heartbeat that is no time
            problem = (f"field '{'.'.join(map(str, exc.errors()[0]['loc']))}': {exc.errors()[0]['msg']}"
                       if isinstance(exc, ValidationError) else str(exc))
            raise DamagedRow(f"{self.path}: the row of run {str(row.get('id'))[:80]!r} does not parse "
                             f"({' '.join(problem.split())[:200]})") from None

    def update_run(self, run_id: str, **fields: Any) -> None:
        if "summary" in fields and not isinstance(fields["summary"], str):
            fields["summary"] = json.dumps(fields["summary"])
        with self.db.conn:
            self.db.table("runs").update(run_id, {**fields, "updated_at": _now()})

    def run(self, run_id: str) -> RunRecord | None:
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
        return self._run_record(rows[0])

    def runs(self, task: str | None = None, limit: int = 50) -> list[RunRecord]:
        """The most recent runs first (ties in creation time: the later inserted first); rows that do not parse
        are left out (:meth:`run_listing` names them)."""
        return self.run_listing(task, limit)[0]

    def run_listing(self, task: str | None = None, limit: int = 50) -> tuple[list[RunRecord], list[DamagedRow]]:
        """:meth:`runs`, and what is wrong with each row among them that does not parse (left out: one
        damaged row never stops a listing)."""
        where, args = _where(task=task)
        query = f"select * from runs {where} order by created_at desc, rowid desc limit ?"
        records: list[RunRecord] = []
        damaged: list[DamagedRow] = []
        for row in self.db.query(query, [*args, limit]):
            try:
                records.append(self._run_record(row))
            except DamagedRow as exc:
                damaged.append(exc)
        return records, damaged

    def add_event(self, run_id: str, kind: str, payload: dict[str, Any] | None = None,
                  candidate_hash: str | None = None) -> int:
        """Append an event to a run's log; the sequence number is assigned in the same transaction."""
        with self.db.conn:
            seq = self.db.execute("select coalesce(max(seq), 0) + 1 from events where run_id = ?", [run_id]).fetchone()[0]
            self.db.table("events").insert({"run_id": run_id, "seq": seq, "kind": kind, "candidate_hash": candidate_hash,
                                      "payload": json.dumps(payload or {}, default=str), "created_at": _now()})
        return int(seq)

    def events(self, run_id: str, kind: str | None = None) -> list[EventRecord]:
        """A run's log in order (``kind``: only events of that kind)."""
        where, args = _where(run_id=run_id, kind=kind)
        return [EventRecord.model_validate(r) for r in self.db.query(f"select * from events {where} order by seq", args)]

    # ---- portable datasets ---------------------------------------------------------------
    def export_pairs(self, path: str | Path, device: str | None = None) -> int:
        """Measured pairs (+ the specs of their devices) as gzipped JSON lines, to seed another store."""
        import gzip

        devices = self.devices()
        pairs = self.measured_pairs(device=device, sizes="full")
        with gzip.open(path, "wt") as fh:
            for cand, m in pairs:
                spec = devices.get(m.device)
                fh.write(json.dumps({"candidate": cand.model_dump(), "measurement": m.model_dump(mode="json"),
                                     "device": spec.model_dump() if spec else None}) + "\n")
        return len(pairs)

    @staticmethod
    def read_pairs(path: str | Path) -> tuple[list[tuple[Candidate, Measurement]], dict[str, HardwareSpec]]:
        import gzip

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

    def import_pairs(self, path: str | Path) -> int:
        """Load an exported dataset as ``imported`` rows (training data, never "already measured", calibration or
        trust); pairs already present (same candidate, device, time) are skipped. A device this store knows keeps
        its own spec. Refused whole (:class:`ImportConflict`, nothing written) when a pair contradicts this
        store's live measurement of the same candidate on the same device, task and sizes."""
        pairs, devices = self.read_pairs(path)
        conflict = self._contradiction(pairs)
        if conflict is not None:
            raise ImportConflict(f"{path}: not imported: {conflict}")
        have = {(m.candidate_hash, m.device, m.created_at)
                for m in self.measurements(provenance=("live", "imported"))}
        added = 0
        for spec in devices.values():
            self.add_device_if_unknown(spec)
        for cand, m in pairs:
            if (m.candidate_hash, m.device, m.created_at) in have:
                continue
            self.add_candidate(cand)
            self.add_measurement(m.model_copy(update={"provenance": "imported"}))
            added += 1
        return added

    def _contradiction(self, pairs: list[tuple[Candidate, Measurement]]) -> str | None:
        """The first imported pair that this store's own live measurements refute, said in one line, or None."""
        for _, m in pairs:
            own = self.latest_measurement(m.candidate_hash, m.device, m.sizes, fingerprint=m.task_fingerprint)
            if own is None or own.created_at == m.created_at:
                continue  # nothing measured here, or the very row (a store's own export read back)
            why = contradicts(m, own)
            if why:
                return (f"candidate {m.candidate_hash[:12]} of task {m.task} on {m.device}: the file says {why}, "
                        f"this device measured {_said(own)}")
        return None

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


def _where(prefix: str = "", **filters: Any) -> tuple[str, list[Any]]:
    parts, args = [], []
    for key, value in filters.items():
        if value is not None:
            parts.append(f"{prefix}{key} = ?")
            args.append(value)
    return ("where " + " and ".join(parts)) if parts else "", args


def _on_task(fingerprint: str | None, prefix: str = "") -> tuple[str, list[Any]]:
    """An SQL condition (" and ...", to append) keeping measurements measured on the task with ``fingerprint``
    (``Task.fingerprint``), or before measurements carried one (read as the task of their name); none for
    None. Two task files of one name measure speedups over different problems. The SQL twin of
    ``Task.owns`` (rows already in memory)."""
    if fingerprint is None:
        return "", []
    field = f"json_extract({prefix}data, '$.task_fingerprint')"
    return f" and ({field} is null or {field} = ?)", [fingerprint]


def _parsed(model: type[RecordT], row: Any) -> RecordT | None:
    """A cached row as its record, or None when it does not parse (a JSON text or a row): a cache is repaired by
    doing the work again, never trusted damaged."""
    try:
        return model.model_validate_json(row) if isinstance(row, str | bytes) else model.model_validate(row)
    except ValidationError:
        return None


def _live(run_id: str | None, prefix: str = "") -> str:
    """An SQL condition (" and ...", to append) keeping live measurements (``Measurement.provenance``), unless the
    read is one run's own (``run_id`` given): a replay run reads back what it replayed; the "already measured"
    sets, noise floor, calibration, measured points and datasets never see replayed, imported or recorded rows."""
    return "" if run_id is not None else f" and {prefix}provenance = 'live'"


def _visible(visible_to: str | None, prefix: str = "") -> tuple[str, list[str]]:
    """(SQL condition, its arguments): live measurements, plus the replayed ones of run ``visible_to``: a replay
    run's generator knows what its own replay measured, as the recorded run's generator knew it was measured."""
    if visible_to is None:
        return _live(None, prefix), []
    return f" and ({prefix}provenance = 'live' or {prefix}run_id = ?)", [visible_to]


def _of_provenance(kinds: Sequence[Provenance], prefix: str = "") -> tuple[str, list[str]]:
    """(SQL condition, its arguments) keeping the rows of these provenances, whatever run they belong to."""
    if not kinds:
        raise ValueError("name at least one provenance")
    return f" and {prefix}provenance in ({', '.join('?' for _ in kinds)})", list(kinds)


#: What the learned forecaster trains on: this store's own measurements and datasets imported for the purpose
#: (``kernelcast dataset import``); never replayed rows, and recorded ones only through a forecaster that asks.
TRAINING_PROVENANCE: tuple[Provenance, ...] = ("live", "imported")

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


def _row_to_candidate(row: dict[str, Any]) -> Candidate:
    return Candidate(task=row["task"], source=row["source"], global_size=json.loads(row["global_size"]),
                     local_size=json.loads(row["local_size"]), build_options=json.loads(row["build_options"]),
                     params=json.loads(row["params"]), parent=row["parent"], origin=row["origin"] or "written",
                     edits=json.loads(row["edits"] or "[]"), note=row["note"] or "", generator=row["generator"] or "")


def _candidate_row(candidate: Candidate, now: str) -> dict[str, Any]:
    return {"hash": candidate.hash, "task": candidate.task, "source": candidate.source,
            "global_size": json.dumps(candidate.global_size), "local_size": json.dumps(candidate.local_size),
            "build_options": json.dumps(candidate.build_options), "params": json.dumps(candidate.params),
            "parent": candidate.parent, "intent": candidate.intent, "generator": candidate.generator,
            "origin": candidate.origin, "edits": _edits_json(candidate.edits), "note": candidate.note,
            "created_at": now}


def _measurement_row(m: Measurement, run_id: str | None) -> dict[str, Any]:
    return {"task": m.task, "candidate_hash": m.candidate_hash, "device": m.device, "sizes": m.sizes,
            "status": m.status.value, "reason": m.reason, "speedup": m.speedup, "bin": m.bin(),
            "ref_median_ns": m.reference.median_ns if m.reference else None,
            "cand_median_ns": m.candidate.median_ns if m.candidate else None,
            "cand_cv": m.candidate.cv if m.candidate else None, "flags": json.dumps(m.flags),
            "run_id": run_id, "data": m.model_dump_json(exclude_none=False), "created_at": m.created_at,
            "replayed": int(m.replayed), "provenance": m.provenance}


def _edits_json(edits: list[Edit]) -> str:
    return json.dumps([e.model_dump(mode="json") for e in edits])


def _v1_base(db: sqlite_utils.Database) -> None:
    """The original tables (``if_not_exists``: databases that predate versioning already have them)."""
    db.table("tasks").create({"name": str, "path": str, "language": str, "spec": str, "source_hash": str,
                        "updated_at": str}, pk="name", if_not_exists=True)
    db.table("devices").create({"key": str, "spec": str, "updated_at": str}, pk="key", if_not_exists=True)
    db.table("candidates").create({"hash": str, "task": str, "source": str, "global_size": str, "local_size": str,
                             "build_options": str, "params": str, "parent": str, "intent": str,
                             "generator": str, "created_at": str}, pk="hash", if_not_exists=True)
    db.table("measurements").create({"id": int, "task": str, "candidate_hash": str, "device": str, "sizes": str,
                               "status": str, "reason": str, "speedup": float, "bin": int,
                               "ref_median_ns": float, "cand_median_ns": float, "cand_cv": float,
                               "flags": str, "run_id": str, "data": str, "created_at": str},
                              pk="id", if_not_exists=True)
    db.table("forecasts").create({"id": int, "task": str, "candidate_hash": str, "device": str, "forecaster": str,
                            "model": str, "probabilities": str, "predicted_bin": int, "confidence": float,
                            "failed": int, "reasoning": str, "provenance": str, "run_id": str,
                            "created_at": str}, pk="id", if_not_exists=True)
    db.table("runs").create({"id": str, "task": str, "device": str, "status": str, "config": str, "budget": int,
                       "spent": int, "best_candidate": str, "best_speedup": float, "summary": str,
                       "folder": str, "created_at": str, "updated_at": str}, pk="id", if_not_exists=True)
    db.table("events").create({"id": int, "run_id": str, "seq": int, "kind": str, "candidate_hash": str,
                         "payload": str, "created_at": str}, pk="id", if_not_exists=True)
    for table, cols in [("measurements", ["task", "device"]), ("measurements", ["candidate_hash"]),
                        ("forecasts", ["candidate_hash"]), ("forecasts", ["forecaster", "model"]),
                        ("events", ["run_id", "seq"]), ("candidates", ["task"])]:
        db.table(table).create_index(cols, if_not_exists=True)


def _v2_probes_and_run_owners(db: sqlite_utils.Database) -> None:
    """Device probe verdicts, and who drives a run (so a dead owner reads as "interrupted")."""
    db.table("device_probes").create({"key": str, "driver": str, "reason": str, "checked_at": str},
                               pk=("key", "driver"), if_not_exists=True)
    for column, kind in (("owner_pid", int), ("owner_host", str), ("heartbeat", str)):
        if column not in db.table("runs").columns_dict:
            db.table("runs").add_column(column, kind)


def _v3_run_calibration_group(db: sqlite_utils.Database) -> None:
    """The group a run's calibration rows are kept under (a task name is not enough: a task loaded from a path
    may borrow a built-in's name with another kernel); older runs have none and read as their task's name."""
    if "calibration_group" not in db.table("runs").columns_dict:
        db.table("runs").add_column("calibration_group", str)


def _v4_replayed_measurements(db: sqlite_utils.Database) -> None:
    """Whether a measurement was replayed from a store rather than measured (``Measurement.replayed``): reads
    outside its run skip such rows. Older rows read as live (a replay stored them as such before)."""
    if "replayed" not in db.table("measurements").columns_dict:
        db.table("measurements").add_column("replayed", int, not_null_default=0)


def _v5_candidate_edits(db: sqlite_utils.Database) -> None:
    """A candidate's origin, edits and note as data (``tools.core.edit``): older rows carry only their intent
    text, read here once into edits that render back to the same text."""
    table = db.table("candidates")
    for column in ("origin", "edits", "note"):
        if column not in table.columns_dict:
            table.add_column(column, str)
    rows = db.execute("select hash, intent, params, generator from candidates where origin is null").fetchall()
    for key, intent, params, generator in rows:
        old = parse_legacy_intent(intent or "", json.loads(params or "null"), generator)
        db.execute("update candidates set origin = ?, edits = ?, note = ? where hash = ?",
                   [old["origin"], _edits_json(old["edits"]), old["note"], key])


def _v6_measurement_provenance(db: sqlite_utils.Database) -> None:
    """Where each measurement's numbers come from (``Measurement.provenance``: live, replayed, imported, recorded),
    one concept in place of the v4 ``replayed`` flag (kept, written in step, for older readers). Older rows read
    from that flag: replayed ones as such, every other as live (rows imported before this version were stored as
    live and cannot be told apart)."""
    table = db.table("measurements")
    if "provenance" not in table.columns_dict:
        table.add_column("provenance", str, not_null_default="live")
    db.execute("update measurements set provenance = 'replayed' where replayed = 1")
    table.create_index(["provenance"], if_not_exists=True)


MIGRATIONS: list[Callable[[sqlite_utils.Database], None]] = [_v1_base, _v2_probes_and_run_owners,
                                                             _v3_run_calibration_group, _v4_replayed_measurements,
                                                             _v5_candidate_edits, _v6_measurement_provenance]
