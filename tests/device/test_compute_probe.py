"""The compute roof measured by a probe of independent multiply-adds (issue 64 item 6), once per device, for the
roofline verdict only: the forecaster's prior reads the same bandwidth and costs with or without it."""

from __future__ import annotations

from pathlib import Path

from kernelcast.agents.forecast.device_probe import (
    COMPUTE_PROBE,
    device_bandwidth,
    ensure_compute_peak,
    run_compute_probe,
    stored_compute_peak,
)
from kernelcast.agents.forecast.prior import DeviceModel
from kernelcast.graphs.search.roofline import device_peaks
from kernelcast.tools.hardware.worker import MeasurementWorker
from kernelcast.tools.store.store import Store


class Counting:
    def __init__(self, worker: MeasurementWorker, simulated: bool = False) -> None:
        self.worker, self.measured, self.simulated = worker, 0, simulated

    def measure(self, task, candidate, config=None):  # noqa: ANN001, ANN201 - MeasurementWorker.measure's
        self.measured += 1
        return self.worker.measure(task, candidate, config)

    def hardware_spec(self):  # noqa: ANN201
        return self.worker.hardware_spec()


def test_the_compute_roof_is_measured_once_and_only_the_verdict_reads_it(tmp_path: Path,
                                                                         worker: MeasurementWorker) -> None:
    hw = worker.hardware_spec()
    rate = run_compute_probe(worker)
    assert rate is not None and 1e8 < rate < 1e16, rate
    store = Store(tmp_path / "k.db")
    store.devices.upsert(hw)
    replay = Counting(worker, simulated=True)
    ensure_compute_peak(store, hw, replay)
    assert replay.measured == 0 and store.devices.probe(hw.key, COMPUTE_PROBE) is None, "a replay measures nothing"
    before = DeviceModel.of(hw, device_bandwidth(store, hw))
    counting = Counting(worker)
    ensure_compute_peak(store, hw, counting)
    ensure_compute_peak(store, hw, counting)
    assert counting.measured == 1 and stored_compute_peak(store, hw) is not None
    peaks = device_peaks(store, hw, 1e9)
    assert peaks.compute_probed and peaks.gflops == stored_compute_peak(store, hw) / 1e9  # type: ignore[operator]
    assert DeviceModel.of(hw, device_bandwidth(store, hw)) == before, "the prior's model does not read it"
