"""Routers: which forecast candidates go to the hardware, and which are trusted or pruned.

Pure functions of forecasts and budget, so the invariants can be property-tested:
every candidate gets exactly one decision; never more measurements than allowed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

Decision = Literal["measure", "accept", "prune", "drop"]


@dataclass(frozen=True)
class RoutingInput:
    hash: str
    confidence: float
    predicted_bin: int
    expected_log_speedup: float
    expected_bin: float
    failed: bool


@dataclass(frozen=True)
class Routed:
    decision: Decision
    reason: str


class Router(Protocol):
    name: str
    reserve_fraction: float

    def route(self, items: list[RoutingInput], can_measure: int) -> dict[str, Routed]:
        """Decide for every item; at most ``can_measure`` get "measure"."""


def _take(ranked: list[RoutingInput], can_measure: int, out: dict[str, Routed], why: str, cap_reason: str) -> None:
    for i, item in enumerate(ranked):
        if i < can_measure:
            out[item.hash] = Routed("measure", why)
        else:
            out[item.hash] = Routed("drop", cap_reason)


@dataclass
class MeasureAllRouter:
    """The baseline: every candidate measured while budget remains (the paper's standard search)."""

    name: str = "measure-all"
    reserve_fraction: float = 0.0

    def route(self, items: list[RoutingInput], can_measure: int) -> dict[str, Routed]:
        out: dict[str, Routed] = {}
        _take(items, can_measure, out, "measure-all", "budget exhausted")
        return out


@dataclass
class TopKRouter:
    """The paper's surrogate filter: measure the top ``k`` children by expected bin."""

    k: int = 4
    name: str = "topk"
    reserve_fraction: float = 0.0

    def route(self, items: list[RoutingInput], can_measure: int) -> dict[str, Routed]:
        ranked = sorted(items, key=lambda it: -it.expected_bin)
        out: dict[str, Routed] = {}
        limit = min(self.k, can_measure)
        for i, item in enumerate(ranked):
            if i < limit:
                out[item.hash] = Routed("measure", f"top {self.k} by expected bin ({item.expected_bin:.2f})")
            elif i < self.k:
                out[item.hash] = Routed("drop", "in the top k but the budget is exhausted")
            else:
                out[item.hash] = Routed("prune", f"not in the top {self.k} by expected bin ({item.expected_bin:.2f})")
        return out


@dataclass
class SelectiveRouter:
    """Trust confident forecasts, defer uncertain ones to the hardware (highest expected speedup first).

    Confident slowdowns are pruned, confident speedups accepted as unverified
    nodes (expandable, never reported until measured); a failed forecast is
    always deferred, so a broken model can cost budget but never correctness.
    """

    threshold: float = 0.6
    measure_per_round: int = 4
    reserve_fraction: float = 0.25
    name: str = "selective"

    def route(self, items: list[RoutingInput], can_measure: int) -> dict[str, Routed]:
        out: dict[str, Routed] = {}
        deferred: list[RoutingInput] = []
        for item in items:
            if item.failed:
                deferred.append(item)
            elif item.confidence >= self.threshold and item.predicted_bin <= 4:
                out[item.hash] = Routed("prune", f"confident slowdown (bin {item.predicted_bin}, "
                                                 f"confidence {item.confidence:.2f} >= {self.threshold:.2f})")
            elif item.confidence >= self.threshold:
                out[item.hash] = Routed("accept", f"confident speedup (bin {item.predicted_bin}, "
                                                  f"confidence {item.confidence:.2f} >= {self.threshold:.2f})")
            else:
                deferred.append(item)
        deferred.sort(key=lambda it: -it.expected_log_speedup)
        limit = min(self.measure_per_round, can_measure)
        for i, item in enumerate(deferred):
            why = "forecast failed: deferred to hardware" if item.failed else \
                f"uncertain (confidence {item.confidence:.2f} < {self.threshold:.2f}): deferred to hardware"
            if i < limit:
                out[item.hash] = Routed("measure", why)
            else:
                out[item.hash] = Routed("drop", "deferred, but " + ("the budget is exhausted" if i >= can_measure
                                                                   else "beyond this round's measurement cap"))
        return out


def make_router(name: str, threshold: float = 0.6, k: int = 4) -> Router:
    if name == "selective":
        return SelectiveRouter(threshold=threshold, measure_per_round=k)
    if name == "topk":
        return TopKRouter(k=k)
    if name == "measure-all":
        return MeasureAllRouter()
    raise ValueError(f"unknown router {name!r} (expected selective, topk or measure-all)")
