"""Runs whose measurements go through a pool, Ray actors or a replay keep the budget invariants."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernelcast.graphs.config import RunConfig
from kernelcast.graphs.context import RunEnv
from kernelcast.graphs.run import start_run
from kernelcast.tools.store.store import Store

from support.run_checks import check_invariants, kill_after_spends


def small(**kw: object) -> RunConfig:
    base = dict(task="saxpy", budget=6, router="measure-all", forecaster="none", sizes="small", measure_per_round=3)
    return RunConfig(**{**base, **kw})  # type: ignore[arg-type]


def test_a_two_worker_pool_run_keeps_the_budget_invariants(tmp_path: Path) -> None:
    store = Store(tmp_path / "k.db")
    seen: list[dict] = []
    env = RunEnv(tmp_path, measure_timeout_s=60, on_event=lambda kind, p: seen.append({"kind": kind, **p}))
    result = start_run(small(parallel=2, share_device=True), store, env)
    check_invariants(store, result.run_id, 6)
    assert result.spent == 6
    rounds = [e for e in seen if e["kind"] == "in_flight"]
    assert rounds and all(e["workers"] == 2 for e in rounds)
    assert any(len(e["candidates"]) > 1 for e in rounds)  # a round dispatched several candidates at once


def test_a_pool_refuses_two_device_models_unless_asked(tmp_path: Path) -> None:
    from kernelcast.tools.hardware.measurers.base import MeasurerError
    from kernelcast.tools.hardware.probe import probe_devices

    healthy = [s for s in probe_devices() if s.healthy]
    if len({s.key for s in healthy}) < 2:
        pytest.skip("one healthy device model here: nothing to mix")
    config = small(parallel=2, device=",".join(s.index for s in healthy[:2]))
    with pytest.raises(MeasurerError, match="mix|model"):
        start_run(config, Store(tmp_path / "k.db"), RunEnv(tmp_path))


def test_a_ray_run_keeps_the_budget_invariants(tmp_path: Path) -> None:
    pytest.importorskip("ray", reason="ray is not installed (pip install 'kernelcast[ray]')")
    store = Store(tmp_path / "k.db")
    result = start_run(small(parallel=2, share_device=True, ray="auto"), store, RunEnv(tmp_path, 60))
    check_invariants(store, result.run_id, 6)
    assert result.spent == 6


def test_a_replayed_run_reproduces_the_stored_runs_decisions(tmp_path: Path) -> None:
    original = Store(tmp_path / "a.db")
    first = start_run(small(router="topk", budget=8, measure_per_round=2), original, RunEnv(tmp_path / "a", 60))
    original.close()
    replay_store = Store(tmp_path / "b.db")  # a fresh store: the replayed search knows nothing in advance
    again = start_run(small(router="topk", budget=8, measure_per_round=2, replay=str(tmp_path / "a.db")),
                      replay_store, RunEnv(tmp_path / "b", 60))

    def decisions(store: Store, run_id: str) -> list[tuple[str | None, str]]:
        return [(e.candidate_hash, e.payload["decision"]) for e in store.events.find(run_id, kind="route")]

    def bought(store: Store, run_id: str) -> list[tuple[str, float | None]]:
        return [(m.candidate_hash, m.speedup) for m in store.ledger.find(run_id=run_id) if m.phase == "search"]

    reader = Store(tmp_path / "a.db", read_only=True)
    assert decisions(replay_store, again.run_id) == decisions(reader, first.run_id)
    assert bought(replay_store, again.run_id) == bought(reader, first.run_id)
    assert again.best_hash == first.best_hash


def test_kill_9_with_measurements_in_flight_then_resume(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = {**os.environ, "KERNELCAST_HOME": str(home)}
    budget = 8
    proc = subprocess.Popen([sys.executable, "-m", "kernelcast.cli", "optimize", "saxpy", "--budget", str(budget),
                             "--sizes", "small", "--forecaster", "none", "--router", "measure-all", "--k", "4",
                             "--parallel", "2", "--share-device", "--events", "jsonl"],
                            stdout=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    run_id, _ = kill_after_spends(proc, 2)  # mid-round: 4 dispatched on 2 workers, others in flight or queued
    assert run_id is not None
    store = Store(home / "kernelcast.db")
    before = {m.candidate_hash: m.created_at for m in store.ledger.find(run_id=run_id)}
    assert 2 <= len(before) < budget and store.runs.get(run_id).status == "interrupted"
    resumed = subprocess.run([sys.executable, "-m", "kernelcast.cli", "resume", run_id, "--events", "jsonl"],
                             capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    after = store.ledger.find(run_id=run_id)
    assert len(after) == budget
    for key, created in before.items():
        assert [m.created_at for m in after if m.candidate_hash == key and m.phase != "confirm"] == [created]
    check_invariants(store, run_id, budget)
