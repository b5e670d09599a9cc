"""A run's budget: what it has spent (the store's ledger, the only count that survives a kill), what it keeps in
reserve for the end of the run, and what the search loop may still spend.

The reserve has one formula (:meth:`Budget.reserve`): the accepted nodes still to verify (at most the router's
verification share of the budget) plus the confirmations of the best measured nodes. The search loop keeps one
confirmation before anything was measured (there will be a best to confirm); the verify step, which spends
the rest, keeps none for a run that measured nothing correct (there is nothing to confirm).
"""

from __future__ import annotations

from collections.abc import Mapping

from kernelcast.graphs.config import RunConfig
from kernelcast.graphs.search.tree import NodeRecord, measured_correct, still_to_confirm
from kernelcast.tools.store.store import Store


def confirmations(config: RunConfig) -> int:
    """How many of the best measured candidates the run confirms: ``confirm_top``, but at most one per 8
    measurements of the budget (at least one), so a budget of 8 is not three-eighths confirmation and
    five measurements of search."""
    return min(config.confirm_top, max(1, config.budget // 8))


def confirm_reserve(nodes: Mapping[str, NodeRecord], config: RunConfig, before_any: int = 1) -> int:
    """The budget kept for the final confirmations: one per node to confirm, ``before_any`` before any was
    measured (the search loop keeps 1: there will be a best; the verify step 0). Nodes confirmed during the search
    do not shrink it: one round can measure several kernels that pass them, and those are then what the final
    confirmations are for."""
    return min(confirmations(config), max(before_any, measured_correct(nodes)))


class Budget:
    """One run's ledger and reserve, read from the store (so a resumed run counts what it bought before a kill)."""

    def __init__(self, store: Store, run_id: str, config: RunConfig) -> None:
        self.store = store
        self.run_id = run_id
        self.config = config

    @property
    def total(self) -> int:
        return self.config.budget

    @property
    def confirmations(self) -> int:
        return confirmations(self.config)

    def spent(self) -> int:
        """Budget spent, from the store: the only count that survives a kill."""
        return self.store.ledger.totals(self.run_id)[0]

    def device_seconds(self) -> float:
        return self.store.ledger.totals(self.run_id)[1]

    def out_of_device_time(self) -> bool:
        limit = self.config.max_device_seconds
        return limit is not None and self.device_seconds() >= limit

    def reserve(self, nodes: Mapping[str, NodeRecord], before_any: int = 1) -> int:
        """THE reserve: accepted nodes to verify (at most ``RunConfig.reserve``) plus the confirmations kept for
        the best (:func:`confirm_reserve`)."""
        accepted = sum(1 for n in nodes.values() if n["outcome"] == "accepted")
        return min(self.config.reserve, accepted) + confirm_reserve(nodes, self.config, before_any)

    def allowance(self, nodes: Mapping[str, NodeRecord]) -> int:
        """Measurements the search loop may still spend, keeping the reserve (none past the device-time limit)."""
        if self.out_of_device_time():
            return 0
        return max(0, self.total - self.spent() - self.reserve(nodes))

    def final_reserve(self, nodes: Mapping[str, NodeRecord]) -> int:
        """What the verify step keeps for the final confirmations while it verifies accepted nodes and measures
        leftovers: the reserve once no node is accepted any more, with nothing kept before any measurement."""
        return confirm_reserve(nodes, self.config, before_any=0)

    def left_beyond(self, reserve: int) -> bool:
        """Whether more than ``reserve`` of the budget is left to spend."""
        return self.spent() < self.total - reserve

    def to_confirm(self, nodes: Mapping[str, NodeRecord]) -> list[str]:
        """The final confirmations to buy, best standing first."""
        return still_to_confirm(nodes, self.confirmations)

    def spent_to(self, key: str | None) -> int:
        """The budget spent when ``key`` was first measured (0 for none)."""
        if key is None:
            return 0
        ledger = [m.candidate_hash for m in self.store.ledger.find(run_id=self.run_id) if m.provenance != "reused"]
        return ledger.index(key) + 1 if key in ledger else 0
