"""The default generator: no network, no model, deterministic given a seed.

Candidates come from three sources, interleaved:

- the task's tunable template: the first round (a parent that is not a template point) is a seeded
  space-filling design over the parameters (scrambled Sobol points snapped to valid points), never the
  default point, which equals the reference; later rounds move one or two parameters of the parent's point
  to adjacent values, with random restarts; never a point the store has measured on this device at the
  run's sizes;
- without a template, a derived template (:class:`kernelcast.agents.generate.derived_space.DerivedSpace`): the
  source transformations whose preconditions hold on the entry kernel's AST (scalar replacement,
  restrict/const, coarsening with jam, unrolling with remainder, work-group shape over the full legal
  range), explored the same way: a space-filling first round, then neighbours of the parent's point;
- generic edits valid for any kernel: work-group size/shape (only when the kernel cannot observe it; 1-D
  from 1 up to the device limit), build options (fast-math only where the task's tolerance allows it; floating-point options
  only for kernels that compute on floats, found on the AST: a transpose's variant with ``-cl-mad-enable`` is the
  same kernel) and
  ``#pragma unroll`` on the entry kernel's counted loops (found on the AST).

Every proposal passes :class:`kernelcast.agents.generate.base.Validator` before it is returned.
"""

from __future__ import annotations

import functools
import itertools
import math
import random
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from kernelcast.agents.generate.base import FAST_MATH_OPTIONS, GenerationContext, ProposalReport, Proposals, Validator
from kernelcast.agents.generate.dedup import Deduplicator
from kernelcast.agents.generate.derived_space import DerivedSpace, work_group_shapes
from kernelcast.agents.generate.kernel_ast import (
    K,
    KernelParseError,
    ParsedSource,
    Span,
    counted_loop,
    does_float_math,
    header_parts,
    observes_work_group,
    parse,
    walk,
)
from kernelcast.agents.generate.space_filling import space_filling
from kernelcast.tools.core.candidate import DERIVED_BASE, Candidate, normalize_source
from kernelcast.tools.core.edit import Edit, Origin
from kernelcast.tools.core.expr import ExpressionError, evaluate_int
from kernelcast.tools.core.task import Task

if TYPE_CHECKING:
    from kernelcast.tools.hardware.measurers.base import Measurer

T = TypeVar("T")
Point = dict[str, Any]

SAFE_OPTIONS = {"opencl": ["-cl-mad-enable", "-cl-no-signed-zeros"],
                "cuda": ["--extra-device-vectorization", "-maxrregcount=64"]}
FAST_OPTIONS = {"opencl": ["-cl-fast-relaxed-math", "-cl-unsafe-math-optimizations"], "cuda": ["--use_fast_math"]}
assert all(o in FAST_MATH_OPTIONS for opts in FAST_OPTIONS.values() for o in opts)
FLOAT_MATH_OPTIONS = frozenset({"-cl-mad-enable", "-cl-no-signed-zeros", *FAST_MATH_OPTIONS})  # change float math only
UNROLL_FACTORS = (2, 4, 8)
MAX_LOCAL_CHOICES = 12  # work-group shapes offered per kernel as generic edits (a shuffled sample of the valid ones)
DEFAULT_MAX_WG = 256  # without a hardware spec, stay within what every device supports
TEMPLATE_SHARE = 3  # template points per generic variant of the parent in the proposal stream
DESIGN_DRAWS = 1024  # Sobol draws of the derived design before the remaining points (small spaces) follow
MAX_ENUMERATED = 20000  # derived spaces up to this size are exhausted point by point after the design


# ---- does the kernel observe its work-group size? ------------------------------------------
_CL_LOCAL_DEPENDENT = re.compile(
    r"reqd_work_group_size|work_group_size_hint|\bget_(local_id|local_size|group_id|num_groups|enqueued_local_size|"
    r"local_linear_id|sub_group\w*)\b|\b__local\b|\blocal\s+\w|\bbarrier\s*\(|\bwork_group_\w+|\bsub_group_\w+")
_CUDA_LOCAL_DEPENDENT = re.compile(
    r"\b(blockIdx|threadIdx|blockDim|gridDim|__shared__|__syncthreads\w*|__launch_bounds__|__shfl\w*|"
    r"cooperative_groups|warpSize|__ballot\w*|__any\w*|__all\w*|__reduce\w*)\b")


