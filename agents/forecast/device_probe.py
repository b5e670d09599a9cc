"""The device's memory bandwidth and launch costs, measured once by probes and kept in the store.

The roofline prior compares a kernel's traffic with what the device can move.
A spec sheet does not say that (and CPU runtimes report nothing useful), so
the first forecast on a new device runs one small streaming kernel through the
ordinary measurement harness: the ``saxpy`` task (``y = a*x + y``, 12 bytes per
element) at full size, as its float4 template point, and divides the bytes it
must move by the faster of the two timed kernels. Two more measurements of a
probe kernel (``data/probes/launch_costs``: a transpose in its gathering and
scattering forms) give what a launch costs beyond its traffic: the time of one
work-group, and of one store that lands far from its neighbouring work-item's.
A third (``data/probes/simd_width``: chains of multiply-adds as the runtime's own
vectors across work-items and as explicit float4 and float8) gives how many
float lanes a compute unit's arithmetic fills (the narrowest width whose doubling
gains less than √2), which the instruction set does not say: an AMD EPYC (Zen 4) reports 16 (AVX-512) but runs float8 code as fast
as 16-wide vectors. The costs vary widely between CPU runtimes (a guessed 0.4 us
per work-group against 55 ns measured on an AMD EPYC with Intel's runtime, where
PoCL read about 0),
and they decide the ranking of tiled kernels on a CPU (a GPU's are not probed:
the prior does not use them there). The results are stored per device key
(``store.devices.set_probe``), so every later run reuses them.

A fourth probe (``data/probes/compute_peak``: sixteen independent multiply-add chains per work-item) measures the
device's compute roof, as the triad measures its bandwidth. Only the roofline verdict reads it
(:mod:`kernelcast.graphs.search.roofline`); the prior keeps its modelled peak (units x clock x SIMD lanes x 2),
so forecasts and routing do not depend on it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from kernelcast.agents import DATA_DIR
from kernelcast.agents.forecast.work_estimate import compulsory_bytes
from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.expr import evaluate
from kernelcast.tools.core.measurement import HardwareSpec, MeasureConfig, Measurement
from kernelcast.tools.core.task import Task, TaskError, resolve_task

if TYPE_CHECKING:
    from kernelcast.tools.store.store import Store

PROBE = "triad_bandwidth_bps"
WORK_GROUP_PROBE = "work_group_s"  # seconds one work-group costs a compute unit beyond its work
SCATTER_PROBE = "scattered_store_s"  # seconds one scattered store costs a compute unit (CPU vector code)
SIMD_PROBE = "simd_lanes"  # float lanes a compute unit's arithmetic fills (0: the probe could not tell)
COMPUTE_PROBE = "compute_flops_per_s"  # the device's measured multiply-add throughput (the roofline's compute roof)
COSTS_TASK = DATA_DIR / "probes" / "launch_costs" / "task.toml"
SIMD_TASK = DATA_DIR / "probes" / "simd_width" / "task.toml"
COMPUTE_TASK = DATA_DIR / "probes" / "compute_peak" / "task.toml"
# a doubling of the vector width that gains less than this (the geometric middle between no gain and twice) finds
# the lanes already filled. Until 2026-12-06 the rule was "the narrowest explicit vector within 0.85 of the runtime's
# own vectors' rate": on a 2-core Intel Xeon (AVX-512) float8 ran at 0.83-0.88 of the 16-wide vectors, so fresh
# stores read 8 lanes or none (the instruction set's 16), and the modelled compute roof moved between 64 and 128
# GFLOP/s from one run to the next. There the doublings gain 1.92-2.03 (float4 to float8) and 1.14-1.20 (float8 to
# the runtime's own): both far from the middle.
DOUBLING_GAIN = math.sqrt(2.0)
VECTORIZED = 2.0  # the runtime's own vectors beat scalar code by this much, or it did not vectorize across
PROBE_TASKS = {"opencl": ("saxpy", {"VEC": 4, "COARSEN": 1, "WG": 256}), "cuda": ("reduce_rows_cuda", None)}
PROBE_CONFIG = MeasureConfig(sizes="full", seeds=[0], warmup=2, min_reps=5, max_reps=30, target_seconds=0.15,
                             remeasure=False, timeout_s=60.0)


class Measures(Protocol):
    """What the probe needs of a :class:`kernelcast.tools.hardware.worker.MeasurementWorker`."""

    def measure(self, task: Task, candidate: Candidate, config: MeasureConfig | None = None) -> Measurement: ...

    def hardware_spec(self) -> HardwareSpec: ...


@dataclass(frozen=True)
class CpuCosts:
    """What a CPU's launches cost beyond their traffic, per compute unit, and how wide its arithmetic is, as the
    probes measured them."""

    work_group_s: float  # one work-group's scheduling
    scattered_store_s: float  # one store S elements from its neighbouring work-item's, in vectorized code
    simd_lanes: int = 0  # float lanes the arithmetic fills (0: not read; the model takes the instruction set's)


@dataclass(frozen=True)
class Bandwidth:
    """Bytes per second the device streams, and where the number came from; with the launch costs when they
    were probed (None: the roofline prior's defaults)."""

    bytes_per_s: float
    source: str  # "probe" (measured now or stored) or "guess" (from the device type)
    costs: CpuCosts | None = None

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


def run_cost_probe(worker: Measures, bytes_per_s: float) -> CpuCosts | None:
    """Measure the launch costs on the worker's device; None where the roofline prior does not use them (a GPU,
    CUDA) or the probe cannot run.

    The reference runs 16-item work-groups; the point in 256-item groups differs only in their count, so the
    time it saves, per work-group saved, is one work-group's cost. The scattering point moves the same bytes;
    its time beyond streaming them at ``bytes_per_s``, per store, is one scattered store's cost."""
    hw = worker.hardware_spec()
    if hw.backend != "opencl" or "GPU" in hw.device_type.upper():
        return None
    try:
        task = resolve_task(COSTS_TASK)
        fewer_groups, scattering = (task.instantiate({"WG": 256, "SCATTER": s}) for s in (0, 1))
    except TaskError:
        return None
    sizes = task.sizes("full")
    items = float(sizes["S"]) ** 2
    units = max(1, hw.compute_units)
    fewer = worker.measure(task, fewer_groups, PROBE_CONFIG)
    scatter = worker.measure(task, scattering, PROBE_CONFIG)
    if not (fewer.ok and scatter.ok and fewer.reference and fewer.candidate and scatter.candidate):
        return None
    saved_s = (fewer.reference.median_ns - fewer.candidate.median_ns) * 1e-9
    beyond_s = scatter.candidate.median_ns * 1e-9 - compulsory_bytes(task, sizes) / bytes_per_s
    return CpuCosts(work_group_s=max(saved_s, 0.0) * units / (items / 16 - items / 256),
                    scattered_store_s=max(beyond_s, 0.0) * units / items, simd_lanes=run_simd_probe(worker))


def run_simd_probe(worker: Measures) -> int:
    """How many float lanes the worker's CPU fills with vector arithmetic; 0 when the probe cannot tell.

    Three rates against the same scalar code: the runtime's own vectors across a 16-item work-group, and explicit
    float4 and float8 in one-item groups (:func:`filled_lanes` reads them). A runtime that does not vectorize
    across work-items (PoCL here ran that point no faster than scalar code) gives no reading."""
    try:
        task = resolve_task(SIMD_TASK)
        points = {vec: task.instantiate({"VEC": vec, "WG": 16 if vec == 1 else 1}) for vec in (1, 4, 8)}
    except TaskError:
        return 0
    own = worker.measure(task, points[1], PROBE_CONFIG).speedup  # against the same scalar code, unvectorized
    if not own or own < VECTORIZED:
        return 0
    float4, float8 = ((worker.measure(task, points[vec], PROBE_CONFIG).speedup or 0.0) for vec in (4, 8))
    return filled_lanes(own, float4, float8)


def filled_lanes(own: float, float4: float, float8: float) -> int:
    """The lanes filled, from the rates of the runtime's own vectors and of explicit float4 and float8 code: 4
    when float8 gains less than :data:`DOUBLING_GAIN` over float4, else 8 when the runtime's own (wider) vectors
    gain less than that over float8, else 0 (wider than 8: the instruction set's width stands). An AMD EPYC
    (Zen 4) runs float8 as fast as its 16-wide vectors: 8."""
    if float8 < DOUBLING_GAIN * float4:
        return 4
    if own < DOUBLING_GAIN * float8:
        return 8
    return 0


def run_compute_probe(worker: Measures) -> float | None:
    """FLOP/s of independent multiply-adds on the worker's device (its compute roof); None where the probe cannot
    run (CUDA, or the kernel fails). The reference is timed against itself: the faster timing counts."""
    if worker.hardware_spec().backend != "opencl":
        return None
    try:
        task = resolve_task(COMPUTE_TASK)
    except TaskError:
        return None
    m = worker.measure(task, task.reference(), PROBE_CONFIG)
    times = [t.median_ns for t in (m.reference, m.candidate) if t is not None and t.median_ns > 0]
    if not m.ok or not times or not task.spec.flops:
        return None
    return float(evaluate(task.spec.flops, dict(task.sizes("full")))) / (min(times) * 1e-9)


def stored_compute_peak(store: "Store", hw: HardwareSpec) -> float | None:
    """The device's measured compute roof in FLOP/s (None: not probed, or the device had none to give)."""
    value = stored_probe(store, hw, COMPUTE_PROBE)
    return value if value is not None and value > 0 else None


def ensure_compute_peak(store: "Store | None", hw: HardwareSpec, worker: Measures | None) -> None:
    """Probe the compute roof once per device and keep it (or that the device has none to give): only where a
    real worker is at hand (never a replay's, whose answers are stored rows) and the store can be written."""
    if worker is None or getattr(worker, "simulated", False) or store is None or store.read_only:
        return
    if stored_probe(store, hw, COMPUTE_PROBE) is not None:
        return
    measured = run_compute_probe(worker)
    store.devices.set_probe(hw.key, COMPUTE_PROBE, measured if measured else UNAVAILABLE,
                            {"task": COMPUTE_TASK.parent.name})


UNAVAILABLE = -1.0  # stored in place of launch costs the device cannot give, so no run asks again


def store_probes(store: "Store", hw: HardwareSpec, bandwidth: Bandwidth, detail: dict[str, str]) -> None:
    """Keep a device's probe results (``detail``: where the triad came from) for every later run."""
    store.devices.set_probe(hw.key, PROBE, bandwidth.bytes_per_s, detail)
    store_costs(store, hw, bandwidth.costs)


def store_costs(store: "Store", hw: HardwareSpec, costs: CpuCosts | None) -> None:
    """Keep the launch costs, or that the device has none to give (:data:`UNAVAILABLE`)."""
    detail = {"task": COSTS_TASK.parent.name}
    store.devices.set_probe(hw.key, WORK_GROUP_PROBE, costs.work_group_s if costs else UNAVAILABLE, detail)
    store.devices.set_probe(hw.key, SCATTER_PROBE, costs.scattered_store_s if costs else UNAVAILABLE, detail)
    store.devices.set_probe(hw.key, SIMD_PROBE, costs.simd_lanes if costs else UNAVAILABLE,
                            {"task": SIMD_TASK.parent.name})


def stored_probe(store: "Store", hw: HardwareSpec, name: str) -> float | None:
    """A stored probe's value when it is one the probe can have produced (a positive triad; a cost or a lane count
    of zero or more, or :data:`UNAVAILABLE`), else None: a row that is missing, damaged or edited out of range is
    probed again and overwritten, never trusted."""
    value = store.devices.probe(hw.key, name)
    if value is None:
        return None
    if name == PROBE:
        return value if value > 0 else None
    if name == COMPUTE_PROBE:
        return value if value > 0 or value == UNAVAILABLE else None
    if value == UNAVAILABLE or (value >= 0 and (name != SIMD_PROBE or value.is_integer())):
        return value
    return None


def stored_bandwidth(store: "Store", hw: HardwareSpec) -> tuple[Bandwidth, bool] | None:
    """The probes a store holds for this device, and whether the launch costs were tried (their costs are None
    when they were not, or the device had none to give)."""
    stored = stored_probe(store, hw, PROBE)
    if stored is None:
        return None
    group, scatter, lanes = (stored_probe(store, hw, key) for key in (WORK_GROUP_PROBE, SCATTER_PROBE, SIMD_PROBE))
    if group is None or scatter is None or lanes is None:  # lanes: a store from before the SIMD probe
        return Bandwidth(stored, "probe"), False
    costs = CpuCosts(group, scatter, int(lanes)) if min(group, scatter) >= 0 else None
    return Bandwidth(stored, "probe", costs), True


def device_bandwidth(store: "Store | None", hw: HardwareSpec | None, worker: Measures | None = None) -> Bandwidth:
    """The stored probes for this device; else probe now (when a worker is given) and store them; else a guess.
    A store that has the triad from before the launch-cost or SIMD probe existed gets the CPU's costs probed
    now."""
    if hw is None:
        return guessed_bandwidth(None)
    ensure_compute_peak(store, hw, worker)  # for the roofline verdict only: nothing below reads it
    stored = stored_bandwidth(store, hw) if store is not None else None
    if stored is not None and (stored[1] or worker is None):
        return stored[0]
    measured = stored[0].bytes_per_s if stored is not None else run_probe(worker) if worker is not None else None
    if not measured or worker is None:
        return guessed_bandwidth(hw)
    probed = Bandwidth(measured, "probe", run_cost_probe(worker, measured))
    if store is not None and not store.read_only:
        if stored is not None:  # the stored triad stays as it was measured
            store_costs(store, hw, probed.costs)
        else:
            store_probes(store, hw, probed, {"task": PROBE_TASKS.get(hw.backend, ("saxpy",))[0]})
    return probed


__all__ = ["Bandwidth", "COMPUTE_PROBE", "CpuCosts", "PROBE", "SCATTER_PROBE", "SIMD_PROBE", "UNAVAILABLE", "WORK_GROUP_PROBE",
           "bandwidth_from", "device_bandwidth", "filled_lanes", "guessed_bandwidth", "run_cost_probe", "run_probe",
           "run_compute_probe", "run_simd_probe", "store_costs", "store_probes", "stored_bandwidth", "stored_compute_peak",
           "stored_probe", "ensure_compute_peak"]
