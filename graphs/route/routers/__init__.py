"""The routers by name, each with its settings: the one list the CLI, the chat and MCP tools, RunConfig
and the docs derive their choices and defaults from. One router per module of this package (:mod:`.selective`,
:mod:`.topk`, :mod:`.measure_all`), over the shared vocabulary of :mod:`.base`.

A router's settings are what a run needs to know about it before it routes anything: how many children an
expansion proposes per measurement it may buy, the share of the budget kept back to verify nodes accepted
on their forecast, and whether it trusts forecasts within certified thresholds (then ``--risk`` and the
audit share apply). The classes are imported only when a router is built, so reading the registry (a CLI's
``--help``) stays cheap. Adding a router: its module here and its ``RouterSpec`` below.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from kernelcast.agents.registry import choices

if TYPE_CHECKING:
    from kernelcast.graphs.route.routers.base import Router


@dataclass(frozen=True)
class RouterSpec:
    name: str
    description: str
    children_per_measurement: int  # N = this x k children proposed per expansion of at most k measurements
    opening_per_measurement: int  # the same for an expansion of the reference (the opening design)
    reserve_share: float  # default share of the budget kept to verify accepted (unmeasured) nodes
    certifies_trust: bool  # trusts forecasts within thresholds certified at --risk (and audits a share)
    build: Callable[[int, int, int], Router]  # (k = measurements per round, seed, the run's budget) -> the router


def _measure_all(k: int, seed: int, budget: int) -> Router:
    from kernelcast.graphs.route.routers.measure_all import MeasureAllRouter

    return MeasureAllRouter()


def _topk(k: int, seed: int, budget: int) -> Router:
    from kernelcast.graphs.route.routers.topk import TopKRouter

    return TopKRouter(k=k)


def _selective(k: int, seed: int, budget: int) -> Router:
    from kernelcast.graphs.route.routers.selective import SelectiveRouter

    return SelectiveRouter(measure_per_round=k, seed=seed, budget=budget)


ROUTERS: dict[str, RouterSpec] = {spec.name: spec for spec in (
    RouterSpec("selective", "trust forecasts where calibration certifies it at --risk, measure the uncertain "
               "ones (one per family first, within half the budget; then the forecasts lead by Thompson draw for the "
               "share of variance they claim, or by expected gain for the rank skill they showed on the run's "
               "measured children where that is larger; the generator's order for the rest), audit a share of the "
               "trusted decisions",
               children_per_measurement=8, opening_per_measurement=32, reserve_share=0.25, certifies_trust=True,
               build=_selective),
    RouterSpec("topk", "measure the top k children by expected bin, prune the rest (the paper's surrogate "
               "filter: 16 forecast, 4 measured)", children_per_measurement=4, opening_per_measurement=4,
               reserve_share=0.0,
               certifies_trust=False, build=_topk),
    RouterSpec("measure-all", "measure every child while the budget lasts (the baseline)",
               children_per_measurement=1, opening_per_measurement=1, reserve_share=0.0, certifies_trust=False,
               build=_measure_all),
)}
DEFAULT_ROUTER = "selective"
DEFAULT_RISK = 0.1  # tolerated share of false trusted decisions, certified at 90 % confidence

if TYPE_CHECKING:
    RouterName = str
else:  # the registry's names as a Literal: pydantic and the MCP schemas publish them as choices
    RouterName = Literal[tuple(ROUTERS)]


def router_spec(name: str) -> RouterSpec:
    """The registered router called ``name``; an unknown name is a ValueError that lists the known ones."""
    try:
        return ROUTERS[name]
    except KeyError:
        raise ValueError(f"unknown router {name!r} (expected {choices(ROUTERS)})") from None


def make_router(name: str, k: int = 4, seed: int = 0, budget: int = 0) -> Router:
    return router_spec(name).build(k, seed, budget)

