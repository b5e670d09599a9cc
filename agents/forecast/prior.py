"""A zero-data forecaster: a roofline-style performance model of candidate and reference.

For each kernel the static estimate (:mod:`kernelcast.agents.forecast.work_estimate`)
gives flops and bytes; the device gives its peak compute (compute units x
clock x SIMD lanes x 2 for FMA) and its streaming bandwidth (measured once per
device by the triad probe, :mod:`kernelcast.agents.forecast.device_probe`; a CPU's lanes
are those its arithmetic fills, probed too). A kernel's
time is the largest of its compute, DRAM and cache times, softened by the
others, plus the overheads the launch geometry implies (work-groups, barriers,
work-items on a CPU) and, on a CPU, the stores that vector code scatters. A
CPU's costs of a work-group and of a scattered store are probed once with the
bandwidth (:func:`kernelcast.agents.forecast.device_probe.run_cost_probe`). The forecast
is the ratio of the reference's predicted time to the candidate's, as a
log-normal over the eight bins whose spread says how little a static model
knows: wider when the bandwidth was guessed or a trip count could not be read.

Used alone it needs no data at all, so the first forecast of the first run on
a new device is already informative; :mod:`kernelcast.agents.forecast.blend`
combines it with what is learned as measurements arrive.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kernelcast.agents.forecast.base import Forecast, Provenance
from kernelcast.agents.forecast.device_probe import Bandwidth, guessed_bandwidth
from kernelcast.agents.forecast.distributions import lognormal_bins
from kernelcast.agents.forecast.work_estimate import KernelWork, compulsory_bytes, estimate
from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.measurement import HardwareSpec
from kernelcast.tools.core.task import Task

BASE_SIGMA = 0.8  # natural-log spread of the ratio: a static model is right within a factor ~2 most of the time
UNPROBED_SIGMA = 0.2  # added when the bandwidth is a guess
UNCERTAIN_SIGMA = 0.15  # added when a trip count or the body could not be read
LLC_SPEEDUP = 3.0  # a CPU streams a warm last-level-cache working set this much faster than its DRAM triad
# (AMD EPYC, Intel's runtime, 2026-12-04: gemv's best point read its 8 MiB matrix at 204 GB/s, triad 53 GB/s)
SOFT = 0.25  # share of the non-dominant roofline terms that still costs time (nothing overlaps perfectly)
# Unprobed launch costs of a CPU, per compute unit: the launch-cost probe's readings on an AMD EPYC with
# Intel's runtime (2026-12-04: 55 ns per work-group, 3.7-4.2 ns per scattered store); PoCL on the same machine
# read 0 and 2.2 ns. One work-item of a CPU work-item loop: the stencil's reference (33.5 M work-items) ran in
# 10.9 ms there, which bounds it below 0.65 ns.
CPU_WORK_GROUP_S = 5.5e-8
CPU_SCATTERED_STORE_S = 4e-9
CPU_WORK_ITEM_S = 3e-10


@dataclass(frozen=True)
class DeviceModel:
    """The device numbers the roofline needs, from its spec and the measured bandwidth."""

    peak_flops: float
    bandwidth: float
    cache_bandwidth: float
    cache_bytes: float
    llc_bytes: float  # a working set this small stays warm between launches (the harness keeps it so)
    llc_bandwidth: float  # ... and streams at this rate instead of the DRAM triad's
    lanes: int  # the instruction set's float lanes (a CPU runtime vectorizes across this many work-items)
    simd_lanes: int  # float lanes the arithmetic fills per cycle (probed on a CPU; fewer where the hardware splits
    # wide instructions: Zen 4 runs AVX-512 as two 256-bit halves)
    compute_units: int
    cpu: bool
    probed: bool
    launch_s: float
    work_group_s: float  # scheduling one work-group
    barrier_s: float  # one barrier, per work-group
    work_item_s: float  # per work-item and compute unit (CPU work-item loops)
    scattered_store_s: float  # per store a CPU's vector code scatters, and compute unit
    global_atomic_s: float  # one global atomic update, serialized
    local_atomic_s: float

    @classmethod
    def of(cls, hw: HardwareSpec | None, bandwidth: Bandwidth | None = None) -> "DeviceModel":
        bw = bandwidth or guessed_bandwidth(hw)
        cpu = hw is None or not ("GPU" in hw.device_type.upper() or hw.backend == "cuda")
        units = max(1, hw.compute_units if hw else 2)
        clock = (hw.clock_mhz if hw and hw.clock_mhz else 2000) * 1e6
        lanes = max(1, (hw.native_vector_width_float or hw.preferred_vector_width_float) if hw else 4) if cpu else 64
        if cpu:
            lanes = max(lanes, 4)
        costs = bw.costs
        simd_lanes = min(costs.simd_lanes, lanes) if cpu and costs and costs.simd_lanes > 0 else lanes
        cache = float(hw.global_cache_bytes if hw and hw.global_cache_bytes else 8 * 2**20)
        llc = float(max(hw.last_level_cache_bytes, int(cache)) if hw else cache)
        return cls(peak_flops=units * clock * simd_lanes * 2.0, bandwidth=bw.bytes_per_s,
                   cache_bandwidth=bw.bytes_per_s * (6.0 if cpu else 3.0), cache_bytes=cache, llc_bytes=llc,
                   llc_bandwidth=bw.bytes_per_s * (LLC_SPEEDUP if cpu else 1.0), lanes=lanes, simd_lanes=simd_lanes,
                   compute_units=units, cpu=cpu, probed=bw.probed, launch_s=5e-6 if cpu else 3e-6,
                   work_group_s=(costs.work_group_s if costs else CPU_WORK_GROUP_S) if cpu else 5e-9,
                   barrier_s=3e-7 if cpu else 2e-8, work_item_s=CPU_WORK_ITEM_S if cpu else 0.0,
                   scattered_store_s=(costs.scattered_store_s if costs else CPU_SCATTERED_STORE_S) if cpu else 0.0,
                   global_atomic_s=8e-9 if cpu else 1e-9, local_atomic_s=2e-9 if cpu else 1e-10)


@dataclass(frozen=True)
class TimeEstimate:
    seconds: float
    bound: str  # compute | dram | cache | atomics | scatter | overhead
    uncertain: bool


def predicted_time(work: KernelWork, compulsory: float, dev: DeviceModel) -> TimeEstimate:
    """Seconds one launch takes under the model (see the module docstring)."""
    simd = cpu_simd_share(work, dev) if dev.cpu else 1.0
    occupancy = min(1.0, work.work_items * max(work.vector_width, 1) / (dev.compute_units * dev.lanes * 4.0))
    rate = dev.peak_flops * max(simd, 1.0 / dev.simd_lanes) * max(occupancy, 1e-3)
    compute = (work.flops + 8.0 * work.special_ops) / rate
    footprint = max(compulsory, 1.0)
    spill = 0.0 if footprint <= dev.cache_bytes / 2 else 0.25
    dram_bytes = max(compulsory, work.global_store_bytes) + spill * max(0.0, work.global_bytes - compulsory)
    dram = dram_bytes / (dev.llc_bandwidth if footprint <= dev.llc_bytes / 2 else dev.bandwidth)
    cache_bytes = (work.contiguous_bytes + 0.25 * work.uniform_bytes + 4.0 * work.strided_bytes
                   + 4.0 * work.local_accesses)
    cache = cache_bytes / (dev.cache_bandwidth * max(occupancy, 1e-3))
    groups = work.work_groups
    overhead = dev.launch_s + (groups * (dev.work_group_s + work.barriers * dev.barrier_s)
                               + work.work_items * dev.work_item_s * (1 + work.barriers)) / dev.compute_units
    atomics = (work.global_atomics * dev.global_atomic_s + work.local_atomics * dev.local_atomic_s) / dev.compute_units
    # stores of 4-byte elements (the probe's floats): a double's scatter is counted twice, a rough edge
    scattered = work.strided_store_bytes / 4.0 if dev.cpu and cpu_vectorizes_across(work, dev) else 0.0
    terms = {"compute": compute, "dram": dram, "cache": cache, "atomics": atomics,
             "scatter": scattered * dev.scattered_store_s / dev.compute_units}
    bound = max(terms, key=terms.__getitem__)
    main = terms[bound]
    seconds = overhead + main + SOFT * (sum(terms.values()) - main)
    if overhead > main:
        bound = "overhead"
    return TimeEstimate(seconds, bound, bool(work.uncertain))


def cpu_simd_share(work: KernelWork, dev: DeviceModel) -> float:
    """The share of a CPU core's SIMD lanes a kernel fills. A CPU OpenCL runtime vectorizes across work-items
    of dimension 0, which fills the lanes only when the code is scalar, that dimension of the work-group
    spans them and neighbouring work-items touch neighbouring addresses; otherwise (explicit vector types, a
    narrow work-group, or gathers across work-items) only the kernel's explicit vectors fill lanes. Measured
    on Intel's runtime (AMD EPYC, 16 lanes, softmax template, 2026-12-04): scalar code in 16-wide work-groups
    ran 6.7x the reference, the same code in 1- or 4-wide work-groups 0.8-0.9x; float2, float4 and float8
    code about 1.6x, 3.4x and 6x whatever the work-group; the reference, whose work-items each walk their
    own row, no faster than scalar code. So float8 filled what 16-wide vectors fill: the share counts the lanes
    the arithmetic fills (``simd_lanes``, probed: 8 there, where the instruction set has 16), not the
    instruction set's."""
    return 1.0 if cpu_vectorizes_across(work, dev) else min(1.0, max(work.vector_width, 1) / dev.simd_lanes)


