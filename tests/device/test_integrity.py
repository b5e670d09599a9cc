"""Hostile kernels and careless task files against the measurement protocol, on the real OpenCL device.

Each test is an attack that used to produce a number; now the candidate is rejected or its result is
flagged, never reported as a speedup. (Confinement of inputs: tests/unit/test_confinement.py.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.measurement import Status
from kernelcast.tools.core.task import Task, TaskError
from kernelcast.tools.hardware.probe import DeviceUnusable, choose_device, probe_devices
from kernelcast.tools.hardware.worker import MeasurementWorker, WorkerError

from support.cli import run_cli
from support.slowadd import CONFIG, SLOW_ADD, edit, write_task


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> Task:
    return write_task(tmp_path_factory.mktemp("slowadd"), SLOW_ADD)


def test_output_memoization_gets_no_speedup(task: Task, worker: MeasurementWorker) -> None:
    """Skip the work when the output already holds finite values (a previous launch's results)."""
    memo = edit(task, "if (isfinite(c[i])) return;")
    unchecked = worker.measure(task, memo, CONFIG.model_copy(update={"verify_timed": False}))
    assert unchecked.ok and unchecked.speedup is not None and unchecked.speedup > 3  # the attack works unchecked
    m = worker.measure(task, memo, CONFIG)
    assert m.status is Status.correct and m.speedup is not None
    assert m.speedup < 1.5, f"memoization reported as a {m.speedup:.2f}x speedup"


def test_skipping_work_after_the_correctness_launches_is_caught(task: Task, worker: MeasurementWorker) -> None:
    """A program-scope counter lets a kernel compute only in its first launches (the correctness phase)."""
    counter = edit(task, "int calls = atomic_inc(&launches) / (int)get_global_size(0);\n    if (calls >= 4) return;",
                   prefix="__global int launches = 0;\n", options=["-cl-std=CL2.0"])
    m = worker.measure(task, counter, CONFIG)
    assert m.status in (Status.incorrect, Status.invalid, Status.compile_error), m
    assert m.speedup is None
    if m.status is Status.incorrect:
        assert "during timing" in m.reason or "fresh inputs" in m.reason


def test_uninitialized_read_of_the_output_is_caught(task: Task, worker: MeasurementWorker) -> None:
    """Accumulate into the output without initializing it: passes only if the buffer is reused warm."""
    sneaky = task.reference().model_copy(update={"source": task.source.replace("c[i] = s / 128.0f;",
                                                                                  "c[i] = c[i] * 0.0f + s / 128.0f;")})
    m = worker.measure(task, sneaky, CONFIG)
    assert m.status is Status.incorrect and "NaN" in m.reason


def test_reference_against_itself_carries_an_interval_around_one(task: Task, worker: MeasurementWorker) -> None:
    m = worker.measure(task, task.reference(), CONFIG)
    assert m.ok and m.speedup_ci is not None
    low, high = m.speedup_ci
    assert low <= m.speedup <= high  # type: ignore[operator]
    assert "timed launches checked" in m.reason and "fresh seed" in m.reason


def fast_add(task: Task) -> Candidate:
    """The slow loop's sum in one addition: the same result for a 256th of the work."""
    return task.reference().model_copy(update={"source": task.source.replace(
        "for (int k = 0; k < 256; ++k) s += a[i] * (float)(k & 1) + b[i] * (float)((k + 1) & 1);",
        "s = 128.0f * (a[i] + b[i]);")})


def test_a_rival_timed_beside_the_candidate_gives_a_paired_comparison(task: Task, worker: MeasurementWorker) -> None:
    """The incumbent timed interleaved with the candidate: "does it beat the incumbent" in one session."""
    fast, slow = fast_add(task), task.reference()
    m = worker.measure(task, fast, CONFIG.model_copy(update={"rival": slow}))
    assert m.ok and m.rival is not None and m.speedup is not None, m.reason
    assert m.rival.candidate_hash == slow.hash and m.rival.beaten
    assert m.rival.ratio == pytest.approx(m.speedup / m.rival.speedup)  # one session, one reference
    assert m.rival.ratio_ci[0] <= m.rival.ratio <= m.rival.ratio_ci[1]
    assert m.rival.timing.reps == m.candidate.reps  # type: ignore[union-attr]
    back = worker.measure(task, slow, CONFIG.model_copy(update={"rival": fast}))
    assert back.ok and back.rival is not None and not back.rival.beaten


def test_a_rival_that_is_wrong_during_timing_is_dropped_not_trusted(task: Task, worker: MeasurementWorker) -> None:
    """A rival that skips its work would make every candidate look slow: its comparison is dropped, the
    candidate's own measurement stands."""
    lazy = task.reference().model_copy(update={"source": task.source.replace("c[i] = s / 128.0f;", "c[i] = 0.0f;")})
    m = worker.measure(task, fast_add(task), CONFIG.model_copy(update={"rival": lazy}))
    assert m.ok and m.rival is None
    assert any("rival" in f and "wrong" in f for f in m.flags), m.flags
    # one that writes into its read-only input: its own copy, so the candidate's inputs stay intact
    vandal = task.reference().model_copy(update={"source": task.source.replace(
        "c[i] = s / 128.0f;", "c[i] = s / 128.0f; ((__global float *)a)[i] = 0.0f;")})
    m = worker.measure(task, fast_add(task), CONFIG.model_copy(update={"rival": vandal}))
    assert m.ok and m.rival is None, m.reason
    assert any(f.startswith("rival") and "dropped" in f for f in m.flags), m.flags


def test_a_rival_that_cannot_run_costs_the_comparison_only(task: Task, worker: MeasurementWorker) -> None:
    broken = task.reference().model_copy(update={"source": task.source.replace("c[i] = s / 128.0f;", "c[i] = s /;")})
    foreign = broken.model_copy(update={"task": "saxpy"})
    for rival in (broken, foreign):
        m = worker.measure(task, fast_add(task), CONFIG.model_copy(update={"rival": rival}))
        assert m.ok and m.rival is None
        assert any(f.startswith("rival") and "not timed" in f for f in m.flags), m.flags


def test_output_declared_out_but_read_by_the_reference_is_a_task_error(tmp_path: Path,
                                                                       worker: MeasurementWorker) -> None:
    """Declared "out", the buffer is poisoned; a reference that reads it yields NaN, and every candidate,
    even an empty kernel, would then pass."""
    source = SLOW_ADD.replace("c[i] = s / 128.0f;", "c[i] = c[i] + s / 128.0f;")
    broken = write_task(tmp_path / "t", source)
    with pytest.raises(TaskError, match=r"'c'.*inout"):
        worker.check_reference(broken, "small")
    empty = broken.reference().model_copy(update={"source": source.replace("c[i] = c[i] + s / 128.0f;", "")})
    m = worker.measure(broken, empty, CONFIG)
    assert not m.ok and "reference" in m.reason


def test_shapes_too_small_for_the_reference_launch_are_a_task_error(tmp_path: Path,
                                                                    worker: MeasurementWorker) -> None:
    broken = write_task(tmp_path / "t", SLOW_ADD, c_shape="N - 64")  # 256 bytes short: inside the guard zone
    with pytest.raises(TaskError, match="shapes are too small"):
        worker.check_reference(broken, "small")
    far = write_task(tmp_path / "far", SLOW_ADD, c_shape="N / 2")  # may crash the runtime instead
    with pytest.raises(TaskError, match="shapes .*too small"):
        worker.check_reference(far, "small")


BROKEN_PROBE = ("__kernel void kernelcast_probe(__global const float* a, __global float* b, const int n) "
                "{ b[0] = this_is_not_declared; }")


def test_a_device_whose_probe_fails_is_skipped_with_the_compilers_reason() -> None:
    """A probe the compiler really rejects on every device at hand: each is reported unusable, with why. A device
    already unusable with the real probe (PoCL's LLVM rejecting a CPU newer than itself) keeps its own reason;
    every device that compiles the real probe reports the compiler's complaint about the broken one."""
    statuses = probe_devices(source=BROKEN_PROBE)
    assert statuses and not any(s.healthy for s in statuses)
    usable = {s.index for s in probe_devices() if s.healthy}
    assert usable, "no device compiles the real probe: the check below would be vacuous"
    assert all("this_is_not_declared" in s.reason for s in statuses if s.index in usable)
    with pytest.raises(DeviceUnusable, match="no usable OpenCL device"):
        choose_device(None, source=BROKEN_PROBE)
    with pytest.raises(DeviceUnusable, match="is unusable"):
        choose_device(statuses[0].index, source=BROKEN_PROBE)
    healthy = choose_device(None)
    assert healthy.healthy and healthy.reason == ""


def test_a_broken_selected_device_stops_the_worker_with_its_reason(tmp_path: Path) -> None:
    from kernelcast.tools.store.store import Store

    store = Store(tmp_path / "k.db")
    status = choose_device(None, store)
    store.devices.record_verdict(status.key, status.driver, "compiler rejects this CPU: test verdict")
    from kernelcast.tools.hardware import probe as device_probe

    device_probe._memo.clear()  # the process memo would answer first; the store's verdict is the one we test
    with pytest.raises(WorkerError, match="test verdict"):
        MeasurementWorker(device=status.index, store=store).start()
    device_probe._memo.clear()


def test_a_broken_task_stops_every_command_before_spending(tmp_path: Path) -> None:
    """optimize, measure and dataset build refuse a task whose reference is unusable: exit 2, the cause
    named, no run created, nothing measured."""
    from kernelcast.tools.store.store import Store

    source = SLOW_ADD.replace("c[i] = s / 128.0f;", "c[i] = c[i] + s / 128.0f;")
    folder = tmp_path / "broken"
    write_task(folder, source)
    home = tmp_path / "home"
    for args in (("optimize", str(folder), "--budget", "4", "--sizes", "small"),
                 ("measure", str(folder), "--sizes", "small"),
                 ("dataset", "build", "--tasks", str(folder), "--sizes", "small", "-n", "2")):
        out = run_cli(home, *args)
        assert out.returncode == 2, (args, out.stdout, out.stderr)
        assert "inout" in out.stdout + out.stderr and "Traceback" not in out.stderr, args
    store = Store(home / "kernelcast.db")
    assert store.runs.recent() == [] and store.ledger.find() == []


def test_a_generator_that_never_proposes_fails_the_run(tmp_path: Path) -> None:
    """An LLM generator whose server is unreachable: an error with the reason, not "finished, 0 spent"."""
    out = run_cli(tmp_path / "home", "optimize", "saxpy", "--budget", "4", "--sizes", "small", "--generator", "llm",
             "--model", "openai/none", "--forecaster", "none", KERNELCAST_API_BASE="http://127.0.0.1:9/v1")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "proposed no candidate" in out.stdout + out.stderr and "Traceback" not in out.stderr
    from kernelcast.tools.store.store import Store

    runs = Store(tmp_path / "home" / "kernelcast.db").runs.recent()
    assert [r.status for r in runs] == ["failed"] and runs[0].spent == 0
