"""Thompson sampling in the selective router, in the share of a round its forecasts lead: measurements follow the
forecast's probability that a candidate is the best, so a confident forecaster is followed, and a round whose
forecasts tell its children apart by nothing goes in the generator's order."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from kernelcast.agents.forecast.distributions import LOG_LOWER, LOG_UPPER, log_speedup_quantile, lognormal_bins
from kernelcast.graphs.route.risk_control import TrustThresholds
from kernelcast.graphs.route.routers.base import RoutingInput, measure_order
from kernelcast.graphs.route.routers.ordering import (
    drawn_incorrect,
    forecast_lead,
    led_order,
    thompson_draw,
    thompson_order,
)
from kernelcast.graphs.route.routers.selective import SelectiveRouter, acts_on


def _item(key: str, mean: float, sd: float, incumbent: float = 1.0, family: str = "") -> RoutingInput:
    probs = tuple(float(p) for p in lognormal_bins(mean, sd))
    return RoutingInput(hash=key, confidence=max(probs), predicted_bin=int(np.argmax(probs)) + 1,
                        expected_log_speedup=mean, expected_bin=sum((i + 1) * p for i, p in enumerate(probs)),
                        failed=False, probabilities=probs, incumbent=incumbent, log_mean=mean, log_sd=sd,
                        family=family)


def _first_measured(items: list[RoutingInput], seed: int) -> str:
    out = SelectiveRouter(measure_per_round=1, audit_rate=0.0, seed=seed).route(items, can_measure=1)
    (key,) = [k for k, r in out.items() if r.decision == "measure"]
    return key


def test_bin_quantiles_draw_each_bin_with_its_probability() -> None:
    probs = np.array([0.02, 0.08, 0.3, 0.1, 0.0, 0.25, 0.2, 0.05])
    n = 4000
    draws = np.array([log_speedup_quantile((i + 0.5) / n, probs) for i in range(n)])
    assert np.all(np.diff(draws) >= 0), "a quantile function is monotone"
    counts = np.array([np.sum((draws >= lo) & (draws < hi)) for lo, hi in zip(LOG_LOWER, LOG_UPPER, strict=True)])
    np.testing.assert_allclose(counts / n, probs, atol=2 / n)


def test_continuous_quantiles_follow_the_belief() -> None:
    assert log_speedup_quantile(0.5, [], 0.7, 0.3) == pytest.approx(0.7)
    assert log_speedup_quantile(0.975, [], 0.0, 1.0) == pytest.approx(1.96, abs=1e-3)
    # a Student-t belief keeps its sd: its 97.5 % point lies inside the normal's for 3 degrees of freedom
    assert 1.5 < log_speedup_quantile(0.975, [], 0.0, 1.0, 3.0) < 1.96


def test_a_confident_forecast_of_the_best_is_measured_first_whatever_the_seed() -> None:
    """Proposed last, so only the forecasts can put it first."""
    items = [_item(f"c{i}", 0.01 * i, 0.05) for i in range(20)] + [_item("best", math.log(3.0), 0.05)]
    assert forecast_lead(items) > 0.9
    assert {_first_measured(items, seed) for seed in range(20)} == {"best"}


def _passes(item: RoutingInput, seed: int) -> bool:
    return thompson_draw(item, seed) > math.log(item.incumbent)


def test_flat_wide_forecasts_follow_the_generators_order_where_expected_gain_picks_its_top() -> None:
    """A round whose forecasts say nothing to rank by (means 0.002 apart, sd 1) goes in the order the generator
    proposed, taking each proposal whose own draw beats the incumbent; expected gain would follow a mean difference
    that carries nothing."""
    items = [_item(f"c{i}", 0.002 * (29 - i), 1.0) for i in range(30)][::-1]  # the generator proposed c29 first
    assert forecast_lead(items) < 0.01
    assert max(items, key=lambda it: it.gain).hash == "c0"
    for seed in range(20):
        passing = [it.hash for it in items if _passes(it, seed)]
        assert 6 <= len(passing) <= 24  # about half the proposals pass a flat forecast's draw
        out = SelectiveRouter(measure_per_round=4, audit_rate=0.0, seed=seed).route(items, can_measure=4)
        assert [it.hash for it in items if out[it.hash].decision == "measure"] == \
            [h for h in (it.hash for it in items) if h in passing[:4]]
        assert all("the round's order" in out[h].reason for h in passing[:4])


def test_a_proposal_the_forecasts_rule_out_is_not_measured_in_turn() -> None:
    """The generator's first proposal, forecast far below the incumbent with a narrow sd, is passed over in every
    seed: the round's order takes the proposals whose draw beats the incumbent first."""
    items = [_item("hopeless", -3.0, 0.3)] + [_item(f"c{i}", 0.0, 1.0) for i in range(29)]
    assert forecast_lead(items) < 0.5  # the round's order takes the first place
    for seed in range(20):
        out = SelectiveRouter(measure_per_round=4, audit_rate=0.0, seed=seed).route(items, can_measure=4)
        assert out["hopeless"].decision == "drop"
        assert sum(r.decision == "measure" for r in out.values()) == 4