def cpu_vectorizes_across(work: KernelWork, dev: DeviceModel) -> bool:
    """Whether a CPU runtime runs the kernel as vector code across work-items (:func:`cpu_simd_share`). Its
    stores to addresses far from the neighbouring work-item's are then scatters, each costing about a cache
    miss: on Intel's runtime (AMD EPYC, 2026-12-04) transposes whose 16-wide work-groups scatter their stores
    ran 1.1-1.6x the reference, the same code in 8-wide work-groups (scalar) 3.8-5.2x."""
    wgx = work.work_group_x or 16  # the runtime's choice for an unconstrained work-group
    gathers = work.strided_bytes > work.contiguous_bytes  # broadcasts (uniform bytes) vectorize either way
    return work.vector_width <= 1 and wgx >= dev.lanes and not gathers


class RooflinePrior:
    """Forecasts from the performance model alone: informative with zero measurements."""

    name = "roofline"

    def __init__(self, bandwidth: Bandwidth | None = None, sigma: float = BASE_SIGMA) -> None:
        self.bandwidth = bandwidth
        self.sigma = sigma

    @property
    def model_name(self) -> str:
        bw = self.bandwidth
        where = (f"{bw.bytes_per_s / 1e9:.1f} GB/s {'measured' if bw.probed else 'guessed'}" if bw
                 else "bandwidth guessed")
        return f"roofline prior ({where}, sigma {self.sigma:.2f})"

    def log_speedups(self, task: Task, candidates: Sequence[Candidate], hardware: HardwareSpec | None
                     ) -> tuple[np.ndarray, np.ndarray]:
        """Predicted ln(T_ref / T_cand) and its spread for each candidate."""
        dev = DeviceModel.of(hardware, self.bandwidth)
        sizes = task.sizes("full")
        compulsory = compulsory_bytes(task, sizes)
        ref = predicted_time(estimate(task, task.reference(), sizes), compulsory, dev)
        mu, sigma = np.zeros(len(candidates)), np.zeros(len(candidates))
        extra = 0.0 if dev.probed else UNPROBED_SIGMA
        for i, cand in enumerate(candidates):
            t = predicted_time(estimate(task, cand, sizes), compulsory, dev)
            mu[i] = math.log(ref.seconds / t.seconds) if t.seconds > 0 and ref.seconds > 0 else 0.0
            sigma[i] = math.hypot(self.sigma, extra, UNCERTAIN_SIGMA if (t.uncertain or ref.uncertain) else 0.0)
        return mu, sigma

    def forecast(self, task: Task, candidate: Candidate, hardware: HardwareSpec) -> Forecast:
        return self.forecast_many(task, [candidate], hardware)[0]

    def forecast_many(self, task: Task, candidates: Sequence[Candidate], hardware: HardwareSpec) -> list[Forecast]:
        if not candidates:
            return []
        start = time.perf_counter()
        try:
            mu, sigma = self.log_speedups(task, candidates, hardware)
        except Exception as exc:  # noqa: BLE001 - a model failure defers, never crashes a search
            return [Forecast.uninformative(f"internal: {type(exc).__name__}: {exc}", forecaster=self.name,
                                           mode="prior").for_candidate(task, c) for c in candidates]
        probs = lognormal_bins(mu, sigma)
        prov = Provenance(forecaster=self.name, model=self.model_name, mode="prior",
                          latency_s=(time.perf_counter() - start) / len(candidates))
        return [Forecast.from_probabilities(p, prov, reasoning=f"roofline: ln speedup {m:+.2f} +- {s:.2f}",
                                            task=task.name, candidate_hash=c.hash)
                for p, m, s, c in zip(probs, mu, sigma, candidates, strict=True)]


__all__ = ["DeviceModel", "RooflinePrior", "TimeEstimate", "cpu_simd_share", "cpu_vectorizes_across", "predicted_time"]
