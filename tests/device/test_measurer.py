"""The Measurer interface on the real OpenCL device: local, pool and replay measurers, and the factory."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.measurement import MeasureConfig, Measurement, Status
from kernelcast.tools.core.task import Task, resolve_task
from kernelcast.tools.hardware.measurers.base import Measurer, MeasurerError, check_one_device_model
from kernelcast.tools.hardware.measurers.factory import make_measurer
from kernelcast.tools.hardware.measurers.local import LocalMeasurer, PoolMeasurer, plan_devices
from kernelcast.tools.hardware.measurers.replay import REPLAY_MISSING_FLAG, ReplayMeasurer
from kernelcast.tools.hardware.worker import WorkerError
from kernelcast.tools.store.store import Store

SMALL = MeasureConfig(sizes="small", max_reps=10, target_seconds=0.02, timeout_s=60)
BODY = "y[i] = a * x[i] + y[i];"


@pytest.fixture(scope="module")
def task() -> Task:
    return resolve_task("saxpy")


def variant(task: Task, body: str) -> Candidate:
    return task.reference().model_copy(update={"source": task.source.replace(BODY, body)})


@pytest.fixture(scope="module")
def candidates(task: Task) -> list[Candidate]:
    """Correct template points, a compile error and a wrong result: every outcome class a round sees."""
    points = [task.instantiate({"VEC": v, "COARSEN": c, "WG": 64}) for v, c in ((1, 1), (2, 2), (4, 1), (4, 2))]
    return [*points, variant(task, "y[i] = a * x[i] + undefined_symbol;"), variant(task, "y[i] = a * x[i];")]


@pytest.fixture(scope="module")
def local() -> Iterator[LocalMeasurer]:
    with LocalMeasurer("opencl") as measurer:
        yield measurer


@pytest.fixture(scope="module")
def local_results(task: Task, candidates: list[Candidate], local: LocalMeasurer) -> dict[str, Measurement]:
    return {c.hash: m for c, m in local.measure_many(task, candidates, SMALL)}


@pytest.fixture(scope="module")
def pool() -> Iterator[PoolMeasurer]:
    measurer = make_measurer("opencl", None, parallel=2, share_device=True)
    assert isinstance(measurer, PoolMeasurer)
    with measurer:
        yield measurer


EXPECTED = [Status.correct] * 4 + [Status.compile_error, Status.incorrect]


# ---- local -------------------------------------------------------------------------
def test_local_measures_each_candidate_once_in_order(task: Task, candidates: list[Candidate],
                                                     local_results: dict[str, Measurement]) -> None:
    assert list(local_results) == [c.hash for c in candidates]
    assert [m.status for m in local_results.values()] == EXPECTED
    assert {m.task_fingerprint for m in local_results.values()} == {task.fingerprint}  # what each speedup is over
    compile_error = local_results[candidates[4].hash]
    assert "undefined_symbol" in compile_error.reason


def test_local_build_outputs_and_spec_match_the_worker_interface(task: Task, candidates: list[Candidate],
                                                                 local: LocalMeasurer) -> None:
    assert local.build(task, candidates[0]) == ("ok", "")
    status, log = local.build(task, candidates[4])
    assert status == Status.compile_error.value and "undefined_symbol" in log
    outputs, problems = local.outputs(task, task.reference(), "small", seed=1)
    assert problems == [] and outputs["y"].shape == (4096,)
    assert local.start() == local.hardware_spec() and local.hardware_spec().backend == "opencl"
    assert local.measure(task, candidates[0], SMALL).status is Status.correct
    assert [a.candidate_hash for a in local.attempts()] == [candidates[0].hash]
    assert local.in_flight() == []


# ---- pool --------------------------------------------------------------------------
def test_pool_of_two_yields_every_candidate_once_with_the_local_statuses(
        task: Task, candidates: list[Candidate], pool: PoolMeasurer, local_results: dict[str, Measurement]) -> None:
    results = list(pool.measure_many(task, candidates, SMALL))
    assert sorted(c.hash for c, _ in results) == sorted(c.hash for c in candidates)
    for cand, m in results:
        assert m.candidate_hash == cand.hash
        assert m.status is local_results[cand.hash].status, m.reason
        assert m.device == pool.hardware_spec().key
    workers = {a.worker for a in pool.attempts()}
    assert len(workers) == 2  # both workers measured
    assert all(a.outcome == "measured" for a in pool.attempts()) and len(pool.attempts()) == len(candidates)
    assert pool.in_flight() == []


def test_pool_keeps_both_workers_busy_while_the_caller_handles_a_result(task: Task, candidates: list[Candidate],
                                                                  pool: PoolMeasurer) -> None:
    results = pool.measure_many(task, candidates[:4], SMALL)
    first, _ = next(results)
    busy = pool.in_flight()  # both workers were given the next candidates before the first result came out
    assert len(busy) == 2 and len({b.worker for b in busy}) == 2
    assert first.hash not in {b.candidate_hash for b in busy}
    assert len(list(results)) == 3 and pool.in_flight() == []
    assert pool.parallelism == 2 and len(pool.hardware_specs()) == 2


def test_pool_build_and_outputs_go_through_one_worker(task: Task, candidates: list[Candidate], pool: PoolMeasurer,
                                                      local: LocalMeasurer) -> None:
    assert pool.build(task, candidates[1]) == ("ok", "")
    assert pool.build(task, candidates[4])[0] == Status.compile_error.value
    mine, _ = pool.outputs(task, candidates[0], "small", seed=2)
    theirs, _ = local.outputs(task, candidates[0], "small", seed=2)
    np.testing.assert_allclose(mine["y"], theirs["y"], rtol=1e-6)


def test_closing_the_iterator_early_leaves_the_pool_usable(task: Task, candidates: list[Candidate],
                                                           pool: PoolMeasurer) -> None:
    results = pool.measure_many(task, candidates[:4], SMALL)
    first_candidate, first = next(results)
    results.close()
    assert first.candidate_hash == first_candidate.hash
    assert pool.measure(task, candidates[0], SMALL).status is Status.correct


def test_a_lost_pool_worker_is_retried_on_the_other_and_no_candidate_is_lost(task: Task,
                                                                             candidates: list[Candidate]) -> None:
    """Worker 1's process is killed and its device made unopenable: it cannot restart, so it is lost."""
    with PoolMeasurer("opencl", [None, None]) as pool:
        slot = pool.slots[1]
        assert slot.worker.pid is not None
        slot.worker.device = "no-such-device-xyz"  # the restart after the kill fails: the device is gone
        os.kill(slot.worker.pid, signal.SIGKILL)
        time.sleep(0.2)
        points = candidates[:4]
        results = list(pool.measure_many(task, points, SMALL))
        assert sorted(c.hash for c, _ in results) == sorted(c.hash for c in points)
        assert all(m.status is Status.correct for _, m in results), [m.reason for _, m in results]
        lost = [a for a in pool.attempts() if a.outcome == "lost"]
        assert len(lost) == 1 and lost[0].worker == slot.label and "no-such-device-xyz" in lost[0].reason
        retried = [a for a in pool.attempts() if a.candidate_hash == lost[0].candidate_hash and a.outcome == "measured"]
        assert len(retried) == 1 and retried[0].worker != slot.label
        assert not slot.alive
        again = list(pool.measure_many(task, points[:2], SMALL))
        assert len(again) == 2 and {a.worker for a in pool.attempts()} == {pool.slots[0].label}


