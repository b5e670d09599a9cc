"""The routers' shared vocabulary: what a router reads of a child (:class:`RoutingInput`), what it decides
(:class:`Routed`), the :class:`Router` interface, and the reproducible draws the routers share.

Routers are pure functions of forecasts, trust thresholds and budget, so the invariants can be property-tested:
every candidate gets exactly one decision; never more measurements than allowed; a failed forecast is never
trusted. One router per module in this package; the registry is the package itself (:mod:`.`).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Literal, Protocol

from kernelcast.agents.forecast.distributions import belief_gain, expected_gain, p_beat
from kernelcast.graphs.route.forecast_skill import ForecastSkill
from kernelcast.graphs.route.risk_control import TrustThresholds

Decision = Literal["measure", "accept", "prune", "drop"]


@dataclass(frozen=True)
class RoutingInput:
    hash: str
    confidence: float
    predicted_bin: int
    expected_log_speedup: float
    expected_bin: float
    failed: bool
    probabilities: tuple[float, ...] = ()  # the forecast's 8 bin probabilities (empty: unknown)
    incumbent: float = 1.0  # the speedup to beat: the best measured so far (1.0: the reference)
    log_mean: float | None = None  # the forecaster's continuous belief about ln S, when it has one
    log_sd: float | None = None
    log_dof: float | None = None  # Student-t degrees of freedom of that belief (None: normal)
    family: str = ""  # the candidate's transformation family (agents.families; empty: unknown)
    family_measured: int = 0  # correct measurements of that family in this run so far
    family_failed: int = 0  # measurements of that family in this run that failed (wrong results, no build, no run)
    run_measured: int = 0  # first measurements of this run so far, every family's (a new one is a new round's draw)

    @property
    def family_tried(self) -> bool:
        """Whether this run has measured any child of the item's family, correct or not."""
        return self.family_measured + self.family_failed > 0

    @property
    def p_correct(self) -> float:
        """P(the child measures correct), from its family's record in this run by the rule of succession with the
        prior mass on correct: 1 untried, 1/2 after one failure, 1/3 after two, 2/3 after a failure and a success.
        A transformation that computes wrong results on a kernel (or does not build there) mostly does so for
        every sibling: on a held-out kernel, 17-18 of selective's 25 measurements went to coarsenings the harness
        refused, because an untried family stays wide and first in line however often it fails."""
        if not self.family:
            return 1.0  # children of unknown family share no record
        return (self.family_measured + 1) / (self.family_measured + self.family_failed + 1)

    @property
    def continuous(self) -> bool:
        return self.log_mean is not None and self.log_sd is not None and self.log_sd > 0

    @property
    def p_beat(self) -> float | None:
        """P(S_child > S_incumbent): from the continuous belief if the forecaster has one, else from the bins
        (interpolated within the bin). None for a failed forecast, and for bins alone when the incumbent lies
        in an open end bin (beyond 4x or below 0.25x), where bins cannot say whether a child beats it."""
        if self.failed or len(self.probabilities) != 8:
            return None
        return p_beat(self.probabilities, self.incumbent, self.log_mean, self.log_sd, self.log_dof)

    @property
    def gain(self) -> float:
        """Expected improvement over the incumbent in ln S (the expected log-speedup without a distribution)."""
        if self.continuous:
            assert self.log_mean is not None and self.log_sd is not None
            return belief_gain(math.log(self.incumbent), self.log_mean, self.log_sd, self.log_dof)
        if len(self.probabilities) != 8:
            return self.expected_log_speedup
        return expected_gain(self.probabilities, self.incumbent)


def measure_order(item: RoutingInput) -> tuple[float, float, str]:
    """Sort key by expected gain over the incumbent, highest first, a child that may measure incorrect gaining
    nothing (then the expected log speedup, then the hash, so the order is total): the order of the leftovers a
    run measures after its generator ran dry."""
    value = item.gain * item.p_correct if item.gain > 0 else item.gain
    return -value, -item.expected_log_speedup, item.hash


@dataclass(frozen=True)
class Routed:
    decision: Decision
    reason: str
    p_beat: float | None = None
    audit: bool = False  # measured although the forecast was trusted (to measure the false-decision rate)
    trusted_as: Literal["prune", "accept", ""] = ""  # what the forecast alone would have decided
    spare: bool = False  # a pruned child measured anyway because the round had nothing else to measure
    probation: bool = False  # an audit of a replayed threshold not yet tried on this task here

    @property
    def trusted(self) -> bool:
        """Decided without a measurement."""
        return self.decision in ("accept", "prune") and not self.audit


class Router(Protocol):
    name: str

    def route(self, items: list[RoutingInput], can_measure: int, trust: TrustThresholds | None = None,
              audits: int = 0, skill: ForecastSkill | None = None) -> dict[str, Routed]:
        """Decide for every item; at most ``can_measure`` get "measure". ``skill``: how well this run's forecasts
        ranked the children it measured (None: unknown)."""


def audit_draw(key: str, seed: int) -> float:
    """A reproducible uniform number in [0, 1) per (candidate, seed): which trusted decisions are audited."""
    digest = hashlib.sha256(f"{seed}:{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64
