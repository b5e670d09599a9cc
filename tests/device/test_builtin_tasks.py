"""The built-in task library: every task loads, its reference kernel agrees with an
independent numpy implementation on two seeds (within the task's own tolerance), and
tunable templates have a real search space whose points compile and are correct.

All device work goes through one measurement worker (the default OpenCL device) at the tasks'
small sizes.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from kernelcast.tools.core.candidate import check_signature
from kernelcast.tools.core.expr import evaluate
from kernelcast.tools.core.measurement import MeasureConfig, Status
from kernelcast.tools.core.task import BufferArg, Task, builtin_task_paths, load_task
from kernelcast.tools.hardware.harness import buffer_count, make_inputs, scalar_values
from kernelcast.tools.hardware.worker import MeasurementWorker

from support.numpy_refs import NUMPY_REFS

EXPECTED_TASKS = {"saxpy", "reduce_rows", "softmax", "layernorm", "transpose", "gemm", "gemv", "stencil2d",
                  "histogram", "scan"}
# CUDA built-ins (``*_cuda``) need a CUDA device and are tested with the CUDA backend, not here
TASK_NAMES = sorted(n for n, p in builtin_task_paths().items() if load_task(p).spec.language == "opencl")
TEMPLATED = [n for n in TASK_NAMES if load_task(builtin_task_paths()[n]).spec.template is not None]
SEEDS = (0, 1)
MIN_SPACE = 20


@pytest.fixture(scope="module")
def worker() -> Iterator[MeasurementWorker]:
    try:
        w = MeasurementWorker()
        w.start()
    except Exception as exc:  # noqa: BLE001 - no OpenCL device on this machine
        pytest.skip(f"no OpenCL device: {exc}")
    with w:
        yield w


def _task(name: str) -> Task:
    return load_task(builtin_task_paths()[name])


def _expected(task: Task, seed: int) -> dict[str, np.ndarray]:
    sizes = task.sizes("small")
    return NUMPY_REFS[task.name](make_inputs(task, sizes, seed), scalar_values(task, sizes), sizes)


def _assert_matches(task: Task, got: dict[str, Any], expected: dict[str, np.ndarray], what: str) -> None:
    tol = task.spec.tolerance
    assert set(got) == set(expected), f"{what}: outputs {sorted(got)} != numpy outputs {sorted(expected)}"
    for name, ref in expected.items():
        out = np.asarray(got[name])
        assert out.dtype == ref.dtype and out.shape == ref.shape, f"{what}: {name} is {out.dtype}{out.shape}"
        if np.issubdtype(ref.dtype, np.floating):
            assert np.isfinite(out).all(), f"{what}: {name} has NaN/Inf (poison left behind?)"
            bad = ~np.isclose(out, ref, rtol=tol.rtol, atol=tol.atol)
        else:
            bad = out != ref
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            pytest.fail(f"{what}: {int(bad.sum())}/{ref.size} values of {name} differ from numpy "
                        f"(first at {i}: got {out[i]}, numpy {ref[i]}; rtol={tol.rtol}, atol={tol.atol})")


# ---- static checks (no device) ------------------------------------------------------------
def test_library_has_the_promised_tasks() -> None:
    assert EXPECTED_TASKS <= set(TASK_NAMES)
    assert set(TASK_NAMES) <= set(NUMPY_REFS), "every built-in OpenCL task needs a numpy oracle in tests/support/numpy_refs.py"
    assert len(TEMPLATED) >= 5


@pytest.mark.parametrize("name", TASK_NAMES)
def test_task_loads_and_is_described(name: str) -> None:
    task = _task(name)
    spec = task.spec
    assert spec.name == name and spec.language == "opencl"
    assert spec.description and spec.tags
    assert spec.small_sizes is not None, "tests need small sizes"
    full, small = task.sizes("full"), task.sizes("small")
    full_bytes = sum(buffer_count(a, full) * np.dtype(a.dtype).itemsize for a in spec.args if isinstance(a, BufferArg))
    small_bytes = sum(buffer_count(a, small) * np.dtype(a.dtype).itemsize for a in spec.args
                      if isinstance(a, BufferArg))
    assert full_bytes <= 512 * 2**20, f"full size needs {full_bytes / 2**20:.0f} MiB of buffers"
    assert small_bytes <= 4 * 2**20, f"small size needs {small_bytes / 2**20:.1f} MiB of buffers"
    assert small_bytes < full_bytes
    for expr in (spec.flops, spec.bytes):
        if expr is not None:
            assert evaluate(expr, full) > 0
    # indices into the largest buffer must fit a 32-bit int, which the kernels use for sizes
    assert max(buffer_count(a, full) for a in spec.args if isinstance(a, BufferArg)) < 2**31


@pytest.mark.parametrize("name", TEMPLATED)
def test_template_space_is_real(name: str) -> None:
    task = _task(name)
    space = task.param_space()
    assert len(space) >= MIN_SPACE, f"{name}: only {len(space)} valid points"
    tmpl = task.spec.template
    assert tmpl is not None
    if tmpl.default is not None:
        assert task.is_valid_point(dict(tmpl.default)), f"{name}: the default point is not valid"
    # every listed value of every parameter occurs in some valid point (no dead values)
    for key, values in tmpl.params.items():
        used = {p[key] for p in space}
        assert used == set(values), f"{name}: values {set(values) - used} of {key} never valid"
    for point in (space[0], space[-1]):
        cand = task.instantiate(point)
        check_signature(cand.source, task.source, task.spec.entry, task.language)
        for which in ("full", "small"):
            sizes = task.sizes(which)  # type: ignore[arg-type]
            glob = [int(evaluate(g, sizes)) for g in cand.global_size]
            loc = [int(evaluate(g, sizes)) for g in cand.local_size or []]
            assert all(g % size == 0 for g, size in zip(glob, loc))


# ---- the reference kernels against numpy ----------------------------------------------------
@pytest.mark.parametrize("name", TASK_NAMES)
def test_reference_matches_numpy(worker: MeasurementWorker, name: str) -> None:
    task = _task(name)
    previous: dict[str, Any] | None = None
    for seed in SEEDS:
        outputs, problems = worker.outputs(task, task.reference(), "small", seed)
        assert problems == [], f"{name} seed {seed}: {problems}"
        _assert_matches(task, outputs, _expected(task, seed), f"{name} reference, seed {seed}")
        if previous is not None:  # different seeds give different data: the comparison is not vacuous
            assert any(not np.array_equal(previous[k], outputs[k]) for k in outputs)
        previous = outputs


def test_numpy_oracle_rejects_a_wrong_answer(worker: MeasurementWorker) -> None:
    """The comparison used above does fail on a plausible mistake (a transposed GEMM result)."""
    task = _task("gemm")
    outputs, _ = worker.outputs(task, task.reference(), "small", 0)
    sizes = task.sizes("small")
    wrong = {"C": outputs["C"].reshape(sizes["M"], sizes["N"])[::-1].ravel().copy()}
    with pytest.raises(pytest.fail.Exception):
        _assert_matches(task, wrong, _expected(task, 0), "flipped gemm")


# ---- template points ------------------------------------------------------------------------
def _sample_points(task: Task) -> list[dict[str, Any]]:
    space = task.param_space()
    tmpl = task.spec.template
    assert tmpl is not None
    first = dict(tmpl.default) if tmpl.default is not None else space[0]
    points = [first, space[-1], random.Random(f"builtin-{task.name}").choice(space)]
    unique: list[dict[str, Any]] = []
    for p in points:
        if p not in unique:
            unique.append(p)
    return unique


@pytest.mark.parametrize("name", TEMPLATED)
def test_template_points_are_correct(worker: MeasurementWorker, name: str) -> None:
    task = _task(name)
    config = MeasureConfig(sizes="small", seeds=list(SEEDS), time_kernels=False)
    for point in _sample_points(task):
        m = worker.measure(task, task.instantiate(point), config)
        assert m.status is Status.correct, f"{name} {point}: {m.status.value}: {m.reason[:500]}"


@pytest.mark.parametrize("name", ["gemm", "softmax"])
def test_template_point_matches_numpy_directly(worker: MeasurementWorker, name: str) -> None:
    """A blocked/vectorized point agrees with numpy too, not only with the reference kernel."""
    task = _task(name)
    point = task.param_space()[-1]
    outputs, problems = worker.outputs(task, task.instantiate(point), "small", 3)
    assert problems == []
    _assert_matches(task, outputs, _expected(task, 3), f"{name} {point}")
