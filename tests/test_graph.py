"""The optimization graph end to end on the real default OpenCL device (small sizes to stay fast)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernelcast.graphs.config import RunConfig
from kernelcast.graphs.context import RunEnv
from kernelcast.graphs.events import parse
from kernelcast.graphs.run import RunError, resume_run, start_run
from kernelcast.graphs.search.tree import CONSIDERED_CLASSES
from kernelcast.graphs.route.trust import RouteRecord
from kernelcast.tools.core.measurement import Measurement
from kernelcast.tools.store.store import Store

ROOT = Path(__file__).resolve().parents[1]


def check_pairing(store: Store, run_id: str) -> int:
    """Every child measured after a decision against a kernel (not the reference) was timed beside that kernel,
    so its calibration row reads the pair; returns how many were."""
    judged = {e.candidate_hash: RouteRecord.model_validate(e.payload).incumbent_hash
              for e in store.events(run_id, kind="route")}
    paired = 0
    for m in store.measurements(run_id=run_id):
        if m.phase != "confirm" and m.ok and judged.get(m.candidate_hash):
            assert m.rival is not None and m.rival.candidate_hash == judged[m.candidate_hash], m.flags
            paired += 1
    return paired


def check_invariants(store: Store, run_id: str, budget: int) -> dict:
    row = store.run(run_id)
    assert row is not None and row.status == "finished"
    tree = json.loads((Path(row.folder) / "tree.json").read_text())
    bought = store.measurements(run_id=run_id)
    assert len(bought) <= budget
    measured = [m for m in bought if m.phase != "confirm"]
    confirmations = [m for m in bought if m.phase == "confirm"]
    assert len({m.candidate_hash for m in measured}) == len(measured), "a candidate was bought twice"
    assert len({m.candidate_hash for m in confirmations}) == len(confirmations), "a candidate was confirmed twice"
    assert {m.candidate_hash for m in confirmations} <= {m.candidate_hash for m in measured if m.ok}
    check_pairing(store, run_id)
    for key, node in tree.items():
        if node["outcome"] == "root":
            continue
        assert node["outcome"] in CONSIDERED_CLASSES, f"{key} ended as {node['outcome']}"
    summary = row.summary
    if summary["best_hash"]:
        best = [m for m in measured if m.candidate_hash == summary["best_hash"]]
        assert best and best[0].ok, "the reported best must be a measured, correct kernel"
        assert summary["first_speedup"] == pytest.approx(best[0].speedup)
        confirmed = [m for m in confirmations if m.candidate_hash == summary["best_hash"]]
        if summary["confirmed"]:  # the reported number is the confirmation's, with its interval
            assert confirmed and confirmed[0].ok and summary["best_speedup"] == pytest.approx(confirmed[0].speedup)
            low, high = summary["best_interval"]
            assert low <= summary["best_speedup"] <= high
            assert summary["significant"] == (low > 1.0 and summary["best_speedup"] > 1 + (summary["noise_floor"] or 0))
        else:
            assert not summary["significant"]
        assert tree[summary["best_hash"]]["outcome"] in ("measured", "verified")
    return summary


@pytest.mark.parametrize("router", ["measure-all", "topk", "selective"])
def test_run_finishes_within_budget_with_a_measured_best(tmp_path: Path, router: str) -> None:
    store = Store(tmp_path / "k.db")
    config = RunConfig(task="saxpy", budget=5, router=router, forecaster="none", sizes="small", measure_per_round=2)
    result = start_run(config, store, RunEnv(tmp_path, measure_timeout_s=60))
    summary = check_invariants(store, result.run_id, 5)
    assert result.spent == 5
    assert summary["best_hash"] is not None
    assert (Path(result.folder) / "best.cl").exists() and (Path(result.folder) / "README.md").exists()
    spends = store.events(result.run_id, kind="spend")
    routes = store.events(result.run_id, kind="route")
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
    store.create_run("saxpy", "dev", {"task": "saxpy"}, 4, run_id="saxpy-a_b")
    store.create_run("saxpy", "dev", {"task": "saxpy"}, 4, run_id="saxpy-axb")
    for pattern in ("", "%", "saxpy-a%", "_", "saxpy-a"):  # wildcards are literal; empty or ambiguous: nothing
        assert store.run(pattern) is None, pattern
    assert store.run("saxpy-a_").id == "saxpy-a_b"  # "_" is a literal underscore, not "any character"
    assert store.run("saxpy-ax").id == "saxpy-axb"  # an unambiguous prefix
    assert len(store.create_run("saxpy", "dev", {}, 1).rsplit("-", 1)[1]) == 16  # 64 random bits


def test_resume_of_a_finished_run_does_nothing_and_says_so(tmp_path: Path) -> None:
    store = Store(tmp_path / "k.db")
    config = RunConfig(task="saxpy", budget=2, router="measure-all", forecaster="none", sizes="small",
                       measure_per_round=1)
    result = start_run(config, store, RunEnv(tmp_path, measure_timeout_s=60))
    with pytest.raises(RunError, match="finished already"):
        resume_run(result.run_id, store, RunEnv(tmp_path))
    row = store.run(result.run_id)
    assert row is not None and row.status == "finished" and row.spent == 2


def kc(home: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "KERNELCAST_HOME": str(home), "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "kernelcast.cli", *args], stdout=subprocess.PIPE, text=True,
                            env=env, cwd=home.parent)


def kill_after_spends(proc: subprocess.Popen[str], spends_wanted: int, phase: str | None = None,
                      after: str | None = None) -> tuple[str | None, int]:
    """Read a run's JSONL events and SIGKILL it right after its n-th measurement (of ``phase``, if given;
    counted from the first event of kind ``after``, if given): (run id, spends counted)."""
    run_id, spends = None, 0
    counting = after is None
    assert proc.stdout is not None
    deadline = time.time() + 240
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        event = json.loads(line)
        run_id = event.get("run_id", run_id)
        counting = counting or event["event"] == after
        if counting and event["event"] == "spend" and phase in (None, event["phase"]):
            spends += 1
            if spends == spends_wanted:
                os.kill(proc.pid, signal.SIGKILL)
                break
    proc.wait()
    return run_id, spends


def resume_to_the_end(home: Path, store: Store, run_id: str, budget: int, before: dict[str, str]) -> list[Measurement]:
    """Resume a killed run through the CLI until it finishes with its budget spent; nothing measured before the
    kill (``before``: candidate -> when) was lost or bought again. The run's measurements afterwards."""
    resumed = kc(home, "resume", run_id, "--events", "jsonl")
    out, _ = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, out
    result = json.loads(out.strip().splitlines()[-1])
    assert result["event"] == "result" and result["spent"] == budget
    after = store.measurements(run_id=run_id)
    for key, created in before.items():
        assert [m.created_at for m in after if m.candidate_hash == key and m.phase != "confirm"] == [created]
    return after


