"""The verify step: spend what the search loop left (the reserve, and more when the generator ran dry).

It buys in three places, all through the run's Spender, in this order: the accepted nodes (trusted on their
forecast) are verified; when the generator ran dry, the best untried leftovers are measured; and the best
measured nodes are confirmed (:class:`Confirmer`). Then it says why the run stopped.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from kernelcast.graphs import events as ev
from kernelcast.graphs.context import RunContext
from kernelcast.graphs.errors import SearchFailed
from kernelcast.graphs.route.inputs import routing_input
from kernelcast.graphs.route.routers.base import measure_order
from kernelcast.graphs.search.budget import Budget
from kernelcast.graphs.search.confirm import Confirmer
from kernelcast.graphs.search.family_book import FamilyBook
from kernelcast.graphs.search.forecasting import ForecastStep
from kernelcast.graphs.search.measure_step import MeasureStep
from kernelcast.graphs.search.spender import Spender
from kernelcast.graphs.search.tree import (
    MAX_EMPTY_ROUNDS,
    NOT_IN_REPLAY,
    NodeRecord,
    SearchState,
    TreeEdit,
    expected_log_speedup,
    generator_ran_dry,
    incumbent_of,
    node_forecast,
)
from kernelcast.tools.core.measurement import Measurement


class VerifyStep:
    """verify: accepted nodes, leftovers, final confirmations; and the stop reason."""

    def __init__(self, ctx: RunContext, budget: Budget, spender: Spender, confirmer: Confirmer,
                 measuring: MeasureStep, forecasting: ForecastStep) -> None:
        self.ctx = ctx
        self.budget = budget
        self.spender = spender
        self.confirmer = confirmer
        self.measuring = measuring
        self.forecasting = forecasting
        self.families = FamilyBook(ctx.store)

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
        for key, result in self.spender.reuse_stored(nodes, accepted, "verify").items():
            nodes[key]["outcome"] = "verified" if result.ok else "failed"
            best, to_best = self.measuring.track(nodes, key, best, to_best)
        for key, result in self.spender.reuse_stored(nodes, self.leftovers(nodes), "search").items():
            self.mark_leftover(nodes, key, result)
            best, to_best = self.measuring.track(nodes, key, best, to_best)
        accepted = [k for k in accepted if nodes[k]["outcome"] == "accepted"]
        reserve = self.budget.final_reserve(nodes)
        for key, result in self.measure_within(nodes, accepted, "verify", reserve):
            nodes[key]["outcome"] = "verified" if result.ok else "failed"
            forecast = nodes[key]["forecast"]
            predicted = forecast["predicted_bin"] if forecast is not None else None
            self.ctx.emit(ev.Verify(predicted_bin=predicted, measured_bin=result.bin(),
                                    forecast_right=predicted == result.bin()), candidate_hash=key)
            best, to_best = self.measuring.track(nodes, key, best, to_best)
        if generator_ran_dry(state):  # budget left and nothing new to propose: the best untried go next
            best, to_best = self.measure_leftovers(nodes, best, to_best, reserve)
        self.confirmer.confirm_best(nodes)
        return {"nodes": nodes.changes(), "best": best, "measurements_to_best": to_best,
                "finished": True, "stop_reason": self.stop_reason(state)}

    def measure_leftovers(self, nodes: TreeEdit, best: str | None, to_best: int, reserve: int
                          ) -> tuple[str | None, int]:
        """Measure the best untried leftovers one at a time while more than ``reserve`` is left."""
        while self.budget.left_beyond(reserve) and (pick := self.next_leftover(nodes, best)) is not None:
            measured = list(self.measure_within(nodes, [pick], "search", reserve))
            if not measured and pick in self.spender.not_in_replay:  # never measurable here: the next one
                nodes[pick]["reason"] = NOT_IN_REPLAY
                self.ctx.emit(ev.Skip(reason=NOT_IN_REPLAY), candidate_hash=pick)
                continue
            if not measured:  # a ledger that disagrees: the rest stay untried
                self.ctx.emit(ev.Skip(reason="picked after the generator ran dry, but not measured"),
                              candidate_hash=pick)
                break
            self.mark_leftover(nodes, pick, measured[0][1])
            best, to_best = self.measuring.track(nodes, pick, best, to_best)
        return best, to_best

    def measure_within(self, nodes: TreeEdit, keys: list[str], phase: str, reserve: int
                       ) -> Iterator[tuple[str, Measurement]]:
        """Measure ``keys`` in order while more than ``reserve`` of the budget is left (and the ledger agrees),
        each beside the incumbent its routing decision was judged against."""
        rivals = self.decision_incumbents()
        for key in keys:
            if not self.budget.left_beyond(reserve):
                return
            result = self.spender.measure(nodes, key, phase, rivals.get(key))
            if result is None:
                return
            yield key, result

    def decision_incumbents(self) -> dict[str, str | None]:
        """The incumbent kernel each routed child was judged against (None: the reference)."""
        return {key: r.incumbent_hash for key, r in self.ctx.store.decisions.last_of_run(self.ctx.run_id).items()}

    @staticmethod
    def mark_leftover(nodes: TreeEdit, key: str, result: Measurement) -> None:
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
        self.forecasting.teach()
        incumbent, _ = incumbent_of(nodes, best)
        items = self.families.annotate([routing_input(key, node_forecast(fc), incumbent, fc.provenance)
                                        for key, fc in zip(keys, self.forecasting.forecasts(keys))], nodes)
        pick = min(items, key=measure_order)  # highest expected gain, times P(correct): one at a time, each fresh
        self.ctx.emit(ev.Leftover(untried=len(keys), spent=self.budget.spent(), gain=pick.gain, p_beat=pick.p_beat,
                                  incumbent=incumbent), candidate_hash=pick.hash)
        return pick.hash

    def leftovers(self, nodes: Mapping[str, NodeRecord]) -> list[str]:
        """Unmeasured children pruned or dropped for want of budget, not by a trusted forecast (those stay
        trusted decisions) and not missing from a replay, most promising first."""
        trusted = {key for key, r in self.ctx.store.decisions.last_of_run(self.ctx.run_id).items() if r.forecast_alone}
        return sorted((k for k, n in nodes.items() if n["outcome"] in ("pruned", "dropped") and n["speedup"] is None
                       and n["forecast"] is not None and k not in trusted and n["reason"] != NOT_IN_REPLAY),
                      key=lambda k: -expected_log_speedup(nodes[k]))

    def last_generator_problem(self) -> str:
        errors = self.ctx.store.events.find(self.ctx.run_id, kind="generator_error")
        if errors:
            return "last error: " + ev.GeneratorError.model_validate(errors[-1].payload).error[:500]
        generated = self.ctx.store.events.find(self.ctx.run_id, kind="generated")
        report = ev.Generated.model_validate(generated[-1].payload).report if generated else ""
        return ("its last report: " + report[:500]) if report else "it gave no reason"

    def stop_reason(self, state: SearchState) -> str:
        """Why the search loop ended, in words, with what it spent: "budget spent" only when it was."""
        cfg, spent = self.ctx.config, self.budget.spent()
        of = f"{spent} of {cfg.budget} spent"
        if spent >= cfg.budget:
            return f"budget spent ({of})"
        why = state.get("stop_reason") or ""
        if not why:
            if self.budget.out_of_device_time():
                why = f"device-time limit of {cfg.max_device_seconds:g} s reached"
            elif state.get("empty_rounds", 0) >= MAX_EMPTY_ROUNDS:
                why = f"{state.get('empty_rounds', 0)} rounds without a new candidate"
            elif state.get("iteration", 0) >= cfg.rounds_limit:
                why = f"round limit of {cfg.rounds_limit} reached"
            elif self.budget.allowance(state["nodes"]) <= 0:
                why = "the rest of the budget is the verification reserve"
            else:
                why = "the search ended"
        return f"stopped: {why}, {of}"
