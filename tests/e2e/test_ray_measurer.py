"""The Ray measurer against a real local Ray instance: 2 actors measuring real OpenCL candidates."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

ray = pytest.importorskip("ray", reason="ray is not installed (pip install ray): the Ray measurer cannot be tested")

from kernelcast.tools.core.candidate import Candidate  # noqa: E402
from kernelcast.tools.core.measurement import MeasureConfig, Measurement, Status  # noqa: E402
from kernelcast.tools.core.task import Task, resolve_task  # noqa: E402
from kernelcast.tools.hardware.measurers.base import MeasurerError  # noqa: E402
from kernelcast.tools.hardware.measurers.factory import make_measurer  # noqa: E402
from kernelcast.tools.hardware.measurers.local import LocalMeasurer  # noqa: E402
from kernelcast.tools.hardware.measurers.ray import RayMeasurer  # noqa: E402

SMALL = MeasureConfig(sizes="small", max_reps=10, target_seconds=0.02, timeout_s=60)
BODY = "y[i] = a * x[i] + y[i];"
# about 2 s per launch series here: slow enough to be killed in the middle, correct all the same
SLOW_LOOP = ("{ float acc = 0.0f; for (int k = 0; k < 150000; ++k) { acc = acc * 0.5f + x[(i + k) & (n - 1)]; } "
             "if (acc == 12345.678f) { y[i] = 0.0f; } else { " + BODY + " } }")

pytestmark = pytest.mark.timeout(120)


def test_auto_starts_a_local_instance_and_close_stops_it(task: Task) -> None:
    """Runs first, before the module's instance exists: "auto" with no Ray running starts one of its own."""
    if ray.is_initialized():
        pytest.skip("a Ray instance is already running in this process")
    with make_measurer("opencl", None, parallel=1, ray="auto") as m:
        assert ray.is_initialized()
        assert m.measure(task, task.reference(), SMALL).status is Status.correct
    assert not ray.is_initialized()


@pytest.fixture(scope="module")
def ray_instance() -> Iterator[None]:
    """One local instance for the module. Its 4 CPUs are logical: actors ask for one each, and two 2-actor
    measurers live at once here (on this 2-core machine they share the cores)."""
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    yield
    if started and ray.is_initialized():
        ray.shutdown()


@pytest.fixture(scope="module")
def task() -> Task:
    return resolve_task("saxpy")


def variant(task: Task, body: str) -> Candidate:
    return task.reference().model_copy(update={"source": task.source.replace(BODY, body)})


@pytest.fixture(scope="module")
def candidates(task: Task) -> list[Candidate]:
    points = [task.instantiate({"VEC": v, "COARSEN": c, "WG": 64}) for v, c in ((1, 1), (2, 2), (4, 1))]
    return [*points, variant(task, "y[i] = a * x[i] + undefined_symbol;"), variant(task, "y[i] = a * x[i];")]


@pytest.fixture(scope="module")
def measurer(ray_instance: None) -> Iterator[RayMeasurer]:
    m = make_measurer("opencl", None, parallel=2, ray="auto", share_device=True)
    assert isinstance(m, RayMeasurer)
    with m:
        yield m


def test_two_actors_give_the_local_statuses(task: Task, candidates: list[Candidate],
                                            measurer: RayMeasurer) -> None:
    with LocalMeasurer("opencl") as local:
        expected = {c.hash: m.status for c, m in local.measure_many(task, candidates, SMALL)}
        local_spec = local.hardware_spec()
    results = list(measurer.measure_many(task, candidates, SMALL))
    assert sorted(c.hash for c, _ in results) == sorted(expected)
    assert {c.hash: m.status for c, m in results} == expected
    assert all(m.device == local_spec.key for _, m in results)
    assert len({a.worker for a in measurer.attempts()}) == 2
    assert len(measurer.actors()) == 2 and measurer.hardware_spec().key == local_spec.key


