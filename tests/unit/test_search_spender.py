"""The Spender (graphs/search/spender.py) over the replay measurer: no device. It stores each measurement
before it returns, runs the after-measurement hooks in order, and never buys twice what a kill interrupted."""

from __future__ import annotations

from pathlib import Path

from kernelcast.graphs.config import RunConfig
from kernelcast.graphs.context import RunContext, RunEnv
from kernelcast.graphs.run import open_run
from kernelcast.graphs.search.budget import Budget
from kernelcast.graphs.search.spender import Spender
from kernelcast.graphs.search.tree import TreeEdit, new_node
from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.measurement import HardwareSpec, Measurement
from kernelcast.tools.core.task import resolve_task
from kernelcast.tools.hardware.measurers.replay import ReplayMeasurer
from kernelcast.tools.store.store import Store

from support.records import measurement

SPEC = HardwareSpec(backend="opencl", platform="p", name="dev", compute_units=2)


def recorded(tmp_path: Path, speedups: dict[str, float]) -> tuple[Path, list[Candidate]]:
    """A store holding one measurement of each of a few saxpy kernels (what a replay answers from)."""
    task = resolve_task("saxpy")
    ref = task.reference()
    cands = [ref.model_copy(update={"build_options": [f"-DVARIANT={i}"]}) for i in range(len(speedups))]
    cands = [Candidate.model_validate({**c.model_dump(), "build_options": c.build_options}) for c in cands]
    store = Store(tmp_path / "recorded.db")
    store.tasks.upsert(task)
    store.devices.upsert(SPEC)
    for cand, speedup in zip(cands, speedups.values()):
        store.candidates.add(cand)
        store.ledger.add(measurement(cand.hash, speedup).model_copy(update={
            "device": SPEC.key, "sizes": "small", "task_fingerprint": task.fingerprint}))
    store.close()
    return tmp_path / "recorded.db", cands


def spender_over_replay(tmp_path: Path, speedups: dict[str, float], hooks: tuple = ()
                        ) -> tuple[Spender, RunContext, list[Candidate], TreeEdit]:
    path, cands = recorded(tmp_path, speedups)
    config = RunConfig(task="saxpy", budget=8, forecaster="none", sizes="small", replay=str(path))
    store = Store(tmp_path / "run.db")
    measurer = ReplayMeasurer(Store(path, read_only=True), "opencl")
    measurer.start()
    run_id = store.runs.create("saxpy", SPEC.key, config.model_dump(), config.budget)
    ctx = open_run(run_id, config, store, RunEnv(tmp_path), measurer)
    nodes: dict = {}
    for cand in cands:
        store.candidates.add(cand)
        nodes[cand.hash] = new_node(cand, None, 1, 1)
    spender = Spender(ctx, Budget(store, run_id, config), hooks)
    return spender, ctx, cands, TreeEdit(nodes)


def test_each_measurement_is_stored_before_the_hooks_after_it_run_in_order(tmp_path: Path) -> None:
    calls: list[tuple[str, str, int]] = []

    def first(candidate: Candidate, bought: Measurement) -> None:
        calls.append(("first", candidate.hash, ctx.store.ledger.totals(ctx.run_id)[0]))

    def second(candidate: Candidate, bought: Measurement) -> None:
        calls.append(("second", candidate.hash, ctx.store.ledger.totals(ctx.run_id)[0]))

    spender, ctx, cands, nodes = spender_over_replay(tmp_path, {"a": 2.0, "b": 3.0}, (first, second))
    results = spender.measure_many(nodes, [c.hash for c in cands], "search")
    assert [r.speedup for r in results.values() if r is not None] == [2.0, 3.0]
    assert [(name, count) for name, _, count in calls] == [("first", 1), ("second", 1), ("first", 2), ("second", 2)]
    assert [m.candidate_hash for m in ctx.store.ledger.find(run_id=ctx.run_id)] == [c.hash for c in cands]
    assert [e.kind for e in ctx.store.events.find(ctx.run_id, kind="spend")] == ["spend", "spend"]  # the event hook
    assert nodes[cands[1].hash]["speedup"] == 3.0  # applied to its node


def test_a_kill_between_store_and_checkpoint_does_not_buy_twice(tmp_path: Path) -> None:
    spender, ctx, cands, nodes = spender_over_replay(tmp_path, {"a": 2.0, "b": 3.0})
    spender.measure_many(nodes, [cands[0].hash], "search")
    # a kill now loses the step's state (the checkpoint never heard of it); the step runs again from before it
    again = TreeEdit({k: new_node(c, None, 1, 1) for k, c in zip(nodes, cands)})
    assert spender.measured_before_a_kill([c.hash for c in cands]) == [cands[0].hash]
    reused = spender.reuse_stored(again, [c.hash for c in cands], "search")
    assert list(reused) == [cands[0].hash] and again[cands[0].hash]["speedup"] == 2.0
    spender.measure_many(again, [c.hash for c in cands], "search")
    assert ctx.store.ledger.totals(ctx.run_id)[0] == 2  # the first is reused, only the second is bought
    assert not spender.confirmed_before_a_kill(cands[0].hash)


def test_the_spender_never_buys_past_the_budget_nor_what_the_replay_lacks(tmp_path: Path) -> None:
    spender, ctx, cands, nodes = spender_over_replay(tmp_path, {"a": 2.0})
    missing = ctx.task.reference().model_copy(update={"build_options": ["-DNOT_RECORDED=1"]})
    missing = Candidate.model_validate(missing.model_dump())
    ctx.store.candidates.add(missing)
    nodes[missing.hash] = new_node(missing, None, 1, 1)
    results = spender.measure_many(nodes, [cands[0].hash, missing.hash], "search")
    assert results[missing.hash] is None and missing.hash in spender.not_in_replay
    assert ctx.store.ledger.totals(ctx.run_id)[0] == 1
    ctx.config = ctx.config.model_copy(update={"budget": 1})
    assert spender.measure_many(nodes, [missing.hash], "confirm") == {missing.hash: None}  # nothing left to pay