def test_the_forecast_lead_is_the_share_of_variance_the_forecasts_claim() -> None:
    """var(means) / (var(means) + mean(sd^2)): the R^2 a calibrated forecaster would have across the round."""
    two = [_item("a", 0.0, 0.5), _item("b", 1.0, 0.5)]  # var(means) 0.25, mean sd^2 0.25
    assert forecast_lead(two) == pytest.approx(0.5)
    assert forecast_lead([_item("a", 0.0, 0.05), _item("b", 2.0, 0.05)]) > 0.99
    assert forecast_lead([_item("a", 0.3, 0.5), _item("b", 0.3, 0.1)]) == 0.0  # same means: nothing to rank by
    assert forecast_lead([_item("a", 0.3, 0.5)]) == 1.0  # nothing to compare
    failed = RoutingInput(hash="f", confidence=0.125, predicted_bin=1, expected_log_speedup=5.0, expected_bin=4.5,
                          failed=True, probabilities=(0.125,) * 8)
    assert forecast_lead([*two, failed]) == pytest.approx(0.5)  # a failed forecast claims nothing
    binned = [replace(_item(k, m, 0.3), log_mean=None, log_sd=None) for k, m in (("a", -1.0), ("b", 1.0))]
    assert 0.5 < forecast_lead(binned) < 1.0  # from the bins' moments
    scaled = [replace(it, probabilities=tuple(q * s for q in it.probabilities)) for it, s in zip(binned, (1.0, 0.2))]
    assert forecast_lead(scaled) == pytest.approx(forecast_lead(binned))  # bins are read as a distribution


def test_a_broken_forecast_neither_crashes_the_round_nor_claims_a_lead() -> None:
    two = [_item("a", 0.0, 0.5), _item("b", 1.0, 0.5)]
    broken = [replace(_item("n", 0.0, 0.5), log_mean=math.nan), replace(_item("i", 0.0, 0.5), log_mean=math.inf,
                                                                        log_sd=math.inf)]
    assert forecast_lead([*two, *broken]) == pytest.approx(0.5)
    out = SelectiveRouter(measure_per_round=2, audit_rate=0.0).route([*broken, *two], can_measure=2)
    assert sum(r.decision == "measure" for r in out.values()) == 2


def test_the_led_order_refuses_a_candidate_twice() -> None:
    with pytest.raises(ValueError, match="distinct"):
        led_order([_item("a", 0.0, 0.5), _item("a", 1.0, 0.5)], 0, 0.5)


