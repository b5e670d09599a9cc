"""Post-hoc calibration for any forecaster: temperature scaling, optionally isotonic confidence.

A forecaster's confidence is only useful to the router if it means what it
says (a 0.8 forecast is right about 80% of the time). Calibration is fitted on
held-out (forecast, measured bin) pairs and applied to new forecasts; it never
touches failed forecasts, which stay uniform and deferred.

- Temperature: p' = softmax(log p / T); one parameter, fitted by minimizing
  NLL, keeps the ranking of bins (T > 1 softens, T < 1 sharpens).
- Isotonic (optional): maps the max probability to the observed accuracy at
  that confidence, and rescales the other bins proportionally, never letting
  the predicted bin lose its place.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize_scalar
from sklearn.isotonic import IsotonicRegression

from kernelcast.agents.forecast.base import Forecast
from kernelcast.agents.forecast.scoring import ScoreSummary, summarize
from kernelcast.tools.core.bins import NUM_BINS

EPS = 1e-12
T_BOUNDS = (0.05, 20.0)
MIN_FIT_SAMPLES = 10


def apply_temperature(probabilities: np.ndarray, temperature: float) -> np.ndarray:
    """softmax(log p / T) row-wise; zeros stay (almost) zero for T near 1."""
    logp = np.log(np.clip(np.asarray(probabilities, dtype=np.float64), EPS, None)) / temperature
    logp -= logp.max(axis=-1, keepdims=True)
    out = np.exp(logp)
    return out / out.sum(axis=-1, keepdims=True)


def _mean_nll(probabilities: np.ndarray, true_bins: np.ndarray) -> float:
    picked = probabilities[np.arange(len(true_bins)), true_bins - 1]
    return float(-np.mean(np.log(np.clip(picked, EPS, None))))


def fit_temperature(probabilities: np.ndarray, true_bins: np.ndarray) -> float:
    """The T in T_BOUNDS minimizing mean NLL (searched on log T, bounded)."""
    res = minimize_scalar(lambda log_t: _mean_nll(apply_temperature(probabilities, math.exp(log_t)), true_bins),
                          bounds=(math.log(T_BOUNDS[0]), math.log(T_BOUNDS[1])), method="bounded",
                          options={"xatol": 1e-4})
    return float(math.exp(res.x))


def set_max_probability(probabilities: np.ndarray, new_max: np.ndarray) -> np.ndarray:
    """Rows with the top probability set to ``new_max`` and the rest rescaled proportionally.

    ``new_max`` is raised where needed so the top bin stays on top (at least
    r2 / (1 - m + r2), r2 the runner-up) and to at least 1/8.
    """
    p = np.array(probabilities, dtype=np.float64)
    rows = np.arange(len(p))
    top = p.argmax(axis=1)
    m = p[rows, top]
    rest = p.copy()
    rest[rows, top] = 0.0
    runner_up = rest.max(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        floor = np.where(runner_up > 0, runner_up / (1 - m + runner_up) + 1e-9, 0.0)  # 1e-9: strictly on top
    target = np.clip(np.maximum(np.maximum(new_max, floor), 1.0 / NUM_BINS), 0.0, 1.0)
    rest_sum = rest.sum(axis=1)
    empty = rest_sum <= 0
    rest[empty] = 1.0  # a point mass: spread the freed mass evenly over the other bins
    rest[empty, top[empty]] = 0.0
    rest_sum = rest.sum(axis=1)
    out = rest * ((1 - target) / rest_sum)[:, None]
    out[rows, top] = target
    return out


@dataclass(frozen=True)
class CalibrationReport:
    """Scores on one data set before and after calibration."""

    before: ScoreSummary
    after: ScoreSummary

    def rows(self) -> list[tuple[str, float, float]]:
        """(metric, before, after) for printing; Brier is the halved form."""
        b, a = self.before.as_dict(), self.after.as_dict()
        return [(k, float(b[k]), float(a[k])) for k in b if k != "n"]


@dataclass
class Calibrator:
    """Temperature scaling, then optionally isotonic regression of the max probability."""

    temperature: float = 1.0
    isotonic: IsotonicRegression | None = None
    n_fit: int = 0

    @classmethod
    def fit(cls, probabilities: Sequence[Sequence[float]] | np.ndarray, true_bins: Sequence[int] | np.ndarray,
            isotonic: bool = False) -> "Calibrator":
        """Fit on held-out pairs (true bins 1..8; filter failures and failed forecasts first)."""
        p, y = _checked(probabilities, true_bins)
        if len(y) < MIN_FIT_SAMPLES:
            raise ValueError(f"calibration needs at least {MIN_FIT_SAMPLES} held-out forecasts, got {len(y)}")
        cal = cls(temperature=fit_temperature(p, y), n_fit=len(y))
        if isotonic:
            scaled = apply_temperature(p, cal.temperature)
            correct = (scaled.argmax(axis=1) + 1 == y).astype(float)
            cal.isotonic = IsotonicRegression(y_min=0.0, y_max=1.0, increasing=True, out_of_bounds="clip")
            cal.isotonic.fit(scaled.max(axis=1), correct)
        return cal

    @classmethod
    def fit_forecasts(cls, forecasts: Sequence[Forecast], true_bins: Sequence[int], isotonic: bool = False
                      ) -> "Calibrator":
        """Fit from Forecast objects, skipping failed forecasts and failed measurements (bin 0)."""
        pairs = [(f.probabilities, b) for f, b in zip(forecasts, true_bins, strict=True) if not f.failed and b > 0]
        if not pairs:
            raise ValueError("no usable (forecast, measured bin) pairs to calibrate on")
        return cls.fit([p for p, _ in pairs], [b for _, b in pairs], isotonic=isotonic)

    @property
    def description(self) -> str:
        return f"temperature T={self.temperature:.3g}" + (" + isotonic max-prob" if self.isotonic else "") + \
            f" (fitted on {self.n_fit})"

    def transform(self, probabilities: Sequence[Sequence[float]] | np.ndarray) -> np.ndarray:
        """Calibrated copies of an (N, 8) array of distributions."""
        p = apply_temperature(np.atleast_2d(np.asarray(probabilities, dtype=np.float64)), self.temperature)
        if self.isotonic is not None:
            p = set_max_probability(p, self.isotonic.predict(p.max(axis=1)))
        return p

    def apply(self, forecast: Forecast) -> Forecast:
        """A calibrated copy of the forecast; failed forecasts are returned unchanged."""
        if forecast.failed:
            return forecast
        probs = self.transform([forecast.probabilities])[0]
        prov = forecast.provenance.model_copy(update={"calibration": self.description})
        out = Forecast.from_probabilities(probs, prov, reasoning=forecast.reasoning,
                                          stated_bin=forecast.provenance.stated_bin)
        return out.model_copy(update={"task": forecast.task, "candidate_hash": forecast.candidate_hash})

    def report(self, probabilities: Sequence[Sequence[float]] | np.ndarray, true_bins: Sequence[int] | np.ndarray
               ) -> CalibrationReport:
        """Scores before and after calibration on the given (ideally held-out) pairs."""
        p, y = _checked(probabilities, true_bins)
        return CalibrationReport(before=summarize(p, y), after=summarize(self.transform(p), y))


def _checked(probabilities: Sequence[Sequence[float]] | np.ndarray, true_bins: Sequence[int] | np.ndarray
             ) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(probabilities, dtype=np.float64)
    y = np.asarray(true_bins, dtype=int)
    if p.ndim != 2 or p.shape[1] != NUM_BINS or len(p) != len(y):
        raise ValueError(f"need an (N, {NUM_BINS}) probability array and N true bins")
    if np.any((y < 1) | (y > NUM_BINS)):
        raise ValueError("true bins must be 1..8: leave failed measurements out of calibration")
    return p, y