def _cuda_global_index_patterns() -> re.Pattern[str]:
    """Index expressions that do not change with the block shape (global id, total thread count)."""
    forms = []
    for d in "xyz":
        b, t, n, g = (rf"{name}\.{d}" for name in ("blockIdx", "threadIdx", "blockDim", "gridDim"))
        forms += [rf"{b}\*{n}\+{t}", rf"{n}\*{b}\+{t}", rf"{t}\+{b}\*{n}", rf"{t}\+{n}\*{b}",
                  rf"{g}\*{n}", rf"{n}\*{g}"]
    # not preceded by an operator binding tighter than + (or by -), not followed by one
    return re.compile(r"(?<![-*/%\w.])(?:" + "|".join(forms) + r")(?![*/%\w.])")


_CUDA_INVARIANT = _cuda_global_index_patterns()


@functools.lru_cache(maxsize=16)
def _parsed(source: str, language: str) -> ParsedSource:
    """One parse of a source for the generator's questions about it (work-group independence, float math,
    loop sites): an expansion asks all three of the same parent. A ParsedSource is read, never changed."""
    return parse(source, language)


def local_size_independent(source: str, language: str, entry: str | None = None) -> bool:
    """True when the kernel's results cannot depend on the work-group size, so it may be changed.

    OpenCL: read on the AST of ``entry`` (every kernel of the file without it): no required size, no local
    ids/sizes/groups, no local memory, no barriers or group functions; a source that does not parse falls
    back to a conservative text check. CUDA: block/thread indices appear only in the block-shape-invariant
    forms ``blockIdx.x*blockDim.x+threadIdx.x`` and ``gridDim.x*blockDim.x``; no shared memory, no syncs,
    no warp functions.
    """
    text = normalize_source(source)
    if language == "cuda":
        return not _CUDA_LOCAL_DEPENDENT.search(_CUDA_INVARIANT.sub(" GID ", text))
    try:
        ps = _parsed(source, language)
        kernels = [ps.kernel(entry)] if entry else ps.kernels()
    except KernelParseError:
        return not _CL_LOCAL_DEPENDENT.search(text)
    return not any(observes_work_group(ps, k) for k in kernels)


# ---- generic edits -------------------------------------------------------------------------
@dataclass(frozen=True)
class GenericEdit:
    """One semantics-preserving change valid for any kernel: what it is (``edit``, the data a variant carries)
    and how to make it; edits with the same slot are alternatives, never combined."""

    slot: str
    edit: Edit
    apply: Callable[[Candidate], Candidate]

    @property
    def label(self) -> str:
        return self.edit.label


def _generic(name: str, label: str, **values: int | str | None) -> Edit:
    return Edit(name=name, values=values, label=label, generic=True)


def _set_local(local: list[str]) -> Callable[[Candidate], Candidate]:
    return lambda c: c.model_copy(update={"local_size": local})


def _add_option(option: str) -> Callable[[Candidate], Candidate]:
    return lambda c: c.model_copy(update={"build_options": [*c.build_options, option]})


@dataclass(frozen=True)
class PragmaSite:
    """A counted for-loop of the entry kernel where ``#pragma unroll`` can go (found on the AST)."""

    ordinal: int
    header: str
    has_pragma: bool
    constant_bound: bool


def _line_loops(ps: ParsedSource, kernel: Any) -> list[tuple[Any, int]]:
    """(loop, offset of its ')') of the for-loops of ``kernel`` that start a line of the file itself (not a
    macro expansion); loops in inactive preprocessor branches are not in the AST at all."""
    out = []
    for n in walk(kernel):
        if n.kind != K.FOR_STMT or not ps.in_main_file(n):
            continue
        start = n.extent.start.offset
        line_start = ps.data.rfind(b"\n", 0, start) + 1
        if ps.data[start:start + 3] != b"for" or ps.data[line_start:start].strip():
            continue
        try:
            out.append((n, header_parts(ps, n)[3]))
        except KernelParseError:
            continue
    return out


