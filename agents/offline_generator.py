"""The default generator: no network, no model, deterministic given a seed.

Two sources of candidates, interleaved:

- the task's tunable template: neighbours of the parent's point (one or two
  parameters moved to an adjacent allowed value) and random restarts over
  the parameter space, never a point the store has measured on this device;
- generic, semantics-preserving rewrites valid for any kernel: work-group
  size/shape (only when the kernel cannot observe it), build options
  (fast-math only where the task's tolerance allows it) and ``#pragma
  unroll`` on simple for-loops. They apply to the parent, or, when the
  parent is an already-measured template point, on top of fresh points.

Every proposal passes :class:`kernelcast.agents.generator.Validator` before it is returned.
"""

from __future__ import annotations

import itertools
import math
import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from kernelcast.agents.dedup import Deduplicator
from kernelcast.agents.generator import FAST_MATH_OPTIONS, GenerationContext, ProposalReport, Validator
from kernelcast.tools.candidate import Candidate, normalize_source
from kernelcast.tools.expr import ExpressionError, evaluate, evaluate_int
from kernelcast.tools.task import Task

if TYPE_CHECKING:
    from kernelcast.tools.worker import MeasurementWorker

T = TypeVar("T")
Point = dict[str, Any]

SAFE_OPTIONS = {"opencl": ["-cl-mad-enable", "-cl-no-signed-zeros"],
                "cuda": ["--extra-device-vectorization", "-maxrregcount=64"]}
FAST_OPTIONS = {"opencl": ["-cl-fast-relaxed-math", "-cl-unsafe-math-optimizations"], "cuda": ["--use_fast_math"]}
assert all(o in FAST_MATH_OPTIONS for opts in FAST_OPTIONS.values() for o in opts)
UNROLL_FACTORS = (2, 4, 8)
LOCAL_1D = (16, 32, 64, 128, 256, 512, 1024)
LOCAL_X = (8, 16, 32, 64, 128, 256)
LOCAL_Y = (1, 2, 4, 8, 16, 32)
MAX_LOCAL_CHOICES = 8  # work-group shapes offered per kernel (a shuffled sample of the valid ones)
DEFAULT_MAX_WG = 256  # without a hardware spec, stay within what every device supports


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


def local_size_independent(source: str, language: str) -> bool:
    """True when the kernel's results cannot depend on the work-group size, so it may be changed.

    OpenCL: no required size, no local ids/sizes/groups, no local memory, no
    barriers or group functions. CUDA: block/thread indices appear only in the
    block-shape-invariant forms ``blockIdx.x*blockDim.x+threadIdx.x`` and
    ``gridDim.x*blockDim.x``; no shared memory, no syncs, no warp functions.
    """
    text = normalize_source(source)
    if language == "cuda":
        return not _CUDA_LOCAL_DEPENDENT.search(_CUDA_INVARIANT.sub(" GID ", text))
    return not _CL_LOCAL_DEPENDENT.search(text)


# ---- simple for-loops ---------------------------------------------------------------------
_SIMPLE_FOR = re.compile(
    r"^(?P<indent>[ \t]*)for\s*\(\s*(?:(?:const\s+)?(?:unsigned\s+)?(?:int|uint|long|ulong|size_t|short)\s+)?"
    r"(?P<var>[A-Za-z_]\w*)\s*=\s*[^;{}]+;\s*(?P=var)\s*(?:<=?|>=?|!=)\s*(?P<bound>[^;{}]+);\s*"
    r"(?:\+\+\s*(?P=var)|--\s*(?P=var)|(?P=var)\s*(?:\+\+|--)|(?P=var)\s*[+\-]=\s*[^;{}(),]+)\s*\)", re.M)
_LITERAL = re.compile(r"^\s*\d+[uUlL]*\s*$")
_NAME = re.compile(r"^\s*([A-Za-z_]\w*)\s*$")


@dataclass(frozen=True)
class Loop:
    start: int  # offset of the line holding ``for``
    indent: str
    header: str
    has_pragma: bool
    constant_bound: bool


