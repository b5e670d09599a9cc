"""The measure-all router: the baseline."""

from __future__ import annotations

from dataclasses import dataclass

from kernelcast.graphs.route.forecast_skill import ForecastSkill
from kernelcast.graphs.route.risk_control import TrustThresholds
from kernelcast.graphs.route.routers.base import Routed, RoutingInput


def _take(ranked: list[RoutingInput], can_measure: int, out: dict[str, Routed], why: str, cap_reason: str) -> None:
    for i, item in enumerate(ranked):
        if i < can_measure:
            out[item.hash] = Routed("measure", why, item.p_beat)
        else:
            out[item.hash] = Routed("drop", cap_reason, item.p_beat)


@dataclass
class MeasureAllRouter:
    """The baseline: every candidate measured while budget remains (the paper's standard search)."""

    name: str = "measure-all"

    def route(self, items: list[RoutingInput], can_measure: int, trust: TrustThresholds | None = None,
              audits: int = 0, skill: ForecastSkill | None = None) -> dict[str, Routed]:
        out: dict[str, Routed] = {}
        _take(items, can_measure, out, "measure-all", "budget exhausted")
        return out
