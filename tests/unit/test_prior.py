"""The zero-data roofline prior and its static work estimates (issue 13, item 1); the device probes and the
prior's forecasts on the device are tests/device/test_prior_probes.py.

Work estimates are checked on the built-in task files (their sizes and templates are fixed, so the
expected counts follow from the source).
"""

from __future__ import annotations

import pytest

from kernelcast.agents.forecast.device_probe import Bandwidth, CpuCosts, filled_lanes
from kernelcast.agents.forecast.prior import DeviceModel, RooflinePrior, cpu_simd_share, cpu_vectorizes_across, predicted_time
from kernelcast.agents.forecast.work_estimate import compulsory_bytes, estimate
from kernelcast.tools.core.measurement import HardwareSpec
from kernelcast.tools.core.task import resolve_task

from support.paths import ROOT


def test_naive_gemm_work_follows_the_triple_loop() -> None:
    task = resolve_task("gemm")
    sizes = task.sizes("full")
    m, n, k = sizes["M"], sizes["N"], sizes["K"]
    work = estimate(task, task.reference(), sizes)
    assert work.flops == pytest.approx(2 * m * n * k)  # one multiply and one add per k
    assert work.global_load_bytes == pytest.approx(2 * 4 * m * n * k)  # A and B read inside the k loop
    assert work.global_store_bytes == pytest.approx(4 * m * n)
    assert work.uniform_bytes > 0 and work.contiguous_bytes > 0  # A[row*K+k] is a broadcast, B[k*N+col] is not
    assert not work.uncertain and work.work_items == m * n


def test_register_blocking_and_tiling_cut_global_traffic() -> None:
    task = resolve_task("gemm")
    sizes = task.sizes("full")
    naive = estimate(task, task.reference(), sizes)
    blocked = estimate(task, task.instantiate({"TM": 8, "TN": 8, "WGX": 8, "WGY": 4, "KU": 1, "LOCAL": 0,
                                               "TK": 8}), sizes)
    tiled = estimate(task, task.instantiate({"TM": 4, "TN": 4, "WGX": 8, "WGY": 4, "KU": 1, "LOCAL": 1,
                                             "TK": 16}), sizes)
    assert blocked.flops == pytest.approx(naive.flops, rel=0.05)  # same arithmetic...
    assert blocked.global_load_bytes < naive.global_load_bytes / 4  # ...far fewer loads per flop
    assert blocked.vector_width == 8 and blocked.work_items == naive.work_items // 64
    assert tiled.local_accesses > 0 and tiled.barriers == 2 * sizes["K"] / 16
    assert tiled.global_load_bytes < naive.global_load_bytes / 4


def test_trip_counts_that_depend_on_the_work_item_use_its_mean() -> None:
    task = resolve_task("scan")  # the reference sums its whole prefix: N^2 / 2 loads
    sizes = task.sizes("full")
    n = sizes["N"]
    work = estimate(task, task.reference(), sizes)
    assert work.global_load_bytes == pytest.approx(4 * n * n / 2, rel=0.01)


def test_vectorized_saxpy_moves_the_same_bytes_in_fewer_work_items() -> None:
    task = resolve_task("saxpy")
    sizes = task.sizes("full")
    ref = estimate(task, task.reference(), sizes)
    vec = estimate(task, task.instantiate({"VEC": 4, "COARSEN": 2, "WG": 64}), sizes)
    assert ref.global_bytes == pytest.approx(compulsory_bytes(task, sizes)) == pytest.approx(vec.global_bytes)
    assert vec.vector_width == 4 and vec.work_items == ref.work_items // 8 and not vec.uncertain


