"""Scoring rules against hand-computed values (docs/architecture.md definitions)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kernelcast.agents.forecast import scoring

UNIFORM = np.full(8, 1 / 8)


def hot(b: int) -> np.ndarray:
    return np.eye(8)[b - 1]


def test_correctness_and_within_one() -> None:
    assert scoring.correctness(5, 5) == 1.0 and scoring.correctness(4, 5) == 0.0
    assert scoring.within_one(4, 5) == 1.0 and scoring.within_one(6, 5) == 1.0
    assert scoring.within_one(3, 5) == 0.0


def test_brier_is_halved() -> None:
    assert scoring.brier(hot(3), 3) == 0.0
    assert scoring.brier(hot(3), 4) == pytest.approx(1.0)  # 0.5 * (1 + 1)
    assert scoring.brier(UNIFORM, 1) == pytest.approx(0.4375)  # 0.5 * (49/64 + 7/64)
    assert scoring.brier([0, 0, 0, 0.5, 0.5, 0, 0, 0], 5) == pytest.approx(0.25)


def test_ordinal_crps() -> None:
    assert scoring.crps(hot(5), 5) == 0.0
    assert scoring.crps(hot(4), 5) == pytest.approx(1 / 7)  # the CDFs differ only at k = 4
    assert scoring.crps(hot(3), 5) == pytest.approx(2 / 7)  # ordinal: two bins off costs more
    assert scoring.crps(hot(1), 8) == pytest.approx(1.0)
    assert scoring.crps(UNIFORM, 1) == pytest.approx(140 / 64 / 7)  # sum (j/8)^2, j = 1..7


def test_nll() -> None:
    assert scoring.nll([0.5, 0.5, 0, 0, 0, 0, 0, 0], 2) == pytest.approx(math.log(2))
    assert scoring.nll(hot(1), 2) == pytest.approx(-math.log(1e-12))


def test_failure_bin_is_not_scored() -> None:
    with pytest.raises(ValueError):
        scoring.brier(UNIFORM, 0)
    with pytest.raises(ValueError):
        scoring.nll(UNIFORM, 0)


def test_ece_hand_values() -> None:
    # bucket (0.9, 1]: acc 0.5 vs conf 0.95; bucket (0.5, 0.6]: acc 1 vs conf 0.55
    assert scoring.ece([0.95, 0.95, 0.55, 0.55], [1, 0, 1, 1]) == pytest.approx(0.45)
    assert scoring.ece([0.5, 0.5, 0.5, 0.5], [1, 0, 1, 0]) == pytest.approx(0.0)
    # buckets are closed on the right: 0.1 and 0.15 fall in different buckets
    assert scoring.ece([0.1, 0.15], [0, 1]) == pytest.approx(0.5 * 0.1 + 0.5 * 0.85)


def test_risk_coverage_and_aurc() -> None:
    rc = scoring.risk_coverage([0.6, 0.9, 0.7, 0.8], [1, 1, 1, 0])
    assert rc.thresholds.tolist() == [0.9, 0.8, 0.7, 0.6]
    assert rc.coverage.tolist() == [0.25, 0.5, 0.75, 1.0]
    assert rc.risk == pytest.approx([0.0, 0.5, 1 / 3, 0.25])
    assert rc.accuracy == pytest.approx([1.0, 0.5, 2 / 3, 0.75])
    assert rc.aurc == pytest.approx((0 + 0.5 + 1 / 3 + 0.25) / 4)


def test_risk_coverage_accepts_ties_together() -> None:
    a = scoring.risk_coverage([0.9, 0.9, 0.5, 0.5], [0, 1, 1, 1])
    b = scoring.risk_coverage([0.9, 0.9, 0.5, 0.5], [1, 0, 1, 1])
    for rc in (a, b):
        assert rc.coverage.tolist() == [0.5, 1.0]
        assert rc.risk == pytest.approx([0.5, 0.25])
        assert rc.aurc == pytest.approx(0.5 * 0.5 + 0.25 * 0.5)


def test_recovered_speedup() -> None:
    scores = [0.1, 0.9, 0.5, 0.3]
    speedups = [4.0, 1.0, 2.0, None]  # None: a failed candidate
    assert scoring.recovered_speedup(scores, speedups, 25) == pytest.approx(0.25)
    assert scoring.recovered_speedup(scores, speedups, 1) == pytest.approx(0.25)  # at least one
    assert scoring.recovered_speedup(scores, speedups, 30) == pytest.approx(0.5)  # ceil(1.2) = 2
    assert scoring.recovered_speedup(scores, speedups, 50) == pytest.approx(0.5)
    assert scoring.recovered_speedup(scores, speedups, 100) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="positive speedup"):
        scoring.recovered_speedup([1, 2], [None, 0.0], 50)


def test_summarize_matches_the_single_rules() -> None:
    probs = np.array([[0.1, 0.7, 0.2, 0, 0, 0, 0, 0], [0, 0, 0, 0.4, 0.6, 0, 0, 0]])
    s = scoring.summarize(probs, [2, 4])
    assert s.n == 2
    assert s.accuracy == pytest.approx(0.5)  # argmax bins 2 and 5
    assert s.within_one == pytest.approx(1.0)
    assert s.brier_halved == pytest.approx((scoring.brier(probs[0], 2) + scoring.brier(probs[1], 4)) / 2)
    assert s.crps == pytest.approx((scoring.crps(probs[0], 2) + 1 * 0.6 ** 2 / 7) / 2)
    assert s.nll == pytest.approx((-math.log(0.7) - math.log(0.4)) / 2)
    assert s.mean_confidence == pytest.approx(0.65)
    assert set(s.as_dict()) >= {"brier_halved", "crps", "ece", "aurc"}


def test_rewards() -> None:
    assert scoring.reward(None, None, 3) == 0.0  # parse failure
    assert scoring.reward(hot(3), 3, 3, "correctness") == 1.0
    assert scoring.reward(hot(3), 3, 3, "correctness+brier") == pytest.approx(2.0)
    assert scoring.reward(hot(2), 2, 3, "correctness+crps") == pytest.approx(1 - 1 / 7)
    with pytest.raises(ValueError):
        scoring.reward(hot(3), 3, 3, "accuracy")
