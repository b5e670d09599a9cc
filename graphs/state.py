"""The typed state of an optimization run (what the SQLite checkpointer saves after every step).

Kernel sources stay in the store; the state holds the search tree's bookkeeping
by candidate hash so checkpoints stay small and the tree can be rebuilt from
the store's events as well.
"""

from __future__ import annotations

from typing import Literal, TypedDict

Outcome = Literal["root", "pending", "measured", "failed", "accepted", "verified", "pruned", "dropped"]
# Terminal classes every considered candidate ends in (the router's invariant):
CONSIDERED_CLASSES = ("measured", "failed", "accepted", "verified", "pruned", "dropped")


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
    outcome: Outcome
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


def outcome_counts(nodes: dict[str, NodeRecord]) -> dict[str, int]:
    """How many nodes ended in each outcome (the root included)."""
    counts: dict[str, int] = {}
    for node in nodes.values():
        counts[node["outcome"]] = counts.get(node["outcome"], 0) + 1
    return counts


class SearchState(TypedDict, total=False):
    run_id: str
    iteration: int
    nodes: dict[str, NodeRecord]
    parent: str | None
    children: list[str]
    to_measure: list[str]
    spent: int
    empty_rounds: int
    finished: bool
    stop_reason: str
    best: str | None
    measurements_to_best: int
