"""The typed state of an optimization run (what the SQLite checkpointer saves after every step).

Kernel sources stay in the store; the state holds the search tree's bookkeeping
by candidate hash so checkpoints stay small and the tree can be rebuilt from
the store's events as well.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from enum import StrEnum
from typing import Annotated, TypedDict, cast


class Outcome(StrEnum):
    """Where a node of the search tree stands (a str, so checkpoints and JSON hold plain words)."""

    root = "root"
    pending = "pending"
    measured = "measured"
    failed = "failed"
    accepted = "accepted"  # trusted on its forecast: expandable, never reported until measured
    verified = "verified"  # accepted, then measured correct
    pruned = "pruned"
    dropped = "dropped"


# Terminal classes every considered candidate ends in (the router's invariant):
CONSIDERED_CLASSES = tuple(o.value for o in Outcome if o not in (Outcome.root, Outcome.pending))
# The one map from a router's decision (other than "measure") to the node's outcome:
DECISION_OUTCOME: dict[str, Outcome] = {"accept": Outcome.accepted, "prune": Outcome.pruned, "drop": Outcome.dropped}


class ForecastSummary(TypedDict):
    probabilities: list[float]
    predicted_bin: int
    confidence: float
    expected_log_speedup: float
    failed: bool


class NodeRecord(TypedDict):
    hash: str
    parent: str | None
    depth: int
    iteration: int
    outcome: str  # an Outcome value (plain str in checkpoints)
    speedup: float | None  # measured speedup (correct measurements only)
    cv: float | None
    forecast: ForecastSummary | None
    prior: float
    visits: int
    intent: str
    reason: str
    exhausted: bool
    confirmed: float | None  # speedup of the confirmation re-measurement (the reported one)
    confirmed_ci: list[float] | None  # its 95 % bootstrap interval


def outcome_counts(nodes: Mapping[str, NodeRecord]) -> dict[str, int]:
    """How many nodes ended in each outcome (the root included)."""
    counts: dict[str, int] = {}
    for node in nodes.values():
        counts[node["outcome"]] = counts.get(node["outcome"], 0) + 1
    return counts


def merge_nodes(current: dict[str, NodeRecord] | None, update: dict[str, NodeRecord]) -> dict[str, NodeRecord]:
    """LangGraph reducer: a node returns only the records it changed; they replace the old ones."""
    return {**(current or {}), **update}


class TreeEdit(Mapping[str, NodeRecord]):
    """A node function's view of the tree: records are copied when touched, so the function can edit
    them freely, and :meth:`changes` returns only the records that differ (what the node returns)."""

    def __init__(self, base: Mapping[str, NodeRecord]) -> None:
        self._base = base
        self._copies: dict[str, NodeRecord] = {}

    def __getitem__(self, key: str) -> NodeRecord:
        if key not in self._copies:
            self._copies[key] = cast(NodeRecord, dict(self._base[key]))
        return self._copies[key]

    def __setitem__(self, key: str, record: NodeRecord) -> None:
        self._copies[key] = record

    def __contains__(self, key: object) -> bool:
        return key in self._copies or key in self._base

    def __iter__(self) -> Iterator[str]:
        yield from self._base
        yield from (k for k in self._copies if k not in self._base)

    def __len__(self) -> int:
        return len(self._base) + sum(1 for k in self._copies if k not in self._base)

    def changes(self) -> dict[str, NodeRecord]:
        return {k: v for k, v in self._copies.items() if self._base.get(k) != v}


class SearchState(TypedDict, total=False):
    run_id: str
    iteration: int
    nodes: Annotated[dict[str, NodeRecord], merge_nodes]
    parent: str | None
    children: list[str]
    carried: list[str]  # earlier rounds' children routed again this round (SearchNodes.carried)
    to_measure: list[str]
    empty_rounds: int
    finished: bool
    stop_reason: str
    best: str | None
    measurements_to_best: int
