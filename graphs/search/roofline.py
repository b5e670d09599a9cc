"""Where a run's kernels sit under the device's roofline: GFLOP/s and GB/s against the probed peaks.

The work is the task's: its ``flops`` / ``bytes`` expressions when the task file gives them, else the static
estimate of the reference kernel (:mod:`kernelcast.agents.forecast.work_estimate`: the useful work, which a
candidate that recomputes does not inflate) and every buffer once. The peaks are the roofline prior's
(:class:`kernelcast.agents.forecast.prior.DeviceModel`) for the memory level that holds the working set (DRAM,
last-level cache or cache, named in every verdict), bandwidth from the stored triad probe (a guess by device type
until it ran, and said so); compute from the stored compute probe (independent multiply-adds,
``agents/data/probes/compute_peak``), else modelled from the device spec and the probed SIMD width, and said so.
"Implausible" is said only against these peaks, never against a fixed speedup ratio: a 30x speedup over a naive reference is
ordinary, 3x the device's bandwidth is not.

A run's :class:`RooflineVerdict` says how much room the reference left and how much the best leaves, so a
0.96x on a kernel already at the device's bandwidth reads as what it is. Where the device has no triad probe
yet it says so and names no fraction: a guessed peak would make the verdict up.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, Field

from kernelcast.agents.forecast.device_probe import guessed_bandwidth, stored_bandwidth, stored_compute_peak
from kernelcast.agents.forecast.prior import DeviceModel
from kernelcast.agents.forecast.work_estimate import compulsory_bytes, estimate
from kernelcast.graphs.config import RunConfig
from kernelcast.tools.core.expr import ExpressionError, evaluate
from kernelcast.tools.core.measurement import HardwareSpec, Measurement
from kernelcast.tools.core.task import Task, TaskError, resolve_task
from kernelcast.tools.store.records import RunRecord
from kernelcast.tools.store.store import Store

IMPLAUSIBLE = 2.0  # beyond this multiple of a roofline peak a timing is not believed (the peaks are estimates)
LITTLE_ROOM = 0.8  # at this share of its roof a kernel has little left to gain
SOME_ROOM = 0.5
ABOVE_ROOF = 1.2  # beyond this share the roof (a model of the probed triad) is the doubtful number


class Peaks(BaseModel):
    """The roofline's ceilings of one device for one working set."""

    gflops: float = Field(description="peak GFLOP/s: measured by the compute probe, else compute units x clock x "
                                      "SIMD lanes x 2 (FMA)")
    gbytes: float = Field(description="GB/s the working set streams at: DRAM triad, or the cache's rate when it fits")
    level: str = Field(description="which bandwidth: 'DRAM', 'last-level cache' or 'cache'")
    probed: bool = Field(description="the bandwidth was measured (triad probe); False: a guess by device type")
    compute_probed: bool = Field(False, description="the compute roof was measured (independent multiply-adds); "
                                                    "False: modelled from the spec")
    working_set: float = Field(0.0, description="bytes the kernel's buffers hold (what decides the level)")
    level_bytes: float | None = Field(None, description="the capacity of the level's cache (None: DRAM)")

    def text(self) -> str:
        source = "probed" if self.probed else "guessed, not probed yet"
        compute = "measured" if self.compute_probed else "modelled"
        return (f"peaks {self.gflops:,.0f} GFLOP/s ({compute}), {self.gbytes:,.1f} GB/s ({self.level}, {source})")

    @property
    def where(self) -> str:
        """Where the working set lives, in words: "the 1.5 MiB working set fits the 32 MiB last-level cache"."""
        held = f"the {mib(self.working_set)} working set" if self.working_set > 0 else "the working set"
        if self.level_bytes is None:
            return f"{held} exceeds the last-level cache: DRAM"
        return f"{held} fits the {mib(self.level_bytes)} {self.level}"

    @property
    def compute_name(self) -> str:
        """The compute roof as a verdict names it, measured or modelled."""
        if self.compute_probed:
            return f"measured compute roof ({self.gflops:,.0f} GFLOP/s, independent multiply-adds)"
        return (f"peak compute ({self.gflops:,.0f} GFLOP/s, modelled: units x reported clock x probed SIMD lanes x 2; "
                "no compute probe yet)")

    @property
    def roof_name(self) -> str:
        """The bandwidth roof as a verdict names it: the DRAM rate is the probe's, a cache's is modelled from it."""
        return (f"measured DRAM bandwidth ({self.gbytes:,.1f} GB/s)" if self.level == "DRAM"
                else f"{self.level} bandwidth ({self.gbytes:,.1f} GB/s, modelled from the probed triad)")


