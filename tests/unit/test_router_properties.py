"""Property-based tests of the routing policy and the budget ledger (hypothesis)."""

from __future__ import annotations

import math
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from kernelcast.agents.forecast.distributions import prob_above
from kernelcast.graphs.route.forecast_skill import ForecastSkill
from kernelcast.graphs.route.risk_control import TrustThresholds
from kernelcast.graphs.route.routers.base import RoutingInput, measure_order
from kernelcast.graphs.route.routers.family_rules import coverage_room, doubtful_family
from kernelcast.graphs.route.routers.measure_all import MeasureAllRouter
from kernelcast.graphs.route.routers.ordering import forecast_lead, led_order, thompson_draw
from kernelcast.graphs.route.routers.selective import SelectiveRouter
from kernelcast.graphs.route.routers.topk import TopKRouter

probs = st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=8, max_size=8).filter(lambda p: sum(p) > 1e-6)


@st.composite
def routing_inputs(draw) -> list[RoutingInput]:
    n = draw(st.integers(min_value=0, max_value=24))
    items = []
    for i in range(n):
        p = draw(probs)
        total = sum(p)
        p = [x / total for x in p]
        failed = draw(st.booleans())
        if failed:
            p = [1 / 8] * 8
        best = max(range(8), key=lambda b: p[b])
        items.append(RoutingInput(hash=f"c{i}", confidence=max(p), predicted_bin=best + 1,
                                  expected_log_speedup=draw(st.floats(-3, 3)),
                                  expected_bin=sum((b + 1) * q for b, q in enumerate(p)), failed=failed,
                                  probabilities=tuple(p), incumbent=draw(st.floats(0.2, 40.0)),
                                  log_mean=draw(st.one_of(st.none(), st.floats(-3, 4))),
                                  log_sd=draw(st.floats(0.05, 2.0))))
    return items


thresholds = st.builds(
    TrustThresholds,
    prune_below=st.one_of(st.none(), st.floats(0.0, 0.5)),
    accept_above=st.one_of(st.none(), st.floats(0.5, 1.0)),
    probation=st.sampled_from([(), (("prune", 1),), (("accept", 2),), (("prune", 2), ("accept", 1))]),
)
routers = st.one_of(
    st.builds(SelectiveRouter, measure_per_round=st.integers(1, 8), audit_rate=st.floats(0.0, 1.0),
              seed=st.integers(0, 5)),
    st.builds(TopKRouter, k=st.integers(1, 8)),
    st.just(MeasureAllRouter()),
)


@settings(max_examples=300, deadline=None)
@given(items=routing_inputs(), can_measure=st.integers(0, 30), router=routers, trust=thresholds,
       audits=st.integers(0, 5))
def test_every_candidate_gets_exactly_one_decision_within_budget(items, can_measure, router, trust, audits) -> None:
    out = router.route(items, can_measure, trust=trust, audits=audits)
    assert set(out) == {it.hash for it in items}
    measured = [h for h, r in out.items() if r.decision == "measure"]
    assert len(measured) <= can_measure
    assert all(r.decision in ("measure", "accept", "prune", "drop") and r.reason for r in out.values())
    assert sum(1 for r in out.values() if r.audit) <= audits


@settings(max_examples=300, deadline=None)
@given(items=routing_inputs(), can_measure=st.integers(0, 30), trust=thresholds, k=st.integers(1, 8),
       audits=st.integers(0, 5))
