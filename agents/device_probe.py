"""The device's memory bandwidth, measured once by a triad probe and kept in the store.

The roofline prior compares a kernel's traffic with what the device can move.
A spec sheet does not say that (and CPU runtimes report nothing useful), so
the first forecast on a new device runs one small streaming kernel through the
ordinary measurement harness: the ``saxpy`` task (``y = a*x + y``, 12 bytes per
element) at full size, as its float4 template point, and divides the bytes it
must move by the faster of the two timed kernels. The result is stored per
device key (``Store.set_device_probe``), so every later run reuses it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from kernelcast.agents.work_estimate import compulsory_bytes
from kernelcast.tools.candidate import Candidate
from kernelcast.tools.measurement import HardwareSpec, Measurement, MeasureConfig
from kernelcast.tools.task import Task, TaskError, resolve_task

if TYPE_CHECKING:
    from kernelcast.tools.store import Store

PROBE = "triad_bandwidth_bps"
PROBE_TASKS = {"opencl": ("saxpy", {"VEC": 4, "COARSEN": 1, "WG": 256}), "cuda": ("reduce_rows_cuda", None)}
PROBE_CONFIG = MeasureConfig(sizes="full", seeds=[0], warmup=2, min_reps=5, max_reps=30, target_seconds=0.15,
                             remeasure=False, timeout_s=60.0)


class Measures(Protocol):
    """What the probe needs of a :class:`kernelcast.tools.worker.MeasurementWorker`."""

    def measure(self, task: Task, candidate: Candidate, config: MeasureConfig | None = None) -> Measurement: ...

    def hardware_spec(self) -> HardwareSpec: ...


@dataclass(frozen=True)
class Bandwidth:
    """Bytes per second the device streams, and where the number came from."""

    bytes_per_s: float
    source: str  # "probe" (measured now or stored) or "guess" (from the device type)

    @property
    def probed(self) -> bool:
        return self.source == "probe"


def guessed_bandwidth(hw: HardwareSpec | None) -> Bandwidth:
    """A cautious order of magnitude when nothing was measured (the prior widens its spread then)."""
    if hw is None:
        return Bandwidth(20e9, "guess")
    if "GPU" in hw.device_type.upper() or hw.backend == "cuda":
        return Bandwidth(300e9, "guess")
    return Bandwidth(8e9 * max(1, hw.compute_units) ** 0.5, "guess")


def bandwidth_from(measurement: Measurement, task: Task) -> float | None:
    """Compulsory bytes of the task over the faster of the reference's and candidate's median times."""
    times = [t.median_ns for t in (measurement.reference, measurement.candidate) if t is not None and t.median_ns > 0]
    if not measurement.ok or not times:
        return None
    return compulsory_bytes(task, task.sizes("full")) / (min(times) * 1e-9)


def run_probe(worker: Measures) -> float | None:
    """Measure the triad on the worker's device; None if the probe kernel cannot run there."""
    hw = worker.hardware_spec()
    name, params = PROBE_TASKS.get(hw.backend, PROBE_TASKS["opencl"])
    try:
        task = resolve_task(name)
        candidate = task.instantiate(params) if params and task.is_valid_point(params) else task.reference()
    except TaskError:
        return None
    return bandwidth_from(worker.measure(task, candidate, PROBE_CONFIG), task)


def device_bandwidth(store: "Store | None", hw: HardwareSpec | None, worker: Measures | None = None) -> Bandwidth:
    """The stored probe for this device; else probe now (when a worker is given) and store it; else a guess."""
    if hw is None:
        return guessed_bandwidth(None)
    if store is not None:
        stored = store.device_probe(hw.key, PROBE)
        if stored:
            return Bandwidth(stored, "probe")
    if worker is not None:
        measured = run_probe(worker)
        if measured:
            if store is not None:
                store.set_device_probe(hw.key, PROBE, measured, {"task": PROBE_TASKS.get(hw.backend, ("saxpy",))[0]})
            return Bandwidth(measured, "probe")
    return guessed_bandwidth(hw)


__all__ = ["Bandwidth", "PROBE", "bandwidth_from", "device_bandwidth", "guessed_bandwidth", "run_probe"]
