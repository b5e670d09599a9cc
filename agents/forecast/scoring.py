"""Scoring rules for bin forecasts, exactly as docs/architecture.md defines them (the paper's names).

Pure functions of numbers: no forecaster, store or model objects, so the same
code scores LLM, learned and calibrated forecasts. True bins are 1..8; failed
candidates (bin 0) are kept out of the distribution and must be filtered out
before scoring (``one_hot`` raises on them).

Brier is the HALVED form, 0.5 * sum_b (p_b - y_b)^2, which lies in [0, 1].
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from kernelcast.tools.core.bins import NUM_BINS, as_distribution, one_hot

ArrayLike = Sequence[float] | np.ndarray


# ---- per forecast -----------------------------------------------------------------
def correctness(predicted_bin: int, true_bin: int) -> float:
    """1 if the predicted bin is the measured bin."""
    return float(int(predicted_bin) == int(true_bin))


def within_one(predicted_bin: int, true_bin: int) -> float:
    """1 if the predicted bin is at most one bin away from the measured bin."""
    return float(abs(int(predicted_bin) - int(true_bin)) <= 1)


def brier(probabilities: ArrayLike, true_bin: int) -> float:
    """Halved multi-class Brier score 0.5 * sum_b (p_b - y_b)^2, in [0, 1]."""
    p = as_distribution(probabilities)
    return float(0.5 * np.sum((p - one_hot(true_bin)) ** 2))


def crps(probabilities: ArrayLike, true_bin: int) -> float:
    """Ordinal CRPS (1/7) * sum_{k=1..7} (F_pred(k) - F_true(k))^2, in [0, 1]."""
    f_pred = np.cumsum(as_distribution(probabilities))[: NUM_BINS - 1]
    f_true = np.cumsum(one_hot(true_bin))[: NUM_BINS - 1]
    return float(np.sum((f_pred - f_true) ** 2) / (NUM_BINS - 1))


def nll(probabilities: ArrayLike, true_bin: int, eps: float = 1e-12) -> float:
    """Negative log-likelihood of the measured bin (probability floored at eps, so a miss is finite)."""
    p_true = float(as_distribution(probabilities) @ one_hot(true_bin))
    return -math.log(max(p_true, eps))


# ---- over a set of forecasts -------------------------------------------------------
def bucket_index(confidences: np.ndarray, n_buckets: int) -> np.ndarray:
    """Equal-width buckets closed on the right: (0, 0.1], (0.1, 0.2], ...; 0 goes to the first."""
    return np.clip(np.ceil(confidences * n_buckets).astype(int) - 1, 0, n_buckets - 1)


def ece(confidences: ArrayLike, correct: ArrayLike, n_buckets: int = 10) -> float:
    """Expected calibration error of max-probability confidence: sum_b (n_b / N) |acc_b - conf_b|."""
    conf = np.asarray(confidences, dtype=np.float64)
    hits = np.asarray(correct, dtype=np.float64)
    if conf.shape != hits.shape or conf.ndim != 1:
        raise ValueError("confidences and correct must be 1-D and of equal length")
    if conf.size == 0:
        raise ValueError("ECE of an empty set is undefined")
    idx = bucket_index(conf, n_buckets)
    total = 0.0
    for b in range(n_buckets):
        mask = idx == b
        if mask.any():
            total += mask.sum() / conf.size * abs(hits[mask].mean() - conf[mask].mean())
    return float(total)


@dataclass(frozen=True)
class RiskCoverage:
    """Selective prediction: accept forecasts with confidence >= threshold, sweep the threshold."""

    thresholds: np.ndarray  # distinct confidences, descending
    coverage: np.ndarray  # fraction accepted at each threshold
    risk: np.ndarray  # error rate among the accepted
    aurc: float  # area under the risk-coverage step curve

    @property
    def accuracy(self) -> np.ndarray:
        return 1.0 - self.risk


def risk_coverage(confidences: ArrayLike, correct: ArrayLike) -> RiskCoverage:
    """Risk-coverage curve and AURC; tied confidences are accepted together (one threshold).

    AURC integrates the step curve: each threshold's risk times the coverage it
    adds. Without ties this is the usual (1/N) * sum_i risk(top i).
    """
    conf = np.asarray(confidences, dtype=np.float64)
    hits = np.asarray(correct, dtype=np.float64)
    if conf.shape != hits.shape or conf.ndim != 1 or conf.size == 0:
        raise ValueError("confidences and correct must be non-empty 1-D arrays of equal length")
    order = np.argsort(-conf, kind="stable")
    conf, errors = conf[order], 1.0 - hits[order]
    cum_errors = np.cumsum(errors)
    # last index of each run of equal confidence
    ends = np.flatnonzero(np.append(conf[1:] != conf[:-1], True))
    accepted = ends + 1
    coverage = accepted / conf.size
    risk = cum_errors[ends] / accepted
    added = np.diff(np.concatenate([[0.0], coverage]))
    return RiskCoverage(conf[ends], coverage, risk, float(np.sum(risk * added)))


def aurc(confidences: ArrayLike, correct: ArrayLike) -> float:
    """Area under the risk-coverage curve (lower is better)."""
    return risk_coverage(confidences, correct).aurc


def recovered_speedup(scores: ArrayLike, speedups: Sequence[float | None] | np.ndarray, k_percent: float) -> float:
    """Best speedup among the top k% by forecaster score / best speedup in the pool.

    Scores: higher is better (expected bin or expected log-speedup). Failed
    candidates count as speedup 0. At least one candidate is taken; ties in
    score keep the pool's order, so the result is deterministic.
    """
    s = np.asarray(scores, dtype=np.float64)
    v = np.array([0.0 if x is None or not math.isfinite(x) else float(x) for x in speedups])
    if s.shape != v.shape or s.ndim != 1 or s.size == 0:
        raise ValueError("scores and speedups must be non-empty 1-D arrays of equal length")
    if not 0 < k_percent <= 100:
        raise ValueError(f"k_percent must be in (0, 100], got {k_percent}")
    best = v.max()
    if best <= 0:
        raise ValueError("no candidate in the pool has a positive speedup")
    take = max(1, math.ceil(k_percent * s.size / 100 - 1e-9))
    top = np.argsort(-s, kind="stable")[:take]
    return float(v[top].max() / best)


# ---- summary -----------------------------------------------------------------------
@dataclass(frozen=True)
class ScoreSummary:
    """Mean scores over a set of forecasts (Brier is the halved form)."""

    n: int
    accuracy: float
    within_one: float
    brier_halved: float
    crps: float
    nll: float
    ece: float
    aurc: float
    mean_confidence: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def summarize(probabilities: ArrayLike | Sequence[ArrayLike], true_bins: Sequence[int] | np.ndarray,
              predicted_bins: Sequence[int] | None = None) -> ScoreSummary:
    """All scoring rules averaged over forecasts; predicted bins default to the argmax."""
    probs = np.asarray(probabilities, dtype=np.float64)
    truth = np.asarray(true_bins, dtype=int)
    if probs.ndim != 2 or probs.shape[1] != NUM_BINS or probs.shape[0] != truth.size or truth.size == 0:
        raise ValueError(f"need an (N, {NUM_BINS}) probability array and N true bins, N > 0")
    pred = np.asarray(predicted_bins, dtype=int) if predicted_bins is not None else probs.argmax(axis=1) + 1
    hits = np.array([correctness(p, t) for p, t in zip(pred, truth)])
    conf = probs.max(axis=1)
    return ScoreSummary(
        n=int(truth.size),
        accuracy=float(hits.mean()),
        within_one=float(np.mean([within_one(p, t) for p, t in zip(pred, truth)])),
        brier_halved=float(np.mean([brier(p, t) for p, t in zip(probs, truth)])),
        crps=float(np.mean([crps(p, t) for p, t in zip(probs, truth)])),
        nll=float(np.mean([nll(p, t) for p, t in zip(probs, truth)])),
        ece=ece(conf, hits),
        aurc=aurc(conf, hits),
        mean_confidence=float(conf.mean()),
    )


# ---- RL rewards (for training an open-weights forecaster) ---------------------------
REWARDS = ("correctness", "correctness+brier", "correctness+crps")


def reward(probabilities: ArrayLike | None, predicted_bin: int | None, true_bin: int,
           kind: str = "correctness+brier") -> float:
    """Paper's rewards: correctness, + (1 - Brier), or + (1 - CRPS); a parse failure (None) scores 0."""
    if kind not in REWARDS:
        raise ValueError(f"unknown reward {kind!r}; choose one of {REWARDS}")
    if probabilities is None or predicted_bin is None:
        return 0.0
    base = correctness(predicted_bin, true_bin)
    if kind == "correctness+brier":
        return base + 1.0 - brier(probabilities, true_bin)
    if kind == "correctness+crps":
        return base + 1.0 - crps(probabilities, true_bin)
    return base
