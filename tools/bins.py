"""The eight speedup bins of the GPU Forecasters paper, by explicit edges.

Lives in ``tools`` because measurements are binned as they are stored; the
forecaster side (``kernelcast.agents.bins``) re-exports it. Intervals are closed on the
right. The paper code's ``floor(2*log2(S)) + 4`` is deliberately not used: it
puts S = 1.2 in bin 4.
"""

from __future__ import annotations

import bisect
import math

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
