"""The top-k router: the paper's surrogate filter."""

from __future__ import annotations

from dataclasses import dataclass

from kernelcast.graphs.route.forecast_skill import ForecastSkill
from kernelcast.graphs.route.risk_control import TrustThresholds
from kernelcast.graphs.route.routers.base import Routed, RoutingInput


@dataclass
class TopKRouter:
    """The paper's surrogate filter: measure the top ``k`` children by expected bin."""

    k: int = 4
    name: str = "topk"

    def route(self, items: list[RoutingInput], can_measure: int, trust: TrustThresholds | None = None,
              audits: int = 0, skill: ForecastSkill | None = None) -> dict[str, Routed]:
        ranked = sorted(items, key=lambda it: -it.expected_bin)
        out: dict[str, Routed] = {}
        limit = min(self.k, can_measure)
        for i, item in enumerate(ranked):
            if i < limit:
                out[item.hash] = Routed("measure", f"top {self.k} by expected bin ({item.expected_bin:.2f})",
                                        item.p_beat)
            elif i < self.k:
                out[item.hash] = Routed("drop", "in the top k but the budget is exhausted", item.p_beat)
            else:
                out[item.hash] = Routed("prune", f"not in the top {self.k} by expected bin ({item.expected_bin:.2f})",
                                        item.p_beat)
        return out