def test_selective_trusts_only_certified_working_forecasts(items, can_measure, trust, k, audits) -> None:
    out = SelectiveRouter(measure_per_round=k).route(items, can_measure, trust=trust, audits=audits)
    by_hash = {it.hash: it for it in items}
    for key, routed in out.items():
        it = by_hash[key]
        p = it.p_beat
        assert routed.p_beat == p
        if it.log_mean is None and not it.failed and 0.25 <= it.incumbent <= 4.0:
            assert p == prob_above(it.probabilities, it.incumbent)  # read from the bins
        if p is None:
            assert routed.decision in ("measure", "drop") and not routed.audit, "no P(beat): never trusted"
        if it.failed:
            assert routed.decision in ("measure", "drop") and not routed.audit, "a failed forecast is never trusted"
        if routed.trusted:
            assert not trust.on_probation(routed.decision), "a side on probation trusts nothing"
        if routed.probation:
            assert routed.audit and trust.on_probation(routed.trusted_as)
        if routed.decision == "prune" or routed.trusted_as == "prune":
            assert trust.prune_below is not None and p is not None and p <= trust.prune_below
        if routed.decision == "accept" or routed.trusted_as == "accept":
            assert trust.accept_above is not None and p is not None and p >= trust.accept_above
    for side in ("prune", "accept"):  # a trial takes the audits it needs, no more
        assert sum(r.probation and r.trusted_as == side for r in out.values()) <= trust.trial_audits_needed(side)
    deferred = [it for it in items if not out[it.hash].trusted_as]
    measured = [by_hash[h] for h, r in out.items() if r.decision == "measure" and not r.audit]
    assert len(measured) <= k
    # deferred candidates (no families here: no coverage step) are measured in the led order: the Thompson draws
    # for the round's forecast lead, the round's order (the items' order) for the rest
    uncertain = [it for it in measured if not out[it.hash].trusted_as]
    if len(uncertain) < min(k, can_measure) and not trust.probation:  # (a trial's audits take places first)
        assert len(uncertain) == len(deferred)  # a round measures all it may
    if not any("is on probation" in r.reason for r in out.values()):  # else those join the deferred ones last
        drawn = [it for it in uncertain if "Thompson draw" in out[it.hash].reason]
        in_turn = [it for it in uncertain if "the round's order" in out[it.hash].reason]
        assert len(drawn) + len(in_turn) == len(uncertain)
        # the draws take about the lead's share of the places (midpoint rounding: within half a place)
        assert abs(len(drawn) - forecast_lead(deferred) * len(uncertain)) <= 0.5 + 1e-9
        # the round's order takes its items in turn, those whose draw beats the incumbent first, skipping only
        # those the draws took
        passes = [it.failed or thompson_draw(it, 0) > math.log(it.incumbent) for it in deferred]
        turn = [it for it, ok in zip(deferred, passes, strict=True) if ok] + \
            [it for it, ok in zip(deferred, passes, strict=True) if not ok]
        assert in_turn == [it for it in turn if it not in drawn][:len(in_turn)]
        # a draw's place goes to the highest draw of what is left: none unmeasured drew higher
        left = [it for it in deferred if it not in uncertain]
        for it in drawn:
            assert all(thompson_draw(it, 0) >= thompson_draw(other, 0) for other in left)


@settings(max_examples=200, deadline=None)
@given(items=routing_inputs(), can_measure=st.integers(0, 30), trust=thresholds, k=st.integers(1, 8),
       budget=st.integers(0, 40), families=st.lists(st.sampled_from(["", "a", "b", "c"]), min_size=24, max_size=24),
       evidence=st.lists(st.integers(0, 3), min_size=24, max_size=24))
def test_family_coverage_keeps_every_invariant(items, can_measure, trust, k, budget, families, evidence) -> None:
    """With families and a budget: one decision each, the caps kept, and no more family representatives put before
    the Thompson order than coverage_room allows."""
    items = [replace(it, family=families[i], family_measured=evidence[i]) for i, it in enumerate(items)]
    out = SelectiveRouter(measure_per_round=k, seed=1, budget=budget).route(items, can_measure, trust=trust)
    assert set(out) == {it.hash for it in items}
    measured = [by for by in items if out[by.hash].decision == "measure" and not out[by.hash].audit]
    assert len([r for r in out.values() if r.decision == "measure"]) <= can_measure
    assert len(measured) <= k
    room = coverage_room(budget, can_measure)
    if room is not None and not trust.probation:  # else a side's untried would-be decisions are deferred last
        deferred = [it for it in items if not out[it.hash].trusted_as]
        order = [it.hash for it in led_order(deferred, 1, forecast_lead(deferred))[0]]
        # a measured child that the led order alone would not have reached is a family representative
        uncertain = [it for it in measured if not out[it.hash].trusted_as]  # not a spare measurement of a prune
        reached = set(order[:len(uncertain)])
        jumped = [it for it in uncertain if it.hash not in reached]
        assert len(jumped) <= room
        assert all(it.family and it.family_measured == 0 for it in jumped)


@settings(max_examples=200, deadline=None)
@given(items=routing_inputs(), can_measure=st.integers(0, 30), trust=thresholds, k=st.integers(1, 8),
       audits=st.integers(0, 5), families=st.lists(st.sampled_from(["a", "b", "c"]), min_size=24, max_size=24),
       records=st.fixed_dictionaries({f: st.tuples(st.integers(0, 3), st.integers(0, 4)) for f in "abc"}),
       run=st.integers(0, 40))
