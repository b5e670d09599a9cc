"""Whether a run's forecasts have ranked its measured children: the in-task skill that lets them lead a round.

The share a round's forecasts claim (``routers.ordering.forecast_lead``: var(means) / (var(means) + mean(sd^2)), an R^2)
counts every part of their sd against them, also the part all candidates of a task share (how fast this device runs
this kind of kernel at all), which moves every child alike and leaves the ranking intact. On the built-in gemm the
forecasts claimed 2-3 % of the opening round while ranking what measure-all measured at Spearman 0.35-0.62 (two
runs' measure-all arms, after 4-16 measurements, a 2-core Xeon). So the ranking is measured instead: each measured
child of this run against the forecast it was routed on, made before its measurement (a prequential pair, never
fitted to that measurement), at its shown speedup (``graphs/search/result.shown_speedups``). What counts as shown is
a one-sd lower bound of the rank correlation, so four lucky pairs show nothing and a kernel the forecaster misjudges
(the held-out corpus: -0.8 to +1.0 after four pairs) keeps the generator's order.

The router compares this correlation, not its square, with the claimed R^2: the places it gives are an ordering
decision, for which the ranking itself is the evidence, so a forecaster that has shown a ranking of r leads an r
share of the places even when it claims (or, calibrated, would claim) only r^2. The pairs a selective run measures
were partly picked by the forecasts, a narrowed range that biases the correlation down, not up.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from scipy.stats import spearmanr

MIN_SKILL_PAIRS = 5  # the Fisher bound below needs n - 3 >= 2; fewer pairs show nothing
RHO_CAP = 0.95  # a rank correlation from a handful of pairs is read as at most this before its bound is taken
SPEARMAN_VARIANCE = 1.06  # var(atanh(rho_s)) ~ 1.06 / (n - 3) (Fieller, Hartley and Pearson, 1957)


@dataclass(frozen=True)
class ForecastSkill:
    """How well this run's forecasts ranked the children it measured."""

    pairs: int  # measured children with a forecast made before their measurement
    rho: float | None  # Spearman correlation of predicted and measured ln S (None: no variation to rank)

    @property
    def shown(self) -> float:
        """The skill the pairs show: a one-sd lower bound of the rank correlation (Fisher's z), 0 at or below
        chance and with fewer than MIN_SKILL_PAIRS pairs."""
        if self.rho is None or self.pairs < MIN_SKILL_PAIRS:
            return 0.0
        z = math.atanh(max(-RHO_CAP, min(self.rho, RHO_CAP)))
        return max(0.0, math.tanh(z - math.sqrt(SPEARMAN_VARIANCE / (self.pairs - 3))))

    def text(self) -> str:
        if self.rho is None:
            return (f"no rank skill of the forecasts to read from this run's {self.pairs} measured "
                    f"child{'ren' if self.pairs != 1 else ''}")
        return (f"the forecasts ranked this run's {self.pairs} measured children at Spearman {self.rho:.2f} "
                f"(shown {self.shown:.2f})")


def forecast_skill(pairs: Sequence[tuple[float, float]]) -> ForecastSkill:
    """The skill of (predicted ln S, measured ln S) pairs; non-finite pairs are left out. The correlation is read
    from two pairs on (for the record); ``shown`` counts it from MIN_SKILL_PAIRS."""
    kept = [(p, m) for p, m in pairs if math.isfinite(p) and math.isfinite(m)]
    if len({p for p, _ in kept}) < 2 or len({m for _, m in kept}) < 2:
        return ForecastSkill(len(kept), None)
    rho = float(spearmanr([p for p, _ in kept], [m for _, m in kept]).statistic)
    return ForecastSkill(len(kept), rho if math.isfinite(rho) else None)


__all__ = ["MIN_SKILL_PAIRS", "ForecastSkill", "forecast_skill"]