@pytest.mark.parametrize("lead", [0.0, 0.25, 0.5, 0.8, 1.0])
def test_the_led_order_interleaves_draws_and_proposals_in_the_lead_share(lead: float) -> None:
    items = [_item(f"c{i}", 0.1 * ((i * 7) % 10) - 0.5, 0.3) for i in range(10)]
    order, by_design, _ = led_order(items, 3, lead)
    assert sorted(it.hash for it in order) == sorted(it.hash for it in items)  # each once
    for n in range(1, 11):  # every prefix holds the lead's share of draws, to the nearest place
        assert abs(sum(it.hash not in by_design for it in order[:n]) - lead * n) <= 0.5 + 1e-9
    in_turn = [it.hash for it in items if _passes(it, 3)] + [it.hash for it in items if not _passes(it, 3)]
    assert 0 < sum(_passes(it, 3) for it in items) < 10  # both kinds occur
    design = [it.hash for it in order if it.hash in by_design]
    assert design == [h for h in in_turn if h in by_design]  # the passing proposals first, each kind in turn
    if lead == 0.0:
        assert [it.hash for it in order] == in_turn
    if lead == 1.0:
        assert order == thompson_order(items, 3)
    if lead == 0.5:
        assert order[0].hash == in_turn[0]  # the round's first passing proposal opens an even round


def test_a_wide_forecast_is_measured_before_a_narrow_better_one_as_often_as_it_may_be_better() -> None:
    """Where the forecasts lead (the round's other children are surely far worse), the first measurement is a
    Thompson draw: the wide candidate goes first about as often as it is the better one."""
    narrow, wide = _item("narrow", 0.1, 0.05), _item("wide", 0.0, 1.0)
    worse = [_item(f"w{i}", -3.0 - 0.01 * i, 0.05) for i in range(20)]
    assert forecast_lead([*worse, narrow, wide]) > 0.9
    share = np.mean([_first_measured([*worse, narrow, wide], seed) == "wide" for seed in range(300)])
    assert 0.3 < share < 0.6  # P(ln S_wide > about 0.1) = 0.46


def test_where_the_forecasts_lead_the_routing_depends_on_the_children_not_on_their_order() -> None:
    """Where the forecasts lead the round (the children's means far apart for their sd), the generator's order
    places nothing: the same children in another order get the same decisions. (A flat round follows the order
    the generator proposed, which a resumed run reads back from its checkpoint.)"""
    items = [_item(f"c{i}", 0.3 * i, 0.2, family=f"f{i % 3}") for i in range(20)]
    assert forecast_lead(items) > 0.97
    router = SelectiveRouter(measure_per_round=4, audit_rate=0.0, seed=5, budget=24)
    first = router.route(items, 20)
    shuffled = router.route(list(reversed(items[10:])) + items[:10], 20)
    assert {k: r.decision for k, r in first.items()} == {k: r.decision for k, r in shuffled.items()}


def test_draws_move_with_the_evidence() -> None:
    later = [thompson_draw(_item("c", 0.0, 1.0, incumbent=1.0 + i / 10), 3) for i in range(10)]
    assert len(set(later)) == 10  # a new incumbent is a new round: a new draw
    base = _item("c", 0.0, 1.0)
    more = [thompson_draw(RoutingInput(**{**base.__dict__, "family_measured": n}), 3) for n in range(5)]
    assert len(set(more)) == 5  # so does a new measurement of the family


def test_bins_that_are_no_distribution_are_refused() -> None:
    with pytest.raises(ValueError, match="non-negative"):
        log_speedup_quantile(0.5, [0.0] * 8)
    with pytest.raises(ValueError, match="non-negative"):
        log_speedup_quantile(0.5, [0.5, -0.1, 0.6, 0, 0, 0, 0, 0])


def test_coverage_still_measures_one_of_each_family_first() -> None:
    items = [_item(f"a{i}", 1.0 + 0.01 * i, 0.1, family="alpha") for i in range(10)] + \
            [_item("b0", -1.0, 0.1, family="beta")]
    out = SelectiveRouter(measure_per_round=2, audit_rate=0.0).route(items, can_measure=2)
    measured = {k for k, r in out.items() if r.decision == "measure"}
    assert "b0" in measured and len(measured) == 2


