"""Routing on P(child beats the incumbent) with certified trust thresholds (issue 13, item 4)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kernelcast.agents.forecast.distributions import belief_above, belief_gain, expected_gain, lognormal_bins, moments, prob_above
from kernelcast.graphs.route.risk_control import (
    DEVICE_RECORD,
    OWN_ROWS_TO_SWITCH,
    SEED_REPLAY,
    CalibrationRow,
    TrustThresholds,
    certify_stage,
    clopper_pearson_interval,
    clopper_pearson_lower,
    clopper_pearson_upper,
    fit_thresholds,
    rows_to_certify,
)
from kernelcast.graphs.route.routers.base import RoutingInput, audit_draw
from kernelcast.graphs.route.routers.selective import SelectiveRouter
from kernelcast.tools.core.bins import EDGES


def test_prob_above_reads_bins_and_interpolates_inside_them() -> None:
    p = np.full(8, 1 / 8)
    assert prob_above(p, 1.0) == pytest.approx(0.5)  # four bins above 1.0
    for k, edge in enumerate(EDGES):
        assert prob_above(p, edge) == pytest.approx((7 - k) / 8)
    inside = prob_above(p, math.sqrt(math.sqrt(2)))  # halfway (in log) through bin 5
    assert inside == pytest.approx(3 / 8 + 1 / 16)
    grid = [0.05, 0.3, 0.6, 0.9, 1.1, 1.7, 3.0, 5.0, 20.0]
    values = [prob_above(p, u) for u in grid]
    assert values == sorted(values, reverse=True) and values[0] == 1.0 and values[-1] == 0.0
    with pytest.raises(ValueError, match="8 values"):
        prob_above([0.5, 0.5], 1.0)


def test_lognormal_bins_and_moments_agree() -> None:
    probs = lognormal_bins(0.0, 0.5)
    assert probs.sum() == pytest.approx(1.0) and prob_above(probs, 1.0) == pytest.approx(0.5, abs=1e-6)
    mean, sd = moments(lognormal_bins(math.log(2.5), 0.3))
    assert mean == pytest.approx(math.log(2.5), abs=0.15) and 0.2 < sd < 0.6
    many = lognormal_bins(np.array([-1.0, 0.0, 1.0]), np.array([0.4, 0.4, 0.4]))
    assert many.shape == (3, 8) and np.allclose(many.sum(axis=1), 1.0)


@pytest.mark.parametrize("dof", [None, 3.0, 6.0])
def test_continuous_beliefs_tail_and_gain_match_numeric_integration(dof: float | None) -> None:
    """P(S > u) and E[(ln S - ln u)+] of a normal or Student-t belief (sd-matched) against quadrature."""
    from scipy import integrate, stats

    mu, sd = math.log(1.5), 0.7
    dist = stats.norm(mu, sd) if dof is None else stats.t(dof, mu, sd * math.sqrt((dof - 2) / dof))
    assert dist.std() == pytest.approx(sd)
    for u in (0.5, 1.0, 2.0, 6.0):
        c = math.log(u)
        gain, _ = integrate.quad(lambda x, c=c: (x - c) * dist.pdf(x), c, math.inf)
        assert belief_above(c, mu, sd, dof) == pytest.approx(dist.sf(c), rel=1e-9)
        assert belief_gain(c, mu, sd, dof) == pytest.approx(gain, rel=1e-6, abs=1e-12)
    bins = lognormal_bins(mu, sd, dof)
    assert bins.sum() == pytest.approx(1.0)
    assert bins[4:].sum() == pytest.approx(dist.sf(0.0), abs=1e-6)  # bins 5-8 hold S > 1 (edges .25 .5 .71 1 ...)
    if dof is not None:  # a sharper middle and heavier far tails than the normal of the same sd
        def central(d: float | None) -> float:
            return belief_above(mu - sd / 2, mu, sd, d) - belief_above(mu + sd / 2, mu, sd, d)

        assert central(dof) > central(None)
        far = mu + 3.5 * sd
        assert belief_above(far, mu, sd, dof) > belief_above(far, mu, sd) and belief_gain(far, mu, sd, dof) > \
            belief_gain(far, mu, sd)
    with pytest.raises(ValueError, match="more than 2 degrees"):
        belief_above(0.0, mu, sd, 2.0)


def test_expected_gain_falls_as_the_incumbent_rises() -> None:
    p = lognormal_bins(math.log(2.0), 0.5)
    gains = [expected_gain(p, u) for u in (0.5, 1.0, 2.0, 4.0, 16.0)]
    assert gains == sorted(gains, reverse=True) and gains[-1] == 0.0 and gains[0] > 0


def test_a_forecast_is_trusted_when_its_p_crosses_a_threshold() -> None:
    both = TrustThresholds(prune_below=0.05, accept_above=0.9)
    assert all(both.verdict(p) is not None for p in (0.05, 0.0, 0.9, 1.0))
    assert all(both.verdict(p) is None for p in (0.06, 0.89, None))
    assert TrustThresholds(prune_below=0.05).verdict(0.95) is None  # no acceptance certified


def test_clopper_pearson_bounds() -> None:
    assert clopper_pearson_upper(0, 22, 0.1) == pytest.approx(1 - 0.1 ** (1 / 22))
    assert clopper_pearson_upper(0, 0, 0.1) == 1.0 and clopper_pearson_upper(5, 5, 0.1) == 1.0
    lo, hi = clopper_pearson_interval(3, 30)
    assert 0 < lo < 0.1 < hi < 0.3


def test_no_calibration_data_means_no_trust() -> None:
    trust = fit_thresholds([], risk=0.1)
    assert not trust.trusts_anything and trust.n_calibration == 0
    assert all(trust.verdict(p) is None for p in (0.0, 0.5, 1.0, None))
    few = [CalibrationRow(0.001, False)] * 10  # ten clean rows cannot certify 10 % at 90 % confidence
    assert fit_thresholds(few, risk=0.1).prune_below is None
    with pytest.raises(ValueError, match="risk"):
        fit_thresholds(few, risk=0.0)


def test_certified_thresholds_keep_false_prunes_within_the_risk() -> None:
    """Calibrated forecasts (a child beats the incumbent with probability p): in repeated draws of the
    calibration set, the chosen prune rule's false-prune share on fresh decisions exceeds the risk in at
    most about delta of the trials."""
    rng = np.random.default_rng(0)
    risk, delta, failures, trusted_any = 0.1, 0.1, 0, 0
    trials = 60
    for _ in range(trials):
        p = rng.beta(0.6, 1.5, 400)
        rows = [CalibrationRow(float(q), bool(rng.random() < q)) for q in p]
        trust = fit_thresholds(rows, risk=risk, delta=delta)
        if trust.prune_below is None:
            continue
        trusted_any += 1
        assert trust.prune_bound is not None and trust.prune_bound <= risk
        fresh = rng.beta(0.6, 1.5, 4000)
        pruned = fresh <= trust.prune_below
        false_share = float((rng.random(pruned.sum()) < fresh[pruned]).mean())
        failures += false_share > risk
    assert trusted_any > trials // 2  # the data allow pruning most of the time
    assert failures <= math.ceil(delta * trials) + 2


def test_one_early_false_decision_does_not_end_the_sequence() -> None:
    """The first threshold tested must be able to absorb one error: one child of 22 at p = 0.05 that beat the
    incumbent used to end the fixed sequence, so the 82 rows up to p = 0.3 (one error) trusted nothing."""
    assert rows_to_certify(0.1, 0.1) == 22 and rows_to_certify(0.1, 0.1, errors=1) == 38
    rows = [CalibrationRow(0.05, i == 0) for i in range(22)] + [CalibrationRow(0.05 + 0.25 * i / 60, False)
                                                                 for i in range(1, 61)]
    trust = fit_thresholds(rows, risk=0.1, delta=0.1)
    assert trust.prune_below is not None and trust.prune_below >= 0.25
    assert trust.prune_bound is not None and trust.prune_bound <= 0.1
    assert fit_thresholds(rows[:37], risk=0.1).prune_below is None  # 37 rows cannot absorb an error yet


def test_an_overconfident_forecaster_earns_no_trust() -> None:
    """Forecasts that say p = 0.01 while half of those children beat the incumbent."""
    rng = np.random.default_rng(1)
    rows = [CalibrationRow(0.01, bool(rng.random() < 0.5)) for _ in range(300)]
    assert fit_thresholds(rows, risk=0.1).prune_below is None


def _item(key: str, mu: float, incumbent: float = 1.0, sigma: float = 0.2, failed: bool = False) -> RoutingInput:
    probs = tuple(np.full(8, 1 / 8) if failed else lognormal_bins(mu, sigma))
    return RoutingInput(hash=key, confidence=max(probs), predicted_bin=int(np.argmax(probs)) + 1,
                        expected_log_speedup=mu, expected_bin=float(np.arange(1, 9) @ np.asarray(probs)),
                        failed=failed, probabilities=probs, incumbent=incumbent)


def test_selective_prunes_sure_losers_accepts_sure_winners_and_audits_some() -> None:
    trust = TrustThresholds(prune_below=0.05, accept_above=0.95, n_calibration=100)
    items = [_item(f"slow{i}", math.log(0.3)) for i in range(20)] + \
        [_item(f"fast{i}", math.log(6.0)) for i in range(5)] + \
        [_item("unsure", 0.0), _item("broken", 0.0, failed=True)]
    out = SelectiveRouter(measure_per_round=4, audit_rate=0.3, seed=1).route(items, 10, trust=trust, audits=3)
    assert out["unsure"].decision == "measure" and out["broken"].decision == "measure"
    slow = [out[f"slow{i}"] for i in range(20)]
    assert all(r.trusted_as == "prune" for r in slow)
    assert all(out[f"fast{i}"].trusted_as == "accept" for i in range(5))
    audited = [r for r in out.values() if r.audit]
    assert 1 <= len(audited) <= 3 and all(r.decision == "measure" for r in audited)
    # the incumbent matters: against a 0.2x incumbent the same slow children are likely winners
    against_weak = SelectiveRouter().route([_item("slow", math.log(0.3), incumbent=0.2)], 4, trust=trust)
    assert against_weak["slow"].decision != "prune"


def test_audit_draw_is_reproducible_and_uniform() -> None:
    draws = [audit_draw(f"c{i}", 7) for i in range(2000)]
    assert draws == [audit_draw(f"c{i}", 7) for i in range(2000)]
    assert 0.45 < float(np.mean(draws)) < 0.55 and min(draws) >= 0 and max(draws) < 1


def test_beyond_the_open_bins_only_a_continuous_belief_can_compare_with_the_incumbent() -> None:
    bins_only = _item("bins", math.log(20.0), incumbent=15.0)
    assert bins_only.p_beat is None  # bin 8 says "above 4x", not whether above 15x
    believed = RoutingInput(**{**bins_only.__dict__, "hash": "belief", "log_mean": math.log(20.0), "log_sd": 0.3})
    assert believed.p_beat == pytest.approx(1 - 0.1684, abs=0.01)  # P(Z > ln(15/20)/0.3)
    assert believed.gain > 0
    trust = TrustThresholds(prune_below=0.05, accept_above=0.5)
    out = SelectiveRouter().route([bins_only, believed], 4, trust=trust)
    assert out["bins"].decision == "measure" and "no P(beat)" in out["bins"].reason
    assert out["belief"].decision == "accept"


def _calibrated(rng: np.random.Generator, n: int) -> list[CalibrationRow]:
    """Rows of a calibrated forecaster: a child with forecast p beats the incumbent with probability p."""
    return [CalibrationRow(float(q), bool(rng.random() < q)) for q in rng.beta(0.6, 1.5, n)]


def test_replayed_rows_certify_until_the_device_has_its_own() -> None:
    """A device with a short record is trusted on the replayed rows; once its own rows reach the switch count,
    they alone certify (a count decides, never an outcome)."""
    rng = np.random.default_rng(2)
    replayed = _calibrated(rng, 3000)
    few = _calibrated(rng, 20)
    trust = certify_stage(few, replayed, risk=0.1)
    assert trust.source == SEED_REPLAY and trust.n_calibration == 3000 and not trust.withdrawn
    assert trust.prune_below == fit_thresholds(replayed, risk=0.1).prune_below is not None
    assert fit_thresholds(few, risk=0.1).prune_below is None  # 20 rows of its own could not certify anything
    own = _calibrated(rng, OWN_ROWS_TO_SWITCH)
    switched = certify_stage(own, replayed, risk=0.1)
    assert switched.source == DEVICE_RECORD and switched.n_calibration == OWN_ROWS_TO_SWITCH
    assert switched.prune_below == fit_thresholds(own, risk=0.1).prune_below


def test_the_devices_own_record_withdraws_a_replayed_threshold_it_refutes() -> None:
    """On a device where the forecaster is overconfident, its first rows under the replayed threshold beat the
    incumbent far more often than the risk allows: the prune threshold is withdrawn, not applied."""
    rng = np.random.default_rng(3)
    replayed = _calibrated(rng, 3000)
    threshold = fit_thresholds(replayed, risk=0.1).prune_below
    assert threshold is not None
    refuting = [CalibrationRow(threshold / 2, i % 2 == 0) for i in range(30)]  # half of them beat
    trust = certify_stage(refuting, replayed, risk=0.1)
    assert trust.prune_below is None and trust.withdrawn == ("prune",) and trust.source == SEED_REPLAY
    assert "refuted" in trust.describe()
    agreeing = [CalibrationRow(threshold / 2, i == 0) for i in range(30)]  # one of 30: no refutation
    assert certify_stage(agreeing, replayed, risk=0.1).prune_below == threshold
    assert clopper_pearson_lower(15, 30, 0.1) > 0.1 > clopper_pearson_lower(1, 30, 0.1)


def test_a_task_whose_forecasts_are_overconfident_limits_the_threshold_for_all() -> None:
    """Five tasks calibrated and one whose children at p in (0.05, 0.2] beat the incumbent half the time: the
    pooled rows alone would certify pruning up to 0.2, but a run on that task would then prune wrongly far
    above the risk. The threshold stops below its overconfident band, and says which task stopped it."""
    rng = np.random.default_rng(4)
    calibrated = [CalibrationRow(r.p_beat, r.beat, f"task{i}") for i in range(5) for r in _calibrated(rng, 600)]
    overconfident = [CalibrationRow(q, bool(rng.random() < (0.5 if q > 0.05 else q)), "bad")
                     for q in rng.uniform(0.0, 0.2, 150).tolist()]
    pooled = fit_thresholds([CalibrationRow(r.p_beat, r.beat) for r in calibrated + overconfident], risk=0.1)
    grouped = fit_thresholds(calibrated + overconfident, risk=0.1)
    assert pooled.prune_below is not None and pooled.prune_below >= 0.2
    assert grouped.prune_below is not None and grouped.prune_below <= 0.05
    assert grouped.prune_limited_by == "bad" and "bad" in grouped.describe()
    # a group too small to be tested alone does not stop the sequence: that would let the outcomes of a
    # handful of rows, not the forecasts, decide which tests run
    with_small = fit_thresholds(calibrated + overconfident[:20], risk=0.1)
    assert with_small.prune_limited_by != "bad"
    assert with_small.prune_below is not None and with_small.prune_below > 0.05


def test_the_devices_own_record_on_one_task_refutes_a_replayed_threshold() -> None:
    """Pooled over the device's tasks the refutation would drown; one task's rows alone show it."""
    rng = np.random.default_rng(5)
    replayed = _calibrated(rng, 3000)
    threshold = fit_thresholds(replayed, risk=0.1).prune_below
    assert threshold is not None
    clean = [CalibrationRow(threshold / 2, False, "good") for _ in range(170)]
    bad = [CalibrationRow(threshold / 2, i % 2 == 0, "bad") for i in range(24)]  # 12 of 24 beat
    pooled = [CalibrationRow(r.p_beat, r.beat) for r in clean + bad]
    assert certify_stage(pooled, replayed, risk=0.1).prune_below == threshold  # 12 of 194 refutes nothing
    assert certify_stage(clean + bad, replayed, risk=0.1).withdrawn == ("prune",)


def test_a_run_on_a_task_with_rows_enough_is_certified_on_that_tasks_rows_alone() -> None:
    """One overconfident task must not block trust on the others, nor borrow their record: a run on a task
    with enough rows of its own is certified on those; a task with too few keeps the rule for all tasks."""
    rng = np.random.default_rng(6)
    calibrated = [CalibrationRow(r.p_beat, r.beat, f"task{i}") for i in range(5) for r in _calibrated(rng, 600)]
    overconfident = [CalibrationRow(q, bool(rng.random() < (0.5 if q > 0.05 else q)), "bad")
                     for q in rng.uniform(0.0, 0.2, 150).tolist()]
    rows = calibrated + overconfident
    everyone = certify_stage([], rows, risk=0.1)
    good = certify_stage([], rows, risk=0.1, group="task0")
    bad = certify_stage([], rows, risk=0.1, group="bad")
    unknown = certify_stage([], rows, risk=0.1, group="a task the rows never saw")
    assert everyone.prune_below is not None and everyone.prune_limited_by == "bad"
    assert good.certified_on == "task0" and good.n_calibration == 600 and "of task0" in good.describe()
    assert good.prune_below == fit_thresholds(calibrated[:600], risk=0.1).prune_below
    assert good.prune_below is not None and good.prune_below > everyone.prune_below  # no longer held by "bad"
    assert bad.certified_on == "bad" and (bad.prune_below is None or bad.prune_below <= 0.05)
    assert unknown.certified_on == "" and unknown.prune_below == everyone.prune_below
    # how many rows make a group certify alone is a count: below it, the rule for all tasks applies
    few = [CalibrationRow(0.01, False, "few")] * (rows_to_certify(0.1, 0.1, errors=1) - 1)
    assert certify_stage([], rows + few, risk=0.1, group="few").certified_on == ""
    # the device's own record, once it certifies alone, is limited to the run's task the same way
    own = [CalibrationRow(r.p_beat, r.beat, "task0") for r in _calibrated(rng, OWN_ROWS_TO_SWITCH)]
    switched = certify_stage(own + overconfident, rows, risk=0.1, group="task0")
    assert switched.source == DEVICE_RECORD and switched.certified_on == "task0"
    assert switched.n_calibration == OWN_ROWS_TO_SWITCH
