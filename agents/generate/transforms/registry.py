"""The transformations by name: the one list the derived template and the transformation families read.

Each entry names the module that implements the transformation and says what a derived point needs of it: its
parameters in a point (the first value of each is the identity), how it is probed on a kernel (which values
apply), the step a point takes with it and how that step is applied, which transformations it does not compose
with, and the family of the points it is the most structural change of. ``TRANSFORMATIONS`` is in application
order (a point's steps run in this order; it is also the order of a space's parameters), ``FAMILY_ORDER`` from
the most structural down. Adding a transformation: its module in this folder and its entry here.

The work-group shape is an entry too, a ``geometry`` one: it changes the launch only, so it is applied last, to
the transformed kernel, outside the step cache and the size cap.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from kernelcast.agents.generate.kernel_ast import ParsedSource, observes_work_group
from kernelcast.agents.generate.transforms import (
    NotApplicable,
    Rewritten,
    coarsen,
    local_tiling,
    restrict,
    rewritten,
    row_reduce,
    scalar_replace,
    unroll,
)
from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.expr import ExpressionError, evaluate_int
from kernelcast.tools.core.task import Task

Point = dict[str, Any]
KEEP = "keep"  # the work-group value that keeps the kernel's own shape
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


@dataclass
class Probe:
    """What probing a kernel's space works on, and what it finds: the values each parameter takes on this kernel
    (``params``, in the order found) and why a transformation does not apply (``unavailable``)."""

    task: Task
    base: Candidate
    max_wg: int
    ps: ParsedSource
    kernel: Any  # the entry kernel's cursor
    params: dict[str, list[Any]] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)

    @property
    def dims(self) -> int:
        return len(self.base.global_size)


@dataclass(frozen=True)
class Transformation:
    name: str  # its Edit's name and its step in a derived point
    module: ModuleType  # where it is implemented
    params: tuple[str, ...]  # its parameters in a derived point
    probe: Callable[[Probe], None]  # adds its parameters' values on the kernel, or says why it does not apply
    step: Callable[[Point], Any]  # the value of its step at a point (None: the point does not apply it)
    apply: Callable[[Task, Candidate, Any], Rewritten]  # NotApplicable where it does not apply
    family: Callable[[Mapping[str, Any]], str | None]  # a stored point's family when this is its main change
    excludes: tuple[str, ...] = ()  # transformations it does not compose with (such a point is not built)
    fixes_work_group: bool = False  # it sets the work-group shape itself (the point's shape is then KEEP)
    growth: Callable[[Any], int] | None = None  # how many times the source it multiplies (checked before applying)
    valid: Callable[[Point], bool] = lambda point: True  # False: the point is another point's kernel
    geometry: bool = False  # changes the launch only (applied last)


def number(value: object) -> int:
    """A parameter value as an integer (stored points may carry numbers as strings); 0 when it is none."""
    try:
        return int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return 0


def work_group_shapes(dims: int, max_wg: int) -> list[str]:
    """Every power-of-two work-group shape up to the device limit: 1-D from 1 to ``max_wg``; 2-D shapes."""
    powers = [2 ** i for i in range(int(math.log2(max(1, max_wg))) + 1)]
    if dims == 1:
        return [str(p) for p in powers]
    extra = ",1" * (dims - 2)
    return [f"{x},{y}{extra}" for y in powers if y <= MAX_WG_Y for x in powers if x <= MAX_WG_X and x * y <= max_wg]


# ---- probing ------------------------------------------------------------------------------------------------------
def _probe_flag(name: str, attempt: Callable[[Task, Candidate], Rewritten]) -> Callable[[Probe], None]:
    """A transformation without values of its own: on (1) or off (0), where it applies to the base."""

    def probe(p: Probe) -> None:
        try:
            attempt(p.task, p.base)
            p.params[name] = [0, 1]
        except NotApplicable as exc:
            p.unavailable[name] = str(exc)

    return probe


def _probe_coarsen(p: Probe) -> None:
    for axis, dim in (("x", 0), ("y", 1)):
        if dim >= p.dims:
            continue
        ok = []
        for f in coarsen.FACTORS[1:]:
            if len(p.base.source) * f > MAX_COARSENED_CHARS:
                p.unavailable.setdefault(f"coarsen_{axis}", f"the kernel is too large to coarsen by {f} "
                                                            f"({len(p.base.source)} characters)")
                continue
            try:
                coarsen.coarsen(p.task, p.base, f if dim == 0 else 1, f if dim == 1 else 1)
                ok.append(f)
            except NotApplicable as exc:
                p.unavailable[f"coarsen_{axis}"] = str(exc)
        if ok:
            p.params[f"coarsen_{axis}"] = [1, *ok]
    if "coarsen_x" in p.params or "coarsen_y" in p.params:
        p.params["mapping"] = list(coarsen.MAPPINGS)


def _probe_local_tile(p: Probe) -> None:
    tiles = []
    for tile in (t for t in local_tiling.TILES if t * t <= p.max_wg):
        try:
            local_tiling.local_tile(p.task, p.base, tile)
            tiles.append(tile)
        except NotApplicable as exc:
            p.unavailable["local_tile"] = str(exc)
    if tiles:
        p.params["local_tile"] = [0, *tiles]
        p.unavailable.pop("local_tile", None)


def _probe_row_reduce(p: Probe) -> None:
    """Row reduction applies to the base, or after scalar replacement (a row accumulated in ``y[i]``)."""
    threads = [t for t in row_reduce.THREADS if t <= p.max_wg]
    if not threads:
        p.unavailable["row_threads"] = f"the device's work-groups hold fewer than {row_reduce.THREADS[0]} work-items"
        return
    try:
        row_reduce.row_reduce(p.task, p.base, threads[0])
    except NotApplicable as exc:
        if "scalar_replace" not in p.params:
            p.unavailable["row_threads"] = str(exc)
            return
        try:
            row_reduce.row_reduce(p.task, scalar_replace.scalar_replace(p.task, p.base).candidate, threads[0])
        except NotApplicable as after:
            p.unavailable["row_threads"] = str(after)
            return
    p.params["row_threads"] = [1, *threads]


def _probe_unroll(p: Probe) -> None:
    if unroll.innermost_counted_loops(p.ps, p.kernel) and not p.ps.uses_macros(p.kernel):
        p.params["unroll"] = list(unroll.FACTORS)
    else:
        p.unavailable["unroll"] = "no innermost counted loop the unroller accepts"


def _probe_work_group(p: Probe) -> None:
    if observes_work_group(p.ps, p.kernel):
        p.unavailable["work_group"] = "the kernel observes its work-group"
    else:
        p.params["work_group"] = [KEEP, *work_group_shapes(p.dims, p.max_wg)]


# ---- the work-group shape ----------------------------------------------------------------------------------------
def divides(task: Task, global_size: list[str], local: list[str]) -> bool:
    """Whether the local shape divides the global size at every size set of the task."""
    if len(local) != len(global_size):
        return False
    for which in ("small", "full"):
        try:
            glob = [evaluate_int(e, task.sizes(which)) for e in global_size]
        except (ExpressionError, ZeroDivisionError, ValueError):
            return False
        if any(g % int(size) for g, size in zip(glob, local, strict=True)):
            return False
    return True


def with_work_group(task: Task, candidate: Candidate, shape: str) -> Rewritten:
    """The candidate launched in work-groups of ``shape`` ("16,4")."""
    local = shape.split(",")
    if not divides(task, candidate.global_size, local):
        raise NotApplicable(f"work-group ({shape}) does not divide the global size at every size set")
    return rewritten(candidate.model_copy(update={"local_size": local}), "work_group", f"work-group ({', '.join(local)})",
                     shape=shape)


# ---- the registry ---------------------------------------------------------------------------------------------------
def _coarsening(point: Mapping[str, Any]) -> tuple[int, int, str]:
    return point.get("coarsen_x", 1), point.get("coarsen_y", 1), point.get("mapping", coarsen.MAPPINGS[0])


def _coarsen_step(point: Point) -> tuple[int, int, str] | None:
    fx, fy, mapping = _coarsening(point)
    return (fx, fy, mapping) if fx * fy > 1 else None


def _coarsen_valid(point: Point) -> bool:
    """The mapping without coarsening is the same kernel as another point."""
    fx, fy, mapping = _coarsening(point)
    return fx * fy != 1 or mapping == coarsen.MAPPINGS[0]


def _row_reduce_step(point: Point) -> int | None:
    rows = point.get("row_threads", 1)
    return rows if rows > 1 else None


def _work_group_step(point: Point) -> str | None:
    shape = point.get("work_group", KEEP)
    return shape if shape != KEEP else None


def _coarsen_family(params: Mapping[str, Any]) -> str | None:
    if number(params.get("coarsen_x", 1)) > 1 or number(params.get("coarsen_y", 1)) > 1:
        return f"coarsen ({params.get('mapping', 'cyclic')})"
    return None


def _family_if(param: str, identity: int, family: str) -> Callable[[Mapping[str, Any]], str | None]:
    """The family of a point whose ``param`` is beyond its identity value."""
    return lambda params: family if number(params.get(param, identity)) > identity else None


TRANSFORMATIONS: dict[str, Transformation] = {t.name: t for t in (
    Transformation("scalar_replace", scalar_replace, ("scalar_replace",),
                   probe=_probe_flag("scalar_replace", scalar_replace.scalar_replace),
                   step=lambda point: 1 if point.get("scalar_replace") else None,
                   apply=lambda task, c, value: scalar_replace.scalar_replace(task, c),
                   family=lambda params: "scalar replacement" if number(params.get("scalar_replace", 0)) else None),
    Transformation("restrict", restrict, ("restrict",),
                   probe=_probe_flag("restrict", restrict.restrict_const),
                   step=lambda point: 1 if point.get("restrict") else None,
                   apply=lambda task, c, value: restrict.restrict_const(task, c),
                   family=lambda params: "restrict" if number(params.get("restrict", 0)) else None),
    Transformation("coarsen", coarsen, ("coarsen_x", "coarsen_y", "mapping"), probe=_probe_coarsen,
                   step=_coarsen_step,
                   apply=lambda task, c, value: coarsen.coarsen(task, c, *value), family=_coarsen_family,
                   growth=lambda value: value[0] * value[1],
                   valid=_coarsen_valid),
    Transformation("local_tile", local_tiling, ("local_tile",), probe=_probe_local_tile,
                   step=lambda point: point.get("local_tile", 0) or None,
                   apply=local_tiling.local_tile, family=_family_if("local_tile", 0, "local tile"),
                   excludes=("coarsen",), fixes_work_group=True),
    Transformation("row_reduce", row_reduce, ("row_threads",), probe=_probe_row_reduce,
                   step=_row_reduce_step,
                   apply=row_reduce.row_reduce, family=_family_if("row_threads", 1, "row reduction"),
                   excludes=("coarsen", "local_tile"), fixes_work_group=True),
    Transformation("unroll", unroll, ("unroll",), probe=_probe_unroll,
                   step=lambda point: point["unroll"] if point.get("unroll", 1) > 1 else None,
                   apply=unroll.unroll, family=_family_if("unroll", 1, "unroll")),
    Transformation("work_group", sys.modules[__name__], ("work_group",), probe=_probe_work_group,
                   step=_work_group_step,
                   apply=with_work_group,
                   family=lambda params: "work-group" if params.get("work_group", KEEP) != KEEP else None,
                   geometry=True),
)}
# a derived point's family is that of its most structural transformation: these first
FAMILY_ORDER = ("coarsen", "row_reduce", "local_tile", "scalar_replace", "unroll", "restrict", "work_group")
WORK_GROUP = TRANSFORMATIONS["work_group"]


def point_family(params: Mapping[str, Any]) -> str | None:
    """The family of a derived point's parameters (None: the point changes nothing structural)."""
    for name in FAMILY_ORDER:
        if (family := TRANSFORMATIONS[name].family(params)) is not None:
            return family
    return None


def transformation(name: str) -> Transformation:
    """The registered transformation called ``name``; an unknown name is a ValueError listing the known ones."""
    try:
        return TRANSFORMATIONS[name]
    except KeyError:
        raise ValueError(f"unknown transformation {name!r} (expected one of {', '.join(TRANSFORMATIONS)})") from None