def simple_loops(source: str) -> list[Loop]:
    """Counted for-loops (``for (int i = a; i < b; ++i)``) that start a line, outside macros and outside
    preprocessor branches known to be inactive (a pragma there would make a new hash but the same binary)."""
    active = active_lines(source)
    loops = []
    for m in _SIMPLE_FOR.finditer(source):
        if not active[source.count("\n", 0, m.start())]:
            continue
        before = source[: m.start()].rstrip("\n").splitlines()
        previous = next((line.strip() for line in reversed(before) if line.strip()), "")
        if previous.endswith("\\"):
            continue  # inside a multi-line #define: a pragma line would end the macro
        loops.append(Loop(m.start(), m.group("indent"), " ".join(m.group(0).split()),
                          previous.startswith(("#pragma unroll", "#pragma nounroll")),
                          _compile_time_constant(m.group("bound"), source)))
    return loops


def _compile_time_constant(bound: str, source: str) -> bool:
    """A literal or a ``#define``d name: a trip count the compiler knows, so a full unroll is possible."""
    if _LITERAL.match(bound):
        return True
    name = _NAME.match(bound)
    return bool(name and re.search(rf"#\s*define\s+{name.group(1)}\b", source))


_DIRECTIVE = re.compile(r"^\s*#\s*(\w+)\s*(.*?)\s*$")
_DEFINED = re.compile(r"\bdefined\s*(?:\(\s*(\w+)\s*\)|(\w+))")


def active_lines(source: str) -> list[bool]:
    """Per line: False where an ``#if``/``#ifdef`` branch is known to be skipped, given the ``#define``s above it.

    Conditions it cannot evaluate count as active in every branch (the safe side: the loop is kept).
    """
    defines: dict[str, int | float | None] = {}  # None: defined, value not numeric
    stack: list[tuple[bool, bool | None]] = []  # (enclosing region active, branch taken: True/False/unknown)
    active, out = True, []
    for line in source.splitlines() or [""]:
        m = _DIRECTIVE.match(line)
        if m:
            word, rest = m.groups()
            if word in ("if", "ifdef", "ifndef"):
                cond = _condition(word, rest, defines)
                stack.append((active, cond))
                active = active and cond is not False
            elif word == "elif" and stack:
                outer, taken = stack[-1]
                cond = False if taken is True else None if taken is None else _condition("if", rest, defines)
                stack[-1] = (outer, True if cond is True else taken if cond is False else None)
                active = outer and cond is not False
            elif word == "else" and stack:
                outer, taken = stack[-1]
                active = outer and taken is not True
            elif word == "endif" and stack:
                active = stack.pop()[0]
            elif word == "define" and active:
                name, _, value = rest.partition(" ")
                if re.fullmatch(r"[A-Za-z_]\w*", name):
                    known = {k: v for k, v in defines.items() if v is not None}
                    try:
                        defines[name] = evaluate(value.strip() or "1", known)
                    except (ExpressionError, ZeroDivisionError, TypeError):
                        defines[name] = None
        out.append(active)
    return out


def _condition(word: str, rest: str, defines: dict[str, int | float | None]) -> bool | None:
    if word in ("ifdef", "ifndef"):
        return (rest.split()[0] in defines) == (word == "ifdef") if rest.split() else None
    expr = _DEFINED.sub(lambda m: "1" if (m.group(1) or m.group(2)) in defines else "0", rest)
    expr = expr.replace("&&", " and ").replace("||", " or ")
    if re.search(r"!(?!=)", expr):
        return None
    try:
        return bool(evaluate(expr, {k: v for k, v in defines.items() if v is not None}))
    except (ExpressionError, ZeroDivisionError, TypeError, SyntaxError):
        return None


# ---- generic edits -------------------------------------------------------------------------
@dataclass(frozen=True)
class Edit:
    """One semantics-preserving change; edits with the same slot are alternatives, never combined."""

    slot: str
    label: str
    apply: Callable[[Candidate], Candidate]


def _set_local(local: list[str]) -> Callable[[Candidate], Candidate]:
    return lambda c: c.model_copy(update={"local_size": local})


def _add_option(option: str) -> Callable[[Candidate], Candidate]:
    return lambda c: c.model_copy(update={"build_options": [*c.build_options, option]})


def _unroll(ordinal: int, factor: int | None) -> Callable[[Candidate], Candidate]:
    def apply(c: Candidate) -> Candidate:
        loop = simple_loops(c.source)[ordinal]  # loop ordinals survive pragma insertion
        pragma = f"{loop.indent}#pragma unroll{'' if factor is None else f' {factor}'}\n"
        return c.model_copy(update={"source": c.source[: loop.start] + pragma + c.source[loop.start:]})

    return apply


