"""The typed state of an optimization run (what the SQLite checkpointer saves after every step), and the one
definition of a run's best, incumbent and standing that every step, the result and the session views read.

Kernel sources stay in the store; the state holds the search tree's bookkeeping
by candidate hash so checkpoints stay small and the tree can be rebuilt from
the store's events as well. Records stay plain data (TypedDicts) so checkpoints hold plain words and numbers.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, TypedDict, cast

from kernelcast.agents.forecast.base import Forecast
from kernelcast.graphs.errors import RunError
from kernelcast.tools.core.candidate import Candidate

CHECKPOINT_VERSION = 1  # the shape of SearchState and NodeRecord; a checkpoint without one is of version 0
READABLE_VERSIONS = (0, 1)  # version 0 (before versions were written) has the same shape: read as it is
NOT_IN_REPLAY = "the replay has no measurement of it: nothing bought"  # a node's reason: never measurable here
MAX_EMPTY_ROUNDS = 3  # expansions in a row without a new candidate before the search loop ends


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


def family_record(nodes: Mapping[str, NodeRecord], family_of: Callable[[str], str]) -> tuple[Counter[str], Counter[str]]:
    """(correct, failed) measurements of each transformation family among the measured children (the root
    aside): a node that failed its first measurement, or measured correct and then failed its confirmation (a
    race that one measurement missed is the transformation's fault too), counts as failed."""
    correct: Counter[str] = Counter()
    failed: Counter[str] = Counter()
    for key, node in nodes.items():
        if node["parent"] is None:
            continue
        if node["outcome"] == Outcome.failed:
            failed[family_of(key)] += 1
        elif node["speedup"] is not None:
            correct[family_of(key)] += 1
    return correct, failed


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
    version: int  # CHECKPOINT_VERSION when the run's tree was rooted (absent: 0)
    run_id: str
    iteration: int
    nodes: Annotated[dict[str, NodeRecord], merge_nodes]
    parent: str | None
    children: list[str]
    carried: list[str]  # earlier rounds' children routed again this round (ForecastStep.carried)
    to_measure: list[str]
    empty_rounds: int
    finished: bool
    stop_reason: str
    best: str | None
    measurements_to_best: int
    route_next: str  # where the route step sends the round (nodes.after_route): confirm, trial, measure, backup
    trial: list[str]  # trial audits the route step recorded, for the trial node to buy
    tried: list[str]  # children of this round already tried (trial audits): not routed again


def check_version(state: Mapping[str, object], run_id: str) -> None:
    """Refuse a checkpoint this code cannot read, in one line naming the versions (a checkpoint written before
    versions were has version 0: the same shape, read as it is)."""
    found = state.get("version", 0)
    if found not in READABLE_VERSIONS:
        raise RunError(f"run {run_id}'s checkpoint has version {found}; this kernelcast reads checkpoint versions "
                       f"{', '.join(map(str, READABLE_VERSIONS))}: finish or resume it with the kernelcast that "
                       "wrote it")


def new_node(candidate: Candidate, parent: str | None, depth: int, iteration: int,
             outcome: str = "pending") -> NodeRecord:
    return NodeRecord(hash=candidate.hash, parent=parent, depth=depth, iteration=iteration, outcome=outcome,
                      speedup=None, cv=None, forecast=None, prior=1.0, visits=0, intent=candidate.intent, reason="",
                      exhausted=False, confirmed=None, confirmed_ci=None)


def node_forecast(fc: Forecast) -> ForecastSummary:
    """What a node keeps of its forecast (plain data: nodes live in checkpoints)."""
    return {"probabilities": list(fc.probabilities), "predicted_bin": fc.predicted_bin, "confidence": fc.confidence,
            "expected_log_speedup": fc.expected_log_speedup, "failed": fc.failed}


def expected_log_speedup(node: NodeRecord) -> float:
    """The forecast's expected log speedup of a node, 0 (no change) without a forecast."""
    return node["forecast"]["expected_log_speedup"] if node["forecast"] is not None else 0.0


# ---- best, incumbent and standing -------------------------------------------------------------
@dataclass(frozen=True)
class Standing:
    """How a measured node stands: the one rule for "best" that the tree, the result, sessions, ``show``, reports and
    MCP read. ``speedup`` is its confirmation once it has one, else its first measurement (the first measurement of
    the node that leads is the luckiest of several noisy numbers: a reduce_rows incumbent read 6.27x once and 2.79x
    confirmed, and a router bench run pruned 92 children against the 6.27x).

    Two orders come from it, for two questions:

    - :attr:`rank` (confirmed first, then by speedup) answers "which kernel does the run deliver": a confirmed
      number beats any first measurement, so the delivered best never rests on one lucky timing;
    - :attr:`lead` (by speedup alone) answers "what must a child beat": the search's incumbent is the highest
      number it stands on, confirmed or not (:func:`incumbent_of`, :func:`takes_the_lead`, the confirmations'
      order). Kept apart because the router's decisions are replayed against it.
    """

    speedup: float
    confirmed: bool

    @property
    def rank(self) -> tuple[bool, float]:
        return self.confirmed, self.speedup

    @property
    def lead(self) -> float:
        return self.speedup

    @property
    def label(self) -> str:
        return "confirmed" if self.confirmed else "first measurement"

    @classmethod
    def of(cls, node: NodeRecord) -> Standing | None:
        """A node's standing (None: no correct measurement)."""
        if node["confirmed"] is not None:
            return cls(node["confirmed"], True)
        return cls(node["speedup"], False) if node["speedup"] is not None else None


def standing(node: NodeRecord) -> float | None:
    """A measured node's speedup as the run stands on it (:attr:`Standing.speedup`; None: not measured correct)."""
    found = Standing.of(node)
    return found.speedup if found is not None else None


def incumbent_of(nodes: Mapping[str, NodeRecord], best: str | None) -> tuple[float, str | None]:
    """The speedup to beat and its kernel: the best measured node's standing, or the reference's (1.0, None)."""
    incumbent = max(1.0, (standing(nodes[best]) or 1.0) if best else 1.0)
    return incumbent, best if best and incumbent > 1.0 else None


def takes_the_lead(nodes: Mapping[str, NodeRecord], key: str, best: str | None) -> bool:
    """Whether ``key``'s new measurement makes it the run's best: its first measurement passes the best's standing
    (the best the search carries in its state; a confirmation that falls hands the lead on through
    :func:`best_measured`)."""
    speed = nodes[key]["speedup"]
    return speed is not None and (best is None or speed > (standing(nodes[best]) or 0.0))


def top_measured(nodes: Mapping[str, NodeRecord], k: int) -> list[str]:
    """The ``k`` correct measured nodes that stand highest by :attr:`Standing.lead` (the candidates to confirm; one
    confirmed during the search stands on its confirmation)."""
    stands = {key: Standing.of(n) for key, n in nodes.items() if n["outcome"] in ("measured", "verified")}
    measured = [key for key, s in stands.items() if s is not None and s.speedup]
    return sorted(measured, key=lambda key: -stands[key].lead)[:k]  # type: ignore[union-attr]


def best_measured(nodes: Mapping[str, NodeRecord]) -> str | None:
    """The correct measured node that leads (:attr:`Standing.lead`; None: none yet): the search's incumbent."""
    return next(iter(top_measured(nodes, 1)), None)


def measured_correct(nodes: Mapping[str, NodeRecord]) -> int:
    """How many nodes hold a correct measurement (the candidates a run may confirm)."""
    return sum(1 for n in nodes.values() if n["outcome"] in ("measured", "verified") and n["speedup"])


def still_to_confirm(nodes: Mapping[str, NodeRecord], confirmations: int) -> list[str]:
    """The final confirmations, best standing first: the top nodes not confirmed yet (past the top when those
    were confirmed during the search, so the reserve goes to the next contenders, not idle)."""
    unconfirmed = [key for key in top_measured(nodes, len(nodes)) if nodes[key]["confirmed"] is None]
    return unconfirmed[:confirmations]


def generator_ran_dry(state: SearchState) -> bool:
    """The loop ended because the generator had nothing new (not for the budget, a limit or an error)."""
    return state.get("empty_rounds", 0) >= MAX_EMPTY_ROUNDS or state.get("stop_reason") == "nothing left to expand"
