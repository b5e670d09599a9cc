"""How much a run's forecasts told its candidates apart: the spread of predicted log-speedups within each round.

A forecast that did not fail is not therefore informative: a round whose children all got the same distribution
(issue 46: 70 coarsened GEMM candidates at bin 2, confidence 0.28, whatever their work-group) routes on nothing
but the order they came in. So informativeness is measured here: per routed round, the standard deviation of
the predicted ln S of the forecasts it was routed on (a round is the decisions of one search round, recorded in
the store's ``decisions``; each child's forecast is its latest one stored before its decision). A round with
fewer than two forecasts has nothing to tell apart and is left out.
"""

from __future__ import annotations

import bisect
import statistics
from datetime import datetime

from pydantic import BaseModel, Field

from kernelcast.agents.forecast.base import Provenance
from kernelcast.tools.core.bins import expected_log_speedup
from kernelcast.tools.store.records import ForecastRecord
from kernelcast.tools.store.store import Store

FLAT = 0.05  # ln-units (about 5 % in speedup): below this a round's forecasts hardly tell its children apart


def predicted_log_speedup(record: ForecastRecord) -> float:
    """A stored forecast's ln S: the forecaster's continuous belief when it kept one, else the bins' expectation."""
    belief = Provenance.model_validate(record.provenance).log_speedup_mean if record.provenance else None
    return belief if belief is not None else expected_log_speedup(record.probabilities)


class ForecastSpread(BaseModel):
    """The spread of predicted ln S within each routed round of a run, in the order routed."""

    rounds: list[float] = Field(default_factory=list, description="per round with two or more forecasts that did "
                                "not fail: the population standard deviation of their predicted ln S")
    flat_below: float = Field(FLAT, description="a round below this spread told its children apart by nothing")

    @property
    def median(self) -> float | None:
        return statistics.median(self.rounds) if self.rounds else None

    @property
    def flat(self) -> int:
        """Rounds whose forecasts were all about the same."""
        return sum(1 for s in self.rounds if s < self.flat_below)

    def text(self) -> str:
        if self.median is None:
            return "forecast spread within rounds: no round had two forecasts to compare"
        return (f"forecast spread within rounds: median {self.median:.2f} ln-units over {len(self.rounds)} "
                f"round{'s' if len(self.rounds) != 1 else ''} (uninformative below {self.flat_below:.2f}; "
                f"{self.flat} below)")


def spread(values: list[float]) -> float:
    """Population standard deviation: 0 for a round whose forecasts are all the same."""
    return statistics.pstdev(values)


def _instant(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp)


def round_forecasts(store: Store, run_id: str) -> list[dict[str, ForecastRecord]]:
    """Each routed round of a run: its children and the forecast each was routed on (a decision taken again by a
    resumed step replaces the first; a child without a stored forecast is left out)."""
    by_candidate: dict[str, list[ForecastRecord]] = {}
    for record in store.forecasts.find(run_id=run_id):
        by_candidate.setdefault(record.candidate_hash, []).append(record)
    stamps = {key: [_instant(r.created_at) for r in records] for key, records in by_candidate.items()}
    rounds: dict[int | None, dict[str, ForecastRecord]] = {}
    for decision in store.decisions.of_run(run_id):
        if decision.candidate_hash not in by_candidate:
            continue
        at = bisect.bisect_right(stamps[decision.candidate_hash], _instant(decision.created_at))
        if at > 0:
            rounds.setdefault(decision.round, {})[decision.candidate_hash] = by_candidate[decision.candidate_hash][at - 1]
    return list(rounds.values())


def forecast_spread(store: Store, run_id: str) -> ForecastSpread:
    """The spread of each routed round's forecasts that did not fail (:class:`ForecastSpread`)."""
    out = ForecastSpread()
    for routed in round_forecasts(store, run_id):
        values = [predicted_log_speedup(r) for r in routed.values() if not r.failed]
        if len(values) >= 2:
            out.rounds.append(spread(values))
    return out


__all__ = ["FLAT", "ForecastSpread", "forecast_spread", "predicted_log_speedup", "round_forecasts", "spread"]
