"""The order a round's deferred children are measured in: Thompson draws (joint with whether a child's family
measures correct), the share of places the forecasts lead (:func:`forecast_lead`), and :func:`led_order`, which
interleaves the forecasts' picks with the round's own order. Reproducible per run seed and state of the evidence,
so a resumed run routes as the killed one did."""

from __future__ import annotations

import math
import statistics
from typing import NamedTuple

from kernelcast.agents.forecast.base import CertifiedSkill
from kernelcast.agents.forecast.distributions import log_speedup_quantile, moments
from kernelcast.graphs.route.forecast_skill import (
    MIN_SKILL_PAIRS,
    RHO_CAP,
    SPEARMAN_VARIANCE,
    ForecastSkill,
)
from kernelcast.graphs.route.routers.base import RoutingInput, audit_draw, measure_order


def drawn_incorrect(item: RoutingInput, seed: int) -> bool:
    """Whether this round's draw of the item's family says its children measure incorrect, with probability
    1 - :attr:`RoutingInput.p_correct` (never for a family without a failure here). Drawn once per family and state
    of the run, shared by the siblings: a transformation that is wrong for a kernel is wrong for all of them, and a
    draw per child let one of ten siblings through in nearly every round (on a held-out kernel, 9-10 of 25
    measurements still went to failing families, against 15-16 without the rule). Reproducible per run seed and
    state, so a resumed run draws as the killed one did."""
    if not item.family_failed:
        return False
    key = f"correct:{item.family}:{item.family_measured}:{item.family_failed}:{item.run_measured}"
    return audit_draw(key, seed) >= item.p_correct


def several_families(items: list[RoutingInput]) -> bool:
    """Whether a round's children span more than one family: only then does a family's correctness draw tell
    them apart (a template's points are one family, and so are an LLM's kernels)."""
    return len({item.family for item in items}) > 1


def thompson_draw(item: RoutingInput, seed: int, correctness: bool = True) -> float:
    """One draw of ln S from the item's forecast (its continuous belief, else its bins), reproducible per run seed,
    candidate and state of the evidence (the incumbent, the family's measurements), so a resumed run routes as
    the killed one did. A failed forecast without bins draws its expected log speedup. With ``correctness`` the draw
    is joint with whether the child measures correct (:func:`drawn_incorrect`): a draw of "incorrect" is -inf,
    worth nothing, so a family that keeps failing is measured ever less often, never excluded."""
    if correctness and drawn_incorrect(item, seed):
        return -math.inf
    if len(item.probabilities) != 8 and not item.continuous:
        return item.expected_log_speedup
    u = audit_draw(f"thompson:{item.hash}:{item.incumbent:.9g}:{item.family_measured}", seed)
    return log_speedup_quantile(u, item.probabilities, item.log_mean, item.log_sd, item.log_dof)


def thompson_order(items: list[RoutingInput], seed: int) -> list[RoutingInput]:
    """``items`` by one Thompson draw each, highest first: each is measured in proportion to the forecast's
    probability that it is the best. A confident forecaster's top candidates still come first; a wide, flat
    forecast (a kernel the forecaster never saw) spreads the measurements across candidates instead of
    following differences of mean that carry no information: on kernels it never saw, expected gain spent runs on
    near-duplicates (seven work-group variants of one edit in a row) while measuring the generator's proposals in
    turn found the wins (docs/benchmarks.md, the held-out corpus)."""
    return _by_draw(items, {item.hash: thompson_draw(item, seed) for item in items})


def _by_draw(items: list[RoutingInput], draws: dict[str, float]) -> list[RoutingInput]:
    """``items`` by their draws, highest first (then by expected gain and hash, so the order is total)."""
    return sorted(items, key=lambda it: (-draws[it.hash], -it.gain, it.hash))


