"""Between continuous log-speedup beliefs and the eight bins.

Forecasts live on the bins; performance models and regressions think in
log-speedup with a spread. This module converts both ways and answers the
router's question, P(S > u), from a bin distribution by spreading each bin's
mass uniformly in log S across the bin (the open end bins span one more
factor of 4, matching their geometric centres 1/8 and 8).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.stats import norm
from scipy.stats import t as student_t

from kernelcast.tools.core.bins import EDGES, NUM_BINS

LOG_EDGES = np.log(np.asarray(EDGES, dtype=np.float64))
# log-extent of each bin for interpolation: the outer bins reach 1/16 and 16
LOG_LOWER = np.concatenate([[math.log(1 / 16)], LOG_EDGES])
LOG_UPPER = np.concatenate([LOG_EDGES, [math.log(16.0)]])
MIN_SIGMA = 0.05


def _standard(dof: float | None) -> tuple[Any, float]:
    """The standardized distribution of a belief and the factor from its sd to its scale: a Student-t of
    ``dof`` degrees of freedom with the belief's variance (dof > 2), or the normal (None)."""
    if dof is None:
        return norm, 1.0
    if dof <= 2:
        raise ValueError(f"a Student-t belief needs more than 2 degrees of freedom for a finite sd, got {dof}")
    return student_t(dof), math.sqrt((dof - 2) / dof)


def lognormal_bins(mu: float | np.ndarray, sigma: float | np.ndarray, dof: float | None = None) -> np.ndarray:
    """Bin probabilities of log S with mean mu and sd sigma, normal or (``dof``) Student-t: shape (8,) or (N, 8)."""
    dist, to_scale = _standard(dof)
    mu_a = np.atleast_1d(np.asarray(mu, dtype=np.float64))
    sd = np.maximum(np.broadcast_to(np.asarray(sigma, dtype=np.float64), mu_a.shape), MIN_SIGMA) * to_scale
    cdf = dist.cdf((LOG_EDGES[None, :] - mu_a[:, None]) / sd[:, None])
    full = np.concatenate([np.zeros((len(mu_a), 1)), cdf, np.ones((len(mu_a), 1))], axis=1)
    probs = np.clip(np.diff(full, axis=1), 1e-9, None)
    probs /= probs.sum(axis=1, keepdims=True)
    return probs[0] if np.ndim(mu) == 0 else probs


def belief_above(log_threshold: float, mu: float, sigma: float, dof: float | None = None) -> float:
    """P(log S > log_threshold) under a continuous belief (normal, or Student-t with ``dof``)."""
    dist, to_scale = _standard(dof)
    return float(dist.sf((log_threshold - mu) / (sigma * to_scale)))


def belief_gain(log_threshold: float, mu: float, sigma: float, dof: float | None = None) -> float:
    """E[(log S - log_threshold)+] under a continuous belief: the expected improvement in ln S."""
    dist, to_scale = _standard(dof)
    scale = sigma * to_scale
    z = (log_threshold - mu) / scale
    tail = 1.0 if dof is None else (dof + z * z) / (dof - 1)  # E[(T - z)+] = tail * pdf(z) - z * sf(z)
    return float(scale * (tail * dist.pdf(z) - z * dist.sf(z)))


def prob_above(probabilities: Sequence[float] | np.ndarray, threshold: float) -> float:
    """P(S > threshold), interpolating within the bin that holds the threshold (uniform in log S)."""
    p = np.asarray(probabilities, dtype=np.float64)
    if p.shape != (NUM_BINS,):
        raise ValueError(f"a bin distribution needs {NUM_BINS} values, got shape {p.shape}")
    if threshold <= 0:
        return 1.0
    x = math.log(threshold)
    share = np.clip((LOG_UPPER - x) / (LOG_UPPER - LOG_LOWER), 0.0, 1.0)  # part of each bin above x
    return float(np.clip(p @ share, 0.0, 1.0))


def p_beat(probabilities: Sequence[float] | np.ndarray, threshold: float, log_mean: float | None = None,
           log_sd: float | None = None, log_dof: float | None = None) -> float | None:
    """P(S > threshold) from a forecast: its continuous belief about ln S if it has one, else its bins
    (interpolated within the bin); None for bins alone when the threshold lies in an open end bin (beyond 4x or
    below 0.25x), where bins cannot tell."""
    if log_mean is not None and log_sd is not None and log_sd > 0:
        return belief_above(math.log(threshold), log_mean, log_sd, log_dof)
    if not EDGES[0] <= threshold <= EDGES[-1]:
        return None
    return prob_above(probabilities, threshold)


def moments(probabilities: Sequence[float] | np.ndarray) -> tuple[float, float]:
    """Mean and standard deviation of log S under the interpolated distribution."""
    p = np.asarray(probabilities, dtype=np.float64)
    lo, hi = LOG_LOWER, LOG_UPPER
    mean = float(p @ ((lo + hi) / 2))
    second = float(p @ ((lo * lo + lo * hi + hi * hi) / 3))
    return mean, math.sqrt(max(second - mean * mean, 0.0))


def log_speedup_quantile(u: float, probabilities: Sequence[float] | np.ndarray, log_mean: float | None = None,
                         log_sd: float | None = None, log_dof: float | None = None) -> float:
    """The ``u``-quantile of ln S under a forecast: its continuous belief if it has one, else its bins (uniform in
    ln S within each bin, the open end bins reaching 1/16 and 16). With ``u`` uniform in (0, 1) it is one draw
    from the forecast: Thompson sampling's draw (``graphs.route.routers.ordering``)."""
    u = min(max(u, 1e-9), 1.0 - 1e-9)
    if log_mean is not None and log_sd is not None and log_sd > 0:
        dist, to_scale = _standard(log_dof)
        return float(log_mean + log_sd * to_scale * dist.ppf(u))
    p = np.asarray(probabilities, dtype=np.float64)
    if p.shape != (NUM_BINS,):
        raise ValueError(f"a bin distribution needs {NUM_BINS} values, got shape {p.shape}")
    if np.any(p < 0) or p.sum() <= 0:
        raise ValueError(f"bin probabilities must be non-negative with a positive sum, got {p.tolist()}")
    cum = np.cumsum(p / p.sum())
    k = min(int(np.searchsorted(cum, u, side="right")), NUM_BINS - 1)
    below = cum[k - 1] if k else 0.0
    share = 0.0 if p[k] <= 0 else min(max((u - below) / (cum[k] - below), 0.0), 1.0)
    return float(LOG_LOWER[k] + share * (LOG_UPPER[k] - LOG_LOWER[k]))


__all__ = ["belief_above", "belief_gain", "expected_gain", "log_speedup_quantile", "lognormal_bins", "moments",
           "prob_above"]


def expected_gain(probabilities: Sequence[float] | np.ndarray, threshold: float) -> float:
    """E[max(0, ln S - ln threshold)] under the interpolated distribution: how much a candidate is expected
    to improve on the incumbent (the order in which uncertain candidates go to the hardware)."""
    p = np.asarray(probabilities, dtype=np.float64)
    x = math.log(threshold) if threshold > 0 else -math.inf
    lo, hi = np.maximum(LOG_LOWER, x), LOG_UPPER
    width = LOG_UPPER - LOG_LOWER
    above = np.clip(hi - lo, 0.0, None)
    # mean of (t - x) over the part of each bin above x, times the share of the bin that part holds
    gain = np.where(above > 0, (above / width) * ((lo + hi) / 2 - x), 0.0)
    return float(p @ gain)
