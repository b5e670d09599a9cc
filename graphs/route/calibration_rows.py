"""Calibration rows: a query over the recorded routing decisions (the store's ``decisions``) and the ledger.

A decision that was then measured (deferred to the hardware, or audited) is a calibration row: its forecast's
p = P(S_child > S_incumbent), and whether the child did beat the incumbent it was judged against (by the paired
comparison when the incumbent's kernel was timed beside the child, as the search does, else by two speedups
measured apart). Rows are kept by four keys: the forecaster (name, model, model version), the device, the task
group of the run (:func:`calibration_group`) and the stage of the run when the decision was taken
(:func:`stage_of`). This module is the one reader of decisions against measurements.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import NamedTuple

from pydantic import ValidationError

from kernelcast.agents.factory import SEED_DATASET
from kernelcast.agents.registry import forecaster_spec
from kernelcast.graphs.config import RunConfig
from kernelcast.graphs.route.replay_calibration import stage_bucket
from kernelcast.graphs.route.risk_control import CalibrationRow
from kernelcast.tools.core.measurement import Measurement, RivalComparison, Status
from kernelcast.tools.core.task import Task, builtin_task_paths, load_task
from kernelcast.tools.store.decisions import DecisionRecord, RouteVerdict, last_decisions
from kernelcast.tools.store.records import RunRecord
from kernelcast.tools.store.store import Store

MAX_RUNS = 500  # calibration reads the latest runs of the device

REUSED = "reused"  # a session's copy of an earlier run's measurement (graphs/search/reuse.py): not bought here


class ForecasterKey(NamedTuple):
    """What a run's calibration rows are kept and certified under: another forecaster's record, or another
    model's, or rows of the same forecaster built from other data, say nothing of this one's calibration."""

    forecaster: str
    model: str | None  # a ``local:`` model by its weights' digest; None: the forecaster has no model
    version: str = ""  # the data it was built from ("" : none, or a decision recorded before versions were)


def forecaster_key(config: RunConfig) -> ForecasterKey:
    """The key of a run's forecaster: its name, its model (a ``local:`` model by the digest of its weights the run
    recorded, so a model written over another at the same path does not inherit its record) and, for a forecaster
    without a model that is built from the shipped seed (``ForecasterSpec.seed_replay``), the seed's digest (a new
    seed is a refit on other data)."""
    model = config.model_weights or config.model
    return ForecasterKey(config.forecaster, model, "" if model else seed_version(config.forecaster))


@cache
def seed_version(forecaster: str) -> str:
    """The digest of the seed data a forecaster without a model is fitted and replayed on ("" : it ships none)."""
    replay = forecaster_spec(forecaster).seed_replay
    if replay is None:
        return ""
    digest = hashlib.sha256()
    for path in (SEED_DATASET, replay):
        digest.update(_bytes(path))
    return "seed-sha256:" + digest.hexdigest()[:16]


def _bytes(path: Path) -> bytes:
    return path.read_bytes() if path.exists() else b""


def forecaster_of(run: RunRecord) -> ForecasterKey | None:
    """The key of the forecaster a stored run forecast with (:func:`forecaster_key`; None: its stored config
    does not validate, so its rows belong to no forecaster)."""
    try:
        config = RunConfig.of_run(run)
    except ValidationError:
        return None
    return forecaster_key(config)


def group_of_run(run: RunRecord) -> str:
    """The group a run's calibration rows are kept under: the one it recorded (:func:`calibration_group`); a
    run from before groups were recorded reads as its task's name when it ran a built-in by name, else as
    that name marked legacy (its reference kernel is unknown: it certifies neither the built-in nor a task)."""
    if run.calibration_group is not None:
        return run.calibration_group
    return run.task if run.config.get("task", run.task) in builtin_task_paths() else f"{run.task}@legacy"


def calibration_group(task: Task) -> str:
    """The group a run's calibration rows are kept under, and certified on: a built-in task's name, or for any
    other task (a path task, one borrowing a built-in's name with another reference kernel) its name and
    its reference kernel's hash, so neither certifies on, nor writes into, another task's record (two tasks
    of one name measure speedups over different kernels)."""
    path = builtin_task_paths().get(task.name)
    reference = task.reference().hash
    if path is not None and load_task(path).reference().hash == reference:
        return task.name
    return f"{task.name}@{reference[:12]}"


def stage_of(store: Store, run_id: str) -> int:
    """How far a run is: the correct measurements it bought so far (confirmations and reused copies aside),
    which is what its in-task model has learned from (the calibration of P(beat) depends on it: see
    :mod:`kernelcast.graphs.route.replay_calibration`)."""
    return sum(1 for m in store.ledger.find(run_id=run_id)
               if m.status == Status.correct and m.phase != "confirm" and m.provenance != REUSED)


# ---- judging a decision by its measurement ----------------------------------------------------------------------
def beat_incumbent(incumbent: float, speedup: float | None) -> bool:
    """Whether a measured child (speedup None: it failed) beat the incumbent of its decision."""
    return speedup is not None and speedup > incumbent


def pair_of(record: RouteVerdict, m: Measurement) -> RivalComparison | None:
    """The child against the kernel its decision was judged against, when the measurement timed it beside."""
    return m.rival if m.ok and m.rival is not None and m.rival.candidate_hash == record.incumbent_hash else None


def beat_of(record: RouteVerdict, m: Measurement) -> bool:
    """Whether a measured child beat the incumbent of its decision: by the paired comparison when the
    incumbent's kernel was timed beside it (against the reference, the speedup is that comparison), else by
    its speedup against the incumbent's, measured apart (older runs, a rival that could not run)."""
    if (pair := pair_of(record, m)) is not None:
        return pair.beaten
    return beat_incumbent(record.incumbent or 1.0, m.speedup if m.ok else None)


def wrong_given(kind: str, beat: bool) -> bool:
    """A pruned child that beat the incumbent, or an accepted one that did not."""
    return beat if kind == "prune" else not beat


def decision_wrong(kind: str, incumbent: float, speedup: float | None) -> bool:
    """Whether a measured speedup (None: failed) shows a forecast's decision wrong: a pruned child beat the
    incumbent, an accepted one did not."""
    return wrong_given(kind, beat_incumbent(incumbent, speedup))


# ---- the query ---------------------------------------------------------------------------------------------------
def _judged(records: Iterable[DecisionRecord], measurements: Iterable[Measurement]
            ) -> list[tuple[DecisionRecord, Measurement | None]]:
    """Each child's last decision with the measurement that judges it: the child's measurement paired with the
    decision's incumbent, else its latest (None: never measured)."""
    measured: dict[str, list[Measurement]] = {}
    for m in measurements:
        measured.setdefault(m.candidate_hash, []).append(m)
    out: list[tuple[DecisionRecord, Measurement | None]] = []
    for record in sorted(last_decisions(records).values(), key=lambda r: r.id):
        ms = measured.get(record.candidate_hash, [])
        paired = [m for m in ms if pair_of(record, m) is not None]
        out.append((record, paired[-1] if paired else ms[-1] if ms else None))
    return out


def judged_decisions(store: Store, run_id: str) -> list[tuple[DecisionRecord, Measurement | None]]:
    """A run's decisions (each child's last), in order, each with the measurement that judges it or None."""
    return _judged(store.decisions.of_run(run_id), store.ledger.find(run_id=run_id))


def device_decisions(store: Store, device: str, forecaster: ForecasterKey | tuple[str, str | None] | None = None
                     ) -> Iterable[tuple[str, DecisionRecord, Measurement]]:
    """(the run's group, decision, the measurement that judges it) of each measured decision in the device's runs
    (among the store's latest MAX_RUNS), oldest run first; ``forecaster``: only the decisions recorded under that
    key."""
    runs = [run for run in reversed(store.runs.recent(limit=MAX_RUNS)) if run.device == device]
    key = None if forecaster is None else ForecasterKey(*forecaster)
    recorded = (store.decisions.of_runs([run.id for run in runs]) if key is None else
                store.decisions.of_runs([run.id for run in runs], key.forecaster, key.model, key.version))
    for run in runs:
        if not recorded[run.id]:
            continue
        group = group_of_run(run)
        for record, m in _judged(recorded[run.id], store.ledger.find(run_id=run.id)):
            if m is not None:
                yield group, record, m


def calibration_row(group: str, record: DecisionRecord, m: Measurement) -> CalibrationRow | None:
    """A decision's calibration row: its p and whether the child beat its incumbent (None: no p recorded)."""
    if record.p_beat is None or record.incumbent is None:
        return None
    return CalibrationRow(record.p_beat, beat_of(record, m), group)


def calibration_rows(store: Store, device: str, bucket: int | None = None,
                     forecaster: ForecasterKey | tuple[str, str | None] | None = None) -> list[CalibrationRow]:
    """Measured decisions with a forecast p on this device, across its runs (the latest MAX_RUNS); ``bucket``:
    only the decisions of that stage bucket; ``forecaster``: only those recorded under that key (None: every
    forecaster's, for reports; trust never pools them)."""
    return [row for group, record, m in device_decisions(store, device, forecaster)
            if (bucket is None or stage_bucket(record.stage or 0) == bucket)
            and (row := calibration_row(group, record, m)) is not None]


__all__ = ["MAX_RUNS", "ForecasterKey", "beat_incumbent", "beat_of", "calibration_group", "calibration_row",
           "calibration_rows", "decision_wrong", "device_decisions", "forecaster_key", "forecaster_of",
           "group_of_run", "judged_decisions", "pair_of", "seed_version", "stage_of", "wrong_given"]
