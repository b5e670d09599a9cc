"""Issue 14: local-memory tiling of reused inputs in 2-D kernels, on the real OpenCL device.

A tiled kernel that the tests call valid is measured with the harness (correctness on 3 seeds against
the reference, outputs poisoned, guard zones checked) and must come back ``correct``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kernelcast.agents.generate.derived_space import KEEP, DerivedSpace
from kernelcast.agents.generate.kernel_ast import observes_work_group, parse
from kernelcast.agents.generate.transforms import NotApplicable
from kernelcast.agents.generate.transforms.coarsen import coarsen
from kernelcast.agents.generate.transforms.local_tiling import local_tile
from kernelcast.agents.generate.transforms.restrict import restrict_const
from kernelcast.tools.core.task import Task, load_task, resolve_task
from kernelcast.tools.hardware.worker import MeasurementWorker

from support.paths import KERNELS
from support.transformed import assert_correct

# A 2-D kernel without reuse: every work-item reads its own K values (the index depends on both ids).
NO_REUSE_TOML = """
name = "rowdots"
description = "out[r, c] = sum over k of X[r, c, k]: each work-item reads its own K values."
language = "opencl"
source = "rowdots.cl"
entry = "rowdots"
[sizes]
M = 64
N = 64
K = 32
[[args]]
name = "X"
dtype = "float32"
shape = ["M", "N", "K"]
intent = "in"
[[args]]
name = "out"
dtype = "float32"
shape = ["M", "N"]
intent = "out"
[[args]]
name = "N"
kind = "scalar"
dtype = "int32"
value = "N"
[[args]]
name = "K"
kind = "scalar"
dtype = "int32"
value = "K"
[launch]
global = ["N", "M"]
"""
NO_REUSE_CL = """__kernel void rowdots(__global const float *X, __global float *out, const int N, const int K)
{
    const int col = get_global_id(0);
    const int row = get_global_id(1);
    float acc = 0.0f;
    for (int k = 0; k < K; ++k)
        acc += X[(row * N + col) * K + k];
    out[row * N + col] = acc;
}
"""


@pytest.fixture(scope="module")
def worker() -> Iterator[MeasurementWorker]:
    with MeasurementWorker("opencl") as w:
        yield w


@pytest.mark.parametrize("tile", [8, 16])
def test_tiled_naive_gemm_stages_a_and_b_in_local_memory_and_is_correct(worker: MeasurementWorker,
                                                                        tile: int) -> None:
    task = resolve_task("gemm")
    result = local_tile(task, task.reference(), tile)
    c = result.candidate
    assert result.label == f"local-tile {tile}x{tile} A,B"
    assert c.local_size == [str(tile), str(tile)] and c.global_size == task.reference().global_size
    assert c.source.count(f"[{tile}][{tile}];") == 2 and c.source.count("barrier(CLK_LOCAL_MEM_FENCE)") == 2
    ps = parse(c.source)
    assert observes_work_group(ps, ps.kernel("gemm"))  # re-parsed: valid source that now uses its group
    assert_correct(worker, task, c)
    if tile == 16:
        assert_correct(worker, task, c, sizes="full")  # 384^3: 24 tiles along k


def test_local_tiling_refuses_a_1d_kernel_and_a_kernel_without_reuse(tmp_path: Path) -> None:
    gemv = resolve_task("gemv")
    with pytest.raises(NotApplicable, match="2-D kernel"):
        local_tile(gemv, gemv.reference(), 16)
    matvec = load_task(KERNELS / "matvec_cols")
    with pytest.raises(NotApplicable, match="2-D kernel"):
        local_tile(matvec, matvec.reference(), 8)
    (tmp_path / "task.toml").write_text(NO_REUSE_TOML)
    (tmp_path / "rowdots.cl").write_text(NO_REUSE_CL)
    rowdots = load_task(tmp_path / "task.toml")
    with pytest.raises(NotApplicable, match="reused across the work-items"):
        local_tile(rowdots, rowdots.reference(), 8)


def test_local_tiling_refuses_sizes_that_do_not_divide_and_divergent_barriers() -> None:
    gemm = resolve_task("gemm")
    with pytest.raises(NotApplicable, match="multiple of 32"):  # small sizes: M = 64, N = 128, K = 64
        local_tile(gemm, gemm.reference().model_copy(update={"global_size": ["N", "M - 16"]}), 32)
    coarsened = coarsen(gemm, gemm.reference(), 2, 2).candidate  # copies' guards differ within a group
    with pytest.raises(NotApplicable, match="condition"):
        local_tile(gemm, coarsened, 16)
    tiled = local_tile(gemm, gemm.reference(), 8).candidate
    with pytest.raises(NotApplicable, match="already observes"):
        local_tile(gemm, tiled, 8)
    conv = load_task(KERNELS / "conv2d")  # 5x5 filter loops: 5 is not a multiple of any tile
    with pytest.raises(NotApplicable):
        local_tile(conv, conv.reference(), 8)


def test_local_tiling_joins_the_derived_space_and_composes_where_it_can(worker: MeasurementWorker) -> None:
    task = resolve_task("gemm")
    base = Task(task.spec.model_copy(update={"template": None}), task.path, task.source, None)
    space = DerivedSpace(base, base.reference(), 256)
    assert space.params["local_tile"] == [0, 8, 16]  # 32 x 32 exceeds a 256 work-item limit
    assert "local_tile in [0, 8, 16]" in space.describe()
    tiled = {**space.identity(), "local_tile": 16, "restrict": 1, "unroll": 4}
    made = space.instantiate(tiled)
    assert made is not None
    candidate, edits = made
    assert "; ".join(e.label for e in edits) == "restrict on A, B, C; local-tile 16x16 A,B; unroll k x4 + remainder"
    assert [(e.name, e.values) for e in edits] == [("restrict", {}), ("local_tile", {"tile": 16}),
                                                   ("unroll", {"factor": 4})]
    assert candidate.local_size == ["16", "16"]
    assert_correct(worker, base, candidate)
    assert candidate.params is not None and candidate.params["work_group"] == KEEP
    assert space.instantiate({**tiled, "coarsen_x": 2}) is None  # refused: coarsening with tiling
    reshaped = space.instantiate({**tiled, "work_group": "8,8"})  # the tile fixes the shape: the same kernel
    assert reshaped is not None and reshaped[0].hash == candidate.hash and reshaped[0].local_size == ["16", "16"]
    restricted = restrict_const(base, base.reference()).candidate  # restrict first, then tiling: same kernel
    assert local_tile(base, restricted, 16).candidate.source.count("restrict") == 3
