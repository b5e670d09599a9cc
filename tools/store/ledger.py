"""The ledger: every measurement, the budget a run spent, and the (candidate, measurement) pairs forecasters
train on.

A measurement is written before anybody reports it, so searches also produce the training and calibration data
for the next one. Reads see live rows only unless they name other provenances (``sql.live``, ``sql.visible``,
``sql.of_provenance``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import sqlite_utils

from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.measurement import HardwareSpec, Measurement, Provenance
from kernelcast.tools.core.task import Task
from kernelcast.tools.store.candidates import candidate_row, row_to_candidate
from kernelcast.tools.store.devices import device_row
from kernelcast.tools.store.sql import live, now, of_provenance, on_task, visible, where
from kernelcast.tools.store.tasks import task_row

#: What the learned forecaster trains on: this store's own measurements and datasets imported for the purpose
#: (``kernelcast dataset import``); never replayed rows, and recorded ones only through a forecaster that asks.
TRAINING_PROVENANCE: tuple[Provenance, ...] = ("live", "imported")


def measurement_row(m: Measurement, run_id: str | None) -> dict[str, Any]:
    return {"task": m.task, "candidate_hash": m.candidate_hash, "device": m.device, "sizes": m.sizes,
            "status": m.status.value, "reason": m.reason, "speedup": m.speedup, "bin": m.bin(),
            "ref_median_ns": m.reference.median_ns if m.reference else None,
            "cand_median_ns": m.candidate.median_ns if m.candidate else None,
            "cand_cv": m.candidate.cv if m.candidate else None, "flags": json.dumps(m.flags),
            "run_id": run_id, "data": m.model_dump_json(exclude_none=False), "created_at": m.created_at,
            "replayed": int(m.replayed), "provenance": m.provenance}


class Ledger:
    """The ``measurements`` table."""

    def __init__(self, db: sqlite_utils.Database) -> None:
        self.db = db

    def add(self, m: Measurement, run_id: str | None = None) -> int:
        """Store one measurement (of run ``run_id``); returns its row id."""
        with self.db.conn:
            table = self.db.table("measurements")
            table.insert(measurement_row(m, run_id))
            return int(table.last_pk or 0)

    def replace_recorded(self, task: Task, device: HardwareSpec, rows: list[tuple[Candidate, Measurement]]) -> int:
        """Store a recording of ``task`` on ``device`` (``recorded`` rows only), replacing an earlier import of the
        same task and device, in one transaction; the device's record is the recording's (its key names a recorded
        platform, never a live one). Returns the rows stored."""
        if any(m.provenance != "recorded" or m.device != device.key for _, m in rows):
            raise ValueError("replace_recorded stores recorded rows of its device only")
        at = now()
        with self.db.conn:
            self.db.execute("delete from measurements where provenance = 'recorded' and device = ? and task = ? and "
                            "json_extract(data, '$.task_fingerprint') = ?", [device.key, task.name, task.fingerprint])
            self.db.table("devices").upsert(device_row(device, at), pk="key")
            self.db.table("tasks").upsert(task_row(task, at), pk="name")
            unique = {c.hash: c for c, _ in rows}
            self.db.table("candidates").insert_all(
                (candidate_row(c, at) for c in unique.values()), pk="hash", ignore=True, batch_size=500)
            self.db.table("measurements").insert_all((measurement_row(m, None) for _, m in rows), batch_size=500)
        return len(rows)

    def find(self, task: str | None = None, device: str | None = None, candidate_hash: str | None = None,
             run_id: str | None = None, sizes: str | None = None,
             fingerprint: str | None = None, visible_to: str | None = None,
             provenance: Sequence[Provenance] | None = None) -> list[Measurement]:
        """Measurements matching every filter given, oldest first; ``fingerprint``: only those measured on the task
        with that fingerprint (``sql.on_task``), not another task file of the same name. Live rows only, except in a
        run's own reads (``sql.live``), those of run ``visible_to`` (``sql.visible``), or rows of the
        ``provenance`` asked for (e.g. ``("recorded",)``: a replay of an imported recording)."""
        condition, args = where(task=task, device=device, candidate_hash=candidate_hash, run_id=run_id, sizes=sizes)
        task_cond, extra = on_task(fingerprint)
        if provenance is not None:
            kinds, kind_args = of_provenance(provenance)
        else:
            kinds, kind_args = (live(run_id), []) if run_id is not None else visible(visible_to)
        condition = (condition or "where 1") + task_cond + kinds
        return [Measurement.model_validate_json(r["data"]) for r in
                self.db.query(f"select data from measurements {condition} order by id", [*args, *extra, *kind_args])]

    def correct_speedups(self, task: str, fingerprint: str, provenance: Sequence[Provenance],
                         sizes: str = "full") -> list[tuple[str, str, float]]:
        """(device, candidate hash, speedup) of every correct first-phase row of a task of these provenances, oldest
        first, read from the columns without parsing rows (tens of thousands for a recorded GPU space)."""
        kinds, kind_args = of_provenance(provenance)
        task_cond, extra = on_task(fingerprint)
        rows = self.db.execute(
            "select device, candidate_hash, speedup from measurements where task = ? and sizes = ? and status = "
            f"'correct' and speedup > 0 and json_extract(data, '$.phase') in ('search', 'verify'){task_cond}{kinds} "
            "order by id", [task, sizes, *extra, *kind_args]).fetchall()
        return [(str(d), str(h), float(s)) for d, h, s in rows]

    def totals(self, run_id: str) -> tuple[int, float]:
        """(measurements, device seconds of wall time) of a run: its budget ledger, without parsing rows (rows it
        reused from earlier runs cost it nothing)."""
        count, wall_ms = self.db.execute(
            "select count(*), coalesce(sum(json_extract(data, '$.wall_ms')), 0) from measurements where run_id = ? "
            "and provenance != 'reused'", [run_id]).fetchone()
        return int(count), float(wall_ms) / 1e3

    def latest(self, candidate_hash: str, device: str, sizes: str = "full",
               fingerprint: str | None = None, visible_to: str | None = None) -> Measurement | None:
        """The newest live measurement of a candidate on a device at ``sizes`` (or one replayed by run
        ``visible_to``), or None."""
        task_cond, extra = on_task(fingerprint)
        kinds, kind_args = visible(visible_to)
        rows = list(self.db.query("select data from measurements where candidate_hash = ? and device = ? and sizes = ?"
                                  f"{task_cond}{kinds} order by id desc limit 1",
                                  [candidate_hash, device, sizes, *extra, *kind_args]))
        return Measurement.model_validate_json(rows[0]["data"]) if rows else None

    def measured_pairs(self, device: str | None = None, sizes: str = "full", run_id: str | None = None,
                       provenance: Sequence[Provenance] = ("live",)) -> list[tuple[Candidate, Measurement]]:
        """Every (candidate, latest measurement) pair: the learned forecaster's training data.

        With ``run_id``, only that run's measurements (the latest of each within the run); without, the rows of
        ``provenance`` (live ones unless asked: training passes :data:`TRAINING_PROVENANCE`).
        """
        condition, args = where(device=device, sizes=sizes, run_id=run_id, prefix="m.")
        kinds, kind_args = of_provenance(provenance)
        in_run = "where run_id = ? " if run_id is not None else f"where 1{kinds} "
        latest = (f"m.id in (select max(id) from measurements {in_run}group by candidate_hash, device, sizes, "
                  "json_extract(data, '$.task_fingerprint'))")  # two tasks of one name may share a kernel
        condition = f"{condition} and {latest}" if condition else f"where {latest}"
        args += [run_id] if run_id is not None else kind_args
        rows = self.db.query(f"select c.*, m.data as mdata from measurements m join candidates c "
                             f"on c.hash = m.candidate_hash {condition} order by m.id", args)
        return [(row_to_candidate(r), Measurement.model_validate_json(r["mdata"])) for r in rows]

    def measured_params(self, task: str, device: str, sizes: str = "full",
                        fingerprint: str | None = None, visible_to: str | None = None) -> list[dict[str, Any]]:
        """Template points of ``task`` already measured on ``device`` at ``sizes`` (so generators never repeat
        them); ``fingerprint``: only on the task with that fingerprint (``sql.on_task``); ``visible_to``: a
        run whose replayed rows count too (``sql.visible``)."""
        task_cond, extra = on_task(fingerprint, "m.")
        kinds, kind_args = visible(visible_to, "m.")
        rows = self.db.query(
            "select distinct c.params from candidates c join measurements m on m.candidate_hash = c.hash "
            f"where c.task = ? and m.device = ? and m.sizes = ? and c.params != 'null'{task_cond}{kinds}",
            [task, device, sizes, *extra, *kind_args])
        return [json.loads(r["params"]) for r in rows]
