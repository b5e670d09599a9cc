"""A stable roofline verdict (issue 64 item 6): judged against the memory level that holds the working set, named
in the verdict, and against the measured compute roof when the device has one (the compute probe); throughput and
verdict say where the work came from in the same words (issue 64 item 9)."""

from __future__ import annotations

from pathlib import Path

from kernelcast.agents.forecast.device_probe import COMPUTE_PROBE, PROBE, UNAVAILABLE, stored_compute_peak
from kernelcast.agents.forecast.prior import DeviceModel
from kernelcast.graphs.search.roofline import Work, device_peaks, roofline_verdict, throughput
from kernelcast.tools.core.measurement import HardwareSpec, Measurement, Status, TimingStats
from kernelcast.tools.core.task import builtin_task_paths, load_task
from kernelcast.tools.store.store import Store

# the 2-core EPYC of the issue: 2 units at 2 GHz, 16 float lanes (a modelled 64 GFLOP/s at 8 filled lanes is
# reported as 128 here: the point is the measured roof replaces it), 32 MiB last-level cache
EPYC = HardwareSpec(backend="opencl", platform="Intel(R) OpenCL", name="AMD EPYC", device_type="CPU",
                    compute_units=2, clock_mhz=2000, global_cache_bytes=1 << 20, last_level_cache_bytes=32 << 20,
                    native_vector_width_float=8, preferred_vector_width_float=8)
TRIAD = 66.9e9
MEASURED_ROOF = 160e9


def store_with(tmp_path: Path, compute: float | None) -> Store:
    store = Store(tmp_path / "k.db")
    store.devices.upsert(EPYC)
    store.devices.set_probe(EPYC.key, PROBE, TRIAD, {"task": "saxpy"})
    if compute is not None:
        store.devices.set_probe(EPYC.key, COMPUTE_PROBE, compute, {"task": "compute_peak"})
    return store


def moving_average(working_set: float) -> Work:
    """1.12 FLOP per compulsory byte, as the issue's 7-point moving average."""
    return Work(flops=1.12 * working_set, bytes=working_set, flops_from="task", bytes_from="task")


def test_the_verdict_judges_against_the_level_that_holds_the_working_set_and_names_it(tmp_path: Path) -> None:
    """The issue's moving average (1.12 FLOP/byte) flipped between sizes with no word of why. Each size is judged
    against the level its working set lives in, the ridge is that level's, and the verdict says which."""
    store = store_with(tmp_path, MEASURED_ROOF)
    bounds = {}
    for working_set, level in ((4 << 20, "last-level cache"), (256 << 20, "DRAM")):
        peaks = device_peaks(store, EPYC, working_set)
        assert peaks.level == level and peaks.compute_probed and peaks.gflops == MEASURED_ROOF / 1e9
        work = moving_average(working_set)
        seconds = working_set / (0.5 * peaks.gbytes * 1e9)
        verdict = roofline_verdict(work, "small", reference_s=seconds, best_s=None, peaks=peaks)
        bounds[level] = verdict.bound
        ridge = peaks.gflops / peaks.gbytes
        assert verdict.bound == ("compute" if 1.12 >= ridge else "memory")
        assert f"ridge {ridge:.2f} against the {level} bandwidth" in verdict.text
        assert ("fits the 32.0 MiB last-level cache" if level != "DRAM" else "exceeds the last-level cache: DRAM") \
            in verdict.text
        again = roofline_verdict(work, "small", reference_s=seconds, best_s=None,
                                 peaks=device_peaks(store, EPYC, working_set))
        assert again.text == verdict.text, "the same size reads the same verdict from the stored probes"
    assert bounds == {"last-level cache": "compute", "DRAM": "memory"}


def test_without_a_compute_probe_the_roof_is_the_model(tmp_path: Path) -> None:
    modelled = device_peaks(store_with(tmp_path, None), EPYC, 4 << 20)
    assert not modelled.compute_probed and modelled.gflops == DeviceModel.of(EPYC).peak_flops / 1e9
    assert "no compute probe yet" in modelled.compute_name


def test_a_measured_compute_roof_reads_room_like_a_bandwidth(tmp_path: Path) -> None:
    peaks = device_peaks(store_with(tmp_path, MEASURED_ROOF), EPYC, 256 << 20)
    gemm = Work(flops=2 * 384.0**3, bytes=3 * 4 * 384.0**2, flops_from="task", bytes_from="task")
    verdict = roofline_verdict(gemm, "full", reference_s=gemm.flops / 32e9, best_s=None, peaks=peaks)  # type: ignore
    assert verdict.bound == "compute" and "measured compute roof (160 GFLOP/s" in verdict.text
    assert "reference at 20 % of the measured compute roof" in verdict.text and "much room left" in verdict.text


def test_a_device_without_a_compute_probe_is_modelled_and_an_unavailable_one_is_remembered(tmp_path: Path) -> None:
    store = store_with(tmp_path, UNAVAILABLE)
    assert stored_compute_peak(store, EPYC) is None
    peaks = device_peaks(store, EPYC, 256 << 20)
    assert not peaks.compute_probed and "modelled" in peaks.text()


def test_throughput_and_verdict_say_where_the_work_came_from_in_the_same_words(tmp_path: Path) -> None:
    task = load_task(builtin_task_paths()["saxpy"])
    store = store_with(tmp_path, MEASURED_ROOF)
    m = Measurement(task="saxpy", candidate_hash="c", device=EPYC.key, status=Status.correct, sizes="small",
                    reference=TimingStats.from_samples([2e4] * 5), candidate=TimingStats.from_samples([1e4] * 5),
                    speedup=2.0)
    rate = throughput(task, m, EPYC, store)
    assert rate is not None and rate.work == "work from the task file" and "work from the task file" in rate.text()
    assert "from the static estimate" not in rate.text()