def test_when_every_worker_is_lost_the_pool_says_so_and_invents_no_measurement(task: Task,
                                                                              candidates: list[Candidate]) -> None:
    with PoolMeasurer("opencl", [None]) as pool:
        slot = pool.slots[0]
        slot.worker.device = "no-such-device-xyz"
        assert slot.worker.pid is not None
        os.kill(slot.worker.pid, signal.SIGKILL)
        time.sleep(0.2)
        got: list[tuple[Candidate, Measurement]] = []
        with pytest.raises(MeasurerError, match="every measurement worker is lost"):
            for pair in pool.measure_many(task, candidates[:3], SMALL):
                got.append(pair)
        # the candidate that was on the lost worker had no other worker: recorded as a crash with the reason
        assert len(got) == 1 and got[0][1].status is Status.crash
        assert "no-such-device-xyz" in got[0][1].reason and "no other worker" in got[0][1].reason
        assert got[0][1].task_fingerprint == task.fingerprint


def test_pool_needs_an_explicit_ask_to_share_one_device() -> None:
    with pytest.raises(MeasurerError, match="share_device=True"):
        make_measurer("opencl", None, parallel=2)
    with pytest.raises(MeasurerError, match="named twice"):
        plan_devices("0:0,0:0", 2, share_device=False)
    with pytest.raises(MeasurerError, match="parallel=3 but 2 devices"):
        plan_devices("0:0,0:1", 3, share_device=False)
    assert plan_devices("0:0,0:1", 2, share_device=False) == ["0:0", "0:1"]
    assert plan_devices(None, 3, share_device=True) == [None, None, None]
    with pytest.raises(MeasurerError, match="at least 1"):
        plan_devices(None, 0, share_device=True)


def test_pool_refuses_different_device_models_unless_allowed(local: LocalMeasurer) -> None:
    spec = local.hardware_spec()
    other = spec.model_copy(update={"name": spec.name + " (another model)"})
    with pytest.raises(MeasurerError, match="different device models"):
        check_one_device_model([spec, other], ["w0", "w1"], allow_mixed=False)
    check_one_device_model([spec, other], ["w0", "w1"], allow_mixed=True)
    check_one_device_model([spec, spec], ["w0", "w1"], allow_mixed=False)


def test_a_real_pool_over_two_device_models_is_refused_unless_allowed() -> None:
    from kernelcast.tools.hardware.probe import probe_devices

    models = {s.key: s for s in probe_devices() if s.healthy}
    if len(models) < 2:
        pytest.skip(f"needs two healthy OpenCL device models; this machine has {len(models)}")
    first, second = list(models.values())[:2]
    with pytest.raises(MeasurerError, match="different device models"):
        PoolMeasurer("opencl", [first.index, second.index]).start()
    with PoolMeasurer("opencl", [first.index, second.index], allow_mixed=True) as pool:
        assert [s.key for s in pool.hardware_specs()] == [first.key, second.key]


