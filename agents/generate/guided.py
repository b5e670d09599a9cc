"""Forecast-guided proposals: the forecaster's best-ranked unmeasured template points, for the generator to propose.

A template space's generator proposes a space-filling design and then neighbours of the best measured point, so on
a recorded GPU space (4,000-11,000 points) the points a forecaster ranks highest are mostly never proposed, and the
router can only choose among what it is shown: the transfer forecaster's own top 8 reached a median 0.895 of the
optimum on the leave-one-GPU-out replays while selective, routing the generator's proposals, reached 0.52
(docs/benchmarks.md, issue 63). A forecaster that can rank the kernels it knows without a forecast per kernel
(:class:`RanksKnownKernels`) hands its best unmeasured ones to the generator, which proposes them before its design.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from kernelcast.tools.core.measurement import HardwareSpec
from kernelcast.tools.core.task import Task

if TYPE_CHECKING:
    from kernelcast.tools.store.store import Store


@runtime_checkable
class RanksKnownKernels(Protocol):
    """A forecaster that ranks every kernel of a task it has data on, cheaply (ln S mean, hash; best first)."""

    def ranked(self, task: Task, hardware: HardwareSpec) -> list[tuple[float, str]]: ...


def guided_points(forecaster: object, store: Store, task: Task, hardware: HardwareSpec, excluded: set[str],
                  limit: int) -> list[dict[str, Any]]:
    """Up to ``limit`` template points of ``task``, the forecaster's best first, none of whose kernels is in
    ``excluded`` (measured on this device, or already in the search); none for a task without a template or a
    forecaster that cannot rank what it knows."""
    if task.spec.template is None or limit <= 0 or not isinstance(forecaster, RanksKnownKernels):
        return []
    points: list[dict[str, Any]] = []
    for _mean, key in forecaster.ranked(task, hardware):
        if key in excluded:
            continue
        candidate = store.candidates.get(key)
        if candidate is None or candidate.params is None or not task.is_valid_point(candidate.params):
            continue
        points.append(dict(candidate.params))
        if len(points) >= limit:
            break
    return points


__all__ = ["RanksKnownKernels", "guided_points"]
