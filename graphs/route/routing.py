"""Routers: which forecast candidates go to the hardware, and which are trusted or pruned.

Pure functions of forecasts, trust thresholds and budget, so the invariants can
be property-tested: every candidate gets exactly one decision; never more
measurements than allowed; a failed forecast is never trusted.

The selective router asks each forecast the question that matters, p =
P(S_child > S_incumbent) (read from the bin distribution, interpolating within
bins), and trusts it only as far as the :class:`TrustThresholds` allow, which
come from calibration data with a finite-sample guarantee on the share of
false decisions (:mod:`kernelcast.graphs.route.risk_control`). A small random share of
trusted decisions is measured anyway (audits), so the false-prune rate is
itself measured.
"""

from __future__ import annotations

import hashlib
import math
import statistics
from dataclasses import dataclass
from typing import Literal, NamedTuple, Protocol

from kernelcast.agents.forecast.distributions import belief_gain, expected_gain, log_speedup_quantile, moments, p_beat
from kernelcast.graphs.route.forecast_skill import ForecastSkill
from kernelcast.graphs.route.risk_control import TrustThresholds

Decision = Literal["measure", "accept", "prune", "drop"]
DEFAULT_AUDIT_RATE = 0.2  # share of trusted decisions measured anyway, while the audit allowance lasts
DEFAULT_AUDIT_SHARE = 0.1  # share of the budget the audits may spend (documented in the README)
# correct measurements of a transformation family in this run before the selective router trusts any forecast
# about it: a forecaster fitted elsewhere can be confidently wrong about a whole family on a kernel it never saw
MIN_FAMILY_EVIDENCE = 2
# at most this share of a run's budget goes to covering families (one representative each) before the forecasts
# decide: a derived space offers seven or more families (coarsening in three mappings, local tile, unroll,
# restrict, work-group, generic variants), so at budget 8 covering them took every measurement of the run and left
# nothing to follow what they found (docs/benchmarks.md, the held-out corpus)
COVERAGE_SHARE = 0.5


@dataclass(frozen=True)
class RoutingInput:
    hash: str
    confidence: float
    predicted_bin: int
    expected_log_speedup: float
    expected_bin: float
    failed: bool
    probabilities: tuple[float, ...] = ()  # the forecast's 8 bin probabilities (empty: unknown)
    incumbent: float = 1.0  # the speedup to beat: the best measured so far (1.0: the reference)
    log_mean: float | None = None  # the forecaster's continuous belief about ln S, when it has one
    log_sd: float | None = None
    log_dof: float | None = None  # Student-t degrees of freedom of that belief (None: normal)
    family: str = ""  # the candidate's transformation family (agents.families; empty: unknown)
    family_measured: int = 0  # correct measurements of that family in this run so far
    family_failed: int = 0  # measurements of that family in this run that failed (wrong results, no build, no run)
    run_measured: int = 0  # first measurements of this run so far, every family's (a new one is a new round's draw)

    @property
    def family_tried(self) -> bool:
        """Whether this run has measured any child of the item's family, correct or not."""
        return self.family_measured + self.family_failed > 0

    @property
    def p_correct(self) -> float:
        """P(the child measures correct), from its family's record in this run by the rule of succession with the
        prior mass on correct: 1 untried, 1/2 after one failure, 1/3 after two, 2/3 after a failure and a success.
        A transformation that computes wrong results on a kernel (or does not build there) mostly does so for
        every sibling: on a held-out kernel, 17-18 of selective's 25 measurements went to coarsenings the harness
        refused, because an untried family stays wide and first in line however often it fails."""
        if not self.family:
            return 1.0  # children of unknown family share no record
        return (self.family_measured + 1) / (self.family_measured + self.family_failed + 1)

    @property
    def continuous(self) -> bool:
        return self.log_mean is not None and self.log_sd is not None and self.log_sd > 0

    @property
    def p_beat(self) -> float | None:
        """P(S_child > S_incumbent): from the continuous belief if the forecaster has one, else from the bins
        (interpolated within the bin). None for a failed forecast, and for bins alone when the incumbent lies
        in an open end bin (beyond 4x or below 0.25x), where bins cannot say whether a child beats it."""
        if self.failed or len(self.probabilities) != 8:
            return None
        return p_beat(self.probabilities, self.incumbent, self.log_mean, self.log_sd, self.log_dof)

    @property
    def gain(self) -> float:
        """Expected improvement over the incumbent in ln S (the expected log-speedup without a distribution)."""
        if self.continuous:
            assert self.log_mean is not None and self.log_sd is not None
            return belief_gain(math.log(self.incumbent), self.log_mean, self.log_sd, self.log_dof)
        if len(self.probabilities) != 8:
            return self.expected_log_speedup
        return expected_gain(self.probabilities, self.incumbent)