def test_time_model_prefers_less_traffic_and_less_overhead() -> None:
    task = resolve_task("transpose")
    sizes = task.sizes("full")
    dev = DeviceModel.of(HardwareSpec(backend="opencl", name="cpu", device_type="CPU", compute_units=4,
                                      clock_mhz=3000, native_vector_width_float=8, global_cache_bytes=2**25))
    comp = compulsory_bytes(task, sizes)
    ref = predicted_time(estimate(task, task.reference(), sizes), comp, dev)
    assert ref.seconds >= comp / dev.bandwidth  # never faster than moving the bytes once
    small_groups = predicted_time(estimate(task, task.instantiate({"TILE": 4, "RPT": 1, "LOCAL": 0, "PAD": 0}),
                                           sizes), comp, dev)
    big_groups = predicted_time(estimate(task, task.instantiate({"TILE": 32, "RPT": 1, "LOCAL": 0, "PAD": 0}),
                                         sizes), comp, dev)
    assert big_groups.seconds < small_groups.seconds  # 64x fewer work-groups to schedule


def test_float8_fills_a_cpu_whose_arithmetic_is_eight_lanes_wide() -> None:
    # Intel's runtime on an AMD EPYC (Zen 4): the instruction set has 16 float lanes, but softmax's float8 points
    # in one-item work-groups ran as fast as its scalar points in 16-wide work-groups (the runtime's own 16-wide
    # vectors), 7.5x against 7.2x, because 512-bit instructions run as two 256-bit halves
    comp, explicit, across = _points("softmax", "small", {"WG": 1, "ROWS": 8, "VEC": 8, "ONLINE": 0},
                                     {"WG": 16, "ROWS": 8, "VEC": 1, "ONLINE": 0})
    isa = DeviceModel.of(_cpu(lanes=16), Bandwidth(50e9, "probe", CpuCosts(5e-8, 4e-9)))
    probed = DeviceModel.of(_cpu(lanes=16), Bandwidth(50e9, "probe", CpuCosts(5e-8, 4e-9, simd_lanes=8)))
    assert (isa.lanes, isa.simd_lanes, probed.lanes, probed.simd_lanes) == (16, 16, 16, 8)
    assert cpu_simd_share(explicit, isa) == 0.5 and cpu_simd_share(explicit, probed) == 1.0
    assert cpu_vectorizes_across(across, probed)  # the runtime still vectorizes 16 work-items at a time
    assert predicted_time(explicit, comp, isa).seconds > predicted_time(across, comp, isa).seconds
    assert predicted_time(explicit, comp, probed).seconds <= predicted_time(across, comp, probed).seconds
    narrow = DeviceModel.of(_cpu(lanes=4), Bandwidth(50e9, "probe", CpuCosts(5e-8, 4e-9, simd_lanes=8)))
    assert narrow.simd_lanes == 4  # a reading above the instruction set's width is capped


def test_a_kernel_the_estimator_cannot_read_gets_a_wider_spread() -> None:
    task = resolve_task("saxpy")
    odd = task.reference().model_copy(update={"source": task.source.replace(
        "int i = get_global_id(0);", "int i = get_global_id(0);\n    while (i < 0) i++;")})
    mu, sd = RooflinePrior().log_speedups(task, [task.reference(), odd], None)
    assert sd[1] > sd[0]


def _points(name: str, sizes: str, *points: dict[str, int]) -> tuple:
    """A built-in's compulsory bytes at those sizes, then the work estimate of each template point."""
    task = resolve_task(name)
    values = task.sizes(sizes)
    return (compulsory_bytes(task, values), *(estimate(task, task.instantiate(p), values) for p in points))


def _cpu(lanes: int = 16, llc: int = 0) -> HardwareSpec:
    return HardwareSpec(backend="opencl", name="cpu", device_type="CPU", compute_units=2, clock_mhz=2600,
                        native_vector_width_float=lanes, global_cache_bytes=2**20, last_level_cache_bytes=llc)


def test_a_loop_that_starts_at_the_work_item_index_reads_contiguously() -> None:
    # softmax's tunable kernel walks its row with ``for (v = lid; v < vecs; v += WG)``: neighbouring
    # work-items read neighbouring floats, which a CPU runtime vectorizes and a GPU coalesces
    task = resolve_task("softmax")
    sizes = task.sizes("full")
    wide = estimate(task, task.instantiate({"WG": 16, "ROWS": 1, "VEC": 1, "ONLINE": 0}), sizes)
    assert wide.contiguous_bytes > 0.9 * wide.global_bytes and wide.uniform_bytes < 0.1 * wide.global_bytes
    ref = estimate(task, task.reference(), sizes)  # one work-item per row: its neighbours are a row apart
    assert ref.strided_bytes > 0.9 * ref.global_bytes