def test_family_failures_keep_every_invariant(items, can_measure, trust, k, audits, families, records, run) -> None:
    """With families that failed here: one decision each, the caps kept, and a doubtful family (more failures
    than correct measurements) gets a second child measured in a round of several families only once every
    deferred child of the other families has a place."""
    items = [replace(it, family=families[i], family_measured=records[families[i]][0],
                     family_failed=records[families[i]][1], run_measured=run) for i, it in enumerate(items)]
    out = SelectiveRouter(measure_per_round=k, seed=1, budget=24).route(items, can_measure, trust=trust, audits=audits)
    assert set(out) == {it.hash for it in items}
    assert len([r for r in out.values() if r.decision == "measure"]) <= can_measure
    uncertain = [it for it in items if not out[it.hash].trusted_as]
    measured = [it for it in uncertain if out[it.hash].decision == "measure"]
    assert len(measured) <= k
    if len({it.family for it in uncertain}) < 2:
        return
    for family in "abc":
        mine = [it for it in measured if it.family == family]
        if len(mine) > 1 and doubtful_family(mine[0]):
            assert all(out[it.hash].decision == "measure" for it in uncertain if not doubtful_family(it)), out


@settings(max_examples=200, deadline=None)
@given(items=routing_inputs(), can_measure=st.integers(0, 30))
def test_without_thresholds_nothing_is_trusted(items, can_measure) -> None:
    out = SelectiveRouter().route(items, can_measure, trust=TrustThresholds(), audits=3)
    assert all(r.decision in ("measure", "drop") and not r.audit for r in out.values())


@settings(max_examples=200, deadline=None)
@given(rounds=st.lists(routing_inputs(), min_size=1, max_size=8), budget=st.integers(0, 40), router=routers)
def test_budget_ledger_over_many_rounds_never_overspends(rounds, budget, router) -> None:
    """Drive the router round after round with the budget that is left, as the graph does."""
    spent = 0
    final: dict[str, str] = {}
    for r, items in enumerate(rounds):
        items = [RoutingInput(**{**it.__dict__, "hash": f"r{r}-{it.hash}"}) for it in items]
        out = router.route(items, budget - spent, trust=TrustThresholds(prune_below=0.2, accept_above=0.8), audits=2)
        spent += sum(1 for x in out.values() if x.decision == "measure")
        for key, routed in out.items():
            assert key not in final
            final[key] = routed.decision
    assert spent <= budget
    assert len(final) == sum(len(items) for items in rounds)


@settings(max_examples=200, deadline=None)
@given(items=routing_inputs().filter(lambda its: len(its) >= 2), can_measure=st.integers(0, 30), k=st.integers(1, 8),
       pairs=st.integers(0, 40), rho=st.one_of(st.none(), st.floats(-1.0, 1.0), st.floats(0.6, 1.0)),
       shared_sd=st.floats(0.5, 6.0))
def test_a_shown_skill_leads_by_expected_gain_within_its_share(items, can_measure, k, pairs, rho, shared_sd) -> None:
    """With the rank skill a run's forecasts showed: one decision each, the caps kept; where the shown skill
    exceeds the share the forecasts claim, the forecasts' places go to the highest expected gains (none left
    unmeasured gains more) and take the shown share of the places, the round's order the rest. The beliefs get
    one wide sd (``shared_sd``), as a task's level uncertain for every child alike, so that they claim little."""
    items = [replace(it, log_mean=it.expected_log_speedup if it.log_mean is None else it.log_mean, log_sd=shared_sd)
             for it in items]
    skill = ForecastSkill(pairs, rho)
    out = SelectiveRouter(measure_per_round=k, seed=2).route(items, can_measure, skill=skill)
    assert set(out) == {it.hash for it in items}
    measured = [it for it in items if out[it.hash].decision == "measure"]
    assert len(measured) <= min(k, can_measure)
    led = [it for it in measured if "expected gain" in out[it.hash].reason]
    claimed = forecast_lead(items)
    if skill.shown <= claimed:
        assert not led  # the claim leads, by Thompson draw, as without a skill
        return
    assert not any("Thompson draw" in out[it.hash].reason for it in measured)
    assert abs(len(led) - skill.shown * len(measured)) <= 0.5 + 1e-9
    left = [it for it in items if it not in measured]
    assert all(measure_order(it) <= measure_order(other) for it in led for other in left)
