"""The CUDA path (issue 7): task files, nvcc compile checks, CPU-emulated semantics, GPU measurements.

Three layers, so a machine without a GPU still verifies most of it:

* nvcc (no GPU needed) compiles every CUDA reference and every template point (the 227-point
  GEMM space: a fixed sample of 64, since ptxas spends ~0.2 s on each large register tile;
  ``KERNELCAST_CUDA_ALL_POINTS=1`` takes all), several points per translation unit (each in its
  own namespace, entry renamed, macros undefined after it) because nvcc's fixed cost per
  invocation dominates small kernels; a failing batch is recompiled point by point so the
  report names the point and its own log;
* ``cuda_emu.h`` runs the same kernel sources on the CPU under g++ and compares them with
  independent numpy implementations (tests/support/numpy_refs_cuda.py);
* ``@pytest.mark.gpu`` tests measure through ``MeasurementWorker(backend="cuda")`` on a real
  NVIDIA GPU, including the failure classes, and are skipped where there is none.
"""

from __future__ import annotations

import os
import random
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

from kernelcast.tools.core.candidate import Candidate, check_signature
from kernelcast.tools.core.measurement import MeasureConfig, Status
from kernelcast.tools.core.task import Task, resolve_task
from kernelcast.tools.hardware.backends import DeviceRuntimeError, make_runner
from kernelcast.tools.hardware.backends.cuda import ensure_c_linkage, launch_dims, list_devices
from kernelcast.tools.hardware.harness import compare_outputs, make_inputs
from kernelcast.tools.hardware.nvcc import compile_check, nvcc_available
from kernelcast.tools.hardware.worker import MeasurementWorker, WorkerError

from support.cuda_emu import EmulationError, gxx_available, run_emulated
from support.numpy_refs_cuda import NUMPY_REFS

CUDA_TASKS = ["gemm_cuda", "softmax_cuda", "reduce_rows_cuda", "transpose_cuda", "layernorm_cuda"]
ALL_POINTS = os.environ.get("KERNELCAST_CUDA_ALL_POINTS", "") not in ("", "0")  # no sampling anywhere
NVCC_SAMPLE = 64  # template points compiled per task when its space is larger
NVCC_BATCH = 32  # template points per nvcc invocation
EMU_SAMPLE = 5  # template points emulated per task (default point + extremes + random)
NO_GPU = "no NVIDIA GPU/pycuda on this machine"

needs_nvcc = pytest.mark.skipif(not nvcc_available(), reason="nvcc not found (install the CUDA toolkit or set NVCC)")
needs_gxx = pytest.mark.skipif(not gxx_available(), reason="g++ not found: the CPU emulator of CUDA kernels needs it")


def task(name: str) -> Task:
    return resolve_task(name)


def sample_points(t: Task, k: int, seed: int = 0) -> list[dict[str, Any]]:
    """Every point when the space is small (or ALL_POINTS), else default + both extremes + a seeded sample."""
    space = t.param_space()
    if ALL_POINTS or len(space) <= k:
        return space
    assert t.spec.template is not None and t.spec.template.default is not None

    def size(p: dict[str, Any]) -> float:
        return float(np.prod([float(v) for v in p.values()]))

    chosen: list[dict[str, Any]] = []
    for point in (dict(t.spec.template.default), max(space, key=size), min(space, key=size)):
        if point not in chosen:
            chosen.append(point)
    rest = [p for p in space if p not in chosen]
    chosen += random.Random(seed).sample(rest, k - len(chosen))
    return chosen


# ---- task files (always) ------------------------------------------------------------
@pytest.mark.parametrize("name", CUDA_TASKS)
def test_cuda_task_has_reference_and_real_search_space(name: str) -> None:
    t = task(name)
    assert t.language == "cuda" and t.backend == "cuda"
    assert task(name.removesuffix("_cuda")).backend == "opencl"  # its OpenCL twin
    assert f'extern "C" __global__ void {t.spec.entry}(' in " ".join(t.source.split())
    assert t.spec.template is not None and t.spec.template.default is not None
    space = t.param_space()
    assert len(space) >= 20, f"{name}: only {len(space)} valid template points"
    assert t.is_valid_point(t.spec.template.default)
    for point in space:  # the harness rejects a point whose signature differs from the reference
        check_signature(t.instantiate(point).source, t.source, t.spec.entry, "cuda")


