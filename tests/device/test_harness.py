"""The measurement protocol on the real default OpenCL device: every failure class, caches, isolation."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.measurement import MeasureConfig, Status
from kernelcast.tools.core.task import Task, load_task, resolve_task
from kernelcast.tools.hardware.worker import MeasurementWorker

from support.paths import KERNELS

SMALL = MeasureConfig(sizes="small", max_reps=10, target_seconds=0.02, timeout_s=60)
BODY = "y[i] = a * x[i] + y[i];"


@pytest.fixture(scope="module")
def task() -> Task:
    return resolve_task("saxpy")


@pytest.fixture(scope="module")
def worker() -> Iterator[MeasurementWorker]:
    with MeasurementWorker() as w:
        yield w


def variant(task: Task, body: str, **kw) -> Candidate:
    return task.reference().model_copy(update={"source": task.source.replace(BODY, body), **kw})


def test_reference_against_itself_is_correct_and_near_one(task: Task, worker: MeasurementWorker) -> None:
    m = worker.measure(task, task.reference(), SMALL)
    assert m.status is Status.correct, m.reason
    assert m.seeds == [0, 1, 2]
    assert m.reference is not None and m.candidate is not None
    assert m.reference.reps >= SMALL.min_reps
    assert m.speedup == pytest.approx(m.reference.median_ns / m.candidate.median_ns)
    for stats in (m.reference, m.candidate):
        assert stats.min_ns <= stats.median_ns and stats.iqr_ns >= 0 and stats.cv >= 0


def test_template_point_is_correct(task: Task, worker: MeasurementWorker) -> None:
    m = worker.measure(task, task.instantiate({"VEC": 4, "COARSEN": 2, "WG": 64}), SMALL)
    assert m.status is Status.correct, m.reason


def test_compile_error_is_returned_verbatim(task: Task, worker: MeasurementWorker) -> None:
    m = worker.measure(task, variant(task, "y[i] = a * x[i] + undefined_symbol;"), SMALL)
    assert m.status is Status.compile_error
    assert "undefined_symbol" in m.reason
    assert m.speedup is None and m.bin() == 0


def test_build_only_reports_compile_errors_with_the_compiler_log(task: Task, worker: MeasurementWorker) -> None:
    assert worker.build(task, task.reference()) == ("ok", "")
    status, reason = worker.build(task, variant(task, "y[i] = a * x[i] + undefined_symbol;"))
    assert status == Status.compile_error.value
    assert "undefined_symbol" in reason and "Traceback" not in reason


def test_signature_change_is_rejected_before_running(task: Task, worker: MeasurementWorker) -> None:
    source = task.source.replace("const int n)", "const int n, const int extra)")
    m = worker.measure(task, task.reference().model_copy(update={"source": source}), SMALL)
    assert m.status is Status.invalid
    assert "takes 5 arguments" in m.reason


def test_bad_geometry_is_invalid(task: Task, worker: MeasurementWorker) -> None:
    m = worker.measure(task, task.reference().model_copy(update={"local_size": ["N / 3"]}), SMALL)
    assert m.status is Status.invalid and "whole number" in m.reason


def test_wrong_result_names_the_difference(task: Task, worker: MeasurementWorker) -> None:
    m = worker.measure(task, variant(task, "y[i] = a * x[i] - y[i];"), SMALL)
    assert m.status is Status.incorrect
    assert "output 'y'" in m.reason and "seed 0" in m.reason




def test_a_kernel_with_a_local_memory_argument_is_measured_and_checked(worker: MeasurementWorker) -> None:
    """``kind = "local"`` sizes a ``__local`` pointer argument per work-group: the classic work-group reduction
    runs as written, and a candidate whose tree skips half the partial sums is caught."""
    sums = load_task(KERNELS / "partial_sums")
    assert [a.kind for a in sums.spec.args] == ["buffer", "buffer", "local", "scalar"]
    same = worker.measure(sums, sums.reference(), SMALL)
    assert same.status is Status.correct, same.reason
    skipping = sums.reference().model_copy(update={"source": sums.source.replace("s >>= 1", "s >>= 2")})
    assert skipping.source != sums.source
    wrong = worker.measure(sums, skipping, SMALL)
    assert wrong.status is Status.incorrect and "output 'out'" in wrong.reason


def test_nan_output_is_incorrect(task: Task, worker: MeasurementWorker) -> None:
    m = worker.measure(task, variant(task, "y[i] = a * x[i] + y[i] + sqrt(-1.0f - x[i] * x[i]);"), SMALL)
    assert m.status is Status.incorrect
    assert "NaN/Inf" in m.reason


def test_kernel_that_writes_nothing_fails(task: Task, worker: MeasurementWorker) -> None:
    # y is inout: it is reset to the seeded input before each launch, so "nothing written"
    # leaves y != a*x + y and cannot pass on stale data from the reference run.
    m = worker.measure(task, variant(task, "y[i] = y[i];"), SMALL)
    assert m.status is Status.incorrect


def test_read_only_input_mutation_is_caught(task: Task, worker: MeasurementWorker) -> None:
    m = worker.measure(task, variant(task, BODY + " ((__global float *)x)[i] = 0.0f;"), SMALL)
    assert m.status is Status.incorrect
    assert "read-only input 'x' was modified" in m.reason


def test_out_of_bounds_write_is_caught_by_guards(task: Task, worker: MeasurementWorker) -> None:
    m = worker.measure(task, variant(task, "y[i + 1] = a * x[i] + y[i];"), SMALL)
    assert m.status is Status.incorrect
    assert "out-of-bounds write" in m.reason and "'y'" in m.reason


def test_out_of_bounds_read_garbage_is_incorrect(task: Task, worker: MeasurementWorker) -> None:
    m = worker.measure(task, variant(task, "y[i] = a * x[i + 1000] + y[i];"), SMALL)
    assert m.status is Status.incorrect


def test_hanging_kernel_times_out_and_the_next_measurement_works(task: Task, worker: MeasurementWorker) -> None:
    hang = variant(task, "while (n > 0) { y[i] += 1.0f; } " + BODY)
    m = worker.measure(task, hang, SMALL.model_copy(update={"timeout_s": 4}))
    assert m.status is Status.timeout
    assert "hard time limit" in m.reason
    assert m.task_fingerprint == task.fingerprint  # a failure row is this task's too (never another's by name)
    after = worker.measure(task, task.reference(), SMALL)
    assert after.status is Status.correct


def test_runtime_crash_kills_only_the_worker(task: Task, worker: MeasurementWorker) -> None:
    wild = variant(task, BODY + " if (i == 0) { __global float *p = (__global float *)((ulong)1 << 46); p[0] = 1.0f; }")
    pid_before = worker.pid
    m = worker.measure(task, wild, SMALL)
    assert m.status is Status.crash
    assert "SIGSEGV" in m.reason or "SIGABRT" in m.reason
    after = worker.measure(task, task.reference(), SMALL)
    assert after.status is Status.correct
    assert worker.pid != pid_before


def test_compile_cache_hit(task: Task, worker: MeasurementWorker) -> None:
    cand = variant(task, "y[i] = y[i] + a * x[i];")
    first = worker.measure(task, cand, SMALL)
    second = worker.measure(task, cand, SMALL)
    assert first.status is Status.correct and second.status is Status.correct
    assert first.cache_hit is False and second.cache_hit is True
    assert second.compile_ms == 0.0


def test_the_compile_cache_keeps_the_most_recent_programs_only(task: Task) -> None:
    """A worker compiles every candidate of a search: kept forever, the programs grew one to 14 GiB."""
    from kernelcast.tools.hardware.backends.opencl import OpenCLRunner
    from kernelcast.tools.hardware.probe import choose_device

    runner = OpenCLRunner(choose_device(None).index, kept_builds=2)
    sources = [variant(task, body).source for body in ("y[i] = y[i] + a * x[i];", "y[i] = x[i] * a + y[i];",
                                                        "y[i] = fma(a, x[i], y[i]);")]
    for source in sources:
        assert runner.build(source, "saxpy", [])[1] is False
    assert len(runner._kernels) == 2
    assert runner.build(sources[2], "saxpy", [])[1] is True  # the most recent are kept
    assert runner.build(sources[1], "saxpy", [])[1] is True
    assert runner.build(sources[0], "saxpy", [])[1] is False  # the oldest was dropped, and builds again
    assert runner.build(sources[2], "saxpy", [])[1] is False  # ... which dropped the least recently used


def test_candidate_of_another_task_is_invalid(task: Task, worker: MeasurementWorker) -> None:
    m = worker.measure(task, task.reference().model_copy(update={"task": "gemm"}), SMALL)
    assert m.status is Status.invalid


def test_outputs_match_numpy(task: Task, worker: MeasurementWorker) -> None:
    from kernelcast.tools.hardware.harness import make_inputs

    outputs, problems = worker.outputs(task, task.reference(), "small", seed=5)
    inputs = make_inputs(task, task.sizes("small"), 5)
    assert problems == []
    np.testing.assert_allclose(outputs["y"], np.float32(2.5) * inputs["x"] + inputs["y"], rtol=1e-5, atol=1e-6)


def test_hardware_spec_is_read_from_the_device(worker: MeasurementWorker) -> None:
    spec = worker.hardware_spec()
    assert spec.backend == "opencl"
    assert spec.compute_units >= 1 and spec.max_work_group_size >= 1 and spec.global_mem_bytes > 0
    assert spec.name in spec.summary()


def test_a_device_restricted_to_fewer_compute_units_leaves_the_host_cores(task: Task) -> None:
    """``<device>@N`` measures on a sub-device of N compute units: another device, with its own key."""
    from kernelcast.tools.hardware.probe import choose_device
    from kernelcast.tools.hardware.worker import WorkerError

    default = choose_device(None)
    with MeasurementWorker(device=default.index) as whole:
        units = whole.start().compute_units
        whole_key = whole.start().key
    if units < 2:
        pytest.skip(f"the default device {default.name} has {units} compute unit: nothing to leave the host")
    with MeasurementWorker(device=f"{default.index}@{units - 1}") as part:
        try:
            spec = part.start()
        except WorkerError as exc:
            if "cannot be partitioned" in str(exc):
                pytest.skip(f"the default device {default.name} does not support device fission")
            raise
        m = part.measure(task, task.reference(), SMALL)
    assert spec.compute_units == units - 1
    assert spec.key != whole_key and f"[{units - 1} of {units} compute units]" in spec.name
    assert m.status is Status.correct and m.device == spec.key, m.reason
    for bad, says in ((f"{default.index}@{units}", "leaves the host none"), (f"{default.index}@x", "after '@'")):
        with pytest.raises(WorkerError, match=says), MeasurementWorker(device=bad) as w:
            w.start()
