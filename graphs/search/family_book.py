"""Each candidate's transformation family and each family's record in the run, as the router reads them: the
route step's children and the leftovers a run measures after its generator ran dry are weighed alike."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from kernelcast.agents.generate.families import transformation_family
from kernelcast.graphs.route.routers.base import RoutingInput
from kernelcast.graphs.search.tree import NodeRecord, family_record
from kernelcast.tools.store.store import Store


class FamilyBook:
    """Families read once per candidate from the store; records counted afresh from the nodes at each call."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._families: dict[str, str] = {}  # candidate hash -> transformation family

    def family_of(self, key: str) -> str:
        """A node's transformation family (agents.generate.families; "" for a candidate the store lacks)."""
        if key not in self._families:
            candidate = self.store.candidates.get(key)
            self._families[key] = transformation_family(candidate) if candidate is not None else ""
        return self._families[key]

    def annotate(self, items: list[RoutingInput], nodes: Mapping[str, NodeRecord]) -> list[RoutingInput]:
        """``items`` with their family and its record in the run (correct and failed measurements of the family,
        and of the whole run, from the checkpointed nodes alone, so a resumed run reads what the killed one did)."""
        measured, failed = family_record(nodes, self.family_of)
        run = sum(measured.values()) + sum(failed.values())
        return [replace(item, family=(family := self.family_of(item.hash)), family_measured=measured[family],
                        family_failed=failed[family], run_measured=run) for item in items]