def test_cpu_lanes_fill_across_work_items_only_for_scalar_code_in_wide_groups() -> None:
    task = resolve_task("softmax")
    sizes = task.sizes("full")
    dev = DeviceModel.of(_cpu(lanes=16))

    def share(point: dict[str, int] | None) -> float:
        cand = task.reference() if point is None else task.instantiate(point)
        return cpu_simd_share(estimate(task, cand, sizes), dev)

    assert share({"WG": 16, "ROWS": 1, "VEC": 1, "ONLINE": 0}) == 1.0  # scalar, 16 wide: vectorized across
    assert share({"WG": 4, "ROWS": 1, "VEC": 1, "ONLINE": 0}) == pytest.approx(1 / 16)  # too narrow
    assert share({"WG": 16, "ROWS": 1, "VEC": 4, "ONLINE": 0}) == pytest.approx(4 / 16)  # explicit vectors only
    assert share({"WG": 1, "ROWS": 1, "VEC": 8, "ONLINE": 0}) == pytest.approx(8 / 16)
    assert share(None) == pytest.approx(1 / 16)  # the reference gathers across work-items


def test_a_working_set_in_the_last_level_cache_streams_faster_than_dram() -> None:
    task = resolve_task("gemv")
    sizes = {"M": 256, "N": 4096}  # search_bench's sizes: an 8 MiB matrix
    work = estimate(task, task.instantiate({"WG": 1, "ROWS": 2, "VEC": 8, "UNROLL": 2}), sizes)
    comp = compulsory_bytes(task, sizes)
    assert 2**20 < comp < 2**24  # larger than the reported (per-core) cache, inside a 32 MiB LLC
    bandwidth = Bandwidth(50e9, "probe")
    cold = predicted_time(work, comp, DeviceModel.of(_cpu(llc=0), bandwidth))
    warm = predicted_time(work, comp, DeviceModel.of(_cpu(llc=32 * 2**20), bandwidth))
    assert cold.seconds >= comp / 50e9 > warm.seconds


def test_a_stride_reads_through_parentheses_and_index_variables() -> None:
    # the tiled transpose without local memory writes B[(c0 + tx) * M + ...]: neighbouring work-items a row
    # of B apart; c0 (the group's first column) is the same for every item of a group, so it is no stride
    task = resolve_task("transpose")
    sizes = task.sizes("full")
    direct = estimate(task, task.instantiate({"TILE": 16, "RPT": 4, "LOCAL": 0, "PAD": 0}), sizes)
    assert direct.strided_store_bytes == pytest.approx(direct.global_store_bytes)
    assert direct.contiguous_bytes == pytest.approx(direct.global_load_bytes)  # A[... + c0 + tx]
    staged = estimate(task, task.instantiate({"TILE": 16, "RPT": 4, "LOCAL": 1, "PAD": 0}), sizes)
    assert staged.strided_bytes == 0 and staged.local_accesses > 0  # B[(c0 + ty + k) * M + r0 + tx]
    probe = resolve_task(ROOT / "agents" / "data" / "probes" / "launch_costs" / "task.toml")
    scatter = estimate(probe, probe.instantiate({"WG": 256, "SCATTER": 1}), probe.sizes("full"))
    assert scatter.strided_store_bytes == scatter.global_store_bytes > 0 and scatter.strided_bytes == \
        scatter.global_store_bytes  # B[(size_t)(i % s) * s + i / s] = A[i]