def mib(nbytes: float) -> str:
    return f"{nbytes / 2**20:,.1f} MiB" if nbytes >= 2**20 else f"{nbytes / 2**10:,.0f} KiB"


class Work(BaseModel):
    """One launch's useful work and where each number came from."""

    flops: float | None = Field(description="floating-point operations (None: none the estimate could count)")
    bytes: float = Field(description="compulsory bytes: what any correct kernel must move")
    flops_from: Literal["task", "static estimate"]
    bytes_from: Literal["task", "buffer sizes"]

    def text(self) -> str:
        if self.flops_from == "task" and self.bytes_from == "task":
            return "work from the task file"
        flops = "flops from the task file" if self.flops_from == "task" else "flops estimated from the source"
        nbytes = "bytes from the task file" if self.bytes_from == "task" else "bytes from the buffer sizes"
        return f"{flops}, {nbytes}"


class Throughput(BaseModel):
    """What one correct measurement achieved, against the device's peaks."""

    gflops: float | None = Field(description="useful GFLOP/s of the candidate (None: the work has no flops)")
    gbytes: float = Field(description="compulsory GB/s of the candidate")
    reference_gflops: float | None = None
    reference_gbytes: float
    work: str = Field(description="where the work's numbers came from, in :meth:`Work.text`'s words")
    peaks: Peaks
    implausible: str = Field("", description="why the timing exceeds the roofline (empty: within it)")

    def text(self) -> str:
        flops = f"{self.gflops:,.1f} GFLOP/s ({self.gflops / self.peaks.gflops:.0%} of peak), " if self.gflops else ""
        line = (f"{flops}{self.gbytes:,.1f} GB/s ({self.gbytes / self.peaks.gbytes:.0%} of {self.peaks.level}); "
                f"{self.peaks.text()}; {self.work}")
        return f"{line}; IMPLAUSIBLE: {self.implausible}" if self.implausible else line


class RooflineVerdict(BaseModel):
    """How close a run's reference and best come to the device's roof, and so how much room a search had."""

    work: Work
    sizes: str = Field(description="the problem size the timings are of ('full', 'small' or a task's label)")
    reference_gflops: float | None = Field(description="the reference's GFLOP/s (None: no flops counted)")
    reference_gbs: float
    best_gflops: float | None = Field(None, description="the best's GFLOP/s (None: no flops, or no correct best)")
    best_gbs: float | None = Field(None, description="the best's GB/s (None: no correct candidate)")
    peaks: Peaks | None = Field(description="the device's roofs (None: no triad probe for this device yet)")
    bound: Literal["memory", "compute"] | None = Field(description="the roof the work's arithmetic intensity meets "
                                                                   "first (None: no peaks)")
    reference_fraction: float | None = Field(description="the reference's share of its bound roof (None: no peaks)")
    best_fraction: float | None = Field(None, description="the best's share of its bound roof")
    text: str = Field(description="the verdict in one line")

    @property
    def intensity(self) -> float | None:
        """FLOP per compulsory byte (None: no flops counted)."""
        return self.work.flops / self.work.bytes if self.work.flops and self.work.bytes > 0 else None


def room(fraction: float) -> str:
    """What a share of the roof leaves to gain, in words."""
    if fraction > ABOVE_ROOF:
        return "above the roof: the roof is modelled, read the timing with care"
    if fraction >= LITTLE_ROOM:
        return "little room left"
    return "some room left" if fraction >= SOME_ROOM else "much room left"


def compute_room(fraction: float, measured: bool = False) -> str:
    """:func:`room` against the compute roof. A measured roof is read like a bandwidth's; a modelled one (one FMA
    per SIMD lane per cycle at the clock the runtime reports) a core with two FMA pipes or a turbo clock goes past,
    so near it is not 'little left'."""
    if measured:
        return room(fraction)
    if fraction >= LITTLE_ROOM:
        return ("near or past the modelled compute roof, which a core with two FMA pipes or a turbo clock can "
                "exceed up to about twice: room unknown")
    return room(fraction)


def percent(fraction: float) -> str:
    return f"{fraction * 100:.0f} %"


