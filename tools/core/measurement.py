"""Result types of the measurement tool: what a run on real hardware produced."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import Enum
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, Field, model_validator

from kernelcast.tools.core.candidate import Candidate


class Status(str, Enum):
    """Outcome of one measurement. Only ``correct`` carries a speedup."""

    correct = "correct"
    incorrect = "incorrect"  # ran, but outputs/inputs/guards were wrong
    compile_error = "compile_error"
    runtime_error = "runtime_error"  # the device or runtime raised an error
    timeout = "timeout"  # the worker exceeded its hard time limit and was killed
    crash = "crash"  # the worker process died (segfault, abort)
    invalid = "invalid"  # rejected before running (signature, geometry, task mismatch)

    @property
    def failed(self) -> bool:
        return self is not Status.correct


class TimingStats(BaseModel):
    """Device-event times of one kernel, in nanoseconds."""

    median_ns: float
    min_ns: float
    mean_ns: float
    iqr_ns: float
    cv: float  # coefficient of variation (std / mean)
    reps: int
    # every repetition's time, kept only where the timings were recorded elsewhere (a Kernel Tuner cache): a replay
    # draws its noise from them; live measurements keep the summary alone
    samples_ns: list[float] | None = None

    @classmethod
    def from_samples(cls, samples_ns: list[float]) -> "TimingStats":
        arr = np.asarray(samples_ns, dtype=np.float64)
        mean = float(arr.mean())
        q1, q3 = np.percentile(arr, [25, 75])
        return cls(
            median_ns=float(np.median(arr)),
            min_ns=float(arr.min()),
            mean_ns=mean,
            iqr_ns=float(q3 - q1),
            cv=float(arr.std() / mean) if mean > 0 else 0.0,
            reps=len(arr),
        )


def speedup_interval(ref_ns: list[float], cand_ns: list[float], level: float = 0.95, resamples: int = 2000,
                     seed: int = 0) -> tuple[float, float]:
    """Bootstrap confidence interval of median(ref) / median(cand), the speedup's sampling uncertainty.

    Reference and candidate are resampled independently (their launches alternate, but no pairing is
    assumed); the percentile interval is enough for a decision "is this distinguishable from 1.0".
    """
    ref, cand = np.asarray(ref_ns, dtype=np.float64), np.asarray(cand_ns, dtype=np.float64)
    rng = np.random.default_rng(seed)
    ref_med = np.median(ref[rng.integers(0, ref.size, (resamples, ref.size))], axis=1)
    cand_med = np.median(cand[rng.integers(0, cand.size, (resamples, cand.size))], axis=1)
    ratios = ref_med / np.maximum(cand_med, 1e-9)
    tail = (1.0 - level) / 2 * 100
    low, high = np.percentile(ratios, [tail, 100 - tail])
    return float(low), float(high)


class HardwareSpec(BaseModel):
    """What the forecaster is told about the device (read from the device itself)."""

    backend: str  # opencl | cuda
    platform: str = ""
    name: str
    device_type: str = ""  # CPU | GPU | ACCELERATOR
    vendor: str = ""
    driver: str = ""
    compute_units: int = 0
    clock_mhz: int = 0
    global_mem_bytes: int = 0
    local_mem_bytes: int = 0
    max_work_group_size: int = 0
    max_work_item_sizes: list[int] = Field(default_factory=list)
    preferred_vector_width_float: int = 0
    native_vector_width_float: int = 0
    global_cache_bytes: int = 0
    global_cacheline_bytes: int = 0
    # the largest cache a launch's working set can stay warm in between launches: a CPU's last-level cache
    # (OpenCL's global cache size is a per-core L2 on some CPU runtimes); 0: unknown (older records)
    last_level_cache_bytes: int = 0
    extra: dict[str, Any] = Field(default_factory=dict)

    @property
    def key(self) -> str:
        """Stable device identity used in cache keys and the store."""
        return f"{self.backend}:{self.platform}:{self.name}".strip()

    def summary(self) -> str:
        clock = f"{self.clock_mhz} MHz" if self.clock_mhz else "unknown clock (the runtime reports none)"
        lines = [
            f"device: {self.name} ({self.device_type or 'unknown type'}, {self.backend}, {self.platform})",
            f"compute units: {self.compute_units} @ {clock}",
            f"global memory: {self.global_mem_bytes / 2**30:.1f} GiB, global cache: {self.global_cache_bytes / 2**20:.1f} MiB"
            f" (line {self.global_cacheline_bytes} B)",
            f"local memory: {self.local_mem_bytes / 2**10:.0f} KiB, max work-group: {self.max_work_group_size}"
            f" (per dim {self.max_work_item_sizes})",
            f"float vector width: preferred {self.preferred_vector_width_float}, native {self.native_vector_width_float}",
        ]
        lines += [f"{k}: {v}" for k, v in self.extra.items()]
        return "\n".join(lines)


class MeasureConfig(BaseModel):
    """How to measure. Defaults follow docs/architecture.md's protocol."""

    sizes: str = "full"  # full | small
    seeds: list[int] = Field(default_factory=lambda: [0, 1, 2])
    warmup: int = 2
    min_reps: int = 5
    max_reps: int = 50  # per batch; more batches are added while the speedup's interval is too wide
    target_seconds: float = 0.25  # per kernel, for the first timing batch
    ci_target: float = 0.04  # stop adding batches once the 95 % interval's half-width is within 4 % of the speedup
    max_timing_seconds: float = 3.0  # bound on the adaptive phase (device time of every kernel timed)
    max_batches: int = 4
    verify_timed: bool = True  # check the outputs of timed launches and a final launch on fresh inputs
    cv_limit: float = 0.10
    implausible_speedup: float = 10.0
    remeasure: bool = True
    timeout_s: float = 120.0  # the default of every door (Settings.measure_timeout_s reads it)
    check_correctness: bool = True
    time_kernels: bool = True
    # a kernel of the same task measured before (the search's incumbent), timed interleaved with the reference
    # and the candidate: "does the candidate beat it" is then a paired comparison in one session, free of the
    # drift between measurements minutes apart (docs/architecture.md "Measurement protocol")
    rival: Candidate | None = None