def measure_order(item: RoutingInput) -> tuple[float, float, str]:
    """Sort key by expected gain over the incumbent, highest first, a child that may measure incorrect gaining
    nothing (then the expected log speedup, then the hash, so the order is total): the order of the leftovers a
    run measures after its generator ran dry."""
    value = item.gain * item.p_correct if item.gain > 0 else item.gain
    return -value, -item.expected_log_speedup, item.hash


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


@dataclass(frozen=True)
class Routed:
    decision: Decision
    reason: str
    p_beat: float | None = None
    audit: bool = False  # measured although the forecast was trusted (to measure the false-decision rate)
    trusted_as: Literal["prune", "accept", ""] = ""  # what the forecast alone would have decided
    spare: bool = False  # a pruned child measured anyway because the round had nothing else to measure
    probation: bool = False  # an audit of a replayed threshold not yet tried on this task here

    @property
    def trusted(self) -> bool:
        """Decided without a measurement."""
        return self.decision in ("accept", "prune") and not self.audit


class Router(Protocol):
    name: str

    def route(self, items: list[RoutingInput], can_measure: int, trust: TrustThresholds | None = None,
              audits: int = 0, skill: ForecastSkill | None = None) -> dict[str, Routed]:
        """Decide for every item; at most ``can_measure`` get "measure". ``skill``: how well this run's forecasts
        ranked the children it measured (None: unknown)."""


def _take(ranked: list[RoutingInput], can_measure: int, out: dict[str, Routed], why: str, cap_reason: str) -> None:
    for i, item in enumerate(ranked):
        if i < can_measure:
            out[item.hash] = Routed("measure", why, item.p_beat)
        else:
            out[item.hash] = Routed("drop", cap_reason, item.p_beat)


@dataclass
class MeasureAllRouter:
    """The baseline: every candidate measured while budget remains (the paper's standard search)."""

    name: str = "measure-all"

    def route(self, items: list[RoutingInput], can_measure: int, trust: TrustThresholds | None = None,
              audits: int = 0, skill: ForecastSkill | None = None) -> dict[str, Routed]:
        out: dict[str, Routed] = {}
        _take(items, can_measure, out, "measure-all", "budget exhausted")
        return out


@dataclass
class TopKRouter:
    """The paper's surrogate filter: measure the top ``k`` children by expected bin."""

    k: int = 4
    name: str = "topk"

    def route(self, items: list[RoutingInput], can_measure: int, trust: TrustThresholds | None = None,
              audits: int = 0, skill: ForecastSkill | None = None) -> dict[str, Routed]:
        ranked = sorted(items, key=lambda it: -it.expected_bin)
        out: dict[str, Routed] = {}
        limit = min(self.k, can_measure)
        for i, item in enumerate(ranked):
            if i < limit:
                out[item.hash] = Routed("measure", f"top {self.k} by expected bin ({item.expected_bin:.2f})",
                                        item.p_beat)
            elif i < self.k:
                out[item.hash] = Routed("drop", "in the top k but the budget is exhausted", item.p_beat)
            else:
                out[item.hash] = Routed("prune", f"not in the top {self.k} by expected bin ({item.expected_bin:.2f})",
                                        item.p_beat)
        return out


def unproven_family(item: RoutingInput) -> bool:
    """Whether the item's family has too few measurements in this run for any forecast about it to be trusted."""
    return bool(item.family) and item.family_measured < MIN_FAMILY_EVIDENCE