def _rates(work: Work, seconds: float) -> tuple[float | None, float]:
    return (work.flops / seconds / 1e9 if work.flops else None), work.bytes / seconds / 1e9


def roofline_verdict(work: Work, sizes: str, reference_s: float, best_s: float | None,
                     peaks: Peaks | None) -> RooflineVerdict:
    """The verdict from the numbers: one launch's work, the reference's and the best's seconds (None: no correct
    best), and the device's probed peaks (None, or not probed: no roof to compare against, and said so)."""
    ref_gflops, ref_gbs = _rates(work, reference_s)
    best_gflops, best_gbs = _rates(work, best_s) if best_s else (None, None)
    achieved = f"reference {ref_gbs:,.1f} GB/s" + (f", {ref_gflops:,.2f} GFLOP/s" if ref_gflops else "")
    if best_gbs is not None:
        achieved += f"; best {best_gbs:,.1f} GB/s" + (f", {best_gflops:,.2f} GFLOP/s" if best_gflops else "")
    if peaks is None or not peaks.probed:
        text = f"no roof to compare against: this device has no bandwidth probe yet ({achieved}; {work.text()})"
        return RooflineVerdict(work=work, sizes=sizes, reference_gflops=ref_gflops, reference_gbs=ref_gbs,
                               best_gflops=best_gflops, best_gbs=best_gbs, peaks=None, bound=None,
                               reference_fraction=None, text=text)
    intensity = work.flops / work.bytes if work.flops and work.bytes > 0 else 0.0
    ridge = peaks.gflops / peaks.gbytes
    bound: Literal["memory", "compute"] = "compute" if intensity >= ridge else "memory"

    def share(gflops: float | None, gbs: float) -> float:
        return (gflops or 0.0) / peaks.gflops if bound == "compute" else gbs / peaks.gbytes

    roof = peaks.compute_name if bound == "compute" else peaks.roof_name

    def said(fraction: float) -> str:
        return compute_room(fraction, peaks.compute_probed) if bound == "compute" else room(fraction)

    ref_share = share(ref_gflops, ref_gbs)
    best_share = share(best_gflops, best_gbs) if best_gbs is not None else None
    why = (f"{intensity:.2f} FLOP/byte, ridge {ridge:.2f} against the {peaks.level} bandwidth: {peaks.where}"
           if work.flops else f"no flops counted; {peaks.where}")
    text = f"{bound}-bound ({why}): reference at {percent(ref_share)} of the {roof}: {said(ref_share)}; "
    text += (f"best at {percent(best_share)}: {said(best_share)}" if best_share is not None
             else "no correct candidate") + f"; {work.text()}"
    return RooflineVerdict(work=work, sizes=sizes, reference_gflops=ref_gflops, reference_gbs=ref_gbs,
                           best_gflops=best_gflops, best_gbs=best_gbs, peaks=peaks, bound=bound,
                           reference_fraction=ref_share, best_fraction=best_share, text=text)


def device_peaks(store: Store | None, hw: HardwareSpec, working_set: float) -> Peaks:
    """The roofline's peaks for a working set of ``working_set`` bytes, from the probes the store holds."""
    stored = stored_bandwidth(store, hw) if store is not None else None
    dev = DeviceModel.of(hw, stored[0] if stored is not None else guessed_bandwidth(hw))
    level_bytes: float | None
    if working_set <= dev.cache_bytes:
        rate, level, level_bytes = dev.cache_bandwidth, "cache", dev.cache_bytes
    elif working_set <= dev.llc_bytes:
        rate, level, level_bytes = dev.llc_bandwidth, "last-level cache", dev.llc_bytes
    else:
        rate, level, level_bytes = dev.bandwidth, "DRAM", None
    measured = stored_compute_peak(store, hw) if store is not None else None
    return Peaks(gflops=(measured or dev.peak_flops) / 1e9, gbytes=rate / 1e9, level=level, probed=dev.probed,
                 compute_probed=measured is not None, working_set=working_set, level_bytes=level_bytes)


def task_work(task: Task, sizes: str) -> Work:
    """The work of one launch of ``task`` at ``sizes`` ('small', else the full problem)."""
    values = task.sizes("small" if sizes == "small" else "full")
    nbytes = compulsory_bytes(task, values)
    bytes_from: Literal["task", "buffer sizes"] = "task" if task.spec.bytes else "buffer sizes"
    if task.spec.flops:
        try:
            return Work(flops=float(evaluate(task.spec.flops, dict(values))), bytes=nbytes, flops_from="task",
                        bytes_from=bytes_from)
        except (ExpressionError, ZeroDivisionError):
            pass
    try:
        flops = estimate(task, task.reference(), values).flops
    except (ValueError, ExpressionError):  # a reference the estimate cannot read: bytes only
        flops = 0.0
    return Work(flops=flops or None, bytes=nbytes, flops_from="static estimate", bytes_from=bytes_from)