class RivalComparison(BaseModel):
    """The candidate against the rival kernel timed interleaved with it (MeasureConfig.rival)."""

    candidate_hash: str  # the rival's
    timing: TimingStats
    speedup: float  # the rival over the reference, in this session
    ratio: float  # median(rival) / median(candidate): the candidate's speedup over the rival
    ratio_ci: tuple[float, float]  # its 95 % bootstrap interval

    @property
    def beaten(self) -> bool:
        """Whether the candidate ran faster than the rival (the paired form of S_child > S_rival)."""
        return self.ratio > 1.0


#: Where a stored measurement's numbers come from. ``live``: measured by this store's harness, the only rows any
#: read sees by default ("already measured", noise floor, calibration, trust); ``replayed``: answered by a replay
#: run from stored rows, seen only by that run; ``imported``: another store's rows (``kernelcast dataset import``),
#: training data only; ``recorded``: another tool's timings of a device kernelcast never ran on (a Kernel Tuner
#: cache, ``kernelcast import kernel-tuner``): what a replay of that device answers from and what transfer learns;
#: ``reused``: a live row of this store bought by an earlier run, copied under a session that was submitted the same
#: kernel (same device and sizes): seen by that session alone, never charged to its budget.
Provenance = Literal["live", "replayed", "imported", "recorded", "reused"]
PROVENANCES: tuple[Provenance, ...] = ("live", "replayed", "imported", "recorded", "reused")


class Measurement(BaseModel):
    """The result of running one candidate against the task's reference."""

    task: str
    task_fingerprint: str | None = None  # Task.fingerprint: the problem the speedup is over (None: before 2026-12-04)
    candidate_hash: str
    device: str
    sizes: str
    status: Status
    reason: str = ""
    reference: TimingStats | None = None
    candidate: TimingStats | None = None
    speedup: float | None = None
    speedup_ci: tuple[float, float] | None = None  # 95 % bootstrap interval of the ratio of medians
    phase: str = "search"  # search | verify | confirm | noise: why the measurement was bought
    # where the numbers come from (Provenance): only ``live`` rows are measurements of this store's device now;
    # a replayed row is seen by its own run alone, imported and recorded rows only by reads that ask for them
    provenance: Provenance = "live"
    rival: RivalComparison | None = None  # set when MeasureConfig.rival was timed beside the candidate
    flags: list[str] = Field(default_factory=list)
    seeds: list[int] = Field(default_factory=list)
    compile_ms: float | None = None
    cache_hit: bool | None = None
    harness_ms: float | None = None
    wall_ms: float | None = None
    created_at: str = Field(default_factory=lambda: datetime.now(UTC).isoformat())

    @model_validator(mode="before")
    @classmethod
    def _old_replayed_flag(cls, data: Any) -> Any:
        """Rows written before provenance carried ``replayed`` (a bool): read it as the provenance it meant."""
        if isinstance(data, dict) and "replayed" in data:
            data = dict(data)
            replayed = data.pop("replayed")
            data.setdefault("provenance", "replayed" if replayed else "live")
        return data

    @property
    def replayed(self) -> bool:
        """Answered by a replay run from stored rows, not measured now."""
        return self.provenance == "replayed"

    @property
    def live(self) -> bool:
        return self.provenance == "live"

    @property
    def ok(self) -> bool:
        return self.status is Status.correct and self.speedup is not None

    def bin(self) -> int:
        """Speedup bin 1..8 by the explicit edges, 0 for any failure."""
        from kernelcast.tools.core.bins import speedup_bin

        return speedup_bin(self.speedup) if self.ok else 0