def doubtful_family(item: RoutingInput) -> bool:
    """Whether the item's family failed in this run more often than it measured correct (P(correct) <= 1/2)."""
    return bool(item.family) and item.family_failed > item.family_measured


def doubtful_siblings_last(ordered: list[RoutingInput]) -> tuple[list[RoutingInput], set[str]]:
    """``ordered`` with every child of a doubtful family but its first moved to the end (in their order), and the
    hashes moved: a round measures one child of such a family while it has other children to measure, and the
    siblings wait for that child's outcome. A round of four measurements otherwise put all four into a failing
    family whenever its shared correctness draw said "correct" (:func:`thompson_draw`): 12 of 25 measurements on
    a held-out kernel with a coarsening bug put back. A round with nothing else to measure still measures them,
    and a round of one family is left as it is (a template's points are one family, and so are an LLM's kernels)."""
    probed: set[str] = set()  # doubtful families whose first child keeps its place
    waiting: set[str] = set()
    if not several_families(ordered):
        return ordered, waiting
    for item in ordered:
        if not doubtful_family(item):
            continue
        if item.family in probed:
            waiting.add(item.hash)
        probed.add(item.family)
    return [*(it for it in ordered if it.hash not in waiting), *(it for it in ordered if it.hash in waiting)], waiting


def coverage_first(ranked: list[RoutingInput], limit: int | None = None) -> list[RoutingInput]:
    """``ranked`` (best first) with one representative of each family not tried yet in this run moved to
    the front (at most ``limit`` of them; None: all), each its family's best-ranked, in the order of those
    representatives: a run's first measurements cover the families its generator offers before the forecaster's
    ranking, which on a kernel it never saw may put a whole family at the bottom, decides where the rest go. A
    family whose representative failed is covered: another of it is left to the draws (:func:`thompson_draw`)."""
    firsts: dict[str, RoutingInput] = {}
    for item in ranked:
        if item.family and not item.family_tried and not item.failed:
            firsts.setdefault(item.family, item)
    chosen = {item.hash for item in list(firsts.values())[:None if limit is None else max(0, limit)]}
    return [*(item for item in ranked if item.hash in chosen), *(item for item in ranked if item.hash not in chosen)]


def coverage_room(budget: int, can_measure: int) -> int | None:
    """How many family representatives a round may put first: those the part of the budget left beyond
    (1 - COVERAGE_SHARE) of it can pay (None, no limit, for a router that was not told its budget)."""
    if budget <= 0:
        return None
    return max(0, can_measure - (budget - int(COVERAGE_SHARE * budget)))


def trusted_verdict(trust: TrustThresholds, item: RoutingInput) -> Literal["prune", "accept"] | None:
    """The side ("prune" or "accept") the item's forecast may be trusted on, or None: nothing is trusted about a
    family with too little evidence in this run (:func:`unproven_family`), and no child of a doubtful family is
    accepted (an accepted child is expanded before it is measured: not one likely wrong). The router and the
    route step's confirmation trigger read this one rule."""
    verdict = trust.verdict(item.p_beat)
    if verdict is None or unproven_family(item) or (verdict == "accept" and doubtful_family(item)):
        return None
    return verdict


def acts_on(trust: TrustThresholds, item: RoutingInput, audits: int) -> bool:
    """Whether the item's forecast would be judged against the incumbent without a plain measurement: trusted,
    or (its side on probation) audited for the trial, which needs audits left."""
    side = trusted_verdict(trust, item)
    return side is not None and (audits > 0 or not trust.on_probation(side))


