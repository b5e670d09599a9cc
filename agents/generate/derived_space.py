"""A derived template: the transformations that apply to a kernel, as a tunable parameter space.

A kernel without a hand-written template still gets a search space: one parameter per transformation
whose preconditions hold on its entry kernel (scalar replacement, restrict/const, coarsening factors in
x and y and their mapping, local-memory tile size, work-items per row of a row reduction, unroll factor,
work-group shape). A point is instantiated by applying the chosen transformations in a fixed order to the base
kernel; the first value of every parameter is the identity, so the all-identity point is the base itself and is
never proposed.
The transformations, their parameters and how each is probed and applied are registered in
:mod:`kernelcast.agents.generate.transforms.registry`; this module knows none of them by name.
The offline generator explores it with the same machinery as a template (space-filling first round, then
neighbours).

Local tiling, row reduction and coarsening do not compose with one another (the point instantiates to None):
coarsening refuses a kernel that observes its work-group, the coarsened copies' guards are not the uniform
``gid < bound`` tests tiling needs, and row reduction needs a 1-D kernel whose loops a work-item runs alone.
With local tiling the tile fixes the work-group shape, and with row reduction the lanes of a row do: the
point's ``work_group`` value is ignored (the candidate's params say ``keep``), so such points are not confined
to the one ``keep`` value of a 70-value parameter and a space-filling design reaches them.
"""

from __future__ import annotations

import math
from typing import Any

from kernelcast.agents.generate.transforms import NotApplicable, entry_of
from kernelcast.agents.generate.transforms.registry import (
    KEEP,
    MAX_COARSENED_CHARS,
    TRANSFORMATIONS,
    WORK_GROUP,
    Point,
    Probe,
    work_group_shapes,
)
from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.edit import Edit
from kernelcast.tools.core.preprocess import PreprocessError, preprocess
from kernelcast.tools.core.task import Task

Step = tuple[str, Any]  # one transformation of a point and its value: ("coarsen", (fx, fy, mapping)), ("unroll", 4)
SOURCE_STEPS = tuple(t for t in TRANSFORMATIONS.values() if not t.geometry)
GEOMETRY = tuple(t for t in TRANSFORMATIONS.values() if t.geometry)
__all__ = ["KEEP", "MAX_COARSENED_CHARS", "DerivedSpace", "Point", "Step", "without_macros", "work_group_shapes"]


def without_macros(task: Task, kernel: Candidate) -> Candidate:
    """The kernel as the compiler sees it (the file's macros expanded, its comments gone) when its entry kernel
    uses a macro of the file; else the kernel itself. The transformations edit the text under the AST, which a
    macro hides, so a kernel written with ``#define`` constants had no derived space beyond work-group shapes.
    The expanded kernel has the same identity (a content hash is of the preprocessed source)."""
    try:
        ps, entry = entry_of(kernel.source, task.language, task.spec.entry)
        if not ps.uses_macros(entry):
            return kernel
        return kernel.model_copy(update={"source": preprocess(kernel.source, task.language,
                                                              tuple(kernel.build_options))})
    except (NotApplicable, PreprocessError):
        return kernel


