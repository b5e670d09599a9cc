"""A derived template: the transformations that apply to a kernel, as a tunable parameter space.

A kernel without a hand-written template still gets a search space: one parameter per transformation
whose preconditions hold on its entry kernel (scalar replacement, restrict/const, coarsening factors in
x and y and their mapping, local-memory tile size, work-items per row of a row reduction, unroll factor,
work-group shape). A point is instantiated by applying the chosen transformations in a fixed order to the base
kernel; the first value of every parameter is the identity, so the all-identity point is the base itself and is
never proposed.
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

from kernelcast.agents.generate.kernel_ast import observes_work_group
from kernelcast.agents.generate.transforms import NotApplicable, entry_of
from kernelcast.agents.generate.transforms.coarsen import FACTORS as COARSEN_FACTORS
from kernelcast.agents.generate.transforms.coarsen import MAPPINGS, coarsen
from kernelcast.agents.generate.transforms.local_tiling import TILES, local_tile
from kernelcast.agents.generate.transforms.restrict import restrict_const
from kernelcast.agents.generate.transforms.row_reduce import THREADS as ROW_THREADS
from kernelcast.agents.generate.transforms.row_reduce import row_reduce
from kernelcast.agents.generate.transforms.scalar_replace import scalar_replace
from kernelcast.agents.generate.transforms.unroll import FACTORS as UNROLL_FACTORS
from kernelcast.agents.generate.transforms.unroll import innermost_counted_loops, unroll
from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.edit import Edit
from kernelcast.tools.core.expr import ExpressionError, evaluate_int
from kernelcast.tools.core.preprocess import PreprocessError, preprocess
from kernelcast.tools.core.task import Task

Point = dict[str, Any]
Step = tuple[str, Any]  # one transformation of a point and its value: ("coarsen", (fx, fy, mapping)), ("unroll", 4)
KEEP = "keep"
MAX_WG_X = 1024
MAX_WG_Y = 64
# Coarsening copies the kernel's body F times and unrolling copies loop bodies U times: no derived kernel larger
# than this is built (an already jammed 8x8 kernel is ~40 KB; growing it further costs seconds per point to build
# and compile, for register pressure no device rewards). Until 2026-12-02 only coarsening checked it, so unrolling
# a re-based coarsened kernel made candidates of up to 220 KB (23 s to compile each on Intel's CPU runtime): the
# no-template bench's selective run on matvec_cols spent 2-6 min per round of 32 children validating them, and had
# not finished after 12 min; with the cap it took 1.1 min. What the cap excludes was not the best to be had: those
# kernels measured 2.4-8.9x, and measure-all on the capped space found 11.1x with a 4 KB kernel
MAX_COARSENED_CHARS = 48_000


def work_group_shapes(dims: int, max_wg: int) -> list[str]:
    """Every power-of-two work-group shape up to the device limit: 1-D from 1 to ``max_wg``; 2-D shapes."""
    powers = [2 ** i for i in range(int(math.log2(max(1, max_wg))) + 1)]
    if dims == 1:
        return [str(p) for p in powers]
    extra = ",1" * (dims - 2)
    return [f"{x},{y}{extra}" for y in powers if y <= MAX_WG_Y for x in powers if x <= MAX_WG_X and x * y <= max_wg]


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
        task, base = self.task, self.base
        try:
            ps, kernel = entry_of(base.source, task.language, task.spec.entry)
        except NotApplicable as exc:
            self.unavailable["all"] = str(exc)
            return
        for name, attempt in (("scalar_replace", lambda: scalar_replace(task, base)),
                              ("restrict", lambda: restrict_const(task, base))):
            try:
                attempt()
                self.params[name] = [0, 1]
            except NotApplicable as exc:
                self.unavailable[name] = str(exc)
        dims = len(base.global_size)
        for axis, dim in (("x", 0), ("y", 1)):
            if dim >= dims:
                continue
            ok = []
            for f in COARSEN_FACTORS[1:]:
                if len(base.source) * f > MAX_COARSENED_CHARS:
                    self.unavailable.setdefault(f"coarsen_{axis}", f"the kernel is too large to coarsen by {f} "
                                                                       f"({len(base.source)} characters)")
                    continue
                try:
                    coarsen(task, base, f if dim == 0 else 1, f if dim == 1 else 1)
                    ok.append(f)
                except NotApplicable as exc:
                    self.unavailable[f"coarsen_{axis}"] = str(exc)
            if ok:
                self.params[f"coarsen_{axis}"] = [1, *ok]
        if "coarsen_x" in self.params or "coarsen_y" in self.params:
            self.params["mapping"] = list(MAPPINGS)
        tiles = []
        for tile in (t for t in TILES if t * t <= self.max_wg):
            try:
                local_tile(task, base, tile)
                tiles.append(tile)
            except NotApplicable as exc:
                self.unavailable["local_tile"] = str(exc)
        if tiles:
            self.params["local_tile"] = [0, *tiles]
            self.unavailable.pop("local_tile", None)
        self._probe_row_reduce()
        if innermost_counted_loops(ps, kernel) and not ps.uses_macros(kernel):
            self.params["unroll"] = list(UNROLL_FACTORS)
        else:
            self.unavailable["unroll"] = "no innermost counted loop the unroller accepts"
        if observes_work_group(ps, kernel):
            self.unavailable["work_group"] = "the kernel observes its work-group"
        else:
            self.params["work_group"] = [KEEP, *work_group_shapes(dims, self.max_wg)]

    def _probe_row_reduce(self) -> None:
        """Row reduction applies to the base, or after scalar replacement (a row accumulated in ``y[i]``)."""
        threads = [t for t in ROW_THREADS if t <= self.max_wg]
        if not threads:
            self.unavailable["row_threads"] = f"the device's work-groups hold fewer than {ROW_THREADS[0]} work-items"
            return
        try:
            row_reduce(self.task, self.base, threads[0])
        except NotApplicable as exc:
            if "scalar_replace" not in self.params:
                self.unavailable["row_threads"] = str(exc)
                return
            try:
                row_reduce(self.task, scalar_replace(self.task, self.base).candidate, threads[0])
            except NotApplicable as after:
                self.unavailable["row_threads"] = str(after)
                return
        self.params["row_threads"] = [1, *threads]

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
        fx, fy = point.get("coarsen_x", 1), point.get("coarsen_y", 1)
        mapping, tile = point.get("mapping", MAPPINGS[0]), point.get("local_tile", 0)
        if fx * fy == 1 and mapping != MAPPINGS[0]:
            return None  # the mapping without coarsening is the same kernel as another point
        rows = point.get("row_threads", 1)
        if (tile and fx * fy > 1) or (rows > 1 and (tile or fx * fy > 1)):
            return None  # a refused composition (module docstring)
        steps: list[Step] = [(name, 1) for name in ("scalar_replace", "restrict") if point.get(name)]
        if fx * fy > 1:
            steps.append(("coarsen", (fx, fy, mapping)))
        if tile:
            steps.append(("local_tile", tile))
            point = {**point, "work_group": KEEP}  # the tile fixes the work-group shape
        if rows > 1:
            steps.append(("row_reduce", rows))
            point = {**point, "work_group": KEEP}  # so do the lanes of a row
        if point.get("unroll", 1) > 1:
            steps.append(("unroll", point["unroll"]))
        built = self._transformed(tuple(steps))
        if built is None:
            return None
        c, edits = built
        shape = point.get("work_group", KEEP)
        if shape != KEEP:
            local = shape.split(",")
            if not self._divides(c.global_size, local):
                return None
            c = c.model_copy(update={"local_size": local})
            edits = (*edits, Edit(name="work_group", values={"shape": shape}, label=f"work-group ({', '.join(local)})"))
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
        task = self.task
        try:
            if name == "scalar_replace":
                result = scalar_replace(task, c)
            elif name == "restrict":
                result = restrict_const(task, c)
            elif name == "coarsen":
                fx, fy, mapping = value
                if len(c.source) * fx * fy > MAX_COARSENED_CHARS:
                    return None
                result = coarsen(task, c, fx, fy, mapping)
            elif name == "local_tile":
                result = local_tile(task, c, value)
            elif name == "row_reduce":
                result = row_reduce(task, c, value)
            else:
                result = unroll(task, c, value)
        except NotApplicable:
            return None
        if len(result.candidate.source) > MAX_COARSENED_CHARS:
            return None
        return result.candidate, (*edits, result.edit)

    def _divides(self, global_size: list[str], local: list[str]) -> bool:
        if len(local) != len(global_size):
            return False
        for which in ("small", "full"):
            try:
                glob = [evaluate_int(e, self.task.sizes(which)) for e in global_size]
            except (ExpressionError, ZeroDivisionError, ValueError):
                return False
            if any(g % int(size) for g, size in zip(glob, local, strict=True)):
                return False
        return True

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