@pytest.mark.parametrize("name", CUDA_TASKS)
def test_numpy_reference_is_independent_and_sane(name: str) -> None:
    """The oracle itself: shapes and the invariant each operation has."""
    t = task(name)
    sizes = t.sizes("small")
    inputs = make_inputs(t, sizes, 0)
    out = NUMPY_REFS[name](inputs, sizes)
    m, n = sizes["M"], sizes["N"]
    if name == "softmax_cuda":
        np.testing.assert_allclose(out["Y"].reshape(m, n).sum(axis=1), 1.0, rtol=1e-5)
    elif name == "reduce_rows_cuda":
        assert out["out"].shape == (m,)
        assert np.isclose(out["out"][3], inputs["A"].reshape(m, n)[3].astype(np.float64).sum(), rtol=1e-6)
    elif name == "transpose_cuda":
        assert out["B"].reshape(n, m)[3, 5] == inputs["A"].reshape(m, n)[5, 3]
    elif name == "layernorm_cuda":
        z = (out["Y"].reshape(m, n) - inputs["beta"]) / inputs["gamma"]
        np.testing.assert_allclose(z.mean(axis=1), 0.0, atol=1e-4)
    elif name == "gemm_cuda":
        a, b = inputs["A"].reshape(m, sizes["K"]), inputs["B"].reshape(sizes["K"], n)
        assert np.isclose(out["C"].reshape(m, n)[1, 2], float(a[1] @ b[:, 2]), rtol=1e-5)


def test_geometry_follows_the_opencl_convention() -> None:
    """global = total threads, local = block, grid = global / local; x first."""
    assert launch_dims((4096, 512), (32, 8)) == ((32, 8, 1), (128, 64, 1))
    assert launch_dims((64,), (64,)) == ((64, 1, 1), (1, 1, 1))
    block, grid = launch_dims((1000, 6), None)  # default block: power-of-two divisors, <= 256 threads
    assert block == (8, 2, 1) and grid == (125, 3, 1)
    with pytest.raises(DeviceRuntimeError):
        launch_dims((100,), (64,))


def test_entry_gets_c_linkage_exactly_once() -> None:
    plain = "__global__ void k(float* x) { x[0] = 1.0f; }"
    assert ensure_c_linkage(plain, "k").startswith('extern "C" __global__ void k(')
    assert ensure_c_linkage(ensure_c_linkage(plain, "k"), "k") == ensure_c_linkage(plain, "k")
    bounded = "__global__ __launch_bounds__(256) void k(float* x) {}\n__global__ void other(float* x) {}"
    fixed = ensure_c_linkage(bounded, "k")
    assert fixed.count('extern "C"') == 1 and 'extern "C" __global__ __launch_bounds__(256) void k(' in fixed
    assert ensure_c_linkage("__global__ void other() {}", "k") == "__global__ void other() {}"


def test_without_gpu_the_runner_says_why() -> None:
    if list_devices():
        pytest.skip("an NVIDIA GPU is present: the no-GPU error path cannot be exercised")
    with pytest.raises(DeviceRuntimeError, match="no CUDA device / pycuda not installed"):
        make_runner("cuda")
    worker = MeasurementWorker(backend="cuda")
    with pytest.raises(WorkerError, match="no CUDA device / pycuda not installed"):
        worker.start()
    worker.close()


