"""Calibration rows as a query over recorded decisions and the ledger (graphs/route/calibration_rows.py): which
measurement judges a decision, which decisions count for a forecaster key, a device and a stage."""

from __future__ import annotations

from pathlib import Path

from kernelcast.graphs.config import RunConfig
from kernelcast.graphs.route.calibration_rows import (
    ForecasterKey,
    calibration_rows,
    forecaster_key,
    judged_decisions,
    seed_version,
    stage_of,
)
from kernelcast.graphs.route.replay_calibration import stage_bucket
from kernelcast.tools.core.measurement import Measurement, RivalComparison, Status, TimingStats
from kernelcast.tools.store.decisions import DecisionRecord
from kernelcast.tools.store.store import Store

LEARNED = ForecasterKey("learned", None, "seed-1")


def _measured(child: str, speedup: float | None, phase: str = "search", rival: RivalComparison | None = None,
              provenance: str = "live") -> Measurement:
    stats = TimingStats.from_samples([100.0, 110.0, 105.0])
    if speedup is None:
        return Measurement(task="saxpy", candidate_hash=child, device="dev", sizes="full", status=Status.incorrect,
                           phase=phase)
    return Measurement(task="saxpy", candidate_hash=child, device="dev", sizes="full", status=Status.correct,
                       speedup=speedup, reference=stats, candidate=stats, phase=phase, rival=rival,
                       provenance=provenance)  # type: ignore[arg-type]


def _rival(incumbent: str, beaten: bool) -> RivalComparison:
    stats = TimingStats.from_samples([100.0, 101.0, 99.0])
    ratio = 1.2 if beaten else 0.8
    return RivalComparison(candidate_hash=incumbent, timing=stats, speedup=1.5, ratio=ratio,
                           ratio_ci=(ratio - 0.05, ratio + 0.05))


def _run(store: Store, device: str = "dev", group: str = "saxpy") -> str:
    run = store.runs.create("saxpy", device, RunConfig(task="saxpy").model_dump(), 24)
    store.runs.update(run, calibration_group=group)
    return run


def _decide(store: Store, run: str, child: str, key: ForecasterKey = LEARNED, device: str = "dev",
            **verdict: object) -> None:
    store.decisions.add(DecisionRecord.model_validate({
        "run_id": run, "candidate_hash": child, "device": device, "forecaster": key.forecaster, "model": key.model,
        "model_version": key.version, "decision": "measure", "p_beat": 0.3, "incumbent": 1.4, "stage": 0,
        **verdict}))


def test_a_decision_is_judged_by_the_pair_with_its_incumbent_else_its_latest_measurement(tmp_path: Path) -> None:
    store = Store(tmp_path / "k.db")
    run = _run(store)
    _decide(store, run, "paired", incumbent_hash="inc")
    _decide(store, run, "apart", incumbent_hash="inc")
    _decide(store, run, "never")
    # the pair says the child lost to its incumbent although its speedup (2.0) is above the incumbent's 1.4
    store.ledger.add(_measured("paired", 2.0, rival=_rival("inc", beaten=False)), run_id=run)
    store.ledger.add(_measured("paired", 2.1, phase="confirm"), run_id=run)  # the latest, but not the pair
    store.ledger.add(_measured("apart", 1.5, rival=_rival("another", beaten=False)), run_id=run)
    judged = {record.candidate_hash: m for record, m in judged_decisions(store, run)}
    assert judged["paired"] is not None and judged["paired"].phase == "search", "the pair judges, not the latest"
    assert judged["apart"] is not None and judged["never"] is None
    rows = calibration_rows(store, "dev", forecaster=LEARNED)
    assert [(row.p_beat, row.beat, row.group) for row in rows] == [(0.3, False, "saxpy"), (0.3, True, "saxpy")], \
        "paired: the pair (lost); apart: 1.5 against the incumbent's 1.4 (beat); never measured: no row"


def test_rows_are_kept_by_forecaster_key_device_and_stage(tmp_path: Path) -> None:
    store = Store(tmp_path / "k.db")
    run, elsewhere = _run(store), _run(store, device="other")
    _decide(store, run, "a", stage=0)
    _decide(store, run, "b", stage=20)
    _decide(store, run, "c", key=ForecasterKey("learned", None, "seed-2"))  # a refit on other seed data
    _decide(store, run, "d", key=ForecasterKey("prior", None))
    _decide(store, run, "e", p_beat=None)  # no forecast p: no row
    _decide(store, elsewhere, "f", device="other")
    for child in "abcde":
        store.ledger.add(_measured(child, 2.0), run_id=run)
    store.ledger.add(_measured("f", 2.0), run_id=elsewhere)
    assert len(calibration_rows(store, "dev", forecaster=LEARNED)) == 2
    assert len(calibration_rows(store, "dev", bucket=stage_bucket(20), forecaster=LEARNED)) == 1
    assert stage_bucket(20) != stage_bucket(0)
    assert len(calibration_rows(store, "dev", forecaster=("prior", None))) == 1
    assert len(calibration_rows(store, "dev")) == 4, "every forecaster's rows, for reports"
    assert len(calibration_rows(store, "other")) == 1


def test_the_carried_childs_last_decision_is_the_one_judged(tmp_path: Path) -> None:
    store = Store(tmp_path / "k.db")
    run = _run(store)
    _decide(store, run, "a", decision="drop", p_beat=0.9)
    _decide(store, run, "a", decision="measure", p_beat=0.1, carried=True)
    store.ledger.add(_measured("a", 2.0), run_id=run)
    [(record, m)] = judged_decisions(store, run)
    assert record.p_beat == 0.1 and record.carried and m is not None
    assert [row.p_beat for row in calibration_rows(store, "dev", forecaster=LEARNED)] == [0.1]


def test_the_stage_counts_correct_measurements_bought_by_the_run(tmp_path: Path) -> None:
    store = Store(tmp_path / "k.db")
    run = _run(store)
    store.ledger.add(_measured("a", 2.0), run_id=run)
    store.ledger.add(_measured("a", 2.0, phase="confirm"), run_id=run)  # a confirmation re-measures a point
    store.ledger.add(_measured("b", None), run_id=run)  # failed
    store.ledger.add(_measured("c", 1.1, phase="verify"), run_id=run)
    store.ledger.add(_measured("d", 1.3, provenance="reused"), run_id=run)  # a session's copy: not bought here
    store.ledger.add(_measured("e", 1.3))  # no run: the noise floor, another run's
    assert stage_of(store, run) == 2


def test_the_forecaster_key_names_the_data_a_forecaster_was_built_from(tmp_path: Path) -> None:
    learned = forecaster_key(RunConfig(task="saxpy"))
    assert learned.forecaster == "learned" and learned.model is None
    assert learned.version == seed_version("learned") and learned.version.startswith("seed-sha256:")
    assert forecaster_key(RunConfig(task="saxpy", forecaster="prior")) == ("prior", None, "")
    assert forecaster_key(RunConfig(task="saxpy", forecaster="llm", model="some-model")) == ("llm", "some-model", "")
