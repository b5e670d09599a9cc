"""Attacks of the second integrity round (issue 49, items 1, 2, 4 and 8), on the real OpenCL device.

Program-scope and static memory that outlives a launch, a predictable checked launch, two kernels that
shared one identity, and a hanging reference that waited past the configured timeout.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from kernelcast.tools.core.candidate import Candidate, content_hash
from kernelcast.tools.core.confinement import ConfinementError, check_candidate
from kernelcast.tools.core.measurement import Status
from kernelcast.tools.core.program_state import mutable_state_problem
from kernelcast.tools.core.task import Task
from kernelcast.tools.hardware.backends import make_runner
from kernelcast.tools.hardware.backends.base import CompileError, ProgramStateError
from kernelcast.tools.hardware.harness import Harness, task_identity
from kernelcast.tools.hardware.worker import MeasurementWorker

from support.cli import run_cli
from support.slowadd import CONFIG, SLOW_ADD, edit, write_task

CL2 = ["-cl-std=CL2.0"]


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> Task:
    return write_task(tmp_path_factory.mktemp("slowadd2"), SLOW_ADD)


# ---- 1. program-scope state -------------------------------------------------------------
# a kernel that keeps its results in program memory and copies them out once it has computed them: right on
# every launch, so no output check can see it; measured, it was reported as a 3.5x "speedup"
MEMO_PREFIX = "__global float memo[16384];\n__global int filled = 0;\n"
MEMO = "if (filled > 2) { c[i] = memo[i]; return; }\n    if (i == 0) atomic_inc(&filled);"

HIDDEN_STATE = {
    "a program-scope cache": (MEMO_PREFIX, MEMO, "memo"),
    "an unqualified program-scope variable (global in OpenCL 2.0)": (
        "int launches;\n", "if (i == 0) launches++;", "launches"),
    "a static variable inside the kernel": ("", "static global int seen = 0; if (i == 0) seen++;", "seen"),
    "a struct variable at program scope": ("struct { int n; } state;\n", "if (i == 0) state.n++;", "state"),
    "a declaration hidden behind a macro": ("#define KEEP __global\nKEEP int count = 0;\n", "if (i == 0) count++;",
                                            "count"),
    "a writable pointer at program scope": ("__global int *where;\n", "if (i == 0) where = 0;", "where"),
}


@pytest.mark.parametrize("name", list(HIDDEN_STATE))
def test_state_that_outlives_a_launch_is_refused_before_compiling(task: Task, name: str) -> None:
    prefix, insert, variable = HIDDEN_STATE[name]
    candidate = edit(task, insert, prefix=prefix, options=CL2)
    with pytest.raises(ConfinementError, match=rf"variable '{variable}'"):
        check_candidate(task, candidate)


def test_the_program_scope_cache_attack_is_invalid_through_the_worker(task: Task, worker: MeasurementWorker) -> None:
    """The attack as measured: invalid with the reason, never compiled, no speedup."""
    m = worker.measure(task, edit(task, MEMO, prefix=MEMO_PREFIX, options=CL2), CONFIG)
    assert m.status is Status.invalid and m.speedup is None, m
    assert "program-scope variable 'memo'" in m.reason


READ_ONLY_STATE = {
    "a __constant table": ("__constant float scale[2] = {1.0f, 1.0f};\n", "float one = scale[i & 1];"),
    "a const global at program scope": ("global const int ONE = 1;\n", "int one = ONE;"),
    "a static helper function and a prototype": (
        "float twice(float x);\nstatic float twice(float x) { return 2.0f * x; }\n", "float two = twice(1.0f);"),
    "a const static inside the kernel": ("", "const static int K = 3;"),
    "a struct type without a variable": ("struct pair { float a; float b; };\ntypedef struct pair pair_t;\n",
                                         "pair_t p; p.a = 0.0f;"),
}


@pytest.mark.parametrize("name", list(READ_ONLY_STATE))
def test_read_only_program_scope_declarations_stay_allowed(task: Task, name: str) -> None:
    prefix, insert = READ_ONLY_STATE[name]
    check_candidate(task, edit(task, insert, prefix=prefix, options=CL2))  # raises if refused


def test_cuda_device_variables_and_static_locals_are_refused() -> None:
    """The CUDA forms: ``__device__``/``__managed__`` variables and ``static`` locals persist across launches;
    ``__constant__`` (written by the host only), ``__shared__`` and host variables do not reach a later launch."""
    kernel = "__global__ void k(float *c) {{ int i = threadIdx.x; {body} c[i] = 1.0f; }}\n"
    assert "'count'" in str(mutable_state_problem("__device__ int count;\n" + kernel.format(body="count++;"), "cuda"))
    assert "'hits'" in str(mutable_state_problem("static __managed__ int hits = 0;\n" + kernel.format(body=""), "cuda"))
    assert "'seen'" in str(mutable_state_problem(kernel.format(body="static int seen = 0; seen++;"), "cuda"))
    allowed = ("__constant__ float table[4];\n__device__ __forceinline__ float sq(float x) { return x * x; }\n"
               + kernel.format(body="__shared__ float tile[32]; static __shared__ float more[4];"))
    assert mutable_state_problem(allowed, "cuda") is None


def test_a_program_that_counts_its_launches_is_refused_by_its_build(task: Task) -> None:
    """A counter kept in the program (the attack the fresh final build answered) no longer builds at all: the
    runner reads the compiled program's writable symbols (issue 60), cached or fresh. The fresh final build stays
    as a second line."""
    source = ("__global int launches = 0;\n__kernel void slowadd(__global const float *a, __global const float *b, "
              "__global float *c)\n{ int i = get_global_id(0); "
              "c[i] = (float)(atomic_inc(&launches) / (int)get_global_size(0)); }\n")
    runner = make_runner("opencl")
    for fresh in (False, True):
        try:
            runner.build(source, "slowadd", CL2, fresh=fresh)
        except CompileError as exc:
            pytest.skip(f"this device has no OpenCL 2.0 program-scope variables: {str(exc)[:120]}")
        except ProgramStateError as exc:
            assert "launches" in str(exc) or "program-scope" in str(exc)
            continue
        if "pthread" in runner.hardware_spec().name or "Portable" in runner.hardware_spec().platform:
            pytest.skip("PoCL's program binary names no symbols: the source gate is its check")
        pytest.fail("a program that keeps a counter was built")


def test_a_measurement_says_its_final_check_used_a_fresh_build(task: Task, worker: MeasurementWorker) -> None:
    m = worker.measure(task, task.reference(), CONFIG)
    assert m.ok and "(fresh build)" in m.reason


# ---- 2. the checked timed launch is drawn per measurement ------------------------------------
def _old_checked_launch(reps: int, seeds: list[int]) -> int:
    """Which timed launch the harness used to check besides the last: a function of the seeds alone."""
    return int(np.random.default_rng(len(seeds) * 7919 + sum(seeds)).integers(0, reps))


def test_a_kernel_that_knows_which_launch_is_checked_is_caught(task: Task) -> None:
    """The attack of the first round, given a counter the static check would have missed (the harness is told
    the candidate was checked): it computes right on the correctness launches, the warm-up, the launch the
    old seeded generator checked and the last of the batch, and skips its work on all the others. With the
    checked launch drawn from the system's cryptographic source, a measurement catches it unless the draw hits
    that one launch (1 in 20 per measurement); three measurements all missing it is a 1-in-8000 event."""
    reps, warmup, seeds = 20, 2, [0, 1, 2]
    config = CONFIG.model_copy(update={"min_reps": reps, "max_reps": reps, "target_seconds": 10.0,
                                       "remeasure": False, "warmup": warmup, "seeds": seeds})
    first_timed = len(seeds) + warmup  # the candidate's launches before its first timed one
    right = sorted({*range(first_timed), first_timed + _old_checked_launch(reps, seeds), first_timed + reps - 1})
    condition = " && ".join(f"calls != {n}" for n in right)
    attack = edit(task, f"int calls = atomic_inc(&launches) / (int)get_global_size(0);\n    if ({condition}) "
                        "{ c[i] = 0.0f; return; }", prefix="__global int launches = 0;\n", options=CL2)
    def blind_runner() -> object:
        """A runner whose check of the built program "missed" the counter too (issue 60 added that check)."""
        runner = make_runner("opencl")
        runner._refuse_program_state = lambda program: None  # type: ignore[attr-defined]
        return runner

    try:
        blind_runner().build(attack.source, task.spec.entry, attack.build_options)
    except CompileError as exc:
        pytest.skip(f"this device has no OpenCL 2.0 program-scope variables: {str(exc)[:120]}")
    verdicts = []
    for _ in range(3):  # a harness (and program) per measurement: each starts with the counter at 0
        harness = Harness(blind_runner())
        harness._confined.add((task_identity(task), attack.hash, tuple(attack.build_options)))  # the check "missed" it
        verdicts.append(harness.measure(task, attack, config))
    assert any(m.status is Status.incorrect and "during timing" in m.reason for m in verdicts), \
        [(m.status, m.reason[:120]) for m in verdicts]


# ---- 4. one identity per kernel -------------------------------------------------------------
def _identity(task: Task, body: str) -> str:
    source = task.source.replace("c[i] = s / 128.0f;", body)
    return content_hash(task.name, source, ("N",), (), ())


@pytest.mark.parametrize("first,second", [
    ("int j = 3, k = 2; c[i] = s + (float)(j - --k);", "int j = 3, k = 2; c[i] = s + (float)(j-- - k);"),
    ("int j = 3, k = 2; c[i] = s + (float)(j + +k);", "int j = 3, k = 2; c[i] = s + (float)(j++ + k);"),
    ("c[i] = s / *(&s);", "c[i] = s /(*(&s));"),
])
def test_kernels_that_differ_only_across_a_space_keep_their_own_identity(task: Task, first: str, second: str) -> None:
    assert _identity(task, first) != _identity(task, second)


def test_layout_alone_does_not_make_a_new_identity(task: Task) -> None:
    """The normalization still merges what is the same code: spaces, line breaks, comments."""
    plain = _identity(task, "int j = 3, k = 2; c[i] = s + (float)(j - --k);")
    spaced = _identity(task, "int  j=3,k=2;\n /* note */ c[ i ]=s+( float )( j -  -- k ) ;")
    assert plain == spaced


def test_the_worker_measures_each_of_two_such_kernels_as_itself(task: Task, worker: MeasurementWorker) -> None:
    """The collision's symptom: the store kept one source per hash, so the second kernel was measured as the
    first. Two kernels now give two measurements of two hashes, each of its own source."""
    sources = [task.source.replace("c[i] = s / 128.0f;", f"int j = 3, k = 2; c[i] = s / 128.0f + (float){e};")
               for e in ("(j - --k)", "(j-- - k)")]
    first, second = (Candidate(task=task.name, source=s, global_size=["N"]) for s in sources)
    assert first.hash != second.hash
    for candidate in (first, second):
        m = worker.measure(task, candidate, CONFIG.model_copy(update={"time_kernels": False}))
        assert m.candidate_hash == candidate.hash
        assert m.status is Status.incorrect  # both add a nonzero term: the oracle tells them apart from the task


# ---- 8. a hanging reference --------------------------------------------------------------------
def test_a_hanging_reference_is_a_task_error_within_the_configured_timeout(tmp_path: Path) -> None:
    hang = SLOW_ADD.replace("float s = 0.0f;", "volatile float x = 0.0f;\n    while (x < 1.0f) x = x * 0.5f;\n"
                                               "    float s = 0.0f;")
    folder = tmp_path / "hang"
    write_task(folder, hang)
    start = time.monotonic()
    out = run_cli(tmp_path / "home", "measure", str(folder), "--sizes", "small", KERNELCAST_MEASURE_TIMEOUT_S="4")
    elapsed = time.monotonic() - start
    text = out.stdout + out.stderr
    assert out.returncode == 2, text
    assert "did not finish within the measurement timeout of 4 s" in text and "Traceback" not in text
    assert elapsed < 90, f"took {elapsed:.0f} s with a 4 s timeout"