# ---- nvcc (no GPU needed) -----------------------------------------------------------
@needs_nvcc
def test_nvcc_compile_check_returns_the_error() -> None:
    ok, log = compile_check('extern "C" __global__ void k(float* x) { x[0] = undefined_name; }')
    assert not ok
    assert "undefined_name" in log and "kernel.cu" in log and "/tmp/" not in log
    ok, log = compile_check('extern "C" __global__ void k(float* x) { x[threadIdx.x] = 1.0f; }')
    assert ok, log
    # ptxas runs too: 64 KiB of static shared memory is over the 48 KiB limit, which --ptx would not see
    big = 'extern "C" __global__ void k(float* x) { __shared__ float s[16384]; s[threadIdx.x] = 1; x[0] = s[5]; }'
    assert compile_check(big, ptx_only=True)[0]
    ok, log = compile_check(big)
    assert not ok and "shared" in log.lower()


def batched_source(t: Task, points: list[dict[str, Any]], offset: int) -> str:
    """Several template points in one translation unit, isolated from each other."""
    parts = []
    for i, point in enumerate(points, start=offset):
        source = t.instantiate(point).source
        macros = sorted(set(re.findall(r"^\s*#\s*define\s+(\w+)", source, re.M)) | {t.spec.entry})
        parts.append(f"namespace kc_point{i} {{\n#define {t.spec.entry} {t.spec.entry}_point{i}\n{source}\n}}\n"
                     + "".join(f"#undef {m}\n" for m in macros))
    return "\n".join(parts)


@needs_nvcc
@pytest.mark.parametrize("name", CUDA_TASKS)
def test_nvcc_compiles_reference_and_template_points(name: str) -> None:
    t = task(name)
    space = sample_points(t, NVCC_SAMPLE)
    batches = [space[i: i + NVCC_BATCH] for i in range(0, len(space), NVCC_BATCH)]

    def check(batch_index: int) -> list[str]:
        if batch_index < 0:
            ok, log = compile_check(t.source)
            return [] if ok else [f"reference: {log[:600]}"]
        batch = batches[batch_index]
        if compile_check(batched_source(t, batch, batch_index * NVCC_BATCH))[0]:
            return []
        failures = []
        for point in batch:  # find the culprit(s) with their own logs
            ok, log = compile_check(t.instantiate(point).source)
            if not ok:
                failures.append(f"{point}: {log[:600]}")
        return failures or [f"batch {batch_index} fails together but every point compiles alone"]

    with ThreadPoolExecutor(max_workers=2) as pool:
        failures = [f for result in pool.map(check, range(-1, len(batches))) for f in result]
    assert not failures, f"{name}: sources that nvcc rejects:\n" + "\n".join(failures)


@needs_nvcc
def test_nvcc_batches_keep_points_apart() -> None:
    """A batch fails when one of its points does, so batching cannot hide a broken point."""
    t = task("softmax_cuda")
    points = t.param_space()[:3]
    assert compile_check(batched_source(t, points, 0))[0]
    broken = t.instantiate(points[1]).source.replace("const float inv = 1.0f / rsum;", "const float inv = 1.0f / rsm;")
    assert broken != t.instantiate(points[1]).source
    good = [t.instantiate(p).source for p in (points[0], points[2])]
    source = batched_source(t, points, 0).replace(t.instantiate(points[1]).source, broken)
    assert source.count("rsm;") == 1 and all(g in source for g in good)
    ok, log = compile_check(source)
    assert not ok and "rsm" in log


# ---- CPU emulation of the kernels (g++, no GPU) --------------------------------------
def _emulate_and_compare(t: Task, candidate: Candidate, seed: int) -> list[str]:
    sizes = t.sizes("small")
    inputs = make_inputs(t, sizes, seed)
    outputs, problems = run_emulated(t, candidate, sizes, inputs)
    return problems + compare_outputs(t, NUMPY_REFS[t.name](inputs, sizes), outputs)


@needs_gxx
@pytest.mark.parametrize("name", CUDA_TASKS)
def test_emulated_reference_matches_numpy(name: str) -> None:
    t = task(name)
    assert _emulate_and_compare(t, t.reference(), seed=1) == []


