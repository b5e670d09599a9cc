"""The rank skill a run's forecasts have shown on its measured children, and how the selective router lets it
lead: forecasts that have ranked this task's children lead by expected gain even where their shared sd makes
them claim little, and forecasts that have shown nothing leave the round as it was."""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import pytest

from kernelcast.agents.forecast.distributions import lognormal_bins
from kernelcast.graphs.route.forecast_skill import MIN_SKILL_PAIRS, ForecastSkill, forecast_skill
from kernelcast.graphs.route.routers.base import RoutingInput
from kernelcast.graphs.route.routers.ordering import forecast_lead
from kernelcast.graphs.route.routers.selective import SelectiveRouter
from kernelcast.graphs.search.result import run_skill
from kernelcast.tools.core.measurement import Measurement, Status
from kernelcast.tools.store.store import Store


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
    assert few.rho == 1.0 and few.shown == 0.0  # four perfectly ranked pairs happen by chance one time in 24
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
    weak = ForecastSkill(40, 0.5)
    assert 0.3 < weak.shown < forecast_lead(items)  # shown, and less than the forecasts claim
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


def test_a_runs_skill_pairs_each_measured_child_at_its_shown_speedup_with_the_forecast_it_was_routed_on(
        tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    run, other = store.runs.create("t", "dev", {}, budget=8), store.runs.create("t", "dev", {}, budget=8)

    def forecast(key: str, mean: float, failed: bool = False, run_id: str = run) -> None:
        store.forecasts.add("t", key, "dev", "prior", "", [float(p) for p in lognormal_bins(mean, 0.5)], 1, 0.5,
                            failed, run_id=run_id)

    def measure(key: str, speedup: float | None, run_id: str = run, phase: str = "search") -> None:
        status = Status.correct if speedup is not None else Status.incorrect
        store.ledger.add(Measurement(task="t", candidate_hash=key, device="dev", sizes="full", status=status,
                                     speedup=speedup, phase=phase), run_id=run_id)

    for i in range(6):  # measured in the forecasts' order
        forecast(f"c{i}", 0.2 * i)
        measure(f"c{i}", 1.0 + i)
    forecast("wrong", -1.0)
    measure("wrong", None)  # incorrect: no speedup to rank
    forecast("failed", 3.0, failed=True)
    measure("failed", 0.1)  # a failed forecast ranks nothing
    forecast("elsewhere", 3.0, run_id=other)
    measure("elsewhere", 0.1, run_id=other)  # another run's pair
    forecast("waiting", 5.0)  # forecast, not measured
    skill = run_skill(store, run)
    assert skill.pairs == 6 and skill.rho == pytest.approx(1.0)
    measure("c5", 2.5, phase="confirm")  # the incumbent's confirmation is its shown speedup: now third
    assert run_skill(store, run).rho == pytest.approx(1.0 - 6 * (1 + 1 + 1 + 9) / (6 * 35))  # rank gaps 1, 1, 1, 3
    measure("c4", None, phase="confirm")  # a failed confirmation leaves c4 without a speedup to rank
    assert run_skill(store, run).pairs == 5
