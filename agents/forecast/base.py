"""Forecasts: a distribution over the eight speedup bins plus where it came from.

Every forecaster (LLM, learned, calibrated wrappers) returns :class:`Forecast`.
A forecast is always a valid distribution: raw model numbers are repaired by
:func:`repair_probabilities` or rejected, and any failure becomes
:meth:`Forecast.uninformative` (uniform, flagged failed), which the router
defers to the hardware. A broken model can cost budget, never correctness.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np
from pydantic import BaseModel, Field, field_validator

from kernelcast.tools.core.bins import NUM_BINS, expected_bin, expected_log_speedup, normalized_entropy, top2_margin
from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.errors import InputError
from kernelcast.tools.core.measurement import HardwareSpec, Measurement
from kernelcast.tools.core.task import Task

if TYPE_CHECKING:
    from kernelcast.tools.store.store import Store


class Provenance(BaseModel):
    """Who produced a forecast, at what cost, and whether its numbers had to be fixed."""

    forecaster: str
    model: str | None = None
    mode: str = ""  # e.g. json | logprobs | learned
    latency_s: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    raw_sum: float | None = None  # sum of the probabilities as the model gave them
    stated_bin: int | None = None  # the bin the model named, if it named one
    repaired: bool = False
    repair_notes: list[str] = Field(default_factory=list)
    failed: bool = False
    failure_reason: str = ""
    calibration: str | None = None  # e.g. "temperature T=1.8" once post-hoc calibrated
    # the forecaster's continuous belief about ln S, when it has one: the bins cannot say how far beyond 4x
    # (or below 0.25x) a kernel lands, and a router comparing with a 15x incumbent needs exactly that
    log_speedup_mean: float | None = None
    log_speedup_sd: float | None = None
    log_speedup_dof: float | None = None  # degrees of freedom when that belief is a Student-t (None: normal)


class Forecast(BaseModel):
    """A calibrated-or-not distribution over bins 1..8 for one candidate."""

    probabilities: list[float]
    predicted_bin: int = Field(ge=1, le=NUM_BINS)
    reasoning: str = ""
    provenance: Provenance
    task: str | None = None
    candidate_hash: str | None = None

    @field_validator("probabilities")
    @classmethod
    def _valid_distribution(cls, v: list[float]) -> list[float]:
        p = np.asarray(v, dtype=np.float64)
        if p.shape != (NUM_BINS,) or not np.all(np.isfinite(p)) or np.any(p < 0) or abs(p.sum() - 1) > 1e-6:
            raise ValueError(f"probabilities must be {NUM_BINS} finite non-negative values summing to 1, got {v}")
        return (p / p.sum()).tolist()

    # ---- summaries -------------------------------------------------------
    @property
    def confidence(self) -> float:
        """Max bin probability: the confidence the router thresholds."""
        return max(self.probabilities)

    @property
    def entropy_confidence(self) -> float:
        """1 - normalized entropy (0 uniform, 1 certain)."""
        return 1.0 - normalized_entropy(self.probabilities)

    @property
    def margin(self) -> float:
        """Top-2 margin: how clearly the predicted bin beats the runner-up."""
        return top2_margin(self.probabilities)

    @property
    def expected_bin(self) -> float:
        return expected_bin(self.probabilities)

    @property
    def expected_log_speedup(self) -> float:
        return expected_log_speedup(self.probabilities)

    @property
    def failed(self) -> bool:
        return self.provenance.failed

    # ---- constructors ----------------------------------------------------
    @classmethod
    def from_probabilities(cls, probabilities: Sequence[float] | np.ndarray, provenance: Provenance,
                           reasoning: str = "", stated_bin: int | None = None, **ids: Any) -> "Forecast":
        """Forecast whose predicted bin is the argmax (ties: the stated bin, else nearest the expectation).

        The predicted bin is derived, not copied from the model, so predicted
        bin, confidence and distribution always agree; the model's own bin is
        kept in ``provenance.stated_bin``.
        """
        p = np.asarray(probabilities, dtype=np.float64)
        tied = np.flatnonzero(p >= p.max() - 1e-12) + 1
        if stated_bin is not None and stated_bin in tied:
            predicted = int(stated_bin)
        else:
            centre = float(np.arange(1, NUM_BINS + 1) @ (p / p.sum()))
            predicted = int(min(tied, key=lambda b: (abs(b - centre), b)))
        if stated_bin is not None and provenance.stated_bin is None:
            provenance = provenance.model_copy(update={"stated_bin": stated_bin})
        return cls(probabilities=p.tolist(), predicted_bin=predicted, reasoning=reasoning, provenance=provenance, **ids)

    @classmethod
    def uninformative(cls, reason: str, forecaster: str = "unknown", model: str | None = None,
                      **provenance: Any) -> "Forecast":
        """Uniform distribution flagged failed: the router defers it to the hardware."""
        prov = Provenance(forecaster=forecaster, model=model, failed=True, failure_reason=reason, **provenance)
        return cls.from_probabilities(np.full(NUM_BINS, 1.0 / NUM_BINS), prov)

    def for_candidate(self, task: Task | str, candidate: Candidate) -> "Forecast":
        """Copy stamped with the task name and candidate hash (how the store keys it)."""
        name = task if isinstance(task, str) else task.name
        return self.model_copy(update={"task": name, "candidate_hash": candidate.hash})



def record_forecast(store: "Store", forecast: Forecast, task: str, candidate_hash: str, device: str,
                    run_id: str | None = None) -> int:
    """Write a forecast to the store (one row per forecast; calibration joins it with measurements later)."""
    prov = forecast.provenance
    return store.forecasts.add(task, candidate_hash, device, prov.forecaster, prov.model or "",
                               list(forecast.probabilities), forecast.predicted_bin, forecast.confidence,
                               forecast.failed, forecast.reasoning, prov.model_dump(), run_id=run_id)


@runtime_checkable
class Forecaster(Protocol):
    """Anything that turns (task, candidate, hardware) into a Forecast and never raises for a bad model."""

    name: str

    def forecast(self, task: Task, candidate: Candidate, hardware: HardwareSpec) -> Forecast: ...

    def forecast_many(self, task: Task, candidates: Sequence[Candidate], hardware: HardwareSpec) -> list[Forecast]: ...


@runtime_checkable
class LearnsFromMeasurements(Protocol):
    """A forecaster that a search can teach with its own measurements as they arrive."""

    def learn(self, pairs: Sequence[tuple[Candidate, Measurement]], hardware: Mapping[str, HardwareSpec]) -> bool: ...


@dataclass(frozen=True)
class CertifiedSkill:
    """A forecaster's rank skill on a task and device before the run measures anything, from held-out data it
    already has (Spearman of its forecasts against measured ln S over ``pairs`` kernels), and how it was read."""

    rho: float
    pairs: int
    why: str


@runtime_checkable
class CertifiesRankSkill(Protocol):
    """A forecaster that can certify its within-task rank skill on a device from data it holds (None: it cannot)."""

    def certified_skill(self, task: Task, hardware: HardwareSpec) -> CertifiedSkill | None: ...


# ---- repairing raw model output -------------------------------------------------
ABSURD_LIMIT = 1e3  # any |value| above this is garbage, not a probability or a percentage
NEGATIVE_TOLERANCE = 0.05  # small negatives are rounding noise and clipped; larger ones are rejected
SUM_RANGE = (0.5, 2.0)  # after clipping, sums outside this are too far from 1 to renormalize soundly
RENORMALIZE_NOTE_TOL = 0.01  # sums this close to 1 are renormalized silently (models return 0.75-1.10)
PEAK_MASS = 0.5  # mass a bin-only answer puts on the named bin


class RepairError(InputError, ValueError):
    """Raw probabilities that cannot be turned into a distribution soundly."""


@dataclass
class Repaired:
    """A distribution made from raw model numbers, with what was done to it."""

    probabilities: np.ndarray
    raw_sum: float | None
    notes: list[str] = field(default_factory=list)

    @property
    def repaired(self) -> bool:
        return bool(self.notes)


def peaked_distribution(bin_: int, peak_mass: float = PEAK_MASS) -> np.ndarray:
    """A distribution around a single named bin: ``peak_mass`` on it, the rest halving per bin of distance.

    Used when a model names a bin but gives no usable probabilities; the peak
    is deliberately moderate so a bare guess does not look like certainty.
    """
    if not 1 <= bin_ <= NUM_BINS:
        raise RepairError(f"predicted_bin {bin_} is not a bin 1..{NUM_BINS}")
    bins = np.arange(1, NUM_BINS + 1)
    rest = np.where(bins == bin_, 0.0, 0.5 ** np.abs(bins - bin_))
    p = (1.0 - peak_mass) * rest / rest.sum()
    p[bin_ - 1] = peak_mass
    return p


def repair_probabilities(raw: Any, predicted_bin: Any = None) -> Repaired:
    """Turn a model's raw "probabilities" into a distribution, or raise RepairError.

    Sound repairs: clip small negatives, read percentages, renormalize sums
    near 1, and build a peaked distribution when only a bin is given. Wrong
    length, non-numbers, NaN/inf, absurd magnitudes (e.g. 5.5e24), large
    negatives and sums far from 1 are rejected: they say nothing trustworthy,
    so the caller defers to the hardware instead of guessing.
    """
    stated = parse_bin(predicted_bin)
    if raw is None or (isinstance(raw, (list, tuple)) and len(raw) == 0):
        if stated is None:
            raise RepairError("no probabilities and no valid predicted_bin")
        return Repaired(peaked_distribution(stated), None, [f"only predicted_bin {stated} given: peaked distribution"])
    if not isinstance(raw, (list, tuple, np.ndarray)) or len(raw) != NUM_BINS:
        size = len(raw) if isinstance(raw, (list, tuple, np.ndarray)) else type(raw).__name__
        raise RepairError(f"expected {NUM_BINS} probabilities, got {size}")
    try:
        p = np.array([_as_number(v) for v in raw], dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise RepairError(f"non-numeric probability: {exc}") from None
    raw_sum = float(p.sum()) if np.all(np.isfinite(p)) else float("nan")
    if not np.all(np.isfinite(p)):
        raise RepairError(f"non-finite probability in {p.tolist()}")
    if np.max(np.abs(p)) > ABSURD_LIMIT:
        raise RepairError(f"absurd magnitude {np.max(np.abs(p)):.3g} (raw sum {raw_sum:.3g})")
    notes: list[str] = []
    if np.any(p < -NEGATIVE_TOLERANCE):
        raise RepairError(f"negative probability {p.min():.3g}")
    if np.any(p < 0):
        notes.append(f"clipped {int((p < 0).sum())} small negative value(s)")
        p = np.clip(p, 0.0, None)
    total = float(p.sum())
    if p.max() > 1.0 and 80.0 <= total <= 120.0:
        notes.append("read as percentages")
        p, total = p / 100.0, total / 100.0
    if total <= 0:
        raise RepairError("probabilities sum to zero")
    if not SUM_RANGE[0] <= total <= SUM_RANGE[1]:
        raise RepairError(f"sum {total:.4g} too far from 1 to renormalize")
    if abs(total - 1.0) > RENORMALIZE_NOTE_TOL:
        notes.append(f"renormalized from sum {total:.4g}")
    return Repaired(p / total, raw_sum, notes)


def _as_number(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, str, np.floating, np.integer)):
        raise TypeError(repr(v))
    return float(v)


def parse_bin(v: Any) -> int | None:
    """A valid bin number from model output (int, integral float or digit string), else None."""
    if isinstance(v, bool):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(f) or f != int(f) or not 1 <= int(f) <= NUM_BINS:
        return None
    return int(f)