def throughput(task: Task, m: Measurement, hw: HardwareSpec, store: Store | None = None) -> Throughput | None:
    """GFLOP/s and GB/s of a correct measurement of ``task`` (None: failed, or no timing)."""
    if not m.ok or m.candidate is None or m.reference is None or m.candidate.median_ns <= 0:
        return None
    work = task_work(task, m.sizes)
    peaks = device_peaks(store, hw, work.bytes)
    gflops, gbytes = _rates(work, m.candidate.median_ns * 1e-9)
    ref_gflops, ref_gbytes = _rates(work, m.reference.median_ns * 1e-9)
    implausible = []
    if gflops is not None and gflops > IMPLAUSIBLE * peaks.gflops:
        implausible.append(f"{gflops:,.0f} GFLOP/s is over {IMPLAUSIBLE:g}x the peak {peaks.gflops:,.0f}")
    if gbytes > IMPLAUSIBLE * peaks.gbytes:
        implausible.append(f"{gbytes:,.0f} GB/s is over {IMPLAUSIBLE:g}x the {peaks.level} rate "
                           f"{peaks.gbytes:,.1f}")
    return Throughput(gflops=gflops, gbytes=gbytes, reference_gflops=ref_gflops, reference_gbytes=ref_gbytes,
                      work=work.text(), peaks=peaks, implausible="; ".join(implausible))


def shown_measurement(ledger: Sequence[Measurement], key: str) -> Measurement | None:
    """The measurement of node ``key`` whose timings a run shows: its last confirmation, else its last correct
    measurement (None: none correct)."""
    ok = [m for m in ledger if m.candidate_hash == key and m.ok and m.phase != "noise"]
    confirmed = [m for m in ok if m.phase == "confirm"]
    return (confirmed or ok)[-1] if ok else None


def verdict_of(task: Task, hw: HardwareSpec, store: Store, ledger: Sequence[Measurement],
               best_hash: str | None) -> RooflineVerdict | None:
    """A run's verdict from its ledger: the reference's and the best's timings from the best's shown measurement
    (they were timed together); without a correct best, the reference's last timing (None: never timed, or
    timed on another version of the task)."""
    best = shown_measurement(ledger, best_hash) if best_hash else None
    paired = best if best is not None else next(
        (m for m in reversed(ledger) if m.reference is not None and m.reference.median_ns > 0), None)
    if paired is None or paired.reference is None or paired.task_fingerprint not in (None, task.fingerprint):
        return None
    work = task_work(task, paired.sizes)
    best_s = best.candidate.median_ns * 1e-9 if best is not None and best.candidate is not None else None
    return roofline_verdict(work, paired.sizes, paired.reference.median_ns * 1e-9, best_s,
                            device_peaks(store, hw, work.bytes))


def run_task(store: Store, run: RunRecord) -> tuple[Task, HardwareSpec] | None:
    """The task a stored run measured and its device (None: the task file is gone, or the device unknown)."""
    try:
        task = resolve_task(RunConfig.of_run(run).task)
    except (TaskError, OSError, ValueError):
        return None
    hw = store.devices.all().get(run.device)
    return (task, hw) if hw is not None else None


def run_throughput(store: Store, run: RunRecord, candidate_hash: str) -> Throughput | None:
    """The throughput of a run's node as shown: of its confirmation when it has one, else of its last correct
    measurement (None: the task file is gone or changed, the device unknown, or no correct measurement)."""
    found = run_task(store, run)
    m = shown_measurement(store.ledger.find(run_id=run.id, candidate_hash=candidate_hash), candidate_hash)
    if found is None or m is None or m.task_fingerprint not in (None, found[0].fingerprint):
        return None
    return throughput(found[0], m, found[1], store)


__all__ = ["IMPLAUSIBLE", "Peaks", "RooflineVerdict", "Throughput", "Work", "device_peaks", "roofline_verdict",
           "room", "run_task", "run_throughput", "shown_measurement", "task_work", "throughput", "verdict_of"]