def audit_draw(key: str, seed: int) -> float:
    """A reproducible uniform number in [0, 1) per (candidate, seed): which trusted decisions are audited."""
    digest = hashlib.sha256(f"{seed}:{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


@dataclass
class SelectiveRouter:
    """Trust forecasts where calibration certifies it, defer the rest to the hardware (the forecasts pick the
    share of the round they lead, the generator's order the rest: by expected gain for the share of rank skill
    they have shown on this run's measured children, :mod:`forecast_skill`, where that exceeds what they claim,
    else by Thompson draw for the share they claim, ``forecast_lead``; after one representative of each family not
    tried yet, within COVERAGE_SHARE of the budget).

    A child is pruned when p = P(S_child > S_incumbent) <= ``trust.prune_below`` and accepted as an
    unverified node (expandable, never reported until measured) when p >= ``trust.accept_above``; without
    thresholds (too little calibration data) nothing is trusted. A failed forecast is always deferred, so a
    broken model can cost budget but never correctness. Up to ``audits`` trusted decisions per call, drawn at
    random (``audit_rate``, reproducible by ``seed``), are measured anyway. A side on probation
    (``trust.probation``: a replayed threshold not yet tried on this task here) trusts nothing: its would-be
    decisions get the audits first, as many as its trial still needs, drawn at random with every draw taken
    (before the uncertain children, and out of the round's spare room), and the rest are routed as uncertain
    children. With no audits left, a side on probation stays untrusted for the round.
    """

    measure_per_round: int = 4
    audit_rate: float = DEFAULT_AUDIT_RATE
    seed: int = 0
    budget: int = 0  # the run's budget: family coverage gets at most COVERAGE_SHARE of it (0: unlimited)
    name: str = "selective"

    def route(self, items: list[RoutingInput], can_measure: int, trust: TrustThresholds | None = None,
              audits: int = 0, skill: ForecastSkill | None = None) -> dict[str, Routed]:
        trust = trust or TrustThresholds()
        out: dict[str, Routed] = {}
        deferred: list[RoutingInput] = []
        trusted: list[tuple[RoutingInput, Routed]] = []
        on_trial: list[tuple[RoutingInput, Routed]] = []  # would be trusted by a side on probation
        for item in items:
            p, verdict = item.p_beat, trusted_verdict(trust, item)
            if verdict is None:
                deferred.append(item)
                continue
            sign = "<=" if verdict == "prune" else ">="
            bound = trust.prune_below if verdict == "prune" else trust.accept_above
            routed = Routed(verdict, f"P(beat incumbent {item.incumbent:.3g}x) = {p:.3f} {sign} {bound:.3g} "
                                     f"({trust.describe()})", p, trusted_as=verdict)
            (on_trial if trust.on_probation(verdict) else trusted).append((item, routed))
        trial = 0  # audits of sides on probation
        untried: set[str] = set()  # would-be decisions of a side on probation left without an audit
        audit_room = max(0, min(audits, can_measure))
        needed = {side: trust.trial_audits_needed(side) for side in ("prune", "accept")}
        for item, routed in sorted(on_trial, key=lambda pair: audit_draw(pair[0].hash, self.seed)):
            if trial < audit_room and needed[routed.decision] > 0:  # every draw, as many as the trial needs
                out[item.hash] = Routed("measure", f"probation audit of a replayed {routed.decision}: {routed.reason}",
                                        routed.p_beat, audit=True, trusted_as=routed.trusted_as, probation=True)
                needed[routed.decision] -= 1
                trial += 1
            else:
                deferred.append(item)  # not trusted yet: routed as an uncertain child
                untried.add(item.hash)
        audit_room -= trial
        claimed = forecast_lead(deferred)
        shown = skill.shown if skill is not None else 0.0
        by_gain = shown > claimed  # the forecasts lead by the ranking skill they showed, not the share they claim
        lead = max(claimed, shown)
        ordered, by_design, drew_incorrect = led_order(deferred, self.seed, lead, by_gain=by_gain)
        lead_why = f"the forecasts lead {lead:.0%} of the round's deferred children: " + \
            (f"the rank skill they showed (they claim {claimed:.0%})" if by_gain else
             "the share of their variance they claim") + (f"; {skill.text()}" if skill is not None else "")
        deferred, waiting = doubtful_siblings_last(coverage_first(ordered, coverage_room(self.budget, can_measure - trial)))
        limit = min(self.measure_per_round, can_measure - trial)
        in_turn = 0  # deferred children and audits of trusted decisions
        for item in deferred:
            p = item.p_beat
            why = ("forecast failed: deferred to hardware" if item.failed else
                   "no P(beat) from bins past the incumbent: deferred to hardware") if p is None else \
                f"uncertain (P(beat incumbent {item.incumbent:.3g}x) = {p:.3f}): deferred to hardware"
            if item.hash in untried:
                why = f"P(beat incumbent {item.incumbent:.3g}x) = {p:.3f}: the replayed {trust.verdict(p)} threshold " \
                      "is on probation (not trusted until audited here): deferred to hardware"
            elif p is not None and trust.verdict(p) == "accept" and doubtful_family(item):
                why = f"P(beat incumbent {item.incumbent:.3g}x) = {p:.3f} would be accepted, but its family " \
                      f"({item.family}) failed here more often than it measured correct: deferred to hardware"
            elif p is not None and unproven_family(item):
                why = (f"first of its family ({item.family}) in this run" if not item.family_tried else
                       f"its family ({item.family}) has {item.family_measured} correct measurement(s) here" +
                       (f" and {item.family_failed} failed (P(correct) {item.p_correct:.2f})"
                        if item.family_failed else "")) + \
                      f"; forecasts about it are not trusted before {MIN_FAMILY_EVIDENCE} correct " \
                      f"(P(beat incumbent {item.incumbent:.3g}x) = {p:.3f}): deferred to hardware"
            if in_turn < limit:
                placed_by = f"its family drew incorrect (P(correct) {item.p_correct:.2f}): placed after the " \
                    "children that drew correct" if item.hash in drew_incorrect else \
                    "the round's order" if item.hash in by_design else \
                    f"expected gain {item.gain:.3g}" if by_gain else \
                    f"Thompson draw {math.exp(min(thompson_draw(item, self.seed, correctness=False), 700.0)):.3g}x"
                why += f" ({placed_by}; {lead_why})"
                out[item.hash] = Routed("measure", why, p)
                in_turn += 1
            elif item.hash in waiting:
                out[item.hash] = Routed("drop", f"deferred, but a family that failed here more often than it measured "
                                                f"correct ({item.family}: {item.family_failed} failed, "
                                                f"{item.family_measured} correct) gets one child a round while others "
                                                "wait: its siblings wait for that child's outcome", p)
            else:
                cap = "the budget is exhausted" if in_turn + trial >= can_measure else "beyond this round's measurement cap"
                out[item.hash] = Routed("drop", f"{why}, but {cap}" if item.hash in untried else f"deferred, but {cap}", p)
        audit_room = max(0, min(audit_room, can_measure - trial - in_turn))
        for item, routed in sorted(trusted, key=lambda pair: audit_draw(pair[0].hash, self.seed)):
            if audit_room > 0 and audit_draw(item.hash, self.seed) < self.audit_rate:
                out[item.hash] = Routed("measure", f"audit of a trusted {routed.decision}: {routed.reason}",
                                        routed.p_beat, audit=True, trusted_as=routed.trusted_as)
                audit_room -= 1
                in_turn += 1
            else:
                out[item.hash] = routed
        if not deferred:
            self._spend_spare(trusted, out, min(self.measure_per_round, can_measure) - trial - in_turn)
        return out

    @staticmethod
    def _spend_spare(trusted: list[tuple[RoutingInput, Routed]], out: dict[str, Routed], room: int) -> None:
        """A round with nothing uncertain would leave its measurements unspent, and a budget saved by pruning
        buys nothing once the generator runs dry: measure the pruned children most likely to beat the
        incumbent (highest p times P(correct)) instead. They count as measurements, not as trusted decisions or audits."""
        pruned = [(item, routed) for item, routed in trusted if out[item.hash] is routed and routed.decision == "prune"]
        pruned.sort(key=lambda pair: (-(pair[1].p_beat or 0.0) * pair[0].p_correct, -pair[0].gain, pair[0].hash))
        for item, routed in pruned[:max(0, room)]:
            out[item.hash] = Routed("measure", f"nothing uncertain this round: measuring the most promising pruned "
                                               f"child instead of leaving the budget unspent ({routed.reason})",
                                    routed.p_beat, trusted_as="prune", spare=True)