def pragma_sites(source: str, language: str, entry: str) -> list[PragmaSite]:
    """Where ``#pragma unroll`` can go in the entry kernel, with whether one is there already."""
    try:
        ps = _parsed(source, language)
        kernel = ps.kernel(entry)
    except KernelParseError:
        return []
    sites: list[PragmaSite] = []
    for n, close in _line_loops(ps, kernel):
        start = n.extent.start.offset
        before = ps.data[:start].decode().splitlines()[:-1]
        previous = next((line.strip() for line in reversed(before) if line.strip()), "")
        loop = counted_loop(ps, n)
        bound = ps.text(loop.bound).strip() if loop is not None else ""
        constant = bool(bound) and (bound.rstrip("uUlL").isdigit() or bound in ps.macros())
        header = " ".join(ps.slice(start, close + 1, []).split())
        sites.append(PragmaSite(len(sites), header, previous.startswith(("#pragma unroll", "#pragma nounroll")),
                                constant))
    return sites


def _unroll_pragma(language: str, entry: str, ordinal: int, factor: int | None) -> Callable[[Candidate], Candidate]:
    def apply(c: Candidate) -> Candidate:
        ps = parse(c.source, language)
        start = _line_loops(ps, ps.kernel(entry))[ordinal][0].extent.start.offset
        pragma = f"#pragma unroll{'' if factor is None else f' {factor}'}\n{ps.line_indent(start)}"
        return c.model_copy(update={"source": ps.edited([Span(start, start, pragma)])})

    return apply


def local_size_choices(task: Task, candidate: Candidate, max_wg: int, rng: random.Random) -> list[list[str]]:
    """Work-group shapes over the full legal range (1-D from 1 up to the device limit, 2-D shapes) that
    divide the global size at both size sets, excluding the current one; a shuffled sample, smallest first."""
    globals_ = []
    for which in ("small", "full"):
        try:
            sizes = task.sizes(which)
            globals_.append([evaluate_int(e, sizes) for e in candidate.global_size])
        except (ExpressionError, ZeroDivisionError, ValueError):
            return []
    dims = len(candidate.global_size)
    shapes = [tuple(int(v) for v in shape.split(",")) for shape in work_group_shapes(dims, max_wg)]
    current = [str(e).replace(" ", "") for e in candidate.local_size or []]
    valid = [s for s in shapes if [str(v) for v in s] != current
             and all(g % size == 0 for glob in globals_ for g, size in zip(glob, s, strict=True))]
    rng.shuffle(valid)
    return [[str(v) for v in s] for s in sorted(valid[:MAX_LOCAL_CHOICES], key=lambda s: (math.prod(s), s))]


def computes_floats(task: Task, candidate: Candidate) -> bool:
    """Whether floating-point build options can change the kernel (an unparsable source: assume they can)."""
    try:
        ps = _parsed(candidate.source, task.language)
        return does_float_math(ps, ps.kernel(task.spec.entry))
    except KernelParseError:
        return True


def generic_edits(task: Task, candidate: Candidate, max_wg: int, rng: random.Random) -> list[GenericEdit]:
    """Every single generic edit applicable to ``candidate``."""
    edits: list[GenericEdit] = []
    if local_size_independent(candidate.source, task.language, task.spec.entry):
        for local in local_size_choices(task, candidate, max_wg, rng):
            edits.append(GenericEdit("local", _generic("local_size", f"work-group ({', '.join(local)})",
                                                       shape=",".join(local)), _set_local(local)))
    options = SAFE_OPTIONS.get(task.language, []) + (
        FAST_OPTIONS.get(task.language, []) if task.spec.tolerance.allow_fast_math else [])
    if not computes_floats(task, candidate):
        options = [o for o in options if o not in FLOAT_MATH_OPTIONS]
    for option in options:
        if option not in candidate.build_options:
            edits.append(GenericEdit(f"option {option}", _generic("build_option", f"build option {option}",
                                                                  option=option), _add_option(option)))
    for site in pragma_sites(candidate.source, task.language, task.spec.entry):
        if site.has_pragma:
            continue
        factors: list[int | None] = [*UNROLL_FACTORS, *([None] if site.constant_bound else [])]
        for factor in factors:
            label = f"#pragma unroll{'' if factor is None else f' {factor}'} on '{site.header}'"
            edits.append(GenericEdit(f"loop {site.ordinal}",
                                     _generic("unroll_pragma", label, factor=factor, header=site.header,
                                              loop=site.ordinal),
                                     _unroll_pragma(task.language, task.spec.entry, site.ordinal, factor)))
    return edits