def test_family_coverage_takes_at_most_half_the_budget() -> None:
    """Five unmeasured families, three candidates of one the forecast is sure of, three measurements a round, a
    budget of 8: a round covers families only with what lies beyond the budget's second half (``can_measure`` - 4
    representatives), and gives the rest to the forecasts; once the first half is spent, they alone decide."""
    sure = [_item(f"sure{i}", math.log(4.0 - 0.1 * i), 0.05, family="f0") for i in range(3)]
    others = [_item(f"f{j}", -1.0, 0.05, family=f"f{j}") for j in range(1, 5)]

    def measured(budget: int, can_measure: int) -> tuple[int, int]:
        """(sure candidates measured, other families measured)"""
        out = SelectiveRouter(measure_per_round=3, audit_rate=0.0, budget=budget).route([*sure, *others],
                                                                                        can_measure)
        keys = {k for k, r in out.items() if r.decision == "measure"}
        return len(keys & {it.hash for it in sure}), len(keys & {it.hash for it in others})

    assert measured(0, 7) == (1, 2)  # not told the budget: one of each family first, whatever is left
    assert measured(8, 7) == (1, 2)  # 3 representatives: as many as the round measures
    assert measured(8, 6) == (2, 1)  # 2 representatives (the sure family's and one other), then the forecasts
    assert measured(8, 4) == (3, 0)  # the first half spent: the forecasts alone


def test_a_family_whose_child_failed_is_covered_and_no_longer_put_first() -> None:
    """One representative of each untried family goes first; a family whose representative measured incorrect
    counts as tried, so the next round does not put another of it first on coverage alone."""
    items = [_item(f"a{i}", 1.0 - 0.01 * i, 0.1, family="alpha") for i in range(6)] + \
            [_item("b0", -1.0, 0.1, family="beta"), _item("c0", -1.5, 0.1, family="gamma")]
    first = SelectiveRouter(measure_per_round=3, audit_rate=0.0).route(items, can_measure=3)
    assert {k for k, r in first.items() if r.decision == "measure"} == {"a0", "b0", "c0"}
    failed_beta = [replace(it, family_measured=1) if it.family == "alpha" else
                   replace(it, family_failed=1) if it.family == "beta" else it for it in items]
    second = SelectiveRouter(measure_per_round=3, audit_rate=0.0).route(failed_beta, can_measure=3)
    measured = {k for k, r in second.items() if r.decision == "measure"}
    assert "c0" in measured and "b0" not in measured, second
    assert "1 failed" in second["b0"].reason or second["b0"].decision == "drop"


@pytest.mark.parametrize(("correct", "failed"), [(0, 1), (0, 2), (1, 1), (0, 4)])
def test_a_failing_family_is_drawn_as_often_as_it_may_measure_correct(correct: int, failed: int) -> None:
    """The Thompson draw is joint with correctness: a child whose family failed ``failed`` times and measured
    correct ``correct`` times draws -inf (worth nothing) with probability 1 - (correct + 1) / (correct + failed
    + 1), over rounds; with no failure it never does."""
    child = replace(_item("c", 0.5, 0.3, family="coarsen (block)"), family_measured=correct, family_failed=failed)
    n = 2000
    worthless = sum(thompson_draw(replace(child, run_measured=r), 0) == -math.inf for r in range(n)) / n
    expected = 1 - (correct + 1) / (correct + failed + 1)
    assert worthless == pytest.approx(expected, abs=4 * math.sqrt(expected * (1 - expected) / n))
    assert child.p_correct == pytest.approx(1 - expected)
    clean = replace(child, family_failed=0)
    assert all(thompson_draw(replace(clean, run_measured=r), 0) > -math.inf for r in range(200))
    unknown = replace(child, family="")  # children of no known family share no record
    assert unknown.p_correct == 1.0


def test_siblings_share_their_familys_correctness_draw() -> None:
    """Correctness is a fact about the family on this kernel: in one round its siblings all draw "incorrect" or
    none does (a draw per child let one of ten through in nearly every round), and the next round draws anew."""
    siblings = [replace(_item(f"s{i}", 0.5, 0.3, family="coarsen (cyclic)"), family_failed=3) for i in range(10)]
    verdicts = []
    for run_measured in range(100):
        worthless = {thompson_draw(replace(s, run_measured=run_measured), 7) == -math.inf for s in siblings}
        assert len(worthless) == 1
        verdicts.append(worthless.pop())
    assert 55 < sum(verdicts) < 95  # P(incorrect) = 3/4 per round


