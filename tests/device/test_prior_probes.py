"""The device probes the prior reads (triad bandwidth, launch costs, SIMD width, caches), measured once and stored,
and the prior's forecasts on the real OpenCL device (issue 13, item 1); the work estimates are tests/unit/test_prior.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelcast.agents.forecast.blend import BlendedForecaster
from kernelcast.agents.forecast.device_probe import (
    PROBE,
    SCATTER_PROBE,
    SIMD_PROBE,
    WORK_GROUP_PROBE,
    device_bandwidth,
    guessed_bandwidth,
    run_simd_probe,
)
from kernelcast.agents.forecast.prior import RooflinePrior
from kernelcast.tools.core.measurement import HardwareSpec
from kernelcast.tools.core.task import resolve_task
from kernelcast.tools.hardware.worker import MeasurementWorker
from kernelcast.tools.store.store import Store


def test_triad_probe_is_measured_once_and_stored(tmp_path: Path, worker: MeasurementWorker) -> None:
    store = Store(tmp_path / "k.db")
    hw = worker.hardware_spec()
    assert not device_bandwidth(store, hw).probed  # nothing stored, no worker: a guess
    first = device_bandwidth(store, hw, worker)
    assert first.probed and 1e8 < first.bytes_per_s < 1e13
    assert store.devices.probe(hw.key, PROBE) == pytest.approx(first.bytes_per_s)
    again = device_bandwidth(Store(tmp_path / "k.db"), hw)  # a new process reads it back without measuring
    assert again.probed and again.bytes_per_s == pytest.approx(first.bytes_per_s)
    if hw.device_type != "CPU":  # a GPU's launch costs are not probed: the prior does not use them there
        assert first.costs is None and again.costs is None
        return
    # on a CPU the launch costs come with it, and a new process reads them back
    assert first.costs is not None and min(first.costs.work_group_s, first.costs.scattered_store_s) >= 0
    assert again.costs is not None and again.costs.work_group_s == pytest.approx(first.costs.work_group_s)
    assert again.costs.scattered_store_s == pytest.approx(first.costs.scattered_store_s)
    assert store.devices.probe(hw.key, SCATTER_PROBE) == pytest.approx(first.costs.scattered_store_s)


class CountingWorker:
    """The module's worker, counting the measurements asked of it."""

    def __init__(self, worker: MeasurementWorker) -> None:
        self.worker, self.measured = worker, 0

    def measure(self, task, candidate, config=None):  # noqa: ANN001, ANN201 - MeasurementWorker.measure's
        self.measured += 1
        return self.worker.measure(task, candidate, config)

    def hardware_spec(self) -> HardwareSpec:
        return self.worker.hardware_spec()


@pytest.mark.parametrize("held", [(PROBE,), (PROBE, WORK_GROUP_PROBE, SCATTER_PROBE)],
                         ids=["triad alone", "triad and launch costs, no SIMD width"])
def test_a_store_from_before_gets_the_cpu_costs_probed_once(tmp_path: Path, worker: MeasurementWorker,
                                                            held: tuple[str, ...]) -> None:
    # stores from before the launch-cost (or the SIMD) probe hold part of the probes: the triad is kept, the CPU's
    # costs are tried once (and remembered when the device has none to give, so no later run measures again)
    store = Store(tmp_path / "k.db")
    hw = worker.hardware_spec()
    old = {PROBE: 12.5e9, WORK_GROUP_PROBE: 1e-7, SCATTER_PROBE: 1e-9}
    for key in held:  # as a store from before
        store.devices.set_probe(hw.key, key, old[key], {"task": "saxpy"})
    assert device_bandwidth(store, hw).costs is None  # no worker: the triad alone, the model's defaults
    counting = CountingWorker(worker)
    probed = device_bandwidth(store, hw, counting)
    # a CPU: the compute roof (for the roofline verdict), two launch-cost measurements, the runtime's own vectors,
    # then float4 and float8 (not where the runtime did not vectorize); a GPU: the compute roof
    first = counting.measured
    assert probed.bytes_per_s == 12.5e9 and first in ((4, 6) if hw.device_type == "CPU" else (1,))
    assert store.devices.probe(hw.key, WORK_GROUP_PROBE) is not None  # measured, or marked unavailable
    assert store.devices.probe(hw.key, SIMD_PROBE) is not None
    again = device_bandwidth(store, hw, counting)
    assert counting.measured == first  # not asked again
    assert (again.costs is None) == (probed.costs is None)
    if again.costs is not None:
        assert again.costs.simd_lanes == probed.costs.simd_lanes


def test_the_simd_probe_reads_lanes_the_instruction_set_allows(worker: MeasurementWorker) -> None:
    # the reading is 0 (no reading) or the narrowest vector width whose doubling gains less than root 2; it
    # never exceeds the instruction set's width (a device reporting 4 lanes cannot fill 8)
    hw = worker.hardware_spec()
    if hw.device_type != "CPU":
        pytest.skip(f"the SIMD probe is for CPUs; the first OpenCL device here is a {hw.device_type}")
    lanes = run_simd_probe(worker)
    assert lanes in (0, 4, 8)
    assert lanes <= max(4, hw.native_vector_width_float or hw.preferred_vector_width_float)


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


def test_a_cpu_device_reports_its_last_level_cache(worker: MeasurementWorker) -> None:
    hw = worker.hardware_spec()
    if hw.device_type != "CPU":
        pytest.skip(f"the OpenCL device here is a {hw.device_type}: a GPU reports its L2 as its global cache")
    assert hw.last_level_cache_bytes >= hw.global_cache_bytes > 0
