"""The exploit suite of the third integrity round (issue 60), by class, each class with several variants.

The pattern of the last round: a defence that modelled what the compiler or the runtime would do let a variant
through. These tests ask the compiler and the runtime: the built program's own count of program-scope storage,
the work-group memory a runtime keeps between launches, an identity that keeps every branch the compiler
decides, and buffers between inaccessible pages. Classes and their variants:

- program-scope state: a memo whose bound is a parenthesized macro; a memo behind ``#ifdef __clang__``, behind
  ``#if __OPENCL_C_VERSION__ == 200``, behind ``#if defined(cl_khr_fp64)``; a ``static`` counter behind a
  compiler macro (the runtime's report, asked with the source check bypassed, and the source gate alike);
- work-group memory state: a memo of a work-group's outputs keyed by its inputs, kept in ``__local`` arrays (as
  written, behind 96 KiB of other arrays, behind ``#ifdef __clang__``), measured 20 and 5 times;
- identity collisions: a hidden slow block behind ``#ifdef __clang__``, ``#if __OPENCL_C_VERSION__ >= 200`` and
  ``#ifdef cl_khr_fp64``; ``-D`` order; a session caller claiming a template point with a hidden block;
- out-of-bounds writes: 4.3 KiB and 64 KiB past the end of an output, and 5 KiB before its start;
- launch prediction, input mutation and forged records keep their tests in test_integrity.py,
  test_integrity_round2*.py and the dataset tests.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import kernelcast
from kernelcast.session import SessionError
from kernelcast.tools.core.confinement import ConfinementError, check_candidate
from kernelcast.tools.core.measurement import Status
from kernelcast.tools.core.task import Task, resolve_task
from kernelcast.tools.hardware.backends import make_runner
from kernelcast.tools.hardware.backends.base import ProgramStateError
from kernelcast.tools.hardware.program_symbols import writable_symbols
from kernelcast.tools.hardware.worker import MeasurementWorker

from support.slowadd import CONFIG, SLOW_ADD, edit, write_task

CL2 = ["-cl-std=CL2.0"]


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> Task:
    return write_task(tmp_path_factory.mktemp("slowadd3"), SLOW_ADD)


@pytest.fixture(scope="module")
def runner() -> Iterator[object]:
    try:
        r = make_runner("opencl")
    except Exception as exc:  # noqa: BLE001 - no OpenCL device on this machine
        pytest.skip(f"no OpenCL device: {exc}")
    yield r


# ---- program-scope state --------------------------------------------------------------------------------------
# the memo is the only state: its last element counts the launches, the rest holds the outputs
MEMO = ("if (memo[MAXE - 1] > 2.0f) { c[i] = memo[i % (MAXE - 1)]; return; }\n"
        "    if (i == 0) memo[MAXE - 1] += 1.0f;")
# behind a macro, the other branch declares a __constant memo; the cast writes the global one
CAST_MEMO = MEMO.replace("memo[MAXE - 1] += 1.0f", "((__global float *)memo)[MAXE - 1] += 1.0f")
STATEFUL = {
    "a memo bounded by a parenthesized macro": ("#define MAXE (128 * 128)\n__global float memo[MAXE];\n", MEMO),
    "a memo behind #ifdef __clang__": (
        "#define MAXE 16384\n#ifdef __clang__\n__global float memo[MAXE];\n#else\n"
        "__constant float memo[MAXE] = {0.0f};\n#endif\n", CAST_MEMO),
    "a memo behind #if __OPENCL_C_VERSION__ == 200": (
        "#define MAXE 16384\n#if __OPENCL_C_VERSION__ == 200\n__global float memo[MAXE];\n#else\n"
        "__constant float memo[MAXE] = {0.0f};\n#endif\n", CAST_MEMO),
    "a memo behind #if defined(__clang_major__) && __clang_major__ > 3": (
        "#define MAXE 16384\n#if defined(__clang_major__) && __clang_major__ > 3\n__global float memo[MAXE];\n"
        "#else\n__constant float memo[MAXE] = {0.0f};\n#endif\n", CAST_MEMO),
    "a static counter behind a compiler macro": (
        "#ifdef __OPENCL_VERSION__\n#define KEEP static global\n#else\n#define KEEP const\n#endif\n",
        "KEEP int seen = 0;\n    if (i == 0) seen++;"),
}


@pytest.mark.parametrize("name", list(STATEFUL))
def test_the_source_gate_scans_every_branch_the_compiler_decides(task: Task, name: str) -> None:
    prefix, insert = STATEFUL[name]
    with pytest.raises(ConfinementError, match="variable"):
        check_candidate(task, edit(task, insert, prefix=prefix, options=CL2))


@pytest.mark.parametrize("name", list(STATEFUL))
def test_the_runtime_reports_program_scope_storage_whatever_the_source_looks_like(
        task: Task, runner, name: str) -> None:
    """The source gate bypassed (the runner builds what it is given): the built program's own count of its
    program-scope storage refuses it."""
    prefix, insert = STATEFUL[name]
    candidate = edit(task, insert, prefix=prefix, options=CL2)
    probe = runner.cl.Program(runner.context, task.source).build()
    if writable_symbols(bytes(probe.binaries[0])) is None:
        pytest.skip(f"{runner.hardware_spec().platform}'s program binary names no symbols: the source gate is its check")
    with pytest.raises(ProgramStateError, match="writable program-scope storage"):
        runner.build(candidate.source, task.spec.entry, candidate.build_options)


def test_a_program_without_writable_state_builds(task: Task, runner) -> None:
    """Read-only program-scope data stays allowed by the runtime check too."""
    candidate = edit(task, "float one = scale[i & 1];", prefix="__constant float scale[2] = {1.0f, 1.0f};\n",
                     options=CL2)
    kernel, _, _ = runner.build(candidate.source, task.spec.entry, candidate.build_options, fresh=True)
    assert kernel is not None


def test_a_memo_behind_a_compiler_macro_is_invalid_through_the_worker(task: Task, worker: MeasurementWorker) -> None:
    prefix, insert = STATEFUL["a memo behind #ifdef __clang__"]
    m = worker.measure(task, edit(task, insert, prefix=prefix, options=CL2), CONFIG)
    assert m.status is Status.invalid and m.speedup is None, m


# ---- work-group memory that outlives a launch -------------------------------------------------------------------
# the attack as measured: each work-group keeps its outputs in work-group memory, keyed by its inputs, and copies
# them out when it finds them there again; otherwise it computes them the slow way (the task's 256-step loop)
LOCAL_MEMO = """
__kernel void slowadd(__global const float *a, __global const float *b, __global float *c)
{
    PAD
    __local float memo[256 * 64];
    __local float key[256 * 2];
    int i = get_global_id(0), lid = get_local_id(0), g = get_group_id(0) % 256;
    int first = get_group_id(0) * 64;
    if (key[2 * g] == a[first] && key[2 * g + 1] == b[first]) { c[i] = memo[g * 64 + lid]; return; }
    barrier(CLK_LOCAL_MEM_FENCE);
    float s = 0.0f;
    for (int k = 0; k < 256; ++k) s += a[i] * (float)(k & 1) + b[i] * (float)((k + 1) & 1);
    c[i] = s / 128.0f;
    memo[g * 64 + lid] = c[i];
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid == 0) { key[2 * g] = a[first]; key[2 * g + 1] = b[first]; }
    USE_PAD
}
"""
# variants: the memo as written, behind 96 KiB of other work-group memory, and behind a compiler macro
MEMO_VARIANTS = {
    "a keyed memo": ("", "", 20),
    "a memo behind 96 KiB of other arrays": ("__local float pad[24576];", "if (lid == 0) pad[g] = 0.0f;", 5),
    "a memo behind #ifdef __clang__": ("", "", 5),
}


@pytest.mark.parametrize("name", list(MEMO_VARIANTS))
def test_a_work_group_memory_memo_never_measures_a_speedup(task: Task, worker: MeasurementWorker, name: str) -> None:
    """Caught 20 times of 20: the memo finds nothing at the timed launches (a scrub precedes each), so the kernel
    runs at its own speed, the slow loop plus the memo's bookkeeping, or, where a slab the scrub missed served it
    half its memo, its outputs are wrong. Never a speedup. (Without the scrub it copied its outputs out of
    work-group memory on Intel's CPU runtime, many times faster than the loop.)"""
    pad, use_pad, attempts = MEMO_VARIANTS[name]
    source = LOCAL_MEMO.replace("USE_PAD", use_pad).replace("PAD", pad)
    if "clang" in name:
        source = source.replace("    if (key[2 * g]", "#ifdef __clang__\n    if (key[2 * g]").replace(
            "memo[g * 64 + lid]; return; }", "memo[g * 64 + lid]; return; }\n#endif")
    memo = task.reference().model_copy(update={"source": source, "local_size": ["64"]})
    outcomes = []
    for _ in range(attempts):
        m = worker.measure(task, memo, CONFIG)
        outcomes.append(f"{m.status.value} {m.speedup or 0:.2f}x")
        assert m.status is not Status.correct or (m.speedup_ci is not None and m.speedup_ci[0] < 1.5), outcomes


def test_kernels_without_work_group_memory_cost_no_scrub(task: Task, runner) -> None:
    kernel, _, _ = runner.build(task.source, task.spec.entry, [])
    assert runner.local_memory_scrub([kernel]) is None


# ---- identity ----------------------------------------------------------------------------------------------------
SLOW_LOOP = "for (int k = 0; k < 4096; ++k) s += 0.0f * (float)k;"
HIDDEN = {
    "#ifdef __clang__": "#ifdef __clang__\n    {loop}\n#endif",
    "#if __OPENCL_C_VERSION__ >= 200": "#if __OPENCL_C_VERSION__ >= 200\n    {loop}\n#endif",
    "#ifdef cl_khr_fp64": "#ifdef cl_khr_fp64\n    {loop}\n#endif",
    "#if defined(__OPENCL_VERSION__) && __OPENCL_VERSION__ > 100": (
        "#if defined(__OPENCL_VERSION__) && __OPENCL_VERSION__ > 100\n    {loop}\n#endif"),
}


@pytest.mark.parametrize("name", list(HIDDEN))
def test_a_block_the_compiler_decides_is_part_of_the_identity(task: Task, name: str) -> None:
    body = task.source.replace("float s = 0.0f;", "float s = 0.0f;\n" + HIDDEN[name].format(loop=SLOW_LOOP))
    hidden = task.reference().model_copy(update={"source": body})
    assert hidden.hash != task.reference().hash


def test_the_last_definition_of_a_macro_decides_the_identity(task: Task) -> None:
    ref = task.reference()
    one_then_zero = ref.model_copy(update={"build_options": ["-DSLOW=1", "-DSLOW=0"]})
    zero_then_one = ref.model_copy(update={"build_options": ["-DSLOW=0", "-DSLOW=1"]})
    assert one_then_zero.hash != zero_then_one.hash
    assert one_then_zero.hash == ref.model_copy(update={"build_options": ["-DSLOW=0"]}).hash
    swapped = ref.model_copy(update={"build_options": ["-DB=2", "-DA=1"]})
    assert swapped.hash == ref.model_copy(update={"build_options": ["-DA=1", "-DB=2"]}).hash, \
        "options that set different things keep one identity in any order"


def test_a_session_caller_cannot_claim_a_template_point_with_a_hidden_block(home: Path) -> None:
    """The template point's source with a slow loop behind ``#ifdef __clang__``, submitted with the point's params,
    is not that point (its identity differs), so it is refused and no stored row claims the point for it."""
    task = resolve_task("saxpy")
    point = {"VEC": 4, "COARSEN": 1, "WG": 64}
    genuine = task.instantiate(point)
    lines = genuine.source.splitlines()
    body_at = next(i for i, line in enumerate(lines) if "{" in line and "saxpy" in "".join(lines[:i + 1]))
    hidden_source = "\n".join(lines[:body_at + 1] + ["#ifdef __clang__", "    for (volatile int k = 0; k < 100000; ++k) {}",
                                                     "#endif"] + lines[body_at + 1:])
    forged = {"source": hidden_source, "global_size": genuine.global_size, "local_size": genuine.local_size,
              "build_options": genuine.build_options, "params": point, "intent": "the point with a hidden loop"}
    session = kernelcast.Session("saxpy", budget=2, sizes="small", forecaster="none", measure_per_round=1)
    try:
        with pytest.raises(SessionError, match="not the template instantiated there"):
            session.submit([forged])
    finally:
        session.close()


# ---- out-of-bounds writes -----------------------------------------------------------------------------------------
FAR = {
    "4.3 KiB past the end": "if (i == 0) c[get_global_size(0) + 1100] = 1.0f;",
    "64 KiB past the end": "if (i == 0) c[get_global_size(0) + 16384] = 1.0f;",
    "5 KiB before the start": "if (i == 0) c[-1280] = 1.0f;",
}


@pytest.mark.parametrize("name", list(FAR))
def test_a_write_beyond_the_guard_zone_is_never_correct(task: Task, worker: MeasurementWorker, name: str) -> None:
    """On a CPU device the buffer lies between inaccessible pages, so the write faults in the worker (a crash);
    elsewhere the guard zone grows with the buffer. Either way the measurement is no speedup."""
    m = worker.measure(task, edit(task, FAR[name]), CONFIG)
    assert m.status in (Status.crash, Status.incorrect, Status.runtime_error), m
    assert m.speedup is None


# ---- the reference's own non-finite results ----------------------------------------------------------------------
def test_a_reference_whose_results_include_infinity_is_a_valid_oracle(tmp_path: Path,
                                                                      worker: MeasurementWorker) -> None:
    """+inf is a result like any other (the poison is NaN): the reference is accepted, and a candidate that
    computes the same infinities measures correct."""
    source = SLOW_ADD.replace("c[i] = s / 128.0f;", "c[i] = (i % 7 == 0) ? INFINITY : s / 128.0f;")
    task = write_task(tmp_path / "inf", source)
    assert worker.check_reference(task, "small") == []
    assert worker.measure(task, task.reference(), CONFIG).status is Status.correct


def test_a_reference_that_computes_nan_itself_is_told_to_change_its_inputs(tmp_path: Path,
                                                                         worker: MeasurementWorker) -> None:
    """NaN that the reference computes whatever its output held (sqrt of a negative input) is not an output read
    before it is written: the advice names the inputs, not intent = "inout"."""
    from kernelcast.tools.hardware.worker import TaskError

    source = SLOW_ADD.replace("c[i] = s / 128.0f;", "c[i] = sqrt(a[i] - 2.0f);")  # inputs lie in [0, 1)
    task = write_task(tmp_path / "nan", source)
    with pytest.raises(TaskError, match="computes NaN") as caught:
        worker.check_reference(task, "small")
    assert "inout" not in str(caught.value)


# ---- CUDA: the compiler's own list of module-scope variables -----------------------------------------------------
def test_ptx_names_device_variables_whatever_macros_hid_them() -> None:
    from kernelcast.tools.hardware.nvcc import compile_ptx, nvcc_available
    from kernelcast.tools.hardware.program_symbols import ptx_global_variables, writable_symbols

    if not nvcc_available():
        pytest.skip("nvcc not found (install the CUDA toolkit or set NVCC)")
    hidden = ('#ifdef __CUDA_ARCH__\n__device__ float memo[4096];\n#endif\n'
              'extern "C" __global__ void k(float* x) { static __device__ int seen; seen++;\n'
              '#ifdef __CUDA_ARCH__\n x[0] = memo[threadIdx.x];\n#endif\n }')
    ok, ptx = compile_ptx(hidden, )
    assert ok, ptx
    assert "memo" in ptx_global_variables(ptx) and any("seen" in n for n in ptx_global_variables(ptx))
    assert writable_symbols(ptx.encode()) == ptx_global_variables(ptx)
    ok, clean = compile_ptx('__constant__ float scale[4];\nextern "C" __global__ void k(float* x) '
                            '{ x[threadIdx.x] = scale[threadIdx.x & 3]; }', )
    assert ok and ptx_global_variables(clean) == []