def forecast_lead(items: list[RoutingInput]) -> float:
    """The share of a round's measurements its forecasts may lead, the rest going in the generator's order: the
    share of the candidates' ln S variance that the forecasts themselves say their means account for,
    var(means) / (var(means) + mean(sd^2)) (a calibrated forecaster's R^2 across this round). A round whose
    forecasts all say about the same, or say it with an sd wider than the differences, has nothing to rank by,
    and then the generator's space-filling order (each axis's extremes first) finds more than Thompson draws from
    flat beliefs, which are a random order: on kernels the forecaster never saw, measuring the generator's
    proposals in turn found wins (work-groups of one or two work-items) that the draws missed
    (docs/benchmarks.md, the held-out corpus). 1.0 with fewer than two forecasts to compare."""
    means: list[float] = []
    variances: list[float] = []
    for item in items:
        if item.failed:
            continue
        if item.continuous:
            assert item.log_mean is not None and item.log_sd is not None
            mean, sd = item.log_mean, item.log_sd
        elif len(item.probabilities) == 8 and sum(item.probabilities) > 0:
            total = sum(item.probabilities)
            mean, sd = moments([q / total for q in item.probabilities])
        else:
            continue
        if math.isfinite(mean) and math.isfinite(sd):  # a broken forecast says nothing about the round
            means.append(mean)
            variances.append(sd * sd)
    if len(means) < 2:
        return 1.0
    signal = statistics.pvariance(means)
    noise = statistics.fmean(variances)
    lead = 1.0 if signal + noise <= 0 else signal / (signal + noise)
    return lead if math.isfinite(lead) else 1.0


class LedOrder(NamedTuple):
    """A round's children as it measures them (:func:`led_order`), with why each stands where it does."""

    ordered: list[RoutingInput]
    by_design: set[str]  # placed by the round's order
    drew_incorrect: set[str]  # their family drew "incorrect": placed after every child that drew correct


def led_order(items: list[RoutingInput], seed: int, lead: float, by_gain: bool = False) -> LedOrder:
    """``items`` (in the round's order: this round's proposals in the generator's order, then children carried
    over from earlier rounds) as the round measures them, the hashes placed by that order, and those whose family
    drew "incorrect": the forecasts' order
    and the round's order interleaved, a ``lead`` share of the places going to the forecasts' next pick, the rest
    to the round's next item (each taken once). Rounding gives the first place to the round's order whenever the
    lead is at most one half. The forecasts pick by Thompson draw, or with ``by_gain`` (forecasts that have shown
    in this run that they rank its children, :mod:`forecast_skill`) by expected gain over the incumbent: one
    independent draw per child from sds that are mostly shared by every child (the task's level, not the child's
    difference) shuffles a ranking the forecasts have shown they get right.

    The round's order first takes the items whose own draw beats the incumbent (Thompson sampling's rule for
    whether a candidate is worth trying), in turn, and the others after them: where the forecasts are flat, about
    every other proposal passes, so the generator's space-filling order survives; where a forecaster is sure a
    proposal cannot beat the incumbent (P(beat) 0.002 for a point measured at 0.28x beside a 6.7x incumbent, in
    the built-in router bench) it is not spent on in turn. A failed forecast, which has no draw, passes. Children
    whose family drew "incorrect" (:func:`drawn_incorrect`, in a round of several families) neither pass nor take
    a forecast's place before every other child has one."""
    if len({item.hash for item in items}) != len(items):
        raise ValueError("led_order needs distinct candidates: a hash appears twice")
    correctness = several_families(items)
    wrong = {item.hash for item in items if correctness and drawn_incorrect(item, seed)}
    draws = {item.hash: thompson_draw(item, seed, correctness) for item in items}
    drawn = sorted(items, key=lambda it: (it.hash in wrong, measure_order(it))) if by_gain else _by_draw(items, draws)
    in_turn = sorted(items, key=lambda it: it.hash in wrong or not _draw_passes(it, draws[it.hash]))  # passing first
    design_share = 1.0 - min(max(lead, 0.0), 1.0)
    out: list[RoutingInput] = []
    by_design: set[str] = set()
    taken: set[str] = set()
    queues = {True: iter(in_turn), False: iter(drawn)}
    while len(out) < len(items):
        place = len(out)
        from_design = math.floor((place + 1) * design_share + 0.5) > math.floor(place * design_share + 0.5)
        item = next(it for it in queues[from_design] if it.hash not in taken)
        taken.add(item.hash)
        out.append(item)
        if from_design:
            by_design.add(item.hash)
    return LedOrder(out, by_design, wrong)


def _draw_passes(item: RoutingInput, draw: float) -> bool:
    """Whether the item's Thompson draw says it beats its incumbent (a failed forecast, drawing nothing, passes)."""
    return item.failed or not math.isfinite(draw) or draw > math.log(max(item.incumbent, 1e-12))


