"""The search loop's steps, bound to one run: select parent (PUCT) → generate → forecast → route → measure →
back up, and finally verify → report; plus the conditional edges between them. Each step returns only the
state keys it changes.

The steps live in modules named after what they do or spend (:mod:`.expand`, :mod:`.forecasting`,
:mod:`.route_step`, :mod:`.measure_step`, :mod:`.verify_step`); they share one :class:`Budget` (ledger and
reserve) and one :class:`Spender` (the only caller of the measurer: stored before the checkpoint).
"""

from __future__ import annotations

from collections.abc import Callable

from kernelcast.graphs.context import RunContext
from kernelcast.graphs.search.budget import Budget
from kernelcast.graphs.search.confirm import Confirmer
from kernelcast.graphs.search.expand import ExpandStep
from kernelcast.graphs.search.forecasting import ForecastStep
from kernelcast.graphs.search.measure_step import MeasureStep
from kernelcast.graphs.search.route_step import RouteStep
from kernelcast.graphs.search.spender import AfterMeasurement, Spender
from kernelcast.graphs.search.tree import MAX_EMPTY_ROUNDS, SearchState
from kernelcast.graphs.search.verify_step import VerifyStep


class SearchNodes:
    """One run's steps, wired to one budget and one spender (``carry_over``: see :class:`ForecastStep`;
    ``hooks``: after-measurement hooks run after the Spender's own store and event hooks)."""

    def __init__(self, ctx: RunContext, carry_over: bool = True, hooks: tuple[AfterMeasurement, ...] = ()) -> None:
        self.ctx = ctx
        self.budget = Budget(ctx.store, ctx.run_id, ctx.config)
        self.spender = Spender(ctx, self.budget, hooks)
        confirmer = Confirmer(self.budget, self.spender)
        expanding = ExpandStep(ctx)
        self.forecasting = ForecastStep(ctx, self.budget, carry_over)
        self.measuring = MeasureStep(ctx, self.budget, self.spender)
        self.routing = RouteStep(ctx, self.budget, self.spender)
        self.verifying = VerifyStep(ctx, self.budget, self.spender, confirmer, self.measuring, self.forecasting)
        # the graph's steps, by the names the graphs give them
        self.init, self.select, self.generate = expanding.init, expanding.select, expanding.generate
        self.forecast, self.route = self.forecasting.forecast, self.routing.route
        self.confirm_incumbent, self.trial = confirmer.confirm_step, self.measuring.trial
        self.measure, self.backup, self.verify = self.measuring.measure, self.measuring.backup, self.verifying.verify


def after_route(state: SearchState) -> str:
    """After routing: confirm the incumbent or buy a trial first (then route again), else go to the hardware
    only when something was routed there."""
    return state.get("route_next") or ("measure" if state.get("to_measure") else "backup")


def budget_check(nodes_impl: SearchNodes) -> Callable[[SearchState], str]:
    """After backing up: loop while the loop budget, rounds and generator allow; else verify and report."""

    def decide(state: SearchState) -> str:
        cfg = nodes_impl.ctx.config
        if state.get("finished"):
            return "finish"
        if nodes_impl.budget.allowance(state["nodes"]) <= 0:
            return "finish"
        if state["iteration"] >= cfg.rounds_limit or state.get("empty_rounds", 0) >= MAX_EMPTY_ROUNDS:
            return "finish"
        return "continue"

    return decide


def after_select(state: SearchState) -> str:
    return "finish" if state.get("finished") else "generate"