def local_size_choices(task: Task, candidate: Candidate, max_wg: int, rng: random.Random) -> list[list[str]]:
    """Work-group shapes that divide the global size at both size sets (excluding the current one)."""
    globals_ = []
    for which in ("small", "full"):
        try:
            sizes = task.sizes(which)  # type: ignore[arg-type]
            globals_.append([evaluate_int(e, sizes) for e in candidate.global_size])
        except (ExpressionError, ZeroDivisionError, ValueError):
            return []
    dims = len(candidate.global_size)
    if dims == 1:
        shapes = [(x,) for x in LOCAL_1D]
    else:
        shapes = [(x, y, *([1] * (dims - 2))) for x in LOCAL_X for y in LOCAL_Y if 32 <= x * y]
    current = [str(e).replace(" ", "") for e in candidate.local_size or []]
    valid = [s for s in shapes if math.prod(s) <= max_wg and [str(v) for v in s] != current
             and all(g % l == 0 for glob in globals_ for g, l in zip(glob, s))]
    rng.shuffle(valid)
    return [[str(v) for v in s] for s in sorted(valid[:MAX_LOCAL_CHOICES], key=lambda s: (math.prod(s), s))]


def generic_edits(task: Task, candidate: Candidate, max_wg: int, rng: random.Random) -> list[Edit]:
    """Every single generic edit applicable to ``candidate``."""
    edits: list[Edit] = []
    if local_size_independent(candidate.source, task.language):
        for local in local_size_choices(task, candidate, max_wg, rng):
            edits.append(Edit("local", f"work-group ({', '.join(local)})", _set_local(local)))
    options = SAFE_OPTIONS.get(task.language, []) + (
        FAST_OPTIONS.get(task.language, []) if task.spec.tolerance.allow_fast_math else [])
    for option in options:
        if option not in candidate.build_options:
            edits.append(Edit(f"option {option}", f"build option {option}", _add_option(option)))
    for ordinal, loop in enumerate(simple_loops(candidate.source)):
        if loop.has_pragma:
            continue
        factors: list[int | None] = [*UNROLL_FACTORS, *([None] if loop.constant_bound else [])]
        for factor in factors:
            label = f"#pragma unroll{'' if factor is None else f' {factor}'} on '{loop.header}'"
            edits.append(Edit(f"loop {ordinal}", label, _unroll(ordinal, factor)))
    return edits


def generic_variants(task: Task, base: Candidate, max_wg: int, rng: random.Random) -> Iterator[tuple[Candidate, str]]:
    """(variant, label): single edits in random order, then pairs of edits in different slots."""
    edits = generic_edits(task, base, max_wg, rng)
    singles = [(e,) for e in edits]
    pairs = [(a, b) for a, b in itertools.combinations(edits, 2) if a.slot != b.slot]
    rng.shuffle(singles)
    rng.shuffle(pairs)
    for combo in itertools.chain(singles, pairs):
        candidate = base
        for edit in combo:
            candidate = edit.apply(candidate)
        yield candidate, "; ".join(e.label for e in combo)


# ---- template moves ---------------------------------------------------------------------------
def _key(point: Point) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(point.items()))


def neighbours(task: Task, base: Point, rng: random.Random) -> list[tuple[Point, str]]:
    """Valid points one or two adjacent steps from ``base``: single moves (shuffled) before pairs (shuffled)."""
    assert task.spec.template is not None
    steps = []
    for name in sorted(task.spec.template.params):
        values = task.spec.template.params[name]
        index = values.index(base[name])
        steps += [(name, values[j]) for j in (index - 1, index + 1) if 0 <= j < len(values)]
    singles = [(s,) for s in steps]
    pairs = [(a, b) for a, b in itertools.combinations(steps, 2) if a[0] != b[0]]
    rng.shuffle(singles)
    rng.shuffle(pairs)
    out = []
    for moves in itertools.chain(singles, pairs):
        point = {**base, **dict(moves)}
        if task.is_valid_point(point):
            out.append((point, "template neighbour: " + ", ".join(f"{k} {base[k]}->{v}" for k, v in moves)))
    return out