def _nothing_covered(edit: GenericEdit) -> bool:
    return False


def generic_variants(task: Task, base: Candidate, max_wg: int, rng: random.Random,
                     covered: Callable[[GenericEdit], bool] = _nothing_covered
                     ) -> Iterator[tuple[Candidate, tuple[Edit, ...]]]:
    """(variant, its edits): single edits in random order, then pairs of edits in different slots; none that
    ``covered`` says the parent's own space already offers."""
    edits = [e for e in generic_edits(task, base, max_wg, rng) if not covered(e)]
    singles = [(e,) for e in edits]
    pairs = [(a, b) for a, b in itertools.combinations(edits, 2) if a.slot != b.slot]
    rng.shuffle(singles)
    rng.shuffle(pairs)
    for combo in itertools.chain(singles, pairs):
        candidate = base
        for edit in combo:
            candidate = edit.apply(candidate)
        yield candidate, tuple(e.edit for e in combo)


# ---- template moves ---------------------------------------------------------------------------
def _key(point: Point) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(point.items()))


def neighbours(params: dict[str, list[Any]], base: Point, valid: Callable[[Point], bool], rng: random.Random,
               what: str = "template") -> list[tuple[Point, str]]:
    """Valid points one or two adjacent steps from ``base``: single moves (shuffled) before pairs (shuffled)."""
    steps = []
    for name in sorted(params):
        values = params[name]
        index = values.index(base[name])
        steps += [(name, values[j]) for j in (index - 1, index + 1) if 0 <= j < len(values)]
    singles = [(s,) for s in steps]
    pairs = [(a, b) for a, b in itertools.combinations(steps, 2) if a[0] != b[0]]
    rng.shuffle(singles)
    rng.shuffle(pairs)
    out = []
    for moves in itertools.chain(singles, pairs):
        point = {**base, **dict(moves)}
        if valid(point):
            out.append((point, f"{what} neighbour: " + ", ".join(f"{k} {base[k]}->{v}" for k, v in moves)))
    return out


class _Fresh:
    """Filters points: never one measured on this device, never one already yielded in this call."""

    def __init__(self, measured: list[Point], report: ProposalReport) -> None:
        self.measured = {_key(p) for p in measured}
        self.report = report
        self.skipped: set[tuple[tuple[str, Any], ...]] = set()
        self.yielded: set[tuple[tuple[str, Any], ...]] = set()

    def __call__(self, point: Point) -> bool:
        key = _key(point)
        if key in self.measured:
            self.skipped.add(key)
            self.report.skipped_measured = len(self.skipped)
            return False
        if key in self.yielded:
            return False
        self.yielded.add(key)
        return True


def _describe(point: Point) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(point.items()))


def template_points(task: Task, parent: Candidate, context: GenerationContext, rng: random.Random,
                    report: ProposalReport) -> Iterator[tuple[Point, str]]:
    """Unmeasured template points. First round (the parent is no template point): a seeded space-filling
    design, without the default point (it equals the reference). Later rounds: neighbours of the parent's
    point and random restarts. The forecaster's best-ranked points (``context.guided``, forecast-guided
    proposals) are interleaved with both, one for one in the first round, two in five later."""
    tmpl = task.spec.template
    if tmpl is None or task.template_source is None:
        return
    fresh = _Fresh(context.measured_points, report)
    space = task.param_space()
    base = dict(parent.params) if parent.params and task.is_valid_point(parent.params) else None
    guided = ((p, f"forecast-guided template point (the forecaster's rank {i + 1} unmeasured) " + _describe(p))
              for i, p in enumerate(context.guided))
    if base is None:
        reference = task.reference().hash
        default = dict(tmpl.default) if tmpl.default is not None else None
        known = [p for p in space if p != default]
        design = ((p, "template design point " + _describe(p)) for p in
                  space_filling(dict(tmpl.params), context.seed, count=len(known), known_valid=known))
        for point, intent in interleave([(guided, 1), (design, 1)]):
            if task.instantiate(point).hash != reference and fresh(point):
                yield point, intent
        return
    near = neighbours(dict(tmpl.params), base, task.is_valid_point, rng)
    rng.shuffle(space)
    far = ((p, "random template point " + _describe(p)) for p in space)
    for point, intent in interleave([(guided, 2), (iter(near), 2), (far, 1)]):
        if fresh(point):
            yield point, intent


