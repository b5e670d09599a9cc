"""The graph's nodes: select parent (PUCT) → generate → forecast → route → measure → back up,
and finally verify → report. Each node returns only the state keys it changes.

Hardware spending is resume-safe: a measurement is written to the store (with
the run id) before the state that mentions it is checkpointed, and the measure
node reuses a stored measurement instead of buying it twice.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

from kernelcast.agents.generate.families import transformation_family
from kernelcast.agents.forecast.base import Forecast, LearnsFromMeasurements, Provenance, record_forecast
from kernelcast.agents.generate.base import GenerationContext, ProposalReport, Proposals
from kernelcast.graphs.route.risk_control import TrustThresholds
from kernelcast.graphs import events as ev
from kernelcast.graphs.search import puct
from kernelcast.graphs.config import RunConfig
from kernelcast.graphs.context import RunContext
from kernelcast.graphs.errors import SearchFailed
from kernelcast.graphs.route.routing import Routed, RoutingInput, acts_on, measure_order, unproven_family
from kernelcast.graphs.route.trust import last_routes
from kernelcast.graphs.search.tree import DECISION_OUTCOME, ForecastSummary, NodeRecord, SearchState, TreeEdit, outcome_counts
from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.measurement import Measurement, MeasureConfig
from kernelcast.tools.hardware.measurers.replay import REPLAY_MISSING_FLAG

NOT_IN_REPLAY = "the replay has no measurement of it: nothing bought"  # a node's reason: never measurable here
MAX_EMPTY_ROUNDS = 3  # expansions in a row without a new candidate before the search loop ends


def new_node(candidate: Candidate, parent: str | None, depth: int, iteration: int,
             outcome: str = "pending") -> NodeRecord:
    return NodeRecord(hash=candidate.hash, parent=parent, depth=depth, iteration=iteration, outcome=outcome,
                      speedup=None, cv=None, forecast=None, prior=1.0, visits=0, intent=candidate.intent, reason="",
                      exhausted=False, confirmed=None, confirmed_ci=None)


def confirmation_config(config: MeasureConfig) -> MeasureConfig:
    """More repetitions and a tighter interval: a winner's number must not be the luck of one measurement."""
    return config.model_copy(update={"min_reps": max(config.min_reps, 20), "target_seconds": 4 * config.target_seconds,
                                     "ci_target": config.ci_target / 2, "max_timing_seconds": 2 * config.max_timing_seconds,
                                     "max_batches": 2 * config.max_batches})


def expected_log_speedup(node: NodeRecord) -> float:
    """The forecast's expected log speedup of a node, 0 (no change) without a forecast."""
    return node["forecast"]["expected_log_speedup"] if node["forecast"] is not None else 0.0


def node_forecast(fc: Forecast) -> ForecastSummary:
    """What a node keeps of its forecast (plain data: nodes live in checkpoints)."""
    return {"probabilities": list(fc.probabilities), "predicted_bin": fc.predicted_bin, "confidence": fc.confidence,
            "expected_log_speedup": fc.expected_log_speedup, "failed": fc.failed}


def standing(node: NodeRecord) -> float | None:
    """A measured node's speedup as the run stands on it: its confirmation once it has one, else its first
    measurement. The first measurement of the node that leads is the luckiest of several noisy numbers (a
    reduce_rows incumbent read 6.27x once and 2.79x confirmed, and a router bench run pruned 92 children
    against the 6.27x)."""
    return node["confirmed"] if node["confirmed"] is not None else node["speedup"]


def incumbent_of(nodes: Mapping[str, NodeRecord], best: str | None) -> tuple[float, str | None]:
    """The speedup to beat and its kernel: the best measured node's standing, or the reference's (1.0, None)."""
    incumbent = max(1.0, (standing(nodes[best]) or 1.0) if best else 1.0)
    return incumbent, best if best and incumbent > 1.0 else None


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