def template_points(task: Task, parent: Candidate, context: GenerationContext, rng: random.Random,
                    report: ProposalReport) -> Iterator[tuple[Point, str]]:
    """Unmeasured template points: the default (for a non-template parent), neighbours and random restarts."""
    tmpl = task.spec.template
    if tmpl is None or task.template_source is None:
        return
    measured = {_key(p) for p in context.measured_points}
    skipped: set[tuple[tuple[str, Any], ...]] = set()
    yielded: set[tuple[tuple[str, Any], ...]] = set()

    def fresh(point: Point) -> bool:
        key = _key(point)
        if key in measured:
            skipped.add(key)
            report.skipped_measured = len(skipped)
            return False
        return key not in yielded

    base = dict(parent.params) if parent.params and task.is_valid_point(parent.params) else None
    firsts: list[tuple[Point, str]] = []
    if base is None and tmpl.default is not None and task.is_valid_point(dict(tmpl.default)):
        base = dict(tmpl.default)
        firsts.append((base, "template default point"))
    near = neighbours(task, base, rng) if base is not None else []
    space = task.param_space()
    rng.shuffle(space)
    far = ((p, "random template point " + ", ".join(f"{k}={v}" for k, v in sorted(p.items()))) for p in space)
    for point, intent in itertools.chain(firsts, interleave([(iter(near), 2), (far, 1)])):
        if fresh(point):
            yielded.add(_key(point))
            yield point, intent


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
class OfflineGenerator:
    """Template exploration plus generic rewrites; validated, deduplicated, deterministic per seed."""

    name = "offline"

    def __init__(self, worker: "MeasurementWorker | None" = None, max_tries: int | None = None) -> None:
        """``max_tries`` bounds the non-duplicate proposals validated per call (default 8 n + 64)."""
        self.worker = worker
        self.max_tries = max_tries
        self.last_report = ProposalReport(generator=self.name)

    def propose(self, task: Task, parent: Candidate, context: GenerationContext, n: int) -> list[Candidate]:
        report = self.last_report = ProposalReport(generator=self.name, requested=n, rounds=1)
        validator = Validator(task, parent, report, Deduplicator(context.excluded()), self.worker, context.hardware)
        rng = random.Random(f"{context.seed}:{parent.hash}")
        max_tries = self.max_tries or 8 * n + 64
        accepted: list[Candidate] = []
        if n <= 0:
            return accepted
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
        return accepted

    def _stream(self, task: Task, parent: Candidate, context: GenerationContext, rng: random.Random,
                report: ProposalReport) -> Iterator[Candidate]:
        """Per turn: two template points, one generic variant of the parent, one fresh point with a generic edit."""
        max_wg = (context.hardware.max_work_group_size if context.hardware else 0) or DEFAULT_MAX_WG
        if task.language == "cuda":
            max_wg = min(max_wg, 1024)

        def finish(c: Candidate, intent: str) -> Candidate:
            return c.model_copy(update={"parent": parent.hash, "intent": intent, "generator": self.name})

        points = template_points(task, parent, context, rng, report)
        plain = (task.instantiate(p, intent=i, parent=parent.hash, generator=self.name) for p, i in points)
        on_points = (self._variant_of(task, c, max_wg, rng, finish) for c in plain)  # shares the point stream
        measured = {_key(p) for p in context.measured_points}
        # a measured template point must not come back with its params, so it gets no variants of its own
        if parent.params is None or _key(parent.params) not in measured:
            of_parent: Iterator[Candidate] = (
                finish(c, f"{parent.intent or 'parent'} + {label}" if parent.params else f"generic: {label}")
                for c, label in generic_variants(task, parent, max_wg, rng))
        else:
            of_parent = iter(())
        yield from interleave([(plain, 2), (of_parent, 1), (on_points, 1)])

    @staticmethod
    def _variant_of(task: Task, candidate: Candidate, max_wg: int, rng: random.Random,
                    finish: Callable[[Candidate, str], Candidate]) -> Candidate:
        """A fresh template point with one random generic edit on top (the point itself if none applies)."""
        edits = generic_edits(task, candidate, max_wg, rng)
        if not edits:
            return candidate
        edit = rng.choice(edits)
        return finish(edit.apply(candidate), f"{candidate.intent} + {edit.label}")

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