def test_a_child_drawn_incorrect_is_not_measured_in_turn() -> None:
    """In the generator's order, children whose draw beats the incumbent go first: a child of a family that failed
    four times (P(correct) 1/5) is passed over by an untried one in most rounds, whatever the forecasts say."""
    later = 0
    for seed in range(200):
        failing = replace(_item("f", 1.0, 0.5, family="coarsen (block)"), family_failed=4, run_measured=seed)
        fresh = _item("g", 1.0, 0.3, family="restrict")  # its draw beats the reference in all but 0.05 % of rounds
        ordered, _, _ = led_order([failing, fresh], seed, lead=0.0)
        later += ordered[0].hash == "g"
    assert later > 140  # f goes first only when its draw says correct (P 0.2): about 160 of 200 (without: none)


def test_a_doubtful_family_gets_one_child_a_round() -> None:
    """A family that failed here more often than it measured correct gets one measurement a round while others
    have children to measure, whatever its draws say, so its siblings wait for that child's outcome; they are
    dropped (carried over), not pruned. A family with as many correct measurements as failures keeps the
    ordinary rule, and a round with nothing else to measure still measures the siblings."""
    failing = [replace(_item(f"f{i}", 2.0 - 0.01 * i, 0.1, family="coarsen (block)"), family_failed=1)
               for i in range(6)]
    others = [replace(_item(f"o{i}", 0.1, 0.1, family="unroll"), family_measured=3) for i in range(6)]
    for run_measured in range(40):  # rounds in which the family draws "correct" and in which it does not
        items = [replace(it, run_measured=run_measured) for it in [*failing, *others]]
        out = SelectiveRouter(measure_per_round=4, audit_rate=0.0).route(items, can_measure=4)
        measured = [k for k, r in out.items() if r.decision == "measure"]
        assert len(measured) == 4 and sum(k.startswith("f") for k in measured) <= 1, out
        held = [r for k, r in out.items() if k.startswith("f") and k not in measured]
        assert all(r.decision == "drop" for r in held)
        assert sum("siblings wait" in r.reason for r in held) == 5
    most = 0  # a family as often correct as failed is no doubtful one: in rounds it draws correct, it takes all
    for run_measured in range(10):
        healthy = [replace(it, family_measured=1, run_measured=run_measured) for it in failing] + others
        out = SelectiveRouter(measure_per_round=4, audit_rate=0.0).route(healthy, can_measure=4)
        most = max(most, sum(k.startswith("f") and r.decision == "measure" for k, r in out.items()))
    assert most == 4
    alone = SelectiveRouter(measure_per_round=4, audit_rate=0.0).route(failing, can_measure=4)
    assert sum(r.decision == "measure" for r in alone.values()) == 4  # nothing else to measure: no slot left empty


def test_a_round_of_one_family_draws_no_correctness() -> None:
    """A family's shared correctness draw tells its children apart by nothing when the round has no other
    family (a template's points, an LLM's kernels): the round is ordered as if nothing had failed."""
    items = [replace(_item(f"t{i}", 0.2 * i, 0.5, family="template"), family_measured=3) for i in range(8)]
    sunk = next(r for r in range(50) if drawn_incorrect(replace(items[0], family_failed=2, run_measured=r), 0))
    failing = [replace(it, family_failed=2, run_measured=sunk) for it in items]  # a round the family drew incorrect
    for lead in (0.0, 0.5, 1.0):
        assert [it.hash for it in led_order(failing, 0, lead)[0]] == [it.hash for it in led_order(items, 0, lead)[0]]