def _remaining(space: DerivedSpace, rng: random.Random) -> Iterator[Point]:
    """Every point of a small derived space in random order (after the design, so the space is exhausted)."""
    if space.size() > MAX_ENUMERATED:
        return
    names = sorted(space.params)
    combos = list(itertools.product(*(space.params[n] for n in names)))
    rng.shuffle(combos)
    for combo in combos:
        point = dict(zip(names, combo, strict=True))
        if space.instantiate(point) is not None:
            yield point


def derived_points(space: DerivedSpace, parent_point: Point | None, context: GenerationContext,
                   rng: random.Random, report: ProposalReport) -> Iterator[tuple[Candidate, tuple[Edit, ...]]]:
    """(candidate, its edits) of a derived template: a space-filling design around no point, else neighbours of
    the parent's point interleaved with design points. Points whose transformations do not apply are skipped."""
    base_tag = {DERIVED_BASE: space.base.hash[:12]}
    measured = [{k: v for k, v in p.items() if k != DERIVED_BASE} for p in context.measured_points
                if p.get(DERIVED_BASE) == base_tag[DERIVED_BASE]]
    fresh = _Fresh(measured, report)

    def built(point: Point) -> tuple[Candidate, tuple[Edit, ...]] | None:
        return space.instantiate(point)

    design = itertools.chain(space_filling(space.params, context.seed, count=DESIGN_DRAWS,
                                           valid=lambda p: built(p) is not None),
                             _remaining(space, rng))
    streams: list[tuple[Iterator[tuple[Point, str]], int]] = []
    if parent_point is not None and set(parent_point) == set(space.params):
        near = neighbours(space.params, parent_point, lambda p: built(p) is not None, rng, "derived")
        streams.append((iter(near), 2))
    streams.append((((p, "derived design point") for p in design), 1))
    for point, _why in interleave(streams):
        if not fresh(point):
            continue
        made = built(point)
        if made is None:
            continue
        candidate, edits = made  # its params: the point as built (a tiled or row-reduced one keeps its shape)
        yield candidate.model_copy(update={"params": {**(candidate.params or point), **base_tag}}), edits


def interleave(streams: list[tuple[Iterator[T], int]]) -> Iterator[T]:
    """Round-robin, ``weight`` items from each stream per turn, until every stream is exhausted."""
    live = list(streams)
    while live:
        for entry in list(live):
            stream, weight = entry
            for _ in range(weight):
                item = next(stream, _DONE)
                if item is _DONE:
                    live.remove(entry)
                    break
                yield item  # type: ignore[misc]


_DONE = object()


# ---- the generator -------------------------------------------------------------------------------
def _in_space(space: DerivedSpace) -> Callable[[GenericEdit], bool]:
    """The generic edits a derived point's own space already offers as parameters: its work-group shape, and
    loop unrolling when the space unrolls. A variant of a derived point made by one of them is a neighbour of
    the point under another name, and one without params: expanded, it roots a new derived template on itself
    (conv2d, selective, seed 0: after the opening, 4 pragma variants of one coarsened point and 13 points of the
    template rooted on one of them, all 1.4-1.5x, where the space holds 5.8x and more)."""
    return lambda edit: (edit.slot == "local" and "work_group" in space.params) or \
        (edit.slot.startswith("loop ") and "unroll" in space.params)


