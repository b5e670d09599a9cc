"""The measure step: buy the children the router sent to the hardware, each beside the incumbent, and back the
round up the tree; and the trial audits the route step asks for before it decides the rest of a round
(:meth:`MeasureStep.trial`, the same purchase)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kernelcast.graphs import events as ev
from kernelcast.graphs.context import RunContext
from kernelcast.graphs.search.budget import Budget
from kernelcast.graphs.search.spender import Spender
from kernelcast.graphs.search.tree import (
    NOT_IN_REPLAY,
    NodeRecord,
    SearchState,
    TreeEdit,
    incumbent_of,
    outcome_counts,
    standing,
    takes_the_lead,
)


class MeasureStep:
    """measure and backup, and the best a measurement makes."""

    def __init__(self, ctx: RunContext, budget: Budget, spender: Spender) -> None:
        self.ctx = ctx
        self.budget = budget
        self.spender = spender

    def measure(self, state: SearchState) -> dict[str, Any]:
        nodes = TreeEdit(state["nodes"])
        best, to_best = state.get("best"), state.get("measurements_to_best", 0)
        best, to_best = self.measure_children(nodes, list(state["to_measure"]), best, to_best)
        return {"nodes": nodes.changes(), "to_measure": [], "best": best, "measurements_to_best": to_best}

    def trial(self, state: SearchState) -> dict[str, Any]:
        """Buy the trial audits the route step recorded (``trial``), and go back to it with them tried: the rest
        of the round is routed on the thresholds as the trial leaves them. Resume-safe: audits bought before a
        kill are reused from the store (:meth:`Spender.measure_many`)."""
        nodes = TreeEdit(state["nodes"])
        keys = list(state.get("trial", []))
        best, to_best = self.measure_children(nodes, keys, state.get("best"), state.get("measurements_to_best", 0))
        return {"nodes": nodes.changes(), "best": best, "measurements_to_best": to_best, "trial": [],
                "tried": [*state.get("tried", []), *keys]}

    def measure_children(self, nodes: TreeEdit, keys: list[str], best: str | None, to_best: int
                         ) -> tuple[str | None, int]:
        """Measure routed children beside the incumbent and mark each node measured, failed, or dropped when
        nothing was bought: (best, measurements to it) after them."""
        results = self.spender.measure_many(nodes, keys, "search", rival=incumbent_of(nodes, best)[1])
        for key in keys:
            result = results[key]
            if result is None:
                nodes[key]["outcome"] = "dropped"
                nodes[key]["reason"] = (NOT_IN_REPLAY if key in self.spender.not_in_replay
                                        else "budget exhausted before measurement")
                self.ctx.emit(ev.Skip(reason=nodes[key]["reason"]), candidate_hash=key)
                continue
            nodes[key]["outcome"] = "measured" if result.ok else "failed"
            best, to_best = self.track(nodes, key, best, to_best)
        return best, to_best

    def track(self, nodes: Mapping[str, NodeRecord], key: str, best: str | None, to_best: int
              ) -> tuple[str | None, int]:
        """(best, measurements to it) after ``key``'s measurement (:func:`tree.takes_the_lead`)."""
        return (key, self.budget.spent()) if takes_the_lead(nodes, key, best) else (best, to_best)

    def backup(self, state: SearchState) -> dict[str, Any]:
        nodes = TreeEdit(state["nodes"])
        cursor = state.get("parent")
        while cursor is not None and cursor in nodes:
            nodes[cursor]["visits"] += 1
            cursor = nodes[cursor]["parent"]
        self.ctx.emit(self.progress(nodes, state.get("best")), store=False)
        return {"nodes": nodes.changes()}

    def progress(self, nodes: Mapping[str, NodeRecord], best: str | None) -> ev.Progress:
        return ev.Progress(spent=self.budget.spent(), budget=self.ctx.config.budget, considered=len(nodes) - 1,
                           counts=outcome_counts(nodes), best_speedup=standing(nodes[best]) if best else None)