def test_children_drawn_incorrect_take_no_place_the_forecasts_lead_by_gain() -> None:
    """Leading by expected gain (the forecasts showed rank skill), the children of a family that drew "incorrect"
    this round come after every other child, however high their gain; in rounds it draws correct, they lead."""
    strong = [replace(_item(f"s{i}", 1.5, 0.3, family="coarsen (cyclic)"), family_measured=3, family_failed=2)
              for i in range(3)]
    weak = [_item(f"w{i}", 0.3, 0.3, family="unroll") for i in range(3)]
    seen = set()
    for run_measured in range(30):
        round_ = [replace(it, run_measured=run_measured) for it in [*strong, *weak]]
        order = [it.hash for it in led_order(round_, 0, lead=1.0, by_gain=True)[0]]
        wrong = drawn_incorrect(round_[0], 0)
        assert order == (["w0", "w1", "w2", "s0", "s1", "s2"] if wrong else ["s0", "s1", "s2", "w0", "w1", "w2"])
        seen.add(wrong)
    assert seen == {True, False}


def test_the_leftovers_weigh_gain_by_the_chance_of_a_correct_result() -> None:
    """After the generator ran dry, leftovers go by expected gain times P(correct): a child of a family that failed
    twice and measured correct once (P(correct) 1/2) comes after a clean one that promises less."""
    failing = replace(_item("f", 0.9, 0.3, family="coarsen (block)"), family_measured=1, family_failed=2)
    clean = _item("c", 0.6, 0.3, family="unroll")
    assert failing.gain > clean.gain and failing.p_correct * failing.gain < clean.gain
    assert min([failing, clean], key=measure_order).hash == "c"
    assert min([replace(failing, family_failed=0), clean], key=measure_order).hash == "f"


def test_no_child_of_a_doubtful_family_is_accepted_on_its_forecast() -> None:
    """An accepted child is expanded before it is measured: thresholds that would accept every child accept the
    children of a proven family and defer those of a family that failed here more often than it measured correct
    (pruning stays allowed: a child likely wrong and likely slow is not worth a measurement)."""
    trust = TrustThresholds(accept_above=0.5, prune_below=0.01, risk=0.1, n_calibration=500)
    proven = replace(_item("p", 2.0, 0.2, family="unroll"), family_measured=3)
    doubtful = replace(_item("d", 2.0, 0.2, family="coarsen (block)"), family_measured=2, family_failed=3)
    out = SelectiveRouter(measure_per_round=4, audit_rate=0.0).route([proven, doubtful], can_measure=4, trust=trust)
    assert out["p"].decision == "accept" and out["p"].trusted
    assert not out["d"].trusted and out["d"].decision == "measure"
    assert "would be accepted, but its family" in out["d"].reason
    slow = replace(doubtful, hash="s", log_mean=-3.0, expected_log_speedup=-3.0)
    assert SelectiveRouter(audit_rate=0.0).route([proven, slow], can_measure=4, trust=trust)["s"].trusted_as == "prune"
    # the route step confirms an incumbent only for what the router would trust against it: the same rule
    assert acts_on(trust, proven, 0) and acts_on(trust, slow, 0) and not acts_on(trust, doubtful, 0)
    assert not acts_on(trust, replace(proven, family_measured=0), 0), "nothing trusted about an unproven family"


def test_a_round_without_uncertain_children_spends_spare_places_on_likely_correct_ones() -> None:
    """Nothing uncertain: the round measures its most promising pruned children, P(beat) times P(correct)."""
    trust = TrustThresholds(prune_below=0.9, risk=0.1, n_calibration=500)
    clean = replace(_item("c", -0.3, 0.3, family="unroll"), family_measured=3)
    failing = replace(_item("f", -0.25, 0.3, family="coarsen (block)"), family_measured=2, family_failed=3)
    assert failing.p_beat > clean.p_beat and failing.p_beat * failing.p_correct < clean.p_beat
    out = SelectiveRouter(measure_per_round=1, audit_rate=0.0).route([clean, failing], can_measure=1, trust=trust)
    assert out["c"].decision == "measure" and out["c"].spare
    assert out["f"].decision == "prune"