class OfflineGenerator:
    """Template exploration plus generic rewrites; validated, deduplicated, deterministic per seed."""

    name = "offline"

    def __init__(self, worker: "Measurer | None" = None, max_tries: int | None = None) -> None:
        """``max_tries`` bounds the non-duplicate proposals validated per call (default 8 n + 64)."""
        self.worker = worker
        self.max_tries = max_tries
        self._spaces: dict[str, DerivedSpace] = {}  # derived templates by the short hash of their base kernel

    def derived_space(self, task: Task, parent: Candidate, max_wg: int) -> tuple[DerivedSpace, Point | None]:
        """The derived template ``parent`` belongs to (with its point), or a new one with ``parent`` as base."""
        params = dict(parent.params or {})
        tag = params.pop(DERIVED_BASE, None)
        if tag in self._spaces and self._spaces[tag].task.name == task.name:
            return self._spaces[tag], params
        space = self._spaces.setdefault(parent.hash[:12], DerivedSpace(task, parent, max_wg))
        return space, None

    def propose(self, task: Task, parent: Candidate, context: GenerationContext, n: int) -> Proposals:
        report = ProposalReport(generator=self.name, requested=n, rounds=1)
        validator = Validator(task, parent, report, Deduplicator(context.excluded()), self.worker, context.hardware)
        rng = random.Random(f"{context.seed}:{parent.hash}")
        max_tries = self.max_tries or 8 * n + 64
        accepted: list[Candidate] = []
        if n <= 0:
            return Proposals(accepted, report)
        capped = False
        for candidate in self._stream(task, parent, context, rng, report):
            capped = report.proposed - report.duplicates >= max_tries  # duplicates are cheap; compiles are not
            if capped:
                break
            if validator.check(candidate):
                accepted.append(candidate)
                if len(accepted) == n:
                    break
        if not accepted:
            report.empty_reason = self._why_empty(task, parent, report, capped)
        return Proposals(accepted, report)

    def _stream(self, task: Task, parent: Candidate, context: GenerationContext, rng: random.Random,
                report: ProposalReport) -> Iterator[Candidate]:
        """Per turn: three template points and one generic variant of the parent; without a template, three
        points of the derived template and one generic variant."""
        max_wg = (context.hardware.max_work_group_size if context.hardware else 0) or DEFAULT_MAX_WG
        if task.language == "cuda":
            max_wg = min(max_wg, 1024)

        def finish(c: Candidate, origin: Origin, edits: Sequence[Edit], note: str = "") -> Candidate:
            return c.model_copy(update={"parent": parent.hash, "origin": origin, "edits": list(edits), "note": note,
                                        "generator": self.name})

        def variants_of_parent(of_point: bool, covered: Callable[[GenericEdit], bool] = _nothing_covered
                               ) -> Iterator[Candidate]:
            """Generic edits of the parent. A variant of a (template or derived) point is no point of its
            template: it carries no params, so the point's own identity stays the point's; it keeps the point's
            origin and edits, the generic ones after them. A variant of any other kernel is a "variant"."""
            return ((finish(c, parent.origin, [*parent.edits, *edits], parent.note) if of_point
                     else finish(c, "variant", edits)).model_copy(update={"params": None})
                    for c, edits in generic_variants(task, parent, max_wg, rng, covered))

        if task.spec.template is None:
            space, point = self.derived_space(task, parent, max_wg)
            derived = (finish(c, "derived", edits) for c, edits in derived_points(space, point, context, rng, report))
            covered = _in_space(space) if point is not None else _nothing_covered
            yield from interleave([(derived, TEMPLATE_SHARE), (variants_of_parent(point is not None, covered), 1)])
            return

        points = template_points(task, parent, context, rng, report)
        plain = (task.instantiate(p, intent=i, parent=parent.hash, generator=self.name) for p, i in points)
        # Generic edits go on the parent only, never stacked on an unmeasured point: "fresh point + pragma"
        # changed two things at once, and measuring it marked the point itself as measured, so the plain point
        # was never tried (search_bench: 3 of 7 budget-8 measurements went to such stacks).
        if context.template_only:  # a recording answers its template points only: a generic variant is unmeasurable
            yield from plain
            return
        of_parent = variants_of_parent(parent.params is not None)
        yield from interleave([(plain, TEMPLATE_SHARE), (of_parent, 1)])

    @staticmethod
    def _why_empty(task: Task, parent: Candidate, report: ProposalReport, capped: bool) -> str:
        if capped:
            return f"stopped after {report.proposed} tries without a valid proposal"
        what = ("task has no tunable template" if task.spec.template is None
                else f"every valid template point near or far from the parent is measured or known "
                     f"({report.skipped_measured} measured skipped)")
        rejected = ", ".join(f"{k} {v}" for k, v in report.rejected.most_common()) or "none"
        return (f"nothing left to propose for {task.name!r} from parent {parent.short}: {what}, and every "
                f"generic variation is known or invalid (rejected: {rejected})")