def test_build_and_outputs_run_on_an_actor(task: Task, candidates: list[Candidate], measurer: RayMeasurer) -> None:
    assert measurer.build(task, candidates[0]) == ("ok", "")
    status, log = measurer.build(task, candidates[3])
    assert status == Status.compile_error.value and "undefined_symbol" in log
    outputs, problems = measurer.outputs(task, task.reference(), "small", seed=0)
    assert problems == [] and outputs["y"].shape == (4096,)


def test_two_actors_on_one_device_need_an_explicit_ask(ray_instance: None) -> None:
    with pytest.raises(MeasurerError, match="share_device=True"):
        RayMeasurer("opencl", None, parallel=2, address="auto").start()


def kill_actors_running(m: RayMeasurer, candidate: Candidate, times: int) -> tuple[threading.Thread, list[str]]:
    """A thread that kills the actor measuring ``candidate`` 0.1 s into it, ``times`` times."""
    killed: list[str] = []

    def watch() -> None:
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline and len(killed) < times:
            for running in m.in_flight():
                if running.candidate_hash == candidate.hash and running.worker not in killed:
                    time.sleep(0.1)  # inside the measurement (it takes ~2 s here), early enough on a faster CPU
                    ray.kill(m.actor_handle(running.worker), no_restart=True)
                    killed.append(running.worker)
                    break
            time.sleep(0.02)

    thread = threading.Thread(target=watch)
    thread.start()
    return thread, killed


SLOW_CONFIG = SMALL.model_copy(update={"min_reps": 3, "max_reps": 3, "warmup": 1})


def test_killing_an_actor_mid_measurement_retries_on_the_other_and_loses_no_candidate(
        task: Task, candidates: list[Candidate], ray_instance: None) -> None:
    slow = variant(task, SLOW_LOOP)
    given = [slow, *candidates[:3]]
    with RayMeasurer("opencl", None, parallel=2, address="auto", share_device=True) as m:
        killer, killed = kill_actors_running(m, slow, times=1)
        results: list[tuple[Candidate, Measurement]] = list(m.measure_many(task, given, SLOW_CONFIG))
        killer.join()
        attempts = m.attempts()
    assert killed, "the slow candidate was never seen in flight"
    assert sorted(c.hash for c, _ in results) == sorted(c.hash for c in given)  # each exactly once
    by_hash = {c.hash: r for c, r in results}
    lost = [a for a in attempts if a.outcome == "lost"]
    assert [a.candidate_hash for a in lost] == [slow.hash] and lost[0].worker == killed[0]
    assert "ActorDiedError" in lost[0].reason or "RayActorError" in lost[0].reason
    retried = [a for a in attempts if a.candidate_hash == slow.hash and a.outcome == "measured"]
    assert len(retried) == 1 and retried[0].worker != killed[0]  # measured again, on the other actor
    assert by_hash[slow.hash].status is Status.correct, by_hash[slow.hash].reason
    for cand in candidates[:3]:
        assert by_hash[cand.hash].status is Status.correct, by_hash[cand.hash].reason


def test_a_candidate_lost_twice_is_recorded_as_a_crash_with_the_reason(task: Task, ray_instance: None) -> None:
    slow = variant(task, SLOW_LOOP)
    with RayMeasurer("opencl", None, parallel=2, address="auto", share_device=True) as m:
        killer, killed = kill_actors_running(m, slow, times=2)
        results = list(m.measure_many(task, [slow], SLOW_CONFIG))
        killer.join()
        attempts = m.attempts()
    assert len(killed) == 2 and len(results) == 1
    (cand, result), = results
    assert cand.hash == slow.hash and result.status is Status.crash and result.candidate_hash == slow.hash
    assert killed[0] in result.reason and killed[1] in result.reason and "lost its measurement worker" in result.reason
    assert [a.outcome for a in attempts] == ["lost", "lost"]