def test_pool_with_an_unknown_device_fails_clearly() -> None:
    with pytest.raises(WorkerError, match="no-such-device"):
        with PoolMeasurer("opencl", [None, "no-such-device"]):
            pass


# ---- replay ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory, task: Task, candidates: list[Candidate],
           local: LocalMeasurer, local_results: dict[str, Measurement]) -> Path:
    path = tmp_path_factory.mktemp("replay") / "kernelcast.db"
    store = Store(path)
    store.tasks.upsert(task)
    store.devices.upsert(local.hardware_spec())
    for cand in candidates:
        store.candidates.add(cand)
        store.ledger.add(local_results[cand.hash], run_id="stored-run")
    store.close()
    return path


@pytest.fixture
def store(stored: Path) -> Iterator[Store]:
    s = Store(stored)
    yield s
    s.close()


def test_replay_reproduces_stored_measurements_exactly(task: Task, candidates: list[Candidate], store: Store,
                                                       local_results: dict[str, Measurement]) -> None:
    with make_measurer("opencl", None, parallel=2, replay_store=store) as replay:
        assert isinstance(replay, ReplayMeasurer) and replay.simulated
        results = list(replay.measure_many(task, candidates, SMALL))
    assert sorted(c.hash for c, _ in results) == sorted(c.hash for c in candidates)
    for cand, m in results:  # the stored measurement, marked as replayed (the store keeps it apart from live rows)
        assert m == local_results[cand.hash].model_copy(update={"provenance": "replayed"})


def test_replay_reports_a_candidate_it_never_saw(task: Task, store: Store) -> None:
    unseen = task.instantiate({"VEC": 8, "COARSEN": 8, "WG": 16})
    with make_measurer("opencl", None, replay_store=store) as replay:
        m = replay.measure(task, unseen, SMALL)
        assert m.status is Status.invalid and m.status.failed and REPLAY_MISSING_FLAG in m.flags
        assert "never measured" in m.reason and unseen.short in m.reason
        assert replay.build(task, unseen) == ("ok", "")  # unknown compile status: proposed, then not measured
        full = replay.measure(task, task.instantiate({"VEC": 1, "COARSEN": 1, "WG": 64}), SMALL.model_copy(
            update={"sizes": "full"}))
        assert REPLAY_MISSING_FLAG in full.flags  # stored at small sizes only


def test_replay_answers_build_from_the_stored_verdict(task: Task, candidates: list[Candidate], store: Store) -> None:
    with make_measurer("opencl", None, replay_store=store) as replay:
        assert replay.build(task, candidates[0]) == ("ok", "")
        status, log = replay.build(task, candidates[4])
        assert status == Status.compile_error.value and "undefined_symbol" in log
        with pytest.raises(WorkerError, match="no device"):
            replay.outputs(task, candidates[0])


def test_replay_with_latency_waits_each_stored_device_time(task: Task, candidates: list[Candidate],
                                                           store: Store, local_results: dict[str, Measurement]) -> None:
    slowest = max(candidates, key=lambda c: local_results[c.hash].wall_ms or 0.0)
    with make_measurer("opencl", None, replay_store=store, replay_latency=True) as replay:
        start = time.perf_counter()
        m = replay.measure(task, slowest, SMALL)
        elapsed_ms = (time.perf_counter() - start) * 1e3
    assert m == local_results[slowest.hash].model_copy(update={"provenance": "replayed"})
    assert elapsed_ms >= (m.wall_ms or 0.0)


def test_replay_device_must_be_in_the_store(store: Store, tmp_path: Path) -> None:
    with pytest.raises(MeasurerError, match="no stored opencl device matches"):
        make_measurer("opencl", "not-a-stored-device", replay_store=store)
    with pytest.raises(MeasurerError, match="no cuda device"):
        make_measurer("cuda", None, replay_store=store)
    empty = Store(tmp_path / "empty.db")
    try:
        with pytest.raises(MeasurerError, match="has no opencl device"):
            make_measurer("opencl", None, replay_store=empty)
    finally:
        empty.close()
    key = next(iter(store.devices.all()))
    assert make_measurer("opencl", key, replay_store=store).hardware_spec().key == key


# ---- the factory -------------------------------------------------------------------
def test_factory_builds_the_measurer_asked_for(store: Store) -> None:
    assert isinstance(make_measurer("opencl"), LocalMeasurer)
    assert isinstance(make_measurer("opencl", "0:0,0:1"), PoolMeasurer)  # not started: no device opened yet
    with pytest.raises(MeasurerError, match="unknown backend"):
        make_measurer("vulkan")
    with pytest.raises(MeasurerError, match="not both"):
        make_measurer("opencl", replay_store=store, ray="auto")
    with pytest.raises(MeasurerError, match="empty entry"):
        make_measurer("opencl", "0:0,")


def test_every_measurer_is_a_measurer() -> None:
    for cls in (LocalMeasurer, PoolMeasurer, ReplayMeasurer):
        assert issubclass(cls, Measurer)
