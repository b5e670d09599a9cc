"""The zero-data roofline prior, its static work estimates and the triad probe (issue 13, item 1).

Work estimates are checked on the built-in task files (their sizes and templates are fixed, so the
expected counts follow from the source); the probe and the forecasts run on the real OpenCL device,
and only device-independent properties of them are asserted.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelcast.agents.blended_forecaster import BlendedForecaster
from kernelcast.agents.device_probe import PROBE, Bandwidth, device_bandwidth, guessed_bandwidth
from kernelcast.agents.roofline_prior import DeviceModel, RooflinePrior, cpu_simd_share, predicted_time
from kernelcast.agents.work_estimate import compulsory_bytes, estimate
from kernelcast.tools.measurement import HardwareSpec
from kernelcast.tools.store import Store
from kernelcast.tools.task import resolve_task
from kernelcast.tools.worker import MeasurementWorker


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


@pytest.fixture(scope="module")
def worker():
    with MeasurementWorker("opencl") as w:
        yield w


def test_triad_probe_is_measured_once_and_stored(tmp_path: Path, worker: MeasurementWorker) -> None:
    store = Store(tmp_path / "k.db")
    hw = worker.hardware_spec()
    assert not device_bandwidth(store, hw).probed  # nothing stored, no worker: a guess
    first = device_bandwidth(store, hw, worker)
    assert first.probed and 1e8 < first.bytes_per_s < 1e13
    assert store.device_probe(hw.key, PROBE) == pytest.approx(first.bytes_per_s)
    again = device_bandwidth(Store(tmp_path / "k.db"), hw)  # a new process reads it back without measuring
    assert again.probed and again.bytes_per_s == pytest.approx(first.bytes_per_s)


def test_prior_forecasts_are_informative_with_zero_data(tmp_path: Path, worker: MeasurementWorker) -> None:
    hw = worker.hardware_spec()
    task = resolve_task("gemm")
    cands = [task.reference(), *(task.instantiate(p) for p in task.param_space()[::97][:12])]
    prior = RooflinePrior(guessed_bandwidth(hw))
    forecasts = prior.forecast_many(task, cands, hw)
    assert len(forecasts) == len(cands) and not any(f.failed for f in forecasts)
    assert all(f.provenance.mode == "prior" and "guessed" in (f.provenance.model or "") for f in forecasts)
    # the reference against itself: centred on "no change"
    assert abs(forecasts[0].expected_log_speedup) < 0.2
    assert len({round(f.expected_log_speedup, 3) for f in forecasts}) > 3  # it tells candidates apart
    blended = BlendedForecaster().forecast_many(task, cands, hw)  # no forest, no data: prior alone
    assert not any(f.failed for f in blended) and {f.provenance.mode for f in blended} == {"prior"}


def test_a_kernel_the_estimator_cannot_read_gets_a_wider_spread() -> None:
    task = resolve_task("saxpy")
    odd = task.reference().model_copy(update={"source": task.source.replace(
        "int i = get_global_id(0);", "int i = get_global_id(0);\n    while (i < 0) i++;")})
    mu, sd = RooflinePrior().log_speedups(task, [task.reference(), odd], None)
    assert sd[1] > sd[0]


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


def test_a_cpu_device_reports_its_last_level_cache(worker: MeasurementWorker) -> None:
    hw = worker.hardware_spec()
    if hw.device_type != "CPU":
        pytest.skip(f"the OpenCL device here is a {hw.device_type}: a GPU reports its L2 as its global cache")
    assert hw.last_level_cache_bytes >= hw.global_cache_bytes > 0
