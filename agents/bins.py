"""The eight speedup bins, seen from the forecaster's side.

The bins themselves are defined once, in :mod:`kernelcast.tools.bins` (measurements are
binned when stored); this module re-exports them and adds what forecasts need:
summaries of a distribution over the bins.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from kernelcast.tools.bins import BIN_CENTERS, BIN_NAMES, EDGES, FAILURE, NUM_BINS, bin_label, speedup_bin

__all__ = [
    "BIN_CENTERS", "BIN_NAMES", "EDGES", "FAILURE", "NUM_BINS", "LOG_BIN_CENTERS", "bin_label", "speedup_bin",
    "as_distribution", "expected_bin", "expected_log_speedup", "expected_speedup", "cdf", "one_hot",
    "normalized_entropy", "top2_margin",
]

BINS = np.arange(1, NUM_BINS + 1, dtype=np.float64)
LOG_BIN_CENTERS = np.log(np.asarray(BIN_CENTERS, dtype=np.float64))


def as_distribution(probabilities: Sequence[float] | np.ndarray, atol: float = 1e-6) -> np.ndarray:
    """Checked float array of 8 non-negative values summing to 1 (raises ValueError otherwise).

    Callers that hold raw model output repair it first (see :func:`kernelcast.agents.forecast.repair_probabilities`).
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
