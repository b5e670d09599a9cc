"""A seeded space-filling design over discrete parameters (scrambled Sobol points).

At a budget of 8 measurements, neighbours of one point see a corner of the space; a Sobol design
spreads the same 8 over every parameter's range (each value of a 4-valued parameter about equally
often, pairs of parameters well covered). Points that are invalid under the constraints are snapped to
the nearest valid point (in normalized index distance) when the valid points are known, else skipped.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from scipy.stats import qmc

Point = dict[str, Any]


def _cell(u: float, n: int) -> int:
    return min(n - 1, int(u * n))


def space_filling(params: Mapping[str, Sequence[Any]], seed: int, *, count: int = 256,
                  valid: Callable[[Point], bool] | None = None,
                  known_valid: Sequence[Point] | None = None) -> Iterator[Point]:
    """Distinct points in design order: ``count`` Sobol draws mapped onto the parameters' values.

    ``known_valid`` (every valid point, as a template's param_space) turns an invalid draw into the nearest
    valid point not yet yielded; otherwise ``valid`` filters the draws.
    """
    names = sorted(params)
    if not names:
        return
    sampler = qmc.Sobol(d=len(names), scramble=True, seed=np.random.default_rng(seed))
    draws = sampler.random(2 ** max(1, math.ceil(math.log2(max(2, count)))))
    seen: set[tuple[tuple[str, Any], ...]] = set()
    pool = list(known_valid) if known_valid is not None else None
    centres = _centres(pool, names, params) if pool is not None else None
    free = np.ones(len(pool), dtype=bool) if pool is not None else None
    for u in draws:
        point = {n: params[n][_cell(x, len(params[n]))] for n, x in zip(names, u, strict=True)}
        if pool is not None and centres is not None and free is not None:
            if not free.any():
                return
            distance = np.where(free, ((centres - u) ** 2).sum(axis=1), np.inf)
            best = int(np.argmin(distance))
            free[best] = False
            point = pool[best]
        elif valid is not None and not valid(point):
            continue
        key = tuple(sorted(point.items()))
        if key in seen:
            continue
        seen.add(key)
        yield dict(point)


def _centres(pool: list[Point], names: list[str], params: Mapping[str, Sequence[Any]]) -> np.ndarray:
    """Each valid point as the centres of its values' cells in the unit cube (points x parameters)."""
    index = {n: {repr(v): i for i, v in enumerate(params[n])} for n in names}
    return np.array([[(index[n][repr(p[n])] + 0.5) / len(params[n]) for n in names] for p in pool]).reshape(
        len(pool), len(names))
