"""The route step: decide each child's fate (measure, accept, prune, drop) on P(child beats the incumbent),
trusting forecasts only as far as calibration certifies. It spends nothing: where a round needs a measurement
before it can be decided (the incumbent's confirmation before anything is trusted against it, the trial audits
of a replayed threshold on probation) it says so (``route_next``), the graph's conditional edge takes the run to
the node that buys it (:meth:`Confirmer.confirm_step`, :meth:`MeasureStep.trial`), and that node returns here."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kernelcast.agents.forecast.base import Provenance
from kernelcast.graphs import events as ev
from kernelcast.graphs.context import RunContext
from kernelcast.graphs.route.calibration_rows import forecaster_key, stage_of
from kernelcast.graphs.route.inputs import routing_input
from kernelcast.graphs.route.risk_control import TrustThresholds
from kernelcast.graphs.route.routers.base import Routed, RoutingInput
from kernelcast.graphs.route.routers.selective import acts_on
from kernelcast.graphs.route.trust import trust_for
from kernelcast.graphs.search.budget import Budget
from kernelcast.graphs.search.family_book import FamilyBook
from kernelcast.graphs.search.result import run_skill
from kernelcast.graphs.search.spender import Spender
from kernelcast.graphs.search.tree import DECISION_OUTCOME, NodeRecord, SearchState, TreeEdit, incumbent_of
from kernelcast.tools.store.decisions import DecisionRecord

Trusted = tuple[TrustThresholds, int, int, list[RoutingInput]]  # thresholds, audits, stage, the children as read

CONFIRM, TRIAL = "confirm", "trial"  # where route sends a round it cannot decide yet (nodes.after_route)


class RouteStep:
    """route: a round's decisions from its forecasts, the budget, the incumbent and the trust state."""

    def __init__(self, ctx: RunContext, budget: Budget, spender: Spender) -> None:
        self.ctx = ctx
        self.budget = budget
        self.spender = spender
        self.families = FamilyBook(ctx.store)

    def route(self, state: SearchState) -> dict[str, Any]:
        """Route on P(child beats the incumbent), trusting forecasts only as far as calibration certifies
        (``--risk``) and only against a confirmed incumbent; a share of the budget audits trusted decisions.
        Every decision is recorded with its p.

        Two answers send the round to a node that spends and back here: ``confirm`` (the incumbent is confirmed
        before anything is trusted or audited against it, :meth:`needs_confirmation`) and ``trial`` (the router
        tried a replayed threshold on probation: its audits are recorded now and measured before the rest of the
        round is routed on the thresholds as the trial left them, so a trial that passes trusts the same round's
        other would-be decisions; router_bench seed 0: transpose and stencil2d, first certified at stage 16,
        bought their trial in the round that spent the rest of the budget, and every would-be prune of that round
        was deferred and then dropped). Children already tried this round (``tried``) are not routed again, nor
        are those a route step of an earlier version measured before a kill (they are applied first, at no cost).
        """
        nodes = TreeEdit(state["nodes"])
        best, carried, tried = state.get("best"), state.get("carried", []), state.get("tried", [])
        left = [key for key in [*state["children"], *carried] if key not in tried]
        trusted = self.round_trust(nodes, left, best)
        if trusted is None:
            return {"route_next": CONFIRM}
        if pending := self.spender.measured_before_a_kill(left):
            return {"route_next": TRIAL, "trial": pending}
        trust, audits, stage, items = trusted
        informative = {it.hash: not it.failed for it in items}
        decisions = self.ctx.router.route(items, self.budget.allowance(nodes), trust=trust, audits=audits,
                                          skill=run_skill(self.ctx.store, self.ctx.run_id))
        round_ = state.get("iteration", 0)
        trial = [key for key, routed in decisions.items() if routed.probation]
        chosen = trial or list(decisions)  # a trial is recorded before it is bought: it reads its audits from them
        for key in chosen:
            self.log_route(nodes, key, decisions[key], key in carried, best, informative[key], stage, trust, round_)
        if trial:
            return {"nodes": nodes.changes(), "route_next": TRIAL, "trial": trial}
        to_measure = [key for key, routed in decisions.items() if routed.decision == "measure"]
        return {"nodes": nodes.changes(), "to_measure": to_measure, "route_next": "measure" if to_measure else "backup",
                "trial": [], "tried": []}

    def round_trust(self, nodes: Mapping[str, NodeRecord], children: list[str], best: str | None) -> Trusted | None:
        """(thresholds, audits, stage, the children as the router reads them) for a routing of ``children``
        against the incumbent ``best`` stands for; None: confirm the incumbent first. Without a confirmation to
        buy, nothing is trusted against one measurement."""
        trust, audits, stage = self.trust_now(children)
        items = self.routing_items(nodes, best, children)
        if best is None or nodes[best]["confirmed"] is not None:
            return trust, audits, stage, items
        # a confirmation bought before a kill replays the path that bought it, whatever the trigger says now
        stored = self.spender.confirmed_before_a_kill(best)
        if not stored and not any(acts_on(trust, it, audits) for it in items):
            return trust, audits, stage, items  # nothing would be trusted or audited against it: nothing to confirm
        if not stored and (self.budget.confirmations == 0 or self.budget.allowance(nodes) < 1):
            return TrustThresholds(risk=self.ctx.config.risk), 0, stage, items  # never trusted against one measurement
        return None

    @property
    def certify_group(self) -> str:
        """The group whose rows alone may certify this run's trust ("" : every task's, by choice)."""
        return self.ctx.calibration_group if self.ctx.config.trust_task_rows else ""

    def log_route(self, nodes: TreeEdit, key: str, routed: Routed, carried: bool, best: str | None,
                  informative: bool, stage: int, trust: TrustThresholds, round_: int) -> None:
        """Write a routing decision onto its node and record it (the store's decisions, then the ``route`` event
        made from the record), against the incumbent ``best`` stands for."""
        ctx = self.ctx
        node = nodes[key]
        reason = (f"carried over from round {node['iteration']}: " if carried else "") + routed.reason
        node["reason"] = reason
        if routed.decision != "measure":
            node["outcome"] = DECISION_OUTCOME[routed.decision].value  # plain str in checkpoints
        incumbent, incumbent_hash = incumbent_of(nodes, best)
        forecaster = forecaster_key(ctx.config)
        record = ctx.store.decisions.add(DecisionRecord(
            run_id=ctx.run_id, candidate_hash=key, device=ctx.hardware.key, round=round_,
            forecaster=forecaster.forecaster, model=forecaster.model, model_version=forecaster.version,
            decision=routed.decision, reason=reason, p_beat=routed.p_beat, incumbent=incumbent,
            incumbent_hash=incumbent_hash, audit=routed.audit, trusted_as=routed.trusted_as, carried=carried,
            informative=informative, spare=routed.spare, stage=stage, probation=routed.probation,
            trust_source=trust.source if trust.trusts_anything else ""))
        ctx.emit(ev.Route(**record.verdict().model_dump()), candidate_hash=key)

    def routing_items(self, nodes: Mapping[str, NodeRecord], best: str | None, children: list[str]
                      ) -> list[RoutingInput]:
        """The round's children as the router reads them, against the incumbent that ``best`` stands for."""
        incumbent, _ = incumbent_of(nodes, best)
        wanted = set(children)
        beliefs = {key: Provenance.model_validate(r.provenance)  # ln S mean/sd, when known
                   for key, r in self.ctx.store.forecasts.latest(self.ctx.run_id).items() if key in wanted}
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
            (cand := ctx.store.candidates.get(key)) is not None and cand.origin != "derived" for key in children)
        trust = trust_for(ctx.store, ctx.hardware.key, stage, ctx.config.risk, forecaster_key(ctx.config),
                          replayed=replayed, group=self.certify_group, trial_group=ctx.calibration_group)
        this_round = set(children)  # routed before a kill in this very route step: routed again now
        spent_on_audits = sum(1 for key, r in ctx.store.decisions.last_of_run(ctx.run_id).items()
                              if r.audit and key not in this_round)
        return trust, max(0, int(ctx.config.audit_share * ctx.config.budget) - spent_on_audits), stage
