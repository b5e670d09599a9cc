"""The optimization graph end to end on the real default OpenCL device (small sizes to stay fast)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelcast.graphs.config import RunConfig
from kernelcast.graphs.context import RunEnv
from kernelcast.graphs.events import parse
from kernelcast.graphs.run import RunError, resume_run, start_run
from kernelcast.tools.store.store import Store

from support.cli import start_cli
from support.run_checks import check_invariants, kill_after_spends, resume_to_the_end


@pytest.mark.parametrize("router", ["measure-all", "topk", "selective"])
def test_run_finishes_within_budget_with_a_measured_best(tmp_path: Path, router: str) -> None:
    store = Store(tmp_path / "k.db")
    config = RunConfig(task="saxpy", budget=5, router=router, forecaster="none", sizes="small", measure_per_round=2)
    result = start_run(config, store, RunEnv(tmp_path, measure_timeout_s=60))
    summary = check_invariants(store, result.run_id, 5)
    assert result.spent == 5
    assert summary["best_hash"] is not None
    assert (Path(result.folder) / "best.cl").exists() and (Path(result.folder) / "README.md").exists()
    spends = store.events.find(result.run_id, kind="spend")
    routes = store.events.find(result.run_id, kind="route")
    assert len(spends) == 5
    # every candidate's decision is recorded with a reason (a child carried over is routed once per round)
    assert len({e.candidate_hash for e in routes}) == result.considered_all
    assert all(e.payload["reason"] for e in routes)
    if router != "measure-all":
        assert result.considered_all > result.spent and result.considered <= result.considered_all


def test_resume_of_unknown_run_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(RunError, match="no run with id"):
        resume_run("nope", Store(tmp_path / "k.db"), RunEnv(tmp_path))
    store = Store(tmp_path / "k.db")
    store.runs.create("saxpy", "dev", {"task": "saxpy"}, 4, run_id="saxpy-a_b")
    store.runs.create("saxpy", "dev", {"task": "saxpy"}, 4, run_id="saxpy-axb")
    for pattern in ("", "%", "saxpy-a%", "_", "saxpy-a"):  # wildcards are literal; empty or ambiguous: nothing
        assert store.runs.get(pattern) is None, pattern
    assert store.runs.get("saxpy-a_").id == "saxpy-a_b"  # "_" is a literal underscore, not "any character"
    assert store.runs.get("saxpy-ax").id == "saxpy-axb"  # an unambiguous prefix
    assert len(store.runs.create("saxpy", "dev", {}, 1).rsplit("-", 1)[1]) == 16  # 64 random bits


def test_resume_of_a_finished_run_does_nothing_and_says_so(tmp_path: Path) -> None:
    store = Store(tmp_path / "k.db")
    config = RunConfig(task="saxpy", budget=2, router="measure-all", forecaster="none", sizes="small",
                       measure_per_round=1)
    result = start_run(config, store, RunEnv(tmp_path, measure_timeout_s=60))
    with pytest.raises(RunError, match="finished already"):
        resume_run(result.run_id, store, RunEnv(tmp_path))
    row = store.runs.get(result.run_id)
    assert row is not None and row.status == "finished" and row.spent == 2


def test_kill_9_then_resume_continues_without_rebuying(tmp_path: Path) -> None:
    home = tmp_path / "home"
    budget = 8
    proc = start_cli(home, "optimize", "saxpy", "--budget", str(budget), "--sizes", "small", "--forecaster", "none",
              "--router", "topk", "--k", "2", "--events", "jsonl")
    run_id, spends = kill_after_spends(proc, 3)
    # the worker process is orphaned by the kill; it exits when its pipe closes
    assert run_id is not None and spends == 3
    store = Store(home / "kernelcast.db")
    before = {m.candidate_hash: m.created_at for m in store.ledger.find(run_id=run_id)}
    assert 3 <= len(before) < budget
    killed = store.runs.get(run_id)
    assert killed is not None and killed.status == "interrupted" and killed.spent == len(before)  # a dead owner, what it bought
    assert killed.calibration_group == "saxpy"
    store.runs.update(run_id, calibration_group=None)  # as a run started before groups were recorded

    after = resume_to_the_end(home, store, run_id, budget, before)
    assert len(after) == budget
    check_invariants(store, run_id, budget)
    resumed = store.runs.get(run_id)
    assert resumed is not None and resumed.calibration_group == "saxpy"  # recorded on resume


@pytest.mark.parametrize("learn_online", [True, False])
def test_learned_forecaster_learns_from_the_runs_measurements(tmp_path: Path, learn_online: bool) -> None:
    store = Store(tmp_path / "k.db")
    config = RunConfig(task="saxpy", budget=6, router="topk", forecaster="learned", sizes="small",
                       measure_per_round=2, learn_online=learn_online)
    result = start_run(config, store, RunEnv(tmp_path, measure_timeout_s=60))
    check_invariants(store, result.run_id, 6)
    learned = [e.payload for e in store.events.find(result.run_id, kind="learn")]
    models = {row.model for row in store.forecasts.find(run_id=result.run_id)}
    if not learn_online:
        assert learned == [] and not any("from this run" in m for m in models)
        return
    counts = [p["pairs"] for p in learned]
    assert counts and counts == sorted(set(counts)) and counts[-1] < 6  # the last measurements come after the last forecast
    assert all(parse("learn", p).error is None for p in learned)  # type: ignore[attr-defined]
    assert any("from this run" in m for m in models)  # later forecasts came from the retrained model
