"""The eight speedup bins of the GPU Forecasters paper, by explicit edges.

Lives in ``tools`` because measurements are binned as they are stored; the
summaries forecasts need of a distribution over the bins live here too (one module). Intervals are closed on the
right. The paper code's ``floor(2*log2(S)) + 4`` is deliberately not used: it
puts S = 1.2 in bin 4.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

import numpy as np

EDGES: tuple[float, ...] = (0.25, 0.5, 1 / math.sqrt(2), 1.0, math.sqrt(2), 2.0, 4.0)
NUM_BINS = 8
FAILURE = 0
BIN_NAMES: dict[int, str] = {
    0: "failure",
    1: "severe slowdown",
    2: "significant slowdown",
    3: "moderate slowdown",
    4: "minor slowdown",
    5: "minor speedup",
    6: "significant speedup",
    7: "high speedup",
    8: "extreme speedup",
}
# Geometric centre of each bin (open ends take one more factor of 2), used
# for expected log-speedup.
BIN_CENTERS: tuple[float, ...] = (0.125, math.sqrt(0.125), math.sqrt(0.5 / math.sqrt(2)), 2 ** -0.25,
                                  2 ** 0.25, math.sqrt(2 * math.sqrt(2)), math.sqrt(8.0), 8.0)


def speedup_bin(speedup: float | None) -> int:
    """Bin 1..8 for a measured speedup; 0 (FAILURE) for None, NaN or non-positive."""
    if speedup is None or math.isnan(speedup) or speedup <= 0:
        return FAILURE
    # bisect_left: a value equal to an edge stays in the lower bin (closed on the right)
    return bisect.bisect_left(EDGES, speedup) + 1


def bin_label(b: int) -> str:
    if b == 0:
        return "failure"
    lo = EDGES[b - 2] if b >= 2 else 0.0
    hi = EDGES[b - 1] if b <= 7 else math.inf
    if b == 1:
        return f"{BIN_NAMES[b]} (S <= {hi:.3g})"
    if b == NUM_BINS:
        return f"{BIN_NAMES[b]} (S > {lo:.3g})"
    return f"{BIN_NAMES[b]} ({lo:.3g} < S <= {hi:.3g})"


BINS = np.arange(1, NUM_BINS + 1, dtype=np.float64)
LOG_BIN_CENTERS = np.log(np.asarray(BIN_CENTERS, dtype=np.float64))


def as_distribution(probabilities: Sequence[float] | np.ndarray, atol: float = 1e-6) -> np.ndarray:
    """Checked float array of 8 non-negative values summing to 1 (raises ValueError otherwise).

    Callers that hold raw model output repair it first (see :func:`kernelcast.agents.forecast.base.repair_probabilities`).
    """
    p = np.asarray(probabilities, dtype=np.float64)
    if p.shape != (NUM_BINS,):
        raise ValueError(f"a bin distribution needs {NUM_BINS} values, got shape {p.shape}")
    if not np.all(np.isfinite(p)) or np.any(p < 0):
        raise ValueError(f"bin probabilities must be finite and non-negative: {p.tolist()}")
    if abs(p.sum() - 1.0) > atol:
        raise ValueError(f"bin probabilities must sum to 1, got {p.sum():.6g}")
    return p


def expected_bin(probabilities: Sequence[float] | np.ndarray) -> float:
    """sum_b b * p_b: the paper's ranking score for the top-k surrogate search."""
    return float(BINS @ as_distribution(probabilities))


def expected_log_speedup(probabilities: Sequence[float] | np.ndarray) -> float:
    """sum_b p_b * ln(center_b): a ranking score in speedup units (bins are not equally wide)."""
    return float(LOG_BIN_CENTERS @ as_distribution(probabilities))


def expected_speedup(probabilities: Sequence[float] | np.ndarray) -> float:
    """Geometric-mean speedup implied by the distribution: exp(expected log-speedup)."""
    return math.exp(expected_log_speedup(probabilities))


def cdf(probabilities: Sequence[float] | np.ndarray) -> np.ndarray:
    """F(k) = P(bin <= k) for k = 1..8."""
    return np.cumsum(as_distribution(probabilities))


def one_hot(true_bin: int) -> np.ndarray:
    """The outcome vector y of a measured bin 1..8 (FAILURE is outside the distribution)."""
    if not 1 <= int(true_bin) <= NUM_BINS:
        raise ValueError(f"true bin must be 1..{NUM_BINS} (failures are kept out of forecast scoring), got {true_bin}")
    y = np.zeros(NUM_BINS)
    y[int(true_bin) - 1] = 1.0
    return y


def normalized_entropy(probabilities: Sequence[float] | np.ndarray) -> float:
    """Shannon entropy divided by log(8): 0 for a point mass, 1 for uniform."""
    p = as_distribution(probabilities)
    nz = p[p > 0]
    return float(-(nz * np.log(nz)).sum() / math.log(NUM_BINS))


def top2_margin(probabilities: Sequence[float] | np.ndarray) -> float:
    """Largest minus second-largest probability."""
    p = np.sort(as_distribution(probabilities))
    return float(p[-1] - p[-2])
