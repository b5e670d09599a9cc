"""The selective router: trust forecasts where calibration certifies it, defer the rest to the hardware.

It asks each forecast the question that matters, p = P(S_child > S_incumbent) (read from the forecaster's ln S
belief, else interpolated within the bins), and trusts it only as far as the :class:`TrustThresholds` allow,
which come from calibration data with a finite-sample guarantee on the share of false decisions
(:mod:`kernelcast.graphs.route.risk_control`). A small random share of trusted decisions is measured anyway
(audits), so the false-prune rate is itself measured.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Literal, NamedTuple

from kernelcast.agents.forecast.base import CertifiedSkill
from kernelcast.graphs.route.forecast_skill import ForecastSkill
from kernelcast.graphs.route.risk_control import TrustThresholds
from kernelcast.graphs.route.routers.base import Routed, Router, RoutingInput, audit_draw
from kernelcast.graphs.route.routers.family_rules import (
    COVERAGE_SHARE,
    MIN_FAMILY_EVIDENCE,
    coverage_first,
    coverage_room,
    doubtful_family,
    doubtful_siblings_last,
    unproven_family,
)
from kernelcast.graphs.route.routers.ordering import (
    EXPLOIT_CERTIFIED,
    LedOrder,
    Regime,
    choose_regime,
    forecast_lead,
    led_order,
    ranked_order,
    thompson_draw,
)

DEFAULT_AUDIT_RATE = 0.2  # share of trusted decisions measured anyway, while the audit allowance lasts
Side = Literal["prune", "accept"]
__all__ = ["COVERAGE_SHARE", "DEFAULT_AUDIT_RATE", "MIN_FAMILY_EVIDENCE", "SelectiveRouter", "acts_on",
           "follows_skill", "guides_generator", "trusted_verdict"]


def trusted_verdict(trust: TrustThresholds, item: RoutingInput) -> Side | None:
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


class Lead(NamedTuple):
    """The share of a round's deferred places the forecasts lead, whether by expected gain (the rank skill they
    showed exceeds the share they claim) or by Thompson draw, and why, in words."""

    share: float
    by_gain: bool
    why: str
    ranked: bool = False  # the whole round in the forecasts' ranking (the exploit regime)


@dataclass
class _Round:
    """One routing call as it is decided: the decisions so far and what the later parts need to know."""

    trust: TrustThresholds
    can_measure: int
    out: dict[str, Routed] = field(default_factory=dict)
    deferred: list[RoutingInput] = field(default_factory=list)  # uncertain: to the hardware in the led order
    trusted: list[tuple[RoutingInput, Routed]] = field(default_factory=list)
    on_trial: list[tuple[RoutingInput, Routed]] = field(default_factory=list)  # would be trusted by a side on probation
    untried: set[str] = field(default_factory=set)  # would-be decisions of a side on probation left without an audit
    trial: int = 0  # audits of sides on probation
    in_turn: int = 0  # deferred children measured, and audits of trusted decisions


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

    With ``follow_skill`` (RunConfig.follow_skill) each round's regime comes from measured skill
    (:func:`choose_regime`, with the forecaster's ``certified`` skill): where the forecasts rank, the deferred
    children go in their ranking, as topk's (no coverage, no draws); elsewhere as above. ``regimes`` keeps each
    routing's regime for the run's summary (:meth:`regime_text`).
    """

    measure_per_round: int = 4
    audit_rate: float = DEFAULT_AUDIT_RATE
    seed: int = 0
    budget: int = 0  # the run's budget: family coverage gets at most COVERAGE_SHARE of it (0: unlimited)
    follow_skill: bool = False  # choose each round's regime from measured skill (RunConfig.follow_skill)
    certified: CertifiedSkill | None = None  # the forecaster's certified rank skill on this task and device
    name: str = "selective"
    regimes: list[Regime] = field(default_factory=list, compare=False, repr=False)  # per routing, with follow_skill

    def route(self, items: list[RoutingInput], can_measure: int, trust: TrustThresholds | None = None,
              audits: int = 0, skill: ForecastSkill | None = None) -> dict[str, Routed]:
        """Trusted or deferred, each child; then the trial audits of a side on probation, the deferred children in
        the led order (coverage first, doubtful siblings last) up to the round's cap, the audits of trusted
        decisions, and in a round with nothing uncertain its most promising pruned children."""
        r = _Round(trust or TrustThresholds(), can_measure)
        self._classify(r, items)
        audit_room = self._trial_audits(r, max(0, min(audits, can_measure)))
        lead = self._lead(r.deferred, skill)
        regime = self._regime(r.deferred, skill)
        if regime is not None and regime.exploit:  # the forecasts' ranking, as topk: no coverage, no draws
            order = LedOrder(ranked_order(r.deferred), set(), set())
            lead = Lead(1.0, False, f"regime: {regime.name}, {regime.why}", ranked=True)
            deferred, waiting = doubtful_siblings_last(order.ordered)
        else:
            order = led_order(r.deferred, self.seed, lead.share, by_gain=lead.by_gain)
            deferred, waiting = doubtful_siblings_last(coverage_first(order.ordered,
                                                                      coverage_room(self.budget, can_measure - r.trial)))
            if regime is not None:
                lead = lead._replace(why=f"regime: {regime.name}, {regime.why}; {lead.why}")
        self._route_deferred(r, deferred, waiting, order, lead)
        self._audit_trusted(r, max(0, min(audit_room, can_measure - r.trial - r.in_turn)))
        if not deferred:
            self._spend_spare(r.trusted, r.out, min(self.measure_per_round, can_measure) - r.trial - r.in_turn)
        return r.out

    def regime_text(self) -> str:
        """The regimes this router's rounds were in (with follow_skill), for the run summary: how many rounds
        followed the forecasts' ranking and why the last one was in its regime."""
        if not self.follow_skill:
            return "regime: not chosen (follow_skill off: family coverage, then the forecasts lead the share they " \
                   "claim or showed)"
        if not self.regimes:
            return "regime: no round with children to order was routed by this process"
        last = self.regimes[-1]
        followed = sum(regime.exploit for regime in self.regimes)
        return f"regime: followed the forecasts' ranking in {followed} of {len(self.regimes)} routed rounds; " \
               f"last round: {last.name}, {last.why}"

    def follows_ranking(self) -> bool:
        """Whether the generator should be handed the forecaster's best-ranked points (forecast-guided proposals):
        with follow_skill, where the regime follows the ranking: the last routed round's regime, or before any
        round the forecaster's certified skill (:data:`EXPLOIT_CERTIFIED`). Where no skill is certified or shown
        (a GPU of a vendor no source shares), guided points mixed into the design only displace design points
        chosen for coverage (W6600, issue 63)."""
        if not self.follow_skill:
            return False
        if self.regimes:
            return self.regimes[-1].exploit
        return self.certified is not None and self.certified.rho >= EXPLOIT_CERTIFIED

    # ---- the parts of a routing ----------------------------------------------------------------------------
    def _regime(self, deferred: list[RoutingInput], skill: ForecastSkill | None) -> Regime | None:
        """The round's regime with follow_skill (recorded for the summary when it has children to order)."""
        if not self.follow_skill:
            return None
        regime = choose_regime(deferred, skill, self.certified)
        if deferred:
            self.regimes.append(regime)
        return regime

    @staticmethod
    def _classify(r: _Round, items: list[RoutingInput]) -> None:
        """Each child deferred, or trusted on its forecast (or would be, by a side on probation)."""
        trust = r.trust
        for item in items:
            p, verdict = item.p_beat, trusted_verdict(trust, item)
            if verdict is None:
                r.deferred.append(item)
                continue
            sign = "<=" if verdict == "prune" else ">="
            bound = trust.prune_below if verdict == "prune" else trust.accept_above
            routed = Routed(verdict, f"P(beat incumbent {item.incumbent:.3g}x) = {p:.3f} {sign} {bound:.3g} "
                                     f"({trust.describe()})", p, trusted_as=verdict)
            (r.on_trial if trust.on_probation(verdict) else r.trusted).append((item, routed))

    def _trial_audits(self, r: _Round, audit_room: int) -> int:
        """The audits a side on probation still needs, drawn at random with every draw taken; its other would-be
        decisions are deferred. The audit room left after them."""
        needed = {side: r.trust.trial_audits_needed(side) for side in ("prune", "accept")}
        for item, routed in sorted(r.on_trial, key=lambda pair: audit_draw(pair[0].hash, self.seed)):
            if r.trial < audit_room and needed[routed.decision] > 0:  # every draw, as many as the trial needs
                r.out[item.hash] = Routed("measure", f"probation audit of a replayed {routed.decision}: {routed.reason}",
                                          routed.p_beat, audit=True, trusted_as=routed.trusted_as, probation=True)
                needed[routed.decision] -= 1
                r.trial += 1
            else:
                r.deferred.append(item)  # not trusted yet: routed as an uncertain child
                r.untried.add(item.hash)
        return audit_room - r.trial

    @staticmethod
    def _lead(deferred: list[RoutingInput], skill: ForecastSkill | None) -> Lead:
        """The forecasts lead the share of variance they claim, or the rank skill they showed where larger."""
        claimed = forecast_lead(deferred)
        shown = skill.shown if skill is not None else 0.0
        by_gain = shown > claimed  # the forecasts lead by the ranking skill they showed, not the share they claim
        share = max(claimed, shown)
        why = f"the forecasts lead {share:.0%} of the round's deferred children: " + \
            (f"the rank skill they showed (they claim {claimed:.0%})" if by_gain else
             "the share of their variance they claim") + (f"; {skill.text()}" if skill is not None else "")
        return Lead(share, by_gain, why)

    def _route_deferred(self, r: _Round, deferred: list[RoutingInput], waiting: set[str], order: LedOrder,
                        lead: Lead) -> None:
        """The deferred children in order: measured up to the round's cap, the rest dropped (carried over)."""
        limit = min(self.measure_per_round, r.can_measure - r.trial)
        for item in deferred:
            p = item.p_beat
            why = self._deferred_reason(r, item)
            if r.in_turn < limit:
                r.out[item.hash] = Routed("measure", f"{why} ({self._placed_by(item, order, lead)}; {lead.why})", p)
                r.in_turn += 1
            elif item.hash in waiting:
                r.out[item.hash] = Routed("drop", f"deferred, but a family that failed here more often than it "
                                                  f"measured correct ({item.family}: {item.family_failed} failed, "
                                                  f"{item.family_measured} correct) gets one child a round while "
                                                  "others wait: its siblings wait for that child's outcome", p)
            else:
                cap = "the budget is exhausted" if r.in_turn + r.trial >= r.can_measure else \
                    "beyond this round's measurement cap"
                r.out[item.hash] = Routed("drop", f"{why}, but {cap}" if item.hash in r.untried else
                                          f"deferred, but {cap}", p)

    @staticmethod
    def _deferred_reason(r: _Round, item: RoutingInput) -> str:
        """Why a child goes to the hardware rather than being trusted."""
        p, trust = item.p_beat, r.trust
        if p is None:
            return "forecast failed: deferred to hardware" if item.failed else \
                "no P(beat) from bins past the incumbent: deferred to hardware"
        if item.hash in r.untried:
            return f"P(beat incumbent {item.incumbent:.3g}x) = {p:.3f}: the replayed {trust.verdict(p)} threshold " \
                   "is on probation (not trusted until audited here): deferred to hardware"
        if trust.verdict(p) == "accept" and doubtful_family(item):
            return f"P(beat incumbent {item.incumbent:.3g}x) = {p:.3f} would be accepted, but its family " \
                   f"({item.family}) failed here more often than it measured correct: deferred to hardware"
        if unproven_family(item):
            return (f"first of its family ({item.family}) in this run" if not item.family_tried else
                    f"its family ({item.family}) has {item.family_measured} correct measurement(s) here" +
                    (f" and {item.family_failed} failed (P(correct) {item.p_correct:.2f})"
                     if item.family_failed else "")) + \
                f"; forecasts about it are not trusted before {MIN_FAMILY_EVIDENCE} correct " \
                f"(P(beat incumbent {item.incumbent:.3g}x) = {p:.3f}): deferred to hardware"
        return f"uncertain (P(beat incumbent {item.incumbent:.3g}x) = {p:.3f}): deferred to hardware"

    def _placed_by(self, item: RoutingInput, order: LedOrder, lead: Lead) -> str:
        """What put a measured deferred child where it stands in the round."""
        if item.hash in order.drew_incorrect:
            return f"its family drew incorrect (P(correct) {item.p_correct:.2f}): placed after the children that " \
                   "drew correct"
        if lead.ranked:
            mean = item.log_mean if item.continuous and item.log_mean is not None else item.expected_log_speedup
            return f"forecast ln S {mean:+.3g}, the forecasts' ranking"
        if item.hash in order.by_design:
            return "the round's order"
        if lead.by_gain:
            return f"expected gain {item.gain:.3g}"
        return f"Thompson draw {math.exp(min(thompson_draw(item, self.seed, correctness=False), 700.0)):.3g}x"

    def _audit_trusted(self, r: _Round, audit_room: int) -> None:
        """A random share of the trusted decisions measured anyway, within the audit room."""
        for item, routed in sorted(r.trusted, key=lambda pair: audit_draw(pair[0].hash, self.seed)):
            if audit_room > 0 and audit_draw(item.hash, self.seed) < self.audit_rate:
                r.out[item.hash] = Routed("measure", f"audit of a trusted {routed.decision}: {routed.reason}",
                                          routed.p_beat, audit=True, trusted_as=routed.trusted_as)
                audit_room -= 1
                r.in_turn += 1
            else:
                r.out[item.hash] = routed

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


def follows_skill(router: Router, on: bool, certified: Callable[[], CertifiedSkill | None]) -> Router:
    """``router`` choosing each round's regime from measured skill when ``on`` and it is a selective router
    (RunConfig.follow_skill), with the forecaster's ``certified`` skill (asked only then); any other router, or
    ``on`` False, unchanged."""
    if not on or not isinstance(router, SelectiveRouter):
        return router
    return replace(router, follow_skill=True, certified=certified())


def guides_generator(router: Router) -> bool:
    """Whether ``router``'s next round wants the forecaster's best-ranked points proposed (a selective router
    following skill where its regime follows the ranking, :meth:`SelectiveRouter.follows_ranking`)."""
    return isinstance(router, SelectiveRouter) and router.follows_ranking()