def confirmations(config: RunConfig) -> int:
    """How many of the best measured candidates the run confirms: ``confirm_top``, but at most one per 8
    measurements of the budget (at least one), so a budget of 8 is not three-eighths confirmation and
    five measurements of search."""
    return min(config.confirm_top, max(1, config.budget // 8))


def top_measured(nodes: Mapping[str, NodeRecord], k: int) -> list[str]:
    """The ``k`` correct measured nodes that stand highest (the candidates to confirm; one confirmed during the
    search stands on its confirmation)."""
    measured = [key for key, n in nodes.items() if n["outcome"] in ("measured", "verified") and standing(n)]
    return sorted(measured, key=lambda key: -(standing(nodes[key]) or 0.0))[:k]


def best_measured(nodes: Mapping[str, NodeRecord]) -> str | None:
    """The correct measured node that stands highest (None: none yet)."""
    return next(iter(top_measured(nodes, 1)), None)


def confirm_reserve(nodes: Mapping[str, NodeRecord], config: RunConfig) -> int:
    """The budget the search loop keeps for the final confirmations: one per node to confirm, at least one
    before any was measured. Nodes confirmed during the search do not shrink it: one round can measure
    several kernels that pass them, and those are then what the final confirmations are for."""
    measured_ok = sum(1 for n in nodes.values() if n["outcome"] in ("measured", "verified") and n["speedup"])
    return min(confirmations(config), max(1, measured_ok))


def still_to_confirm(nodes: Mapping[str, NodeRecord], config: RunConfig) -> list[str]:
    """The final confirmations, best standing first: the top nodes not confirmed yet (past the top when those
    were confirmed during the search, so the reserve goes to the next contenders, not idle)."""
    unconfirmed = [key for key in top_measured(nodes, len(nodes)) if nodes[key]["confirmed"] is None]
    return unconfirmed[:confirmations(config)]


class SearchNodes:
    """Node functions bound to one run's context.

    ``carry_over``: a child the router left unmeasured for want of a round's room ("drop") stays a candidate,
    forecast again and routed again with each later round's children against that round's incumbent, until it
    is measured, trusted, or the budget ends. A first round proposes a template's whole opening design and
    measures a few of it; the forecaster learns from those few, and only then can it tell which of the rest to
    measure and which to prune (router_bench, 6 built-ins: 678 of 1,539 decisions were first-round children
    dropped unseen by any measurement). A session keeps each submission's verdicts final instead (its caller
    reads them), so it does not carry over.
    """

    def __init__(self, ctx: RunContext, carry_over: bool = True) -> None:
        self.ctx = ctx
        self.carry_over = carry_over
        self.taught = 0  # run measurements the forecaster has learned from (0 again after a resume)
        self.not_in_replay: set[str] = set()  # candidates a replay had no measurement of (nothing was bought)
        self._families: dict[str, str] = {}  # candidate hash -> transformation family

    # ---- helpers ------------------------------------------------------------------
    @property
    def certify_group(self) -> str:
        """The group whose rows alone may certify this run's trust ("" : every task's, by choice)."""
        return self.ctx.calibration_group if self.ctx.config.trust_task_rows else ""

    def spent(self) -> int:
        """Budget spent, from the store: the only count that survives a kill."""
        return self.ctx.store.measurement_totals(self.ctx.run_id)[0]

    def device_seconds(self) -> float:
        return self.ctx.store.measurement_totals(self.ctx.run_id)[1]

    def loop_allowance(self, state: SearchState) -> int:
        """Measurements the search loop may still spend (:meth:`allowance`)."""
        return self.allowance(state["nodes"])

    def allowance(self, nodes: Mapping[str, NodeRecord]) -> int:
        """Measurements the search loop may still spend, keeping the verification reserve: accepted nodes to
        verify, plus the confirmation of the best measured ones not confirmed yet (one, before any)."""
        accepted = sum(1 for n in nodes.values() if n["outcome"] == "accepted")
        reserve = min(self.ctx.config.reserve, accepted) + confirm_reserve(nodes, self.ctx.config)
        left = self.ctx.config.budget - self.spent() - reserve
        limit = self.ctx.config.max_device_seconds
        if limit is not None and self.device_seconds() >= limit:
            return 0
        return max(0, left)

    def _measure(self, state_nodes: TreeEdit, key: str, phase: str, rival: str | None = None
                 ) -> Measurement | None:
        """Measure one candidate (see :meth:`_measure_many`)."""
        return self._measure_many(state_nodes, [key], phase, rival)[key]

    def _measure_many(self, state_nodes: TreeEdit, keys: list[str], phase: str, rival: str | None = None,
                      ) -> dict[str, Measurement | None]:
        """Measure candidates concurrently through the measurer; None for those the budget cannot pay.

        ``rival``: a measured node (the incumbent) timed beside each candidate, so whether a child beat it is a
        paired comparison of one session (the calibration rows read it: :mod:`kernelcast.graphs.route.trust`).

        Resume-safe: a candidate this run already measured (in this phase) is reused, not bought again; the
        budget is reserved before dispatch (never more in flight than the store's ledger allows); each
        result is written to the store as it arrives, before this node returns and the checkpoint that
        mentions it is written.
        """
        ctx = self.ctx
        results: dict[str, Measurement | None] = {}
        fresh = []
        for key in keys:
            existing = [m for m in ctx.store.measurements(run_id=ctx.run_id, candidate_hash=key)
                        if (m.phase == "confirm") == (phase == "confirm")]
            if existing:
                results[key] = existing[-1]
                ctx.emit(ev.Reused(phase=phase, reason="measured before a restart"), candidate_hash=key, store=False)
            else:
                fresh.append(key)
        allowed = max(0, ctx.config.budget - self.spent())
        for key in fresh[allowed:]:
            results[key] = None
        dispatch = [ctx.store.candidate(key) for key in fresh[:allowed]]
        assert all(c is not None for c in dispatch), "a candidate is missing from the store"
        config = confirmation_config(ctx.measure_config) if phase == "confirm" else ctx.measure_config
        if rival is not None:  # never the reference: against it the speedup itself is the pair (incumbent_of)
            incumbent = ctx.store.candidate(rival)
            assert incumbent is not None, f"the incumbent {rival} is missing from the store"
            config = config.model_copy(update={"rival": incumbent})
        if dispatch:
            ctx.emit(ev.InFlight(phase=phase, workers=ctx.measurer.parallelism,
                                 candidates=[c.hash for c in dispatch if c is not None]), store=False)
        for candidate, measured in ctx.measurer.measure_many(ctx.task, [c for c in dispatch if c is not None], config):
            if ctx.measurer.simulated and REPLAY_MISSING_FLAG in measured.flags:
                results[candidate.hash] = None  # a replay without this candidate: nothing was bought
                self.not_in_replay.add(candidate.hash)
                continue
            bought = measured.model_copy(update={"phase": phase})
            ctx.store.add_measurement(bought, run_id=ctx.run_id)
            results[candidate.hash] = bought
            ctx.emit(ev.Spend(phase=phase, status=bought.status.value, speedup=bought.speedup,
                              over_incumbent=bought.rival.ratio if bought.rival is not None else None, spent=self.spent(),
                              budget=ctx.config.budget, flags=bought.flags,
                              in_flight=[f"{f.worker}:{f.candidate_hash[:8]}" for f in ctx.measurer.in_flight()]),
                     candidate_hash=candidate.hash)
        for key, answer in results.items():
            if answer is not None:
                self._apply(state_nodes[key], answer, phase)
        return results

    @staticmethod
    def _apply(node: NodeRecord, result: Measurement, phase: str) -> None:
        """What a measurement says about its node."""
        if phase == "confirm":
            node["confirmed"] = result.speedup if result.ok else None
            node["confirmed_ci"] = list(result.speedup_ci) if result.ok and result.speedup_ci else None
            if not result.ok:
                node["outcome"] = "failed"
                node["reason"] = f"failed its confirmation: {result.status.value}: {result.reason[:300]}"
            return
        node["speedup"] = result.speedup if result.ok else None
        node["cv"] = result.candidate.cv if result.candidate else None
        node["reason"] = "" if result.ok else f"{result.status.value}: {result.reason[:300]}"

    # ---- nodes ----------------------------------------------------------------------
    def init(self, state: SearchState) -> dict[str, Any]:
        """Root the tree at the reference (measured later only if a speedup needs a baseline: never)."""
        if state.get("nodes"):
            return {}
        ref = self.ctx.task.reference()
        self.ctx.store.upsert_task(self.ctx.task)
        self.ctx.store.upsert_device(self.ctx.hardware)
        self.ctx.store.add_candidate(ref)
        root = new_node(ref, None, 0, 0, outcome="root")
        self.ctx.emit(ev.Start(config=self.ctx.config.model_dump(), device=self.ctx.hardware.key))
        return {"run_id": self.ctx.run_id, "iteration": 0, "nodes": {ref.hash: root}, "parent": None, "children": [],
                "to_measure": [], "empty_rounds": 0, "finished": False, "stop_reason": "", "best": None,
                "measurements_to_best": 0}

    def select(self, state: SearchState) -> dict[str, Any]:
        parent = puct.select(state["nodes"], self.ctx.config.puct_c)
        if parent is None:
            return {"finished": True, "stop_reason": "nothing left to expand", "parent": None, "children": [],
                    "carried": []}
        return {"parent": parent, "iteration": state["iteration"] + 1, "children": [], "to_measure": [],
                "carried": []}

    def generate(self, state: SearchState) -> dict[str, Any]:
        ctx = self.ctx
        nodes = TreeEdit(state["nodes"])
        parent_key = state["parent"]
        assert parent_key is not None
        parent = ctx.store.candidate(parent_key)
        assert parent is not None
        siblings = [k for k, n in nodes.items() if n["parent"] == parent_key]
        context = GenerationContext.from_store(
            ctx.store, ctx.task, ctx.hardware.key, parent, hardware=ctx.hardware,
            seed=ctx.config.seed * 100_003 + state["iteration"], siblings=siblings, extra_known=nodes.keys(),
            sizes=ctx.config.sizes, run_id=ctx.run_id)
        node = nodes[parent_key]
        if node["outcome"] == "accepted" and node["forecast"]:
            context = context.model_copy(update={"parent_speedup": math.exp(node["forecast"]["expected_log_speedup"]),
                                                 "parent_speedup_kind": "forecast"})
        try:
            wanted = ctx.config.n_opening if node["parent"] is None else ctx.config.n_children
            proposals = ctx.generator.propose(ctx.task, parent, context, wanted)
        except Exception as exc:  # noqa: BLE001 - a broken generator ends this expansion, not the run
            proposals = Proposals([], ProposalReport(generator=ctx.generator.name, errors=[str(exc)]))
            ctx.emit(ev.GeneratorError(error=f"{type(exc).__name__}: {exc}"), candidate_hash=parent_key)

        children = []
        for cand in proposals.candidates:
            if cand.hash in nodes:
                continue
            ctx.store.add_candidate(cand)
            nodes[cand.hash] = new_node(cand, parent_key, node["depth"] + 1, state["iteration"])
            children.append(cand.hash)
        ctx.emit(ev.Generated(parent=parent_key, children=children, report=proposals.report.summary()),
                 candidate_hash=parent_key)
        empty = state.get("empty_rounds", 0) + 1 if not children else 0
        if not children:
            nodes[parent_key]["exhausted"] = True
        return {"nodes": nodes.changes(), "children": children, "empty_rounds": empty}

    def _forecasts(self, keys: list[str]) -> list[Forecast]:
        """Forecasts of candidates for the problem the run measures (a run at small sizes: the small one); a
        forecaster that fails gives uninformative forecasts (deferred to hardware), never an error."""
        ctx = self.ctx
        cands = [ctx.store.candidate(k) for k in keys]
        try:
            return ctx.forecaster.forecast_many(ctx.task.at_sizes(ctx.config.sizes), cands,  # type: ignore[arg-type]
                                                ctx.hardware)
        except Exception as exc:  # noqa: BLE001 - a failed forecast is deferred, never fatal
            return [Forecast.uninformative(f"{type(exc).__name__}: {exc}", getattr(ctx.forecaster, "name", "?"))
                    for _ in keys]

    def teach_forecaster(self) -> None:
        """Let a learning forecaster retrain on this run's measurements once new ones have arrived.

        It reads them from the store, so after a resume the rebuilt forecaster
        learns the run's whole history before its first forecast.
        """
        ctx = self.ctx
        if not ctx.config.learn_online or not isinstance(ctx.forecaster, LearnsFromMeasurements):
            return
        spent = self.spent()
        if spent <= self.taught:
            return
        self.taught = spent
        pairs = ctx.store.measured_pairs(device=ctx.hardware.key, sizes=ctx.config.sizes, run_id=ctx.run_id)
        start = time.perf_counter()
        try:
            changed = ctx.forecaster.learn(pairs, {ctx.hardware.key: ctx.hardware})
        except Exception as exc:  # noqa: BLE001 - a failed retrain keeps the previous model
            ctx.emit(ev.Learn(pairs=len(pairs), error=f"{type(exc).__name__}: {exc}"))
            return
        if changed:
            ctx.emit(ev.Learn(pairs=len(pairs), seconds=round(time.perf_counter() - start, 2),
                              model=getattr(ctx.forecaster, "model_name", "")))

    def forecast(self, state: SearchState) -> dict[str, Any]:
        """Forecast the round's children, and again the children carried over from earlier rounds (the
        forecaster has learned since: their routing reads the new forecast, which the store keeps too)."""
        ctx = self.ctx
        self.teach_forecaster()
        nodes = TreeEdit(state["nodes"])
        carried = self.carried(nodes, state["children"])
        keys = [*state["children"], *carried]
        forecasts = self._forecasts(keys)
        expected = {}
        for key, fc in zip(keys, forecasts):
            nodes[key]["forecast"] = node_forecast(fc)
            expected[key] = fc.expected_log_speedup
            record_forecast(ctx.store, fc, ctx.task.name, key, ctx.hardware.key, run_id=ctx.run_id)
        new = set(state["children"])
        for key, prior in puct.rank_priors({k: v for k, v in expected.items() if k in new}).items():
            nodes[key]["prior"] = prior
        ctx.emit(ev.ForecastRound(n=len(keys), failed=sum(1 for f in forecasts if f.failed)),
                 candidate_hash=state["parent"], store=False)
        return {"nodes": nodes.changes(), "carried": carried}

    def carried(self, nodes: Mapping[str, NodeRecord], children: list[str]) -> list[str]:
        """Children of earlier rounds left unmeasured for want of room, routed again this round (oldest
        first); none without ``carry_over``. Only the router's drops: a child routed to the hardware that the
        measure step could not pay (the budget ran out, or a replay has no measurement of it) stays where it is.
        """
        if not self.carry_over:
            return []
        new = set(children)
        routes = last_routes(self.ctx.store, self.ctx.run_id)
        return sorted((k for k, n in nodes.items() if n["outcome"] == "dropped" and n["speedup"] is None
                       and n["forecast"] is not None and k not in new
                       and (route := routes.get(k)) is not None and route.decision == "drop"),
                      key=lambda k: (nodes[k]["iteration"], k))

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
        ctx = self.ctx
        nodes = TreeEdit(state["nodes"])
        best, to_best = state.get("best"), state.get("measurements_to_best", 0)
        carried = state.get("carried", [])
        children = [*state["children"], *carried]
        # trial audits bought before a kill: applied after the confirmation the step had bought before them
        pending = self.measured_before_a_kill(children)
        tried = list(pending)
        while True:
            left = [key for key in children if key not in tried]
            trust, audits, stage, items, best, to_best = self.round_trust(nodes, left, best, to_best)
            if pending:
                best, to_best = self._measure_search(nodes, pending, best, to_best)
                pending = []
                continue
            informative = {it.hash: not it.failed for it in items}
            decisions = ctx.router.route(items, self.allowance(nodes), trust=trust, audits=audits)
            trial = [key for key, routed in decisions.items() if routed.probation]
            if not trial:
                break
            for key in trial:  # logged before they are bought: the trial reads its audits from the route events
                self._log_route(nodes, key, decisions[key], key in carried, best, informative[key], stage, trust)
            best, to_best = self._measure_search(nodes, trial, best, to_best)
            tried = [*tried, *trial]
        to_measure = []
        for key, routed in decisions.items():
            self._log_route(nodes, key, routed, key in carried, best, informative[key], stage, trust)
            if routed.decision == "measure":
                to_measure.append(key)
        return {"nodes": nodes.changes(), "to_measure": to_measure, "best": best, "measurements_to_best": to_best}

    def round_trust(self, nodes: TreeEdit, children: list[str], best: str | None, to_best: int
                    ) -> tuple[TrustThresholds, int, int, list[RoutingInput], str | None, int]:
        """(thresholds, audits, stage, the children as the router reads them, best, measurements to it) for a
        routing of ``children``: the incumbent is confirmed first when anything would be trusted or audited
        against it (:meth:`confirm_incumbent`); without a confirmation to buy, nothing is trusted."""
        ctx = self.ctx
        trust, audits, stage = self.trust_now(children)
        items = self.routing_items(nodes, best, children)
        while best is not None and nodes[best]["confirmed"] is None:
            # a confirmation bought before a kill replays the path that bought it, whatever the trigger says now
            stored = self.confirmed_before_a_kill(best)
            if not stored and not any(acts_on(trust, it.p_beat, audits) and not unproven_family(it) for it in items):
                break  # nothing would be trusted or audited against it: nothing to confirm
            if not stored and (confirmations(ctx.config) == 0 or self.allowance(nodes) < 1):
                trust, audits = TrustThresholds(risk=ctx.config.risk), 0  # never trusted against one measurement
                break
            best, to_best = self.confirm_incumbent(nodes, best, to_best)
            # a decision's calibration row reads its child's latest measurement, so a confirmation can move them
            trust, audits, stage = self.trust_now(children)
            items = self.routing_items(nodes, best, children)
        return trust, audits, stage, items, best, to_best

    def _log_route(self, nodes: TreeEdit, key: str, routed: Routed, carried: bool, best: str | None,
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

    def measured_before_a_kill(self, keys: list[str]) -> list[str]:
        """Those of ``keys`` this run already measured (confirmations aside), in their order: in the route step,
        trial audits bought in that very step before a kill (a child reaches it unmeasured otherwise); in
        verify, what an earlier attempt of it bought."""
        bought = {m.candidate_hash for m in self.ctx.store.measurements(run_id=self.ctx.run_id) if m.phase != "confirm"}
        return [key for key in keys if key in bought]

    def routing_items(self, nodes: Mapping[str, NodeRecord], best: str | None, children: list[str]
                      ) -> list[RoutingInput]:
        """The round's children as the router reads them, against the incumbent that ``best`` stands for."""
        incumbent, _ = incumbent_of(nodes, best)
        wanted = set(children)
        beliefs = {key: Provenance.model_validate(r.provenance)  # ln S mean/sd, when known
                   for key, r in self.ctx.store.latest_forecasts(self.ctx.run_id).items() if key in wanted}
        measured = Counter(self.family_of(key) for key, node in nodes.items()
                           if node["speedup"] is not None and node["parent"] is not None)
        items = []
        for key in children:
            fc = nodes[key]["forecast"]
            assert fc is not None
            family = self.family_of(key)
            items.append(replace(routing_input(key, fc, incumbent, beliefs.get(key)), family=family,
                                 family_measured=measured[family]))
        return items

    def family_of(self, key: str) -> str:
        """A node's transformation family (agents.families), read once per candidate from the store."""
        if key not in self._families:
            candidate = self.ctx.store.candidate(key)
            self._families[key] = transformation_family(candidate) if candidate is not None else ""
        return self._families[key]

    def trust_now(self, children: list[str]) -> tuple[TrustThresholds, int, int]:
        """(the thresholds a round of ``children`` may trust, the audits it may spend, the run's stage)."""
        from kernelcast.agents.forecast.blend import WRITTEN, family
        from kernelcast.graphs.route.trust import stage_of, trust_for

        ctx = self.ctx
        stage = stage_of(ctx.store, ctx.run_id)
        if not ctx.config.router_spec.certifies_trust:
            return TrustThresholds(risk=ctx.config.risk), 0, stage
        # RunConfig.trust_seed_replay (on by default); the seed was replayed on written candidates only: a round with
        # derived points needs the device's own rows
        replayed = ctx.config.trust_seed_replay and all(
            (cand := ctx.store.candidate(key)) is not None and family(cand) == WRITTEN for key in children)
        trust = trust_for(ctx.store, ctx.hardware.key, stage, ctx.config.risk, (ctx.config.forecaster, ctx.config.model),
                          replayed=replayed, group=self.certify_group, trial_group=ctx.calibration_group)
        this_round = set(children)  # routed before a kill in this very route step: routed again now
        spent_on_audits = sum(1 for key, r in last_routes(ctx.store, ctx.run_id).items()
                              if r.audit and key not in this_round)
        return trust, max(0, int(ctx.config.audit_share * ctx.config.budget) - spent_on_audits), stage

    def confirm_incumbent(self, nodes: TreeEdit, best: str, to_best: int) -> tuple[str | None, int]:
        """Confirm the incumbent before a forecast is trusted against it: (the best after it, measurements to it).

        A trusted prune says "this child would not beat the incumbent"; judged against the luckiest first
        measurement of the run it is a judgement against a number the kernel does not reach (the check beside
        the incumbent's kernel then finds the pruned tie, or the pruned winner). A confirmation that falls can
        hand the lead to another node (the route step then asks again whether anything would be trusted
        against it). Resume-safe: a confirmation stored before a kill is reused, not bought again.
        """
        first = nodes[best]["speedup"]
        again = self._measure(nodes, best, "confirm")
        assert again is not None, "the route step confirms only with budget left or a stored confirmation"
        self.ctx.emit(ev.Confirm(first=first, confirmed=again.speedup if again.ok else None,
                                 interval=list(again.speedup_ci) if again.speedup_ci else None,
                                 status=again.status.value, before_trust=True), candidate_hash=best)
        leader = best_measured(nodes)
        return (leader, self.spent_to(leader)) if leader != best else (best, to_best)

    def confirmed_before_a_kill(self, key: str) -> bool:
        """Whether the store holds this run's confirmation of ``key`` that the state does not know of."""
        return any(m.phase == "confirm" for m in self.ctx.store.measurements(run_id=self.ctx.run_id,
                                                                            candidate_hash=key))

    def spent_to(self, key: str | None) -> int:
        """The budget spent when ``key`` was first measured (0 for none)."""
        if key is None:
            return 0
        ledger = [m.candidate_hash for m in self.ctx.store.measurements(run_id=self.ctx.run_id)]
        return ledger.index(key) + 1 if key in ledger else 0

    def measure(self, state: SearchState) -> dict[str, Any]:
        nodes = TreeEdit(state["nodes"])
        best, to_best = state.get("best"), state.get("measurements_to_best", 0)
        best, to_best = self._measure_search(nodes, list(state["to_measure"]), best, to_best)
        return {"nodes": nodes.changes(), "to_measure": [], "best": best, "measurements_to_best": to_best}

    def _measure_search(self, nodes: TreeEdit, keys: list[str], best: str | None, to_best: int
                        ) -> tuple[str | None, int]:
        """Measure routed children beside the incumbent and mark each node measured, failed, or dropped when
        nothing was bought: (best, measurements to it) after them."""
        results = self._measure_many(nodes, keys, "search", rival=incumbent_of(nodes, best)[1])
        for key in keys:
            result = results[key]
            if result is None:
                nodes[key]["outcome"] = "dropped"
                nodes[key]["reason"] = NOT_IN_REPLAY if key in self.not_in_replay else "budget exhausted before measurement"
                self.ctx.emit(ev.Skip(reason=nodes[key]["reason"]), candidate_hash=key)
                continue
            nodes[key]["outcome"] = "measured" if result.ok else "failed"
            best, to_best = self._track_best(nodes, key, best, to_best)
        return best, to_best

    def backup(self, state: SearchState) -> dict[str, Any]:
        nodes = TreeEdit(state["nodes"])
        cursor = state.get("parent")
        while cursor is not None and cursor in nodes:
            nodes[cursor]["visits"] += 1
            cursor = nodes[cursor]["parent"]
        best = state.get("best")
        self.ctx.emit(self.progress(nodes, best), store=False)
        return {"nodes": nodes.changes()}

    def verify(self, state: SearchState) -> dict[str, Any]:
        """Spend what is left (the reserve) measuring the most promising unverified nodes."""
        if len(state["nodes"]) == 1:  # nothing was ever proposed: an error, never "finished, 0 spent"
            raise SearchFailed(f"the {self.ctx.config.generator} generator proposed no candidate in "
                               f"{state.get('iteration', 0)} rounds; {self.last_generator_problem()}")
        nodes = TreeEdit(state["nodes"])
        best, to_best = state.get("best"), state.get("measurements_to_best", 0)
        accepted = sorted((k for k, n in nodes.items() if n["outcome"] == "accepted"),
                          key=lambda k: -expected_log_speedup(nodes[k]))
        # a verify re-run after a kill starts from the state before it: what it bought then is applied first
        for key in [*self._apply_stored(nodes, accepted, "verify"),
                    *self._apply_stored(nodes, self.leftovers(nodes), "search")]:
            best, to_best = self._track_best(nodes, key, best, to_best)
        accepted = [k for k in accepted if nodes[k]["outcome"] == "accepted"]
        reserve = min(confirmations(self.ctx.config), len(top_measured(nodes, confirmations(self.ctx.config))))
        for key, result in self._measure_within(nodes, accepted, "verify", reserve):
            nodes[key]["outcome"] = "verified" if result.ok else "failed"
            forecast = nodes[key]["forecast"]
            predicted = forecast["predicted_bin"] if forecast is not None else None
            self.ctx.emit(ev.Verify(predicted_bin=predicted, measured_bin=result.bin(),
                                    forecast_right=predicted == result.bin()), candidate_hash=key)
            best, to_best = self._track_best(nodes, key, best, to_best)
        if generator_ran_dry(state):  # budget left and nothing new to propose: the best untried go next
            while self.spent() < self.ctx.config.budget - reserve and \
                    (pick := self.next_leftover(nodes, best)) is not None:
                measured = list(self._measure_within(nodes, [pick], "search", reserve))
                if not measured and pick in self.not_in_replay:  # never measurable here: the next one
                    nodes[pick]["reason"] = NOT_IN_REPLAY
                    self.ctx.emit(ev.Skip(reason=NOT_IN_REPLAY), candidate_hash=pick)
                    continue
                if not measured:  # a ledger that disagrees: the rest stay untried
                    self.ctx.emit(ev.Skip(reason="picked after the generator ran dry, but not measured"),
                                  candidate_hash=pick)
                    break
                self._mark_leftover(nodes, pick, measured[0][1])
                best, to_best = self._track_best(nodes, pick, best, to_best)
        for key in still_to_confirm(nodes, self.ctx.config):
            first = nodes[key]["speedup"]
            again = self._measure(nodes, key, "confirm")
            if again is None:
                break
            self.ctx.emit(ev.Confirm(first=first, confirmed=again.speedup if again.ok else None,
                                     interval=list(again.speedup_ci) if again.speedup_ci else None,
                                     status=again.status.value), candidate_hash=key)
        if any(n["confirmed"] for n in nodes.values()):
            self.noise_floor()
        return {"nodes": nodes.changes(), "best": best, "measurements_to_best": to_best,
                "finished": True, "stop_reason": self.stop_reason(state)}

    def _measure_within(self, nodes: TreeEdit, keys: list[str], phase: str, reserve: int
                        ) -> Iterator[tuple[str, Measurement]]:
        """Measure ``keys`` in order while more than ``reserve`` of the budget is left (and the ledger agrees),
        each beside the incumbent its routing decision was judged against."""
        rivals = self.decision_incumbents()
        for key in keys:
            if self.spent() >= self.ctx.config.budget - reserve:
                return
            result = self._measure(nodes, key, phase, rivals.get(key))
            if result is None:
                return
            yield key, result

    def decision_incumbents(self) -> dict[str, str | None]:
        """The incumbent kernel each routed child was judged against (None: the reference)."""
        return {key: r.incumbent_hash for key, r in last_routes(self.ctx.store, self.ctx.run_id).items()}

    def _apply_stored(self, nodes: TreeEdit, keys: list[str], phase: str) -> list[str]:
        """Apply the run's stored measurements of ``keys`` (bought before a restart) to their nodes, at no cost
        (once the budget is spent the measuring loops would never reach them); the keys applied."""
        stored = self.measured_before_a_kill(keys)
        for key, result in self._measure_many(nodes, stored, phase).items():
            assert result is not None, "a stored measurement was not reused"
            if phase == "verify":
                nodes[key]["outcome"] = "verified" if result.ok else "failed"
            else:
                self._mark_leftover(nodes, key, result)
        return stored

    @staticmethod
    def _mark_leftover(nodes: TreeEdit, key: str, result: Measurement) -> None:
        nodes[key]["outcome"] = "measured" if result.ok else "failed"
        nodes[key]["reason"] = "measured after the generator ran dry"

    def next_leftover(self, nodes: Mapping[str, NodeRecord], best: str | None) -> str | None:
        """The untried candidate with the highest expected gain over the incumbent, by the forecast after every
        measurement so far (None: none left). Ranked again before each measurement: the stale forecasts of the
        round that proposed them knew none of the run's measurements, and a small template's opening design
        proposes the whole space at once (transpose: 17 of 24 measurements after the generator ran dry were
        spent in that stale order). These forecasts order the measurements only; each candidate keeps, in the
        store and its node, the forecast its routing decision was taken on."""
        keys = self.leftovers(nodes)
        if not keys:
            return None
        self.teach_forecaster()
        incumbent, _ = incumbent_of(nodes, best)
        items = [routing_input(key, node_forecast(fc), incumbent, fc.provenance)
                 for key, fc in zip(keys, self._forecasts(keys))]
        pick = min(items, key=measure_order)  # the order in which a round's router sends children to measure
        self.ctx.emit(ev.Leftover(untried=len(keys), spent=self.spent(), gain=pick.gain, p_beat=pick.p_beat,
                                  incumbent=incumbent), candidate_hash=pick.hash)
        return pick.hash

    def leftovers(self, nodes: Mapping[str, NodeRecord]) -> list[str]:
        """Unmeasured children pruned or dropped for want of budget, not by a trusted forecast (those stay
        trusted decisions) and not missing from a replay, most promising first."""
        trusted = {key for key, r in last_routes(self.ctx.store, self.ctx.run_id).items() if r.forecast_alone}
        return sorted((k for k, n in nodes.items() if n["outcome"] in ("pruned", "dropped") and n["speedup"] is None
                       and n["forecast"] is not None and k not in trusted and n["reason"] != NOT_IN_REPLAY),
                      key=lambda k: -expected_log_speedup(nodes[k]))

    def noise_floor(self) -> Measurement | None:
        """The reference measured against itself with the confirmation protocol, once per task, device and
        sizes: how far from 1.0 noise alone moves a speedup here. A harness calibration, not a candidate, so
        it is stored without the run id and not charged to the budget."""
        ctx = self.ctx
        reference = ctx.task.reference()
        stored = [m for m in ctx.store.measurements(task=ctx.task.name, device=ctx.hardware.key,
                                                    candidate_hash=reference.hash, fingerprint=ctx.task.fingerprint)
                  if m.phase == "noise" and m.sizes == ctx.measure_config.sizes and m.ok]
        if stored:
            return stored[-1]
        result = ctx.measurer.measure(ctx.task, reference, confirmation_config(ctx.measure_config))
        result = result.model_copy(update={"phase": "noise"})
        ctx.store.add_measurement(result)
        ctx.emit(ev.NoiseFloor(speedup=result.speedup, interval=list(result.speedup_ci or ())))
        return result if result.ok else None

    def last_generator_problem(self) -> str:
        errors = self.ctx.store.events(self.ctx.run_id, kind="generator_error")
        if errors:
            return "last error: " + ev.GeneratorError.model_validate(errors[-1].payload).error[:500]
        generated = self.ctx.store.events(self.ctx.run_id, kind="generated")
        report = ev.Generated.model_validate(generated[-1].payload).report if generated else ""
        return ("its last report: " + report[:500]) if report else "it gave no reason"

    def stop_reason(self, state: SearchState) -> str:
        """Why the search loop ended, in words, with what it spent: "budget spent" only when it was."""
        cfg, spent = self.ctx.config, self.spent()
        of = f"{spent} of {cfg.budget} spent"
        if spent >= cfg.budget:
            return f"budget spent ({of})"
        why = state.get("stop_reason") or ""
        if not why:
            if cfg.max_device_seconds is not None and self.device_seconds() >= cfg.max_device_seconds:
                why = f"device-time limit of {cfg.max_device_seconds:g} s reached"
            elif state.get("empty_rounds", 0) >= MAX_EMPTY_ROUNDS:
                why = f"{state.get('empty_rounds', 0)} rounds without a new candidate"
            elif state.get("iteration", 0) >= cfg.rounds_limit:
                why = f"round limit of {cfg.rounds_limit} reached"
            elif self.loop_allowance(state) <= 0:
                why = "the rest of the budget is the verification reserve"
            else:
                why = "the search ended"
        return f"stopped: {why}, {of}"

    def _track_best(self, nodes: Mapping[str, NodeRecord], key: str, best: str | None, to_best: int) -> tuple[str | None, int]:
        speed = nodes[key]["speedup"]
        if speed is not None and (best is None or speed > (standing(nodes[best]) or 0.0)):
            return key, self.spent()
        return best, to_best

    def progress(self, nodes: Mapping[str, NodeRecord], best: str | None) -> ev.Progress:
        return ev.Progress(spent=self.spent(), budget=self.ctx.config.budget, considered=len(nodes) - 1,
                           counts=outcome_counts(nodes), best_speedup=standing(nodes[best]) if best else None)


def generator_ran_dry(state: SearchState) -> bool:
    """The loop ended because the generator had nothing new (not for the budget, a limit or an error)."""
    return state.get("empty_rounds", 0) >= MAX_EMPTY_ROUNDS or state.get("stop_reason") == "nothing left to expand"


def should_measure(state: SearchState) -> str:
    """After routing: go to the hardware only when something was routed there."""
    return "measure" if state.get("to_measure") else "backup"


def budget_check(nodes_impl: SearchNodes):  # noqa: ANN201 - returns the conditional-edge function
    """After backing up: loop while the loop budget, rounds and generator allow; else verify and report."""

    def decide(state: SearchState) -> str:
        cfg = nodes_impl.ctx.config
        if state.get("finished"):
            return "finish"
        if nodes_impl.loop_allowance(state) <= 0:
            return "finish"
        if state["iteration"] >= cfg.rounds_limit or state.get("empty_rounds", 0) >= MAX_EMPTY_ROUNDS:
            return "finish"
        return "continue"

    return decide


def after_select(state: SearchState) -> str:
    return "finish" if state.get("finished") else "generate"
