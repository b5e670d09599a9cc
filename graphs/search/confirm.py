"""Confirmations: re-measurements of the best kernels with the confirmation protocol, bought where a run's
number must not be the luck of one measurement: the incumbent before a forecast is trusted against it (the
graph's ``confirm_incumbent`` node, reached from the route step), and the best measured nodes before the run
reports (in the verify step)."""

from __future__ import annotations

from typing import Any

from kernelcast.graphs import events as ev
from kernelcast.graphs.search.budget import Budget
from kernelcast.graphs.search.spender import Spender
from kernelcast.graphs.search.tree import SearchState, TreeEdit, best_measured
from kernelcast.tools.core.measurement import Measurement


class Confirmer:
    """Buys confirmations through the run's :class:`Spender`."""

    def __init__(self, budget: Budget, spender: Spender) -> None:
        self.budget = budget
        self.spender = spender

    def confirm(self, nodes: TreeEdit, key: str, before_trust: bool = False) -> Measurement | None:
        """Confirm one node and report it (None: the budget could not pay it)."""
        first = nodes[key]["speedup"]
        again = self.spender.measure(nodes, key, "confirm")
        if again is not None:
            self.spender.ctx.emit(ev.Confirm(first=first, confirmed=again.speedup if again.ok else None,
                                             interval=list(again.speedup_ci) if again.speedup_ci else None,
                                             status=again.status.value, before_trust=before_trust),
                                  candidate_hash=key)
        return again

    def confirm_step(self, state: SearchState) -> dict[str, Any]:
        """The graph node the route step sends a round to when its incumbent must be confirmed first; the round
        then goes back to the route step, which asks again against the best after it."""
        nodes = TreeEdit(state["nodes"])
        best = state.get("best")
        assert best is not None, "the route step asks for a confirmation only of an incumbent"
        best, to_best = self.confirm_incumbent(nodes, best, state.get("measurements_to_best", 0))
        return {"nodes": nodes.changes(), "best": best, "measurements_to_best": to_best}

    def confirm_incumbent(self, nodes: TreeEdit, best: str, to_best: int) -> tuple[str | None, int]:
        """Confirm the incumbent before a forecast is trusted against it: (the best after it, measurements to it).

        A trusted prune says "this child would not beat the incumbent"; judged against the luckiest first
        measurement of the run it is a judgement against a number the kernel does not reach (the check beside
        the incumbent's kernel then finds the pruned tie, or the pruned winner). A confirmation that falls can
        hand the lead to another node (the route step then asks again whether anything would be trusted
        against it). Resume-safe: a confirmation stored before a kill is reused, not bought again.
        """
        again = self.confirm(nodes, best, before_trust=True)
        assert again is not None, "the route step confirms only with budget left or a stored confirmation"
        leader = best_measured(nodes)
        return (leader, self.budget.spent_to(leader)) if leader != best else (best, to_best)

    def confirm_best(self, nodes: TreeEdit) -> None:
        """The final confirmations, best standing first, while the budget pays them; then the noise floor once
        anything was confirmed (what a confirmed speedup is judged against)."""
        for key in self.budget.to_confirm(nodes):
            if self.confirm(nodes, key) is None:
                break
        if any(n["confirmed"] for n in nodes.values()):
            self.spender.noise_floor()
