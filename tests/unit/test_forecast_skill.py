"""The rank skill a run's forecasts have shown on its measured children, and how the selective router lets it
lead: forecasts that have ranked this task's children lead by expected gain even where their shared sd makes
them claim little, and forecasts that have shown nothing leave the round as it was."""

from __future__ import annotations

import math
import random

import numpy as np

from kernelcast.agents.forecast.distributions import lognormal_bins
from kernelcast.graphs.route.forecast_skill import MIN_SKILL_PAIRS, ForecastSkill, forecast_skill
from kernelcast.graphs.route.routing import RoutingInput, SelectiveRouter, forecast_lead


def _item(key: str, mean: float, sd: float) -> RoutingInput:
    probs = tuple(float(p) for p in lognormal_bins(mean, sd))
    return RoutingInput(hash=key, confidence=max(probs), predicted_bin=int(np.argmax(probs)) + 1,
                        expected_log_speedup=mean, expected_bin=sum((i + 1) * p for i, p in enumerate(probs)),
                        failed=False, probabilities=probs, log_mean=mean, log_sd=sd)


def _ranked(n: int, noise: float, seed: int = 0) -> list[tuple[float, float]]:
    """n (predicted, measured) pairs whose measurements follow the predictions up to ``noise``."""
    rng = random.Random(seed)
    return [(x / n, x / n + rng.gauss(0.0, noise)) for x in range(n)]


def test_a_ranking_shown_on_enough_pairs_counts_and_a_few_lucky_pairs_do_not() -> None:
    perfect = forecast_skill(_ranked(12, 0.0))
    assert perfect.rho == 1.0 and perfect.shown > 0.6
    few = forecast_skill(_ranked(MIN_SKILL_PAIRS - 1, 0.0))
    assert few.rho is None and few.shown == 0.0  # four perfectly ranked pairs happen by chance one time in 24
    reversed_ = forecast_skill([(p, -m) for p, m in _ranked(12, 0.0)])
    assert reversed_.rho == -1.0 and reversed_.shown == 0.0  # a forecaster that ranks backwards shows nothing
    shuffled = forecast_skill([(p, m) for (p, _), (_, m) in zip(_ranked(12, 0.0), random.Random(3).sample(
        _ranked(12, 0.0), 12), strict=True)])
    assert shuffled.shown < 0.3


def test_the_same_correlation_shows_more_on_more_pairs() -> None:
    shown = [ForecastSkill(n, 0.6).shown for n in (5, 8, 12, 16, 24, 48)]
    assert shown == sorted(shown) and shown[0] == 0.0 and 0.3 < shown[-1] < 0.6


def test_pairs_that_tell_nothing_apart_or_are_broken_show_nothing() -> None:
    assert forecast_skill([(0.2, float(i)) for i in range(10)]).rho is None  # every forecast the same
    assert forecast_skill([(float(i), 0.0) for i in range(10)]).rho is None  # every measurement the same
    broken = forecast_skill([*_ranked(8, 0.0), (math.nan, 1.0), (1.0, math.inf)])
    assert broken.pairs == 8 and broken.rho == 1.0


def _round() -> list[RoutingInput]:
    """30 proposals, the generator's first the forecasts' worst; means 0.01 apart under a shared sd of 1, so the
    forecasts claim almost nothing."""
    return [_item(f"c{i}", 0.01 * i, 1.0) for i in range(30)]


def test_forecasts_that_ranked_this_run_lead_by_expected_gain() -> None:
    items = _round()
    assert forecast_lead(items) < 0.01
    skill = forecast_skill(_ranked(16, 0.1))
    assert skill.shown > 0.6
    for seed in range(10):
        out = SelectiveRouter(measure_per_round=4, audit_rate=0.0, seed=seed).route(items, 4, skill=skill)
        by_gain = [k for k, r in out.items() if r.decision == "measure" and "expected gain" in r.reason]
        # the shown share of the 4 places (to the nearest place) goes to the highest expected gains, in order
        assert len(by_gain) == math.floor(4 * skill.shown + 0.5)
        assert set(by_gain) == {f"c{29 - i}" for i in range(len(by_gain))}
        assert all("Spearman" in out[k].reason for k in by_gain)


def test_skill_below_what_the_forecasts_claim_changes_nothing() -> None:
    items = [_item(f"c{i}", 0.3 * ((i * 7) % 10), 0.2) for i in range(10)]  # forecasts far apart: they claim much
    weak = ForecastSkill(6, 0.3)
    assert weak.shown < forecast_lead(items)
    router = SelectiveRouter(measure_per_round=4, audit_rate=0.0, seed=2)

    def decisions(round_: list[RoutingInput], skill: ForecastSkill | None) -> dict[str, str]:
        out = router.route(round_, 4, skill=skill)
        if skill is not None:  # the reasons say what the forecasts showed, and that they did not lead by it
            assert all("Spearman" in r.reason or skill.rho is None for r in out.values() if r.decision == "measure")
            assert not any("expected gain" in r.reason for r in out.values())
        return {k: r.decision for k, r in out.items()}

    assert decisions(items, weak) == decisions(items, None)
    flat = _round()
    assert decisions(flat, ForecastSkill(3, None)) == decisions(flat, None)