@needs_gxx
@pytest.mark.parametrize("name", CUDA_TASKS)
def test_emulated_template_points_match_numpy(name: str) -> None:
    t = task(name)
    points = sample_points(t, EMU_SAMPLE, seed=1)
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda p: (p, _emulate_and_compare(t, t.instantiate(p), seed=2)), points))
    failures = [f"{p}: {'; '.join(problems)[:500]}" for p, problems in results if problems]
    assert not failures, "\n".join(failures)


@needs_gxx
def test_emulator_catches_what_it_claims_to() -> None:
    """The emulator is test machinery: prove it fails wrong kernels, or its passes mean nothing."""
    t = task("reduce_rows_cuda")
    ref = t.reference()

    def variant(old: str, new: str) -> Candidate:
        assert old in ref.source
        return ref.model_copy(update={"source": ref.source.replace(old, new)})

    oob = _emulate_and_compare(t, variant("out[row] = s;", "out[row + 1] = s;"), seed=0)
    assert any("guard zone around buffer 'out'" in p for p in oob)
    wrong = _emulate_and_compare(t, variant("s += xr[j];", "s += xr[j] * 1.001f;"), seed=0)
    assert wrong and "differ" in wrong[0]
    writes_input = _emulate_and_compare(t, variant("out[row] = s;", "out[row] = s; ((float*)A)[0] = 0.0f;"), seed=0)
    assert any("read-only input 'A'" in p for p in writes_input)
    tmpl = t.instantiate(t.spec.template.default)
    divergent = tmpl.model_copy(update={"source": tmpl.source.replace("    __syncthreads();", "    if (lane) __syncthreads();")})
    with pytest.raises(EmulationError, match="deadlock"):
        _emulate_and_compare(t, divergent, seed=0)
    unreduced = tmpl.model_copy(update={"source": tmpl.source.replace("s = warp_sum(s);", "")})
    assert _emulate_and_compare(t, unreduced, seed=0)


# ---- real GPU -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def cuda_worker() -> Any:
    if not list_devices():
        pytest.skip(NO_GPU)
    with MeasurementWorker(backend="cuda") as worker:
        yield worker


SMALL = MeasureConfig(sizes="small", seeds=[0], warmup=1, min_reps=3, max_reps=5, target_seconds=0.01, timeout_s=60)


@pytest.mark.gpu
def test_gpu_hardware_spec_is_read_from_the_device(cuda_worker: MeasurementWorker) -> None:
    spec = cuda_worker.hardware_spec()
    assert spec.backend == "cuda" and spec.device_type == "GPU"
    assert spec.compute_units > 0 and spec.global_mem_bytes > 2**30 and spec.global_cache_bytes > 2**20
    assert spec.max_work_group_size >= 1024 and spec.extra["warp_size"] == 32
    assert spec.extra["arch"].startswith("sm_")
    assert [s.name for s in list_devices()][0] == spec.name


@pytest.mark.gpu
def test_gpu_runner_primitives() -> None:
    """In-process: guarded round trip, build cache, compile errors, C linkage added for the entry."""
    if not list_devices():
        pytest.skip(NO_GPU)
    from kernelcast.tools.hardware.backends.base import CompileError
    from kernelcast.tools.hardware.backends.cuda import CudaRunner

    runner = CudaRunner()
    data = np.arange(1000, dtype=np.float32)
    buf = runner.alloc(data.nbytes)
    runner.upload(buf, data)
    assert np.array_equal(runner.download(buf, np.dtype(np.float32), 1000), data)
    assert runner.guards_intact(buf)
    source = "__global__ void scale(float* x, const int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; " \
             "if (i < n) x[i] *= 2.0f; }"  # no extern "C": the runner adds it
    kernel, hit, ms = runner.build(source, "scale", [])
    assert not hit and ms > 0
    assert runner.build(source, "scale", [])[1] is True
    runner.flush_caches()
    elapsed_ns = runner.launch(kernel, [buf, np.int32(1000)], (1024,), (128,))
    assert 0 < elapsed_ns < 1e9
    assert np.array_equal(runner.download(buf, np.dtype(np.float32), 1000), 2 * data)
    assert runner.guards_intact(buf)
    runner.release(buf)
    with pytest.raises(CompileError, match="undefined_name"):
        runner.build(source.replace("2.0f", "undefined_name"), "scale", [])