# ---- the regime: follow the forecasts' ranking, or cover families first --------------------------------------------
# The share of a round's ln S variance its forecasts' means must claim (forecast_lead, a calibrated forecaster's R^2)
# for the round to follow their ranking before the run has measured enough to show it. The transfer forecaster claims
# 0.9 and more for a GPU from its siblings' recordings, whose ranking's top 8 reached a median 0.895 of the optimum
# (docs/benchmarks.md, issue 63); a forecaster on a kernel it never saw claims 0.02-0.03 (the held-out corpus).
EXPLOIT_CLAIM = 0.75
EXPLOIT_CERTIFIED = 0.6  # a forecaster's certified rank skill (CertifiedSkill) that is followed from the start
EXPLOIT_SHOWN = 0.5  # rank skill shown on this run's measured children (a one-sd lower bound) that is followed
POOR_RANK = 0.3  # a measured ranking below this (issue 63's "poor") refutes a certificate or claim it cannot reach


class Regime(NamedTuple):
    """How a round is ordered: by the forecasts' ranking (``exploit``, as topk), or family coverage first and
    the forecasts leading the share they claim or showed (today's order); and why, in words."""

    exploit: bool
    why: str

    @property
    def name(self) -> str:
        return "exploit the ranking" if self.exploit else "cover families"


def choose_regime(items: list[RoutingInput], skill: ForecastSkill | None,
                  certified: CertifiedSkill | None = None) -> Regime:
    """The regime a round's ``items`` are ordered in, from measured skill: the run's own measured children decide
    once there are MIN_SKILL_PAIRS of them (followed where the ranking shown reaches EXPLOIT_SHOWN; refuted where it
    falls below POOR_RANK and even its one-sd upper bound below EXPLOIT_CERTIFIED: on convolution/A100 at budget 24
    a certified 0.75 kept the run on a ranking its 19 measured children showed at 0.18, and it ended at 0.71 of the
    optimum where covering reached 0.89); else, and in between, the forecaster's certified skill on this
    task and device (at least EXPLOIT_CERTIFIED), else what the forecasts claim of this round
    (:func:`forecast_lead` at least EXPLOIT_CLAIM). A round with fewer than two forecasts to compare claims
    nothing."""
    claimed = forecast_lead(items) if sum(not item.failed for item in items) >= 2 else 0.0
    if skill is not None and skill.pairs >= MIN_SKILL_PAIRS and skill.rho is not None:
        upper = skill_upper(skill)
        if skill.shown >= EXPLOIT_SHOWN:
            return Regime(True, f"{skill.text()}: at least {EXPLOIT_SHOWN:.2f}")
        if skill.rho < POOR_RANK and upper < EXPLOIT_CERTIFIED:
            return Regime(False, f"{skill.text()}, at most {upper:.2f}: below {POOR_RANK:.2f} refutes what the "
                                 "forecaster certified or claimed")
    if certified is not None and certified.rho >= EXPLOIT_CERTIFIED:
        return Regime(True, f"certified rank skill {certified.rho:.2f} (at least {EXPLOIT_CERTIFIED:.2f}): "
                            f"{certified.why}" + (f"; {skill.text()}" if skill is not None else ""))
    uncertified = "no certified rank skill" if certified is None else \
        f"certified rank skill {certified.rho:.2f} (below {EXPLOIT_CERTIFIED:.2f}: {certified.why})"
    if claimed >= EXPLOIT_CLAIM:
        return Regime(True, f"{uncertified}; the forecasts claim {claimed:.0%} of the round's ln S variance (at "
                            f"least {EXPLOIT_CLAIM:.0%})" + (f"; {skill.text()}" if skill is not None else ""))
    return Regime(False, f"{uncertified}; the forecasts claim {claimed:.0%} of the round's ln S variance (below "
                         f"{EXPLOIT_CLAIM:.0%})" + (f"; {skill.text()}" if skill is not None else ""))


def skill_upper(skill: ForecastSkill) -> float:
    """A one-sd upper bound of the run's rank correlation (Fisher's z, as ForecastSkill.shown is the lower)."""
    assert skill.rho is not None and skill.pairs > 3
    z = math.atanh(max(-RHO_CAP, min(skill.rho, RHO_CAP)))
    return math.tanh(z + math.sqrt(SPEARMAN_VARIANCE / (skill.pairs - 3)))


def ranked_order(items: list[RoutingInput]) -> list[RoutingInput]:
    """``items`` by the forecasts' ranking, as topk reads it: expected ln S, highest first (the continuous
    belief's mean where there is one: bins end at 4x, and a GPU space's best points lie beyond it; a failed
    forecast last, then the expected gain and the hash, so the order is total)."""
    def mean(it: RoutingInput) -> float:
        return it.log_mean if it.continuous and it.log_mean is not None else it.expected_log_speedup

    return sorted(items, key=lambda it: (it.failed, -mean(it), -it.gain, it.hash))
