"""A candidate's forecast as every router reads it: the route step's rounds and verify's leftovers alike."""

from __future__ import annotations

from kernelcast.agents.forecast.base import Provenance
from kernelcast.graphs.route.routers.base import RoutingInput
from kernelcast.graphs.search.tree import ForecastSummary


def routing_input(key: str, fc: ForecastSummary, incumbent: float, belief: Provenance | None) -> RoutingInput:
    """A candidate's forecast as the router reads it; ``belief``: the forecaster's ln S mean/sd, when known."""
    probs = fc["probabilities"]
    return RoutingInput(hash=key, confidence=fc["confidence"], predicted_bin=fc["predicted_bin"],
                        expected_log_speedup=fc["expected_log_speedup"],
                        expected_bin=sum((i + 1) * p for i, p in enumerate(probs)), failed=fc["failed"],
                        probabilities=tuple(probs), incumbent=incumbent,
                        log_mean=belief.log_speedup_mean if belief else None,
                        log_sd=belief.log_speedup_sd if belief else None,
                        log_dof=belief.log_speedup_dof if belief else None)


__all__ = ["routing_input"]