class DerivedSpace:
    """The parameter space of the transformations applicable to ``base`` (a task's kernel)."""

    def __init__(self, task: Task, base: Candidate, max_wg: int) -> None:
        self.task, self.base, self.max_wg = task, without_macros(task, base), max_wg
        self.params: dict[str, list[Any]] = {}
        self.unavailable: dict[str, str] = {}  # transformation -> why it does not apply
        self._cache: dict[tuple[tuple[str, Any], ...], tuple[Candidate, tuple[Edit, ...]] | None] = {}
        self._steps: dict[tuple[Step, ...], tuple[Candidate, tuple[Edit, ...]] | None] = {}
        self._probe()

    def _probe(self) -> None:
        """Each registered transformation's values on the base, in the registry's order."""
        task, base = self.task, self.base
        try:
            ps, kernel = entry_of(base.source, task.language, task.spec.entry)
        except NotApplicable as exc:
            self.unavailable["all"] = str(exc)
            return
        probe = Probe(task, base, self.max_wg, ps, kernel, self.params, self.unavailable)
        for transformation in TRANSFORMATIONS.values():
            transformation.probe(probe)

    # ---- points --------------------------------------------------------------------------------------
    def identity(self) -> Point:
        return {k: v[0] for k, v in self.params.items()}

    def size(self) -> int:
        return math.prod(len(v) for v in self.params.values())

    def instantiate(self, point: Point) -> tuple[Candidate, tuple[Edit, ...]] | None:
        """(candidate, its edits in the order applied) for ``point``; None when a transformation does not apply
        at this combination, the launch geometry does not divide, or the point is the identity."""
        key = tuple(sorted(point.items()))
        if key not in self._cache:
            self._cache[key] = self._build(point)
        return self._cache[key]

    def _build(self, point: Point) -> tuple[Candidate, tuple[Edit, ...]] | None:
        if point == self.identity() or set(point) != set(self.params):
            return None
        if not all(t.valid(point) for t in TRANSFORMATIONS.values()):
            return None
        chosen = [t for t in SOURCE_STEPS if t.step(point) is not None]
        names = {t.name for t in chosen}
        if any(names.intersection(t.excludes) for t in chosen):
            return None  # a refused composition (module docstring)
        if any(t.fixes_work_group for t in chosen):
            point = {**point, WORK_GROUP.name: KEEP}  # the tile, or the lanes of a row, fix the work-group shape
        built = self._transformed(tuple((t.name, t.step(point)) for t in chosen))
        if built is None:
            return None
        c, edits = built
        for t in GEOMETRY:
            if (value := t.step(point)) is None:
                continue
            try:
                result = t.apply(self.task, c, value)
            except NotApplicable:
                return None
            c, edits = result.candidate, (*edits, result.edit)
        return c.model_copy(update={"params": dict(point)}), edits

    def _transformed(self, steps: tuple[Step, ...]) -> tuple[Candidate, tuple[Edit, ...]] | None:
        """The base with ``steps`` applied in order, and their edits; None where one does not apply. Each
        prefix of the chain is built once: most points differ from others only in their work-group shape or
        their last step, and building a coarsened kernel or unrolling one takes a tenth of a second (a 2-D
        stencil's first round built 400 coarsened kernels for 128 children, 50 s of a 130 s step)."""
        if not steps:
            return self.base, ()
        if steps not in self._steps:
            before = self._transformed(steps[:-1])
            self._steps[steps] = None if before is None else self._apply(steps[-1], *before)
        return self._steps[steps]

    def _apply(self, step: Step, c: Candidate, edits: tuple[Edit, ...]) -> tuple[Candidate, tuple[Edit, ...]] | None:
        name, value = step
        transformation = TRANSFORMATIONS[name]
        if transformation.growth is not None and len(c.source) * transformation.growth(value) > MAX_COARSENED_CHARS:
            return None
        try:
            result = transformation.apply(self.task, c, value)
        except NotApplicable:
            return None
        if len(result.candidate.source) > MAX_COARSENED_CHARS:
            return None
        return result.candidate, (*edits, result.edit)

    def describe(self, max_values: int | None = None) -> str:
        """One line per parameter, for prompts and `kernelcast tasks show`-like views; with ``max_values``
        a long value list shows its first and last values and how many it holds (prompts stay short)."""
        lines = [f"{k} in {_values(v, max_values)}" for k, v in self.params.items()]
        lines += [f"({k} unavailable: {why})" for k, why in self.unavailable.items()]
        return "\n".join(lines)


def _values(values: list[Any], limit: int | None) -> str:
    if limit is None or len(values) <= limit:
        return str(values)
    head, tail = values[: limit - 2], values[-2:]
    return f"[{', '.join(map(repr, head))}, ..., {', '.join(map(repr, tail))}] ({len(values)} values)"
