"""Static features: counts on hand-written kernels, geometry, template deltas, device numbers."""

from __future__ import annotations

import pytest

from kernelcast.agents.forecast.features import SOURCE_KEYS, candidate_features, context, features, source_features
from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.measurement import HardwareSpec
from kernelcast.tools.core.task import load_task, resolve_task

from support.paths import KERNELS

TILED = """
// a comment with for ( and barrier( that must not count
__kernel void k(__global const float *a, __global float *out, __local float *scratch, const int n)
{
    __local float tile[64];
    int i = get_global_id(0);
    float4 acc = (float4)(0.0f);
    for (int j = 0; j < n; ++j) {
        tile[get_local_id(0)] = a[i + j];
        barrier(CLK_LOCAL_MEM_FENCE);
        acc += vload4(j, a) * 2.0f;
    }
    if (i < n) out[i] = acc.x + sqrt(acc.y);
    out[i + n] += 1.0f;
}
"""
HW = HardwareSpec(backend="opencl", name="cpu", device_type="CPU", compute_units=4, clock_mhz=3000,
                  preferred_vector_width_float=8, global_mem_bytes=1 << 30)


def test_source_counts_on_a_hand_written_kernel() -> None:
    f = dict(source_features(TILED, "k"))
    assert f["loops"] == 1 and f["barriers"] == 1  # the comment is ignored
    assert f["local_mem"] == 2  # the __local argument and the __local array
    assert f["vector_width"] == 4 and f["vloads"] == 1 and f["math_calls"] == 1
    assert f["branches"] == 1
    # a[i + j] is a load; out[i] = is a store; out[i+n] += is load and store; vload4 is a load
    assert f["global_loads"] == 1 + 1 + 1
    assert f["global_stores"] == 2
    assert set(SOURCE_KEYS) == set(f)


def test_candidate_features_geometry_params_and_deltas() -> None:
    task = resolve_task("saxpy")
    cand = task.instantiate({"VEC": 4, "COARSEN": 2, "WG": 256})
    f = features(task, cand, HW)
    assert f["ref.log2_work_items"] == 23 and f["ref.work_group_by_runtime"] == 1  # N = 2^23, no local size
    assert f["cand.log2_work_items"] == 20 and f["cand.log2_work_group"] == 8  # N / 8 items, groups of 256
    assert f["delta.log2_work_items"] == -3
    assert f["param.VEC"] == 3 and f["param.COARSEN"] == 2 and f["param.WG"] == 9  # 1 + log2 of the values
    assert f["delta.loops"] == 1 and f["ref.branches"] == 1
    assert f["hw.cpu"] == 1 and f["hw.preferred_vector_width"] == 8 and f["hw.compute_units"] == 4
    assert f["task.log2_intensity"] == pytest.approx(-2.585, abs=1e-3)  # 2N flops over 12N bytes


def test_param_deltas_against_the_template_default() -> None:
    task = resolve_task("gemv")  # default WG=1, ROWS=1, VEC=1, UNROLL=1
    point = next(p for p in task.param_space() if p["VEC"] == 4 and p["WG"] == 16)
    f = features(task, task.instantiate(point), None)
    assert f["param_delta.VEC"] == 2 and f["param_delta.WG"] == 4
    assert not any(k.startswith("hw.") for k in f)  # unknown device: no device features


def test_a_zero_one_switch_is_visible_to_the_models() -> None:
    """log2 mapped 0 and 1 to the same value: transpose's LOCAL and PAD were constant features."""
    task = resolve_task("transpose")
    a, b = (task.instantiate({"TILE": 16, "RPT": 2, "LOCAL": local, "PAD": 0}) for local in (0, 1))
    fa, fb = features(task, a, None), features(task, b, None)
    assert fa["param.LOCAL"] < fb["param.LOCAL"] and fa["param.TILE"] == fb["param.TILE"]
    histogram = resolve_task("histogram")
    values = sorted({features(histogram, histogram.instantiate(p), None)["param.PRIVATE"]
                     for p in histogram.param_space()})
    assert len(values) == 3  # PRIVATE = 0, 1, 2 stay three values, in order


def test_a_derived_points_mapping_and_work_group_are_visible_to_the_models() -> None:
    """String params were dropped: a vectorized and a cyclic coarsening, or two work-group shapes, of one derived
    point had the same features (matvec_cols x8: 8.5x against 0.7x)."""
    from kernelcast.agents.generate.derived_space import KEEP, DerivedSpace
    from kernelcast.agents.generate.offline import DERIVED_BASE

    task = load_task(KERNELS / "matvec_cols")
    space = DerivedSpace(task, task.reference(), 256)
    point = {**space.identity(), "coarsen_x": 8, "work_group": KEEP}
    made = {m: space.instantiate({**point, "mapping": m}) for m in ("cyclic", "vector")}
    shaped = space.instantiate({**point, "mapping": "vector", "work_group": "32"})
    assert made["cyclic"] and made["vector"] and shaped
    tag = {DERIVED_BASE: space.base.hash[:12]}
    fc, fv, fs = (features(task, c.model_copy(update={"params": {**c.params, **tag}}), None)
                  for c, _ in (made["cyclic"], made["vector"], shaped))
    assert fc["param.mapping=cyclic"] == 1 and "param.mapping=vector" not in fc and fv["param.mapping=vector"] == 1
    assert fv["param.coarsen_x"] == fc["param.coarsen_x"] == 4  # 1 + log2 8
    assert fv["param.work_group=keep"] == 1 and "param.work_group[0]" not in fv
    assert fs["param.work_group[0]"] == 6 and "param.work_group=keep" not in fs  # 1 + log2 32, the shape's scale
    assert not any(k.startswith(f"param.{DERIVED_BASE}") for k in fv)  # the base's hash is bookkeeping, no value


def test_batch_context_matches_single_call_and_build_options_count() -> None:
    task = resolve_task("saxpy")
    cand = Candidate(task="saxpy", source=task.source, global_size=["N"], build_options=["-cl-fast-relaxed-math"])
    f = candidate_features(context(task, HW), cand)
    assert f == features(task, cand, HW)
    assert f["opt.fast_math"] == 1 and f["delta.global_loads"] == 0 and f["delta.log2_chars"] == 0