def test_an_index_variable_carries_its_stride_and_dimension_one_is_no_stride() -> None:
    task = resolve_task("saxpy")
    sizes = task.sizes("full")

    def work(body: str):
        src = ("__kernel void saxpy(__global const float *x, __global float *y, const float a, const int n)\n"
               "{\n" + body + "\n}\n")
        return estimate(task, task.reference().model_copy(update={"source": src}), sizes)

    strided = work("const int i = get_global_id(0);\n const int j = i * 8;\n if (j < n) y[j] = a * x[j] + y[j];")
    assert strided.global_bytes > 0 and strided.strided_bytes == pytest.approx(strided.global_bytes)
    rows = work("y[64 * get_global_id(1) + get_global_id(0)] = a * x[get_global_id(0)] + y[get_global_id(0)];")
    assert rows.global_bytes > 0 and rows.contiguous_bytes == pytest.approx(rows.global_bytes)  # the 64 scales dimension 1
    wrapped = work("const int i = get_global_id(0) % n;\n y[i] = a * x[i] + y[i];")  # % keeps the order
    assert wrapped.global_bytes > 0 and wrapped.contiguous_bytes == pytest.approx(wrapped.global_bytes)
    chained = work("y[(get_global_id(0) % n) * 4] = a * x[get_global_id(0)];")  # ... until a factor scales it
    assert chained.strided_store_bytes > 0


def test_scattered_stores_slow_a_cpu_only_where_it_vectorizes_across_work_items() -> None:
    # measured on Intel's CPU runtime: the tiled transpose without local memory in 16-wide work-groups (vector
    # code, scattered stores) ran 1.1x the reference, in 8-wide ones (scalar code) 4-5x
    comp, wide, narrow = _points("transpose", "full", {"TILE": 16, "RPT": 4, "LOCAL": 0, "PAD": 0},
                                 {"TILE": 8, "RPT": 4, "LOCAL": 0, "PAD": 0})
    probed = Bandwidth(50e9, "probe", CpuCosts(work_group_s=5e-8, scattered_store_s=4e-9))
    dev = DeviceModel.of(_cpu(lanes=16), probed)
    assert cpu_vectorizes_across(wide, dev) and not cpu_vectorizes_across(narrow, dev)
    assert predicted_time(wide, comp, dev).seconds > 2 * predicted_time(narrow, comp, dev).seconds
    assert predicted_time(wide, comp, dev).bound == "scatter"
    free = DeviceModel.of(_cpu(lanes=16), Bandwidth(50e9, "probe", CpuCosts(5e-8, 0.0)))
    assert predicted_time(wide, comp, free).seconds < predicted_time(narrow, comp, free).seconds
    gpu = DeviceModel.of(HardwareSpec(backend="opencl", name="gpu", device_type="GPU", compute_units=80), probed)
    assert gpu.scattered_store_s == 0  # a GPU's uncoalesced accesses are the cache term's


@pytest.mark.parametrize(("own", "float4", "float8", "lanes"), [
    (9.38, 3.98, 7.81, 8), (9.05, 3.99, 7.67, 8), (9.12, 3.99, 7.98, 8),  # a 2-core Xeon (AVX-512), 2026-12-06
    (8.0, 4.0, 8.1, 8),  # float8 as fast as 16-wide vectors (Zen 4) or the runtime's own vectors 8 wide (AVX2)
    (4.1, 4.0, 4.2, 4),  # 4 lanes: float8 gains nothing
    (16.0, 4.0, 8.0, 0),  # 16 lanes filled: wider than the probe reads, the instruction set's width stands
])
def test_the_simd_reading_is_the_narrowest_width_whose_doubling_gains_less_than_root_two(
        own: float, float4: float, float8: float, lanes: int) -> None:
    """The rates of the Xeon's repeated probes straddled the old rule's 0.85 (float8 at 0.83-0.88 of the
    runtime's own vectors), so fresh stores read 8 lanes or none; each doubling is far from the middle."""
    assert filled_lanes(own, float4, float8) == lanes
    assert filled_lanes(own * 1.05, float4 * 0.95, float8) == filled_lanes(own * 0.95, float4, float8 * 1.05) == lanes
