"""Issue 13's done-when, at graph level: a fresh store and a task loaded from a path give informative
forecasts from the first round and `learn` events from the first measurements (real device, small sizes)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from kernelcast.agents.factory import learned_forecaster
from kernelcast.agents.forecast.base import Provenance
from kernelcast.agents.forecast.device_probe import PROBE
from kernelcast.agents.forecast.distributions import belief_above
from kernelcast.agents.forecast.learned import task_lookup, training_set
from kernelcast.agents.forecast.task_model import PREDICTIVE_DOF
from kernelcast.graphs.config import RunConfig
from kernelcast.graphs.context import RunEnv
from kernelcast.graphs.route.risk_control import SEED_REPLAY
from kernelcast.graphs.route.trust import RouteRecord, calibration_rows, live_counts, trust_summary
from kernelcast.graphs.run import start_run
from kernelcast.tools.core.task import BUILTIN_DIR, TaskError, resolve_task
from kernelcast.tools.store.store import Store


@pytest.fixture()
def own_task(tmp_path: Path) -> Path:
    """The saxpy task under a name no built-in has, as a user's task folder."""
    folder = tmp_path / "my_saxpy"
    shutil.copytree(BUILTIN_DIR / "saxpy", folder)
    toml = folder / "task.toml"
    toml.write_text(toml.read_text().replace('name = "saxpy"', 'name = "my_saxpy"'))
    with pytest.raises(TaskError):
        resolve_task("my_saxpy")  # only its path knows it
    return toml


def test_fresh_store_path_task_is_forecast_from_the_first_round_and_learns(tmp_path: Path, own_task: Path) -> None:
    store = Store(tmp_path / "k.db")
    config = RunConfig(task=str(own_task), budget=6, router="selective", forecaster="learned", sizes="small",
                       measure_per_round=2, trust_seed_replay=True)
    result = start_run(config, store, RunEnv(tmp_path, measure_timeout_s=60))
    assert result.spent <= 6 and result.best_hash is not None

    forecasts = store.forecasts.find(run_id=result.run_id)
    assert forecasts and not any(r.failed for r in forecasts), "every forecast informative, none 'untrained'"
    events = store.events.find(result.run_id)
    first_spend = next(i for i, e in enumerate(events) if e.kind == "spend")
    first_round = [e for e in events[:first_spend] if e.kind == "route"]
    assert first_round and all(RouteRecord.model_validate(e.payload).informative for e in first_round)
    # the opening design is forecast wide (forecasts are cheap) and measured narrow
    assert len(first_round) > config.n_children and config.n_opening > config.n_children

    learned = [e.payload for e in events if e.kind == "learn"]
    assert learned and all(p.get("error") is None for p in learned)
    assert learned[0]["pairs"] <= config.measure_per_round  # from the first measurements on
    assert any("from this run" in r.model for r in forecasts)

    records = [RouteRecord.model_validate(e.payload) for e in events if e.kind == "route"]
    assert all(r.p_beat is not None and r.incumbent is not None and r.incumbent >= 1.0 for r in records)
    # after the first measurements the in-task layer forecasts, with a Student-t belief, and the router's
    # P(beat) is read from that very belief (not from a normal of the same sd)
    # (a child carried over to later rounds is forecast and routed once per round: its n-th routing read its
    # n-th forecast)
    beliefs: dict[str | None, list[Provenance]] = {}
    for r in forecasts:
        beliefs.setdefault(r.candidate_hash, []).append(Provenance.model_validate(r.provenance))
    routings: dict[str | None, int] = {}
    read = []
    for e in events:
        if e.kind == "route":
            n = routings[e.candidate_hash] = routings.get(e.candidate_hash, 0) + 1
            read.append((e, beliefs[e.candidate_hash][n - 1]))
    assert all(len(beliefs[key]) == n for key, n in routings.items())
    in_task = [(e, belief) for e, belief in read if belief.mode == "in-task"]
    assert in_task, "no in-task forecast was routed after the first measurements"
    for event, belief in in_task:
        record = RouteRecord.model_validate(event.payload)
        assert belief.log_speedup_dof == PREDICTIVE_DOF
        assert belief.log_speedup_mean is not None and belief.log_speedup_sd is not None
        assert record.p_beat == pytest.approx(belief_above(math.log(record.incumbent), belief.log_speedup_mean,
                                                           belief.log_speedup_sd, PREDICTIVE_DOF), abs=1e-6)
    summary = trust_summary(store, result.run_id, risk=config.risk)
    assert summary.given_forecasts == summary.forecasts == len(beliefs)  # candidates, each once
    assert summary.considered == summary.considered_all == result.considered
    assert summary.decisions == len(routings)  # a child carried over is one decision, its last
    tree = json.loads((Path(result.folder) / "tree.json").read_text())
    live = live_counts(tree)
    assert live["given"] == live["forecasts"] == summary.forecasts
    assert live["considered"] == live["considered_all"] == summary.considered
    assert len(calibration_rows(store, result.device)) == sum(1 for e in events if e.kind == "spend"
                                                              and e.payload["phase"] == "search")
    # each decision knows its stage (the run's correct measurements before it); the opening (stage 0) has no
    # certified rows on a fresh store, later rounds trust as far as the seed's replayed decisions certify (opted in)
    stage = 0
    for event in events:
        stage += event.kind == "spend" and event.payload["status"] == "correct" and event.payload["phase"] != "confirm"
        if event.kind == "route":
            assert RouteRecord.model_validate(event.payload).stage == stage
    assert all(r.trust_source == "" for r in records if r.stage == 0)
    later = [r for r in records if r.stage]
    assert later and all(r.trust_source == SEED_REPLAY for r in later)
    assert summary.trusted_on_replay == summary.trusted == sum(1 for r in records if r.forecast_alone)

    assert store.devices.probe(result.device, PROBE)  # the triad was measured once and kept
    # the store's task record lets later trainings featurize this task's pairs
    pairs = store.ledger.measured_pairs(device=result.device, sizes="small")
    rows = training_set(pairs, task_lookup(store))
    assert len(rows) == sum(1 for _, m in pairs if m.ok) > 0 and not rows.skipped["unknown task"]

    # the first round was forecast for the problem this run measures (small sizes), not for the full-size one
    task = resolve_task(str(own_task))
    first = [e.candidate_hash for e in events[:first_spend] if e.kind == "route"]
    cands = [store.candidates.get(h) for h in first]
    recorded: dict[str | None, list[float]] = {}
    for r in forecasts:  # the first round's: a child carried over is forecast again later
        recorded.setdefault(r.candidate_hash, r.probabilities)
    fresh = learned_forecaster(store, result.device)
    hw = store.devices.all()[result.device]
    at_small = fresh.forecast_many(task.at_sizes("small"), cands, hw)
    at_full = fresh.forecast_many(task, cands, hw)
    def gap(made: list) -> float:
        return max(abs(a - b) for f, h in zip(made, first) for a, b in zip(f.probabilities, recorded[h]))

    assert gap(at_small) < 1e-9 and gap(at_full) > 1e-3