def test_kill_9_then_resume_continues_without_rebuying(tmp_path: Path) -> None:
    home = tmp_path / "home"
    budget = 8
    proc = kc(home, "optimize", "saxpy", "--budget", str(budget), "--sizes", "small", "--forecaster", "none",
              "--router", "topk", "--k", "2", "--events", "jsonl")
    run_id, spends = kill_after_spends(proc, 3)
    # the worker process is orphaned by the kill; it exits when its pipe closes
    assert run_id is not None and spends == 3
    store = Store(home / "kernelcast.db")
    before = {m.candidate_hash: m.created_at for m in store.measurements(run_id=run_id)}
    assert 3 <= len(before) < budget
    killed = store.run(run_id)
    assert killed is not None and killed.status == "interrupted" and killed.spent == len(before)  # a dead owner, what it bought
    assert killed.calibration_group == "saxpy"
    store.update_run(run_id, calibration_group=None)  # as a run started before groups were recorded

    after = resume_to_the_end(home, store, run_id, budget, before)
    assert len(after) == budget
    check_invariants(store, run_id, budget)
    resumed = store.run(run_id)
    assert resumed is not None and resumed.calibration_group == "saxpy"  # recorded on resume


@pytest.mark.parametrize("learn_online", [True, False])
def test_learned_forecaster_learns_from_the_runs_measurements(tmp_path: Path, learn_online: bool) -> None:
    store = Store(tmp_path / "k.db")
    config = RunConfig(task="saxpy", budget=6, router="topk", forecaster="learned", sizes="small",
                       measure_per_round=2, learn_online=learn_online)
    result = start_run(config, store, RunEnv(tmp_path, measure_timeout_s=60))
    check_invariants(store, result.run_id, 6)
    learned = [e.payload for e in store.events(result.run_id, kind="learn")]
    models = {row.model for row in store.forecasts(run_id=result.run_id)}
    if not learn_online:
        assert learned == [] and not any("from this run" in m for m in models)
        return
    counts = [p["pairs"] for p in learned]
    assert counts and counts == sorted(set(counts)) and counts[-1] < 6  # the last measurements come after the last forecast
    assert all(parse("learn", p).error is None for p in learned)  # type: ignore[attr-defined]
    assert any("from this run" in m for m in models)  # later forecasts came from the retrained model
