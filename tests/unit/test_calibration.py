"""Post-hoc calibration: hand values, recovery of a known temperature, and before/after scores."""

from __future__ import annotations

import numpy as np
import pytest

from kernelcast.agents.forecast.base import Forecast, Provenance
from kernelcast.agents.forecast.calibration import Calibrator, apply_temperature, fit_temperature, set_max_probability

PROV = Provenance(forecaster="test")


def overconfident_data(n: int, sharpen: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Forecasts = the true distribution sharpened by 1/T (T = sharpen); outcomes drawn from the truth."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(0.0, 1.0, size=(n, 8))
    truth = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    bins = np.array([rng.choice(8, p=q) + 1 for q in truth])
    return apply_temperature(truth, 1.0 / sharpen), bins


def test_temperature_hand_values() -> None:
    p = np.array([[0.8, 0.2, 0, 0, 0, 0, 0, 0]])
    assert apply_temperature(p, 1.0) == pytest.approx(p, abs=1e-9)
    assert apply_temperature(p, 2.0)[0, :2] == pytest.approx([2 / 3, 1 / 3], abs=1e-4)  # sqrt(0.8) = 2 sqrt(0.2)
    assert apply_temperature(p, 1e6)[0] == pytest.approx(np.full(8, 1 / 8), abs=1e-3)


def test_fit_recovers_a_known_temperature() -> None:
    probs, bins = overconfident_data(4000, sharpen=3.0)
    assert fit_temperature(probs, bins) == pytest.approx(3.0, rel=0.1)


def test_calibration_improves_nll_and_ece_on_held_out_data() -> None:
    fit_p, fit_y = overconfident_data(2000, sharpen=3.0, seed=1)
    test_p, test_y = overconfident_data(2000, sharpen=3.0, seed=2)
    report = Calibrator.fit(fit_p, fit_y).report(test_p, test_y)
    assert report.after.nll < report.before.nll - 0.1
    assert report.after.ece < report.before.ece / 2
    assert report.after.accuracy == report.before.accuracy  # temperature never changes the argmax
    assert {name for name, _, _ in report.rows()} >= {"brier_halved", "crps", "ece", "nll", "aurc"}


def test_isotonic_matches_confidence_to_accuracy_and_keeps_the_predicted_bin() -> None:
    fit_p, fit_y = overconfident_data(3000, sharpen=3.0, seed=3)
    test_p, test_y = overconfident_data(3000, sharpen=3.0, seed=4)
    cal = Calibrator.fit(fit_p, fit_y, isotonic=True)
    out = cal.transform(test_p)
    assert np.array_equal(out.argmax(axis=1), test_p.argmax(axis=1))
    assert out.sum(axis=1) == pytest.approx(np.ones(len(out)))
    assert cal.report(test_p, test_y).after.ece < 0.05


def test_set_max_probability_hand_values() -> None:
    p = np.array([[0.6, 0.3, 0.1, 0, 0, 0, 0, 0]])
    assert set_max_probability(p, np.array([0.5]))[0, :3] == pytest.approx([0.5, 0.375, 0.125])
    low = set_max_probability(p, np.array([0.2]))[0]  # cannot drop below the runner-up
    assert low.argmax() == 0 and low[0] == pytest.approx(0.3 / 0.7, abs=1e-6) and low.sum() == pytest.approx(1)
    point = set_max_probability(np.eye(8)[[2]], np.array([0.65]))[0]
    assert point[2] == pytest.approx(0.65) and point[0] == pytest.approx(0.05)


def test_apply_keeps_ids_marks_provenance_and_skips_failed() -> None:
    probs, bins = overconfident_data(500, sharpen=3.0, seed=5)
    cal = Calibrator.fit(probs, bins)
    f = Forecast.from_probabilities(probs[0], PROV).model_copy(update={"task": "t", "candidate_hash": "abc"})
    g = cal.apply(f)
    assert g.confidence < f.confidence  # overconfident forecasts are softened
    assert g.predicted_bin == f.predicted_bin and g.task == "t" and g.candidate_hash == "abc"
    assert g.provenance.calibration and "temperature" in g.provenance.calibration
    failed = Forecast.uninformative("parse: no JSON")
    assert cal.apply(failed) is failed


def test_fit_rejects_too_few_or_failed_outcomes() -> None:
    probs, bins = overconfident_data(50, sharpen=2.0)
    with pytest.raises(ValueError, match="at least"):
        Calibrator.fit(probs[:3], bins[:3])
    with pytest.raises(ValueError, match="1..8"):
        Calibrator.fit(probs, np.zeros(50, dtype=int))
    forecasts = [Forecast.from_probabilities(p, PROV) for p in probs] + [Forecast.uninformative("x")] * 5
    cal = Calibrator.fit_forecasts(forecasts, list(bins) + [3] * 5)
    assert cal.n_fit == 50  # failed forecasts left out