@pytest.mark.gpu
@pytest.mark.parametrize("name", CUDA_TASKS)
def test_gpu_reference_and_default_point_match_numpy(cuda_worker: MeasurementWorker, name: str) -> None:
    t = task(name)
    sizes = t.sizes("small")
    inputs = make_inputs(t, sizes, 0)
    expected = NUMPY_REFS[name](inputs, sizes)
    for candidate in (t.reference(), t.instantiate(t.spec.template.default)):
        outputs, problems = cuda_worker.outputs(t, candidate, "small", seed=0)
        assert problems == []
        assert compare_outputs(t, expected, outputs) == []


@pytest.mark.gpu
@pytest.mark.parametrize("name", CUDA_TASKS)
def test_gpu_measures_a_template_point_at_full_size(cuda_worker: MeasurementWorker, name: str) -> None:
    t = task(name)
    config = MeasureConfig(sizes="full", seeds=[0, 1], warmup=2, min_reps=5, max_reps=30, target_seconds=0.1,
                           timeout_s=240)
    m = cuda_worker.measure(t, t.instantiate(t.spec.template.default), config)
    assert m.status is Status.correct, m.reason
    assert m.reference is not None and m.candidate is not None and m.speedup is not None
    # device-event times of a real launch at the full size: between 1 us and 1 s
    assert 1e3 < m.reference.median_ns < 1e9 and 1e3 < m.candidate.median_ns < 1e9
    print(f"{name}: reference {m.reference.median_ns / 1e3:.1f} us, default point "
          f"{m.candidate.median_ns / 1e3:.1f} us, speedup {m.speedup:.2f}x {m.flags}")


def _variant(t: Task, old: str, new: str) -> Candidate:
    ref = t.reference()
    assert old in ref.source
    return ref.model_copy(update={"source": ref.source.replace(old, new), "generator": "test"})


@pytest.mark.gpu
def test_gpu_failure_classes(cuda_worker: MeasurementWorker) -> None:
    t = task("reduce_rows_cuda")
    m = cuda_worker.measure(t, _variant(t, "s += xr[j];", "s += xr[j] +;"), SMALL)
    assert m.status is Status.compile_error and "error" in m.reason
    m = cuda_worker.measure(t, _variant(t, "out[row] = s;", "out[row] = 1.5f * s;"), SMALL)
    assert m.status is Status.incorrect and "differ" in m.reason
    m = cuda_worker.measure(t, _variant(t, "out[row] = s;", "out[row + 1] = s;"), SMALL)
    assert m.status is Status.incorrect and "guard zone around buffer 'out'" in m.reason
    # far out of bounds: a kernel fault that poisons the CUDA context; the runner must recover
    m = cuda_worker.measure(t, _variant(t, "out[row] = s;", "out[(size_t)row + ((size_t)1 << 38)] = s;"), SMALL)
    assert m.status is Status.runtime_error, m.reason
    after = cuda_worker.measure(t, t.instantiate(t.spec.template.default), SMALL)
    assert after.status is Status.correct, f"the worker did not recover from a kernel fault: {after.reason}"


@pytest.mark.gpu
def test_gpu_hung_kernel_times_out_and_the_next_measurement_works(cuda_worker: MeasurementWorker) -> None:
    t = task("reduce_rows_cuda")
    spin = "long long t0 = clock64(); while (clock64() - t0 < (1LL << 62)) { } out[row] = s;"
    restarts = cuda_worker.restarts
    m = cuda_worker.measure(t, _variant(t, "out[row] = s;", spin), SMALL.model_copy(update={"timeout_s": 20}))
    assert m.status is Status.timeout
    assert cuda_worker.restarts == restarts + 1
    after = cuda_worker.measure(t, t.instantiate(t.spec.template.default), SMALL)
    assert after.status is Status.correct, after.reason
