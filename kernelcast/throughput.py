"""Throughput next to speedup: GFLOP/s and GB/s of a measurement against the device's peaks.

The work is the task's: its ``flops`` / ``bytes`` expressions when the task file gives them, else the static
estimate of the reference kernel (:mod:`kernelcast.agents.forecast.work_estimate`: the useful work, which a candidate that
recomputes does not inflate) and the compulsory bytes. The peaks are the roofline prior's
(:class:`kernelcast.agents.forecast.prior.DeviceModel`): compute from the device spec and the probed SIMD width,
bandwidth from the stored triad probe (a guess by device type until it ran, and said so). "Implausible" is said
only against these peaks, never against a fixed speedup ratio: a 30x speedup over a naive reference is
ordinary, 3x the device's bandwidth is not.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from kernelcast.tools.core.measurement import HardwareSpec, Measurement
from kernelcast.tools.core.task import Task
from kernelcast.tools.store.records import RunRecord
from kernelcast.tools.store.store import Store

IMPLAUSIBLE = 2.0  # beyond this multiple of a roofline peak a timing is not believed (the peaks are estimates)


class Peaks(BaseModel):
    """The roofline's ceilings of one device for one working set."""

    gflops: float = Field(description="peak GFLOP/s: compute units x clock x SIMD lanes x 2 (FMA)")
    gbytes: float = Field(description="GB/s the working set streams at: DRAM triad, or the cache's rate when it fits")
    level: str = Field(description="which bandwidth: 'DRAM', 'last-level cache' or 'cache'")
    probed: bool = Field(description="the bandwidth was measured (triad probe); False: a guess by device type")

    def text(self) -> str:
        source = "probed" if self.probed else "guessed, not probed yet"
        return f"peaks {self.gflops:,.0f} GFLOP/s, {self.gbytes:,.1f} GB/s ({self.level}, {source})"


class Throughput(BaseModel):
    """What one correct measurement achieved, against the device's peaks."""

    gflops: float | None = Field(description="useful GFLOP/s of the candidate (None: the work has no flops)")
    gbytes: float = Field(description="compulsory GB/s of the candidate")
    reference_gflops: float | None = None
    reference_gbytes: float
    work: str = Field(description="'task' (its flops/bytes expressions) or 'static estimate'")
    peaks: Peaks
    implausible: str = Field("", description="why the timing exceeds the roofline (empty: within it)")

    def text(self) -> str:
        flops = f"{self.gflops:,.1f} GFLOP/s ({self.gflops / self.peaks.gflops:.0%} of peak), " if self.gflops else ""
        line = (f"{flops}{self.gbytes:,.1f} GB/s ({self.gbytes / self.peaks.gbytes:.0%} of {self.peaks.level}); "
                f"{self.peaks.text()}; work from the {self.work}")
        return f"{line}; IMPLAUSIBLE: {self.implausible}" if self.implausible else line


def device_peaks(store: Store | None, hw: HardwareSpec, working_set: float) -> Peaks:
    """The roofline's peaks for a working set of ``working_set`` bytes, from the probes the store holds."""
    from kernelcast.agents.forecast.device_probe import guessed_bandwidth, stored_bandwidth
    from kernelcast.agents.forecast.prior import DeviceModel

    stored = stored_bandwidth(store, hw) if store is not None else None
    dev = DeviceModel.of(hw, stored[0] if stored is not None else guessed_bandwidth(hw))
    if working_set <= dev.cache_bytes:
        rate, level = dev.cache_bandwidth, "cache"
    elif working_set <= dev.llc_bytes:
        rate, level = dev.llc_bandwidth, "last-level cache"
    else:
        rate, level = dev.bandwidth, "DRAM"
    return Peaks(gflops=dev.peak_flops / 1e9, gbytes=rate / 1e9, level=level, probed=dev.probed)


def task_work(task: Task, sizes: str) -> tuple[float | None, float, str]:
    """(flops, bytes, where they came from) of one launch of ``task`` at ``sizes`` ('full' or 'small')."""
    from kernelcast.agents.forecast.work_estimate import compulsory_bytes, estimate
    from kernelcast.tools.core.expr import ExpressionError, evaluate

    values = task.sizes("small" if sizes == "small" else "full")
    nbytes = compulsory_bytes(task, values)
    if task.spec.flops:
        try:
            return float(evaluate(task.spec.flops, dict(values))), nbytes, "task"
        except (ExpressionError, ZeroDivisionError):
            pass
    try:
        flops = estimate(task, task.reference(), values).flops
    except (ValueError, ExpressionError):  # a reference the estimate cannot read: bytes only
        flops = 0.0
    return (flops or None), nbytes, "static estimate"


def throughput(task: Task, m: Measurement, hw: HardwareSpec, store: Store | None = None) -> Throughput | None:
    """GFLOP/s and GB/s of a correct measurement of ``task`` (None: failed, or no timing)."""
    if not m.ok or m.candidate is None or m.reference is None or m.candidate.median_ns <= 0:
        return None
    flops, nbytes, work = task_work(task, m.sizes)
    peaks = device_peaks(store, hw, nbytes)
    cand_s, ref_s = m.candidate.median_ns * 1e-9, m.reference.median_ns * 1e-9
    gflops = flops / cand_s / 1e9 if flops else None
    gbytes = nbytes / cand_s / 1e9
    implausible = []
    if gflops is not None and gflops > IMPLAUSIBLE * peaks.gflops:
        implausible.append(f"{gflops:,.0f} GFLOP/s is over {IMPLAUSIBLE:g}x the peak {peaks.gflops:,.0f}")
    if gbytes > IMPLAUSIBLE * peaks.gbytes:
        implausible.append(f"{gbytes:,.0f} GB/s is over {IMPLAUSIBLE:g}x the {peaks.level} rate "
                           f"{peaks.gbytes:,.1f}")
    return Throughput(gflops=gflops, gbytes=gbytes, reference_gflops=flops / ref_s / 1e9 if flops else None,
                      reference_gbytes=nbytes / ref_s / 1e9, work=work, peaks=peaks, implausible="; ".join(implausible))


def shown_flags(flags: list[str]) -> list[str]:
    """A measurement's flags as outputs show them: the harness re-measures a large speedup (a fixed ratio) and
    says "implausible"; that word is kept for the roofline's verdict (:func:`throughput`), so the flag reads as
    what happened: it was re-measured and held."""
    return [f.replace("implausible: speedup", "re-measured: speedup", 1) if f.startswith("implausible: speedup")
            else f for f in flags]


def run_throughput(store: Store, run: RunRecord, candidate_hash: str) -> Throughput | None:
    """The throughput of a run's node as shown: of its confirmation when it has one, else of its first
    measurement (None: the task file is gone or changed, the device unknown, or no correct measurement)."""
    from kernelcast.graphs.config import RunConfig
    from kernelcast.tools.core.task import TaskError, resolve_task

    try:
        task = resolve_task(RunConfig.of_run(run).task)
    except (TaskError, OSError, ValueError):
        return None
    hw = store.devices().get(run.device)
    ok = [m for m in store.measurements(run_id=run.id, candidate_hash=candidate_hash) if m.ok and m.phase != "noise"]
    if hw is None or not ok or ok[-1].task_fingerprint not in (None, task.fingerprint):
        return None
    confirmed = [m for m in ok if m.phase == "confirm"]
    return throughput(task, (confirmed or ok)[-1], hw, store)
