"""The bin table of docs/architecture.md, every edge and just above it, plus distribution summaries."""

from __future__ import annotations

import math

import numpy as np
import pytest

import kernelcast.tools.core.bins
from kernelcast.tools.core import bins
from kernelcast.tools.core.bins import (
    expected_bin,
    expected_log_speedup,
    expected_speedup,
    normalized_entropy,
    speedup_bin,
    top2_margin,
)

ABOVE = 1e-9


@pytest.mark.parametrize(
    ("speedup", "expected"),
    [
        (0.1, 1), (0.25, 1), (0.25 + ABOVE, 2),
        (0.5, 2), (0.5 + ABOVE, 3),
        (1 / math.sqrt(2), 3), (1 / math.sqrt(2) + ABOVE, 4),
        (1.0, 4), (1.0 + ABOVE, 5),
        (1.2, 5),  # the paper code's floor(2*log2(S))+4 says 4 here; the table says 5
        (math.sqrt(2), 5), (math.sqrt(2) + ABOVE, 6),
        (2.0, 6), (2.0 + ABOVE, 7),
        (4.0, 7), (4.0 + ABOVE, 8), (100.0, 8),
    ],
)
def test_speedup_bin_edges_closed_on_the_right(speedup: float, expected: int) -> None:
    assert speedup_bin(speedup) == expected


@pytest.mark.parametrize("bad", [None, float("nan"), 0.0, -1.0])
def test_failures_are_bin_zero(bad: float | None) -> None:
    assert speedup_bin(bad) == bins.FAILURE == 0


def test_agents_bins_reexports_the_single_definition() -> None:
    assert bins.EDGES is kernelcast.tools.core.bins.EDGES
    assert bins.speedup_bin is kernelcast.tools.core.bins.speedup_bin
    assert bins.NUM_BINS == 8 and len(bins.BIN_CENTERS) == 8


def test_bin_centres_lie_inside_their_bins() -> None:
    for b, centre in enumerate(bins.BIN_CENTERS, start=1):
        assert speedup_bin(centre) == b


def test_expected_bin_hand_values() -> None:
    assert expected_bin(np.full(8, 1 / 8)) == pytest.approx(4.5)
    assert expected_bin(np.eye(8)[2]) == pytest.approx(3.0)
    assert expected_bin([0, 0.5, 0, 0, 0, 0.5, 0, 0]) == pytest.approx(4.0)


def test_expected_log_speedup_hand_values() -> None:
    # the log-centres are symmetric around S = 1, so uniform means no expected speedup
    assert expected_log_speedup(np.full(8, 1 / 8)) == pytest.approx(0.0, abs=1e-12)
    assert expected_speedup(np.full(8, 1 / 8)) == pytest.approx(1.0)
    assert expected_log_speedup(np.eye(8)[7]) == pytest.approx(math.log(8.0))
    assert expected_log_speedup([0, 0, 0, 0.5, 0.5, 0, 0, 0]) == pytest.approx(0.0, abs=1e-12)
    # half on bin 7 (centre sqrt 8), half on bin 8 (centre 8): ln(8^0.75)
    assert expected_speedup([0, 0, 0, 0, 0, 0, 0.5, 0.5]) == pytest.approx(8 ** 0.75)


def test_entropy_and_margin() -> None:
    assert normalized_entropy(np.full(8, 1 / 8)) == pytest.approx(1.0)
    assert normalized_entropy(np.eye(8)[0]) == pytest.approx(0.0)
    assert normalized_entropy([0.5, 0.5, 0, 0, 0, 0, 0, 0]) == pytest.approx(1 / 3)
    assert top2_margin([0.6, 0.3, 0.1, 0, 0, 0, 0, 0]) == pytest.approx(0.3)
    assert top2_margin(np.full(8, 1 / 8)) == pytest.approx(0.0)


@pytest.mark.parametrize(
    "bad",
    [[0.5, 0.5], [0.2] * 8, [1.5, -0.5, 0, 0, 0, 0, 0, 0], [float("nan")] + [0.0] * 7],
)
def test_as_distribution_rejects_non_distributions(bad: list[float]) -> None:
    with pytest.raises(ValueError):
        bins.as_distribution(bad)


def test_one_hot_rejects_failure_bin() -> None:
    with pytest.raises(ValueError, match="failures"):
        bins.one_hot(0)
