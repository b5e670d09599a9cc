"""The route step: decide each child's fate (measure, accept, prune, drop) on P(child beats the incumbent),
trusting forecasts only as far as calibration certifies. It spends in two places, both through the run's
Spender: the incumbent's confirmation before anything is trusted against it (:class:`Confirmer`), and the
trial audits of a replayed threshold on probation (:meth:`MeasureStep.measure_children`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kernelcast.agents.forecast.base import Provenance
from kernelcast.graphs import events as ev
from kernelcast.graphs.context import RunContext
from kernelcast.graphs.route.risk_control import TrustThresholds
from kernelcast.graphs.route.routers.base import Routed, RoutingInput
from kernelcast.graphs.route.routers.selective import acts_on
from kernelcast.graphs.route.trust import forecaster_key, last_routes, stage_of, trust_for
from kernelcast.graphs.search.budget import Budget
from kernelcast.graphs.search.confirm import Confirmer
from kernelcast.graphs.search.family_book import FamilyBook
from kernelcast.graphs.search.measure_step import MeasureStep
from kernelcast.graphs.search.result import run_skill
from kernelcast.graphs.search.tree import (
    DECISION_OUTCOME,
    ForecastSummary,
    NodeRecord,
    SearchState,
    TreeEdit,
    incumbent_of,
)

Trusted = tuple[TrustThresholds, int, int, list[RoutingInput], str | None, int]


def routing_input(key: str, fc: ForecastSummary, incumbent: float, belief: Provenance | None) -> RoutingInput:
    """A candidate's forecast as the router reads it; ``belief``: the forecaster's ln S mean/sd, when known."""
    probs = fc["probabilities"]
    return RoutingInput(hash=key, confidence=fc["confidence"], predicted_bin=fc["predicted_bin"],
                        expected_log_speedup=fc["expected_log_speedup"],
                        expected_bin=sum((i + 1) * p for i, p in enumerate(probs)), failed=fc["failed"],
                        probabilities=tuple(probs), incumbent=incumbent,
                        log_mean=belief.log_speedup_mean if belief else None,
                        log_sd=belief.log_speedup_sd if belief else None,
                        log_dof=belief.log_speedup_dof if belief else None)


class RouteStep:
    """route, and the trust a round is routed on."""

    def __init__(self, ctx: RunContext, budget: Budget, confirmer: Confirmer, measuring: MeasureStep) -> None:
        self.ctx = ctx
        self.budget = budget
        self.confirmer = confirmer
        self.measuring = measuring
        self.families = FamilyBook(ctx.store)

    @property
    def certify_group(self) -> str:
        """The group whose rows alone may certify this run's trust ("" : every task's, by choice)."""
        return self.ctx.calibration_group if self.ctx.config.trust_task_rows else ""

    def route(self, state: SearchState) -> dict[str, Any]:
        """Route on P(child beats the incumbent), trusting forecasts only as far as calibration certifies
        (``--risk``) and only against a confirmed incumbent; a share of the budget audits trusted decisions.
        Every decision is logged with its p.

        A replayed threshold on probation is tried first: its trial audits are measured inside this step, and
        the rest of the round is routed on the thresholds as the trial left them, so a trial that passes
        trusts the same round's other would-be decisions (router_bench seed 0: transpose and stencil2d, first
        certified at stage 16, bought their trial in the round that spent the rest of the budget, and every
        would-be prune of that round was deferred and then dropped). Resume-safe: trial audits measured before
        a kill in this step are applied from the store, not bought again, and not routed again.
        """
        nodes = TreeEdit(state["nodes"])
        best, to_best = state.get("best"), state.get("measurements_to_best", 0)
        carried = state.get("carried", [])
        children = [*state["children"], *carried]
        # trial audits bought before a kill: applied after the confirmation the step had bought before them
        pending = self.confirmer.spender.measured_before_a_kill(children)
        tried = list(pending)
        while True:
            left = [key for key in children if key not in tried]
            trust, audits, stage, items, best, to_best = self.round_trust(nodes, left, best, to_best)
            if pending:
                best, to_best = self.measuring.measure_children(nodes, pending, best, to_best)
                pending = []
                continue
            informative = {it.hash: not it.failed for it in items}
            decisions = self.ctx.router.route(items, self.budget.allowance(nodes), trust=trust, audits=audits,
                                              skill=run_skill(self.ctx.store, self.ctx.run_id))
            trial = [key for key, routed in decisions.items() if routed.probation]
            if not trial:
                break
            for key in trial:  # logged before they are bought: the trial reads its audits from the route events
                self.log_route(nodes, key, decisions[key], key in carried, best, informative[key], stage, trust)
            best, to_best = self.measuring.measure_children(nodes, trial, best, to_best)
            tried = [*tried, *trial]
        to_measure = []
        for key, routed in decisions.items():
            self.log_route(nodes, key, routed, key in carried, best, informative[key], stage, trust)
            if routed.decision == "measure":
                to_measure.append(key)
        return {"nodes": nodes.changes(), "to_measure": to_measure, "best": best, "measurements_to_best": to_best}

    def round_trust(self, nodes: TreeEdit, children: list[str], best: str | None, to_best: int) -> Trusted:
        """(thresholds, audits, stage, the children as the router reads them, best, measurements to it) for a
        routing of ``children``: the incumbent is confirmed first when anything would be trusted or audited
        against it (:meth:`Confirmer.confirm_incumbent`); without a confirmation to buy, nothing is trusted."""
        ctx = self.ctx
        trust, audits, stage = self.trust_now(children)
        items = self.routing_items(nodes, best, children)
        while best is not None and nodes[best]["confirmed"] is None:
            # a confirmation bought before a kill replays the path that bought it, whatever the trigger says now
            stored = self.confirmer.spender.confirmed_before_a_kill(best)
            if not stored and not any(acts_on(trust, it, audits) for it in items):
                break  # nothing would be trusted or audited against it: nothing to confirm
            if not stored and (self.budget.confirmations == 0 or self.budget.allowance(nodes) < 1):
                trust, audits = TrustThresholds(risk=ctx.config.risk), 0  # never trusted against one measurement
                break
            best, to_best = self.confirmer.confirm_incumbent(nodes, best, to_best)
            # a decision's calibration row reads its child's latest measurement, so a confirmation can move them
            trust, audits, stage = self.trust_now(children)
            items = self.routing_items(nodes, best, children)
        return trust, audits, stage, items, best, to_best

    def log_route(self, nodes: TreeEdit, key: str, routed: Routed, carried: bool, best: str | None,
                  informative: bool, stage: int, trust: TrustThresholds) -> None:
        """Write a routing decision onto its node and into the store, against the incumbent ``best`` stands for."""
        node = nodes[key]
        reason = (f"carried over from round {node['iteration']}: " if carried else "") + routed.reason
        node["reason"] = reason
        if routed.decision != "measure":
            node["outcome"] = DECISION_OUTCOME[routed.decision].value  # plain str in checkpoints
        incumbent, incumbent_hash = incumbent_of(nodes, best)
        self.ctx.emit(ev.Route(decision=routed.decision, reason=reason, p_beat=routed.p_beat, incumbent=incumbent,
                               incumbent_hash=incumbent_hash, audit=routed.audit, trusted_as=routed.trusted_as,
                               carried=carried, informative=informative, spare=routed.spare, stage=stage,
                               probation=routed.probation, trust_source=trust.source if trust.trusts_anything else ""),
                      candidate_hash=key)

    def routing_items(self, nodes: Mapping[str, NodeRecord], best: str | None, children: list[str]
                      ) -> list[RoutingInput]:
        """The round's children as the router reads them, against the incumbent that ``best`` stands for."""
        incumbent, _ = incumbent_of(nodes, best)
        wanted = set(children)
        beliefs = {key: Provenance.model_validate(r.provenance)  # ln S mean/sd, when known
                   for key, r in self.ctx.store.latest_forecasts(self.ctx.run_id).items() if key in wanted}
        items = []
        for key in children:
            fc = nodes[key]["forecast"]
            assert fc is not None
            items.append(routing_input(key, fc, incumbent, beliefs.get(key)))
        return self.families.annotate(items, nodes)

    def trust_now(self, children: list[str]) -> tuple[TrustThresholds, int, int]:
        """(the thresholds a round of ``children`` may trust, the audits it may spend, the run's stage)."""
        ctx = self.ctx
        stage = stage_of(ctx.store, ctx.run_id)
        if not ctx.config.router_spec.certifies_trust:
            return TrustThresholds(risk=ctx.config.risk), 0, stage
        # RunConfig.trust_seed_replay (on by default); the seed was replayed on candidates that are no derived
        # point: a round with derived points needs the device's own rows
        replayed = ctx.config.trust_seed_replay and all(
            (cand := ctx.store.candidate(key)) is not None and cand.origin != "derived" for key in children)
        trust = trust_for(ctx.store, ctx.hardware.key, stage, ctx.config.risk, forecaster_key(ctx.config),
                          replayed=replayed, group=self.certify_group, trial_group=ctx.calibration_group)
        this_round = set(children)  # routed before a kill in this very route step: routed again now
        spent_on_audits = sum(1 for key, r in last_routes(ctx.store, ctx.run_id).items()
                              if r.audit and key not in this_round)
        return trust, max(0, int(ctx.config.audit_share * ctx.config.budget) - spent_on_audits), stage
