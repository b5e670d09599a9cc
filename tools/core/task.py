"""Task files: what to optimize, written by users for their own kernels.

A task is a TOML file beside a kernel source. It fixes the reference kernel
(the correctness oracle), its ordered arguments, named problem sizes (with a
small set for tests), launch geometry as expressions of those sizes,
tolerances, and optionally a tunable template whose parameters are prepended
as ``#define`` lines to a second source or to the kernel itself, as it is (as
Kernel Tuner does). ``docs/task-format.md`` lists every field
(``python -m kernelcast.task_docs`` writes it from these models).
"""

from __future__ import annotations

import itertools
import math
import os
import re
import stat
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    StrictInt,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)

from kernelcast.tools.core import language as lang
from kernelcast.tools.core.edit import TEMPLATE_POINT, Edit
from kernelcast.tools.core.errors import InputError
from kernelcast.tools.core.expr import ExpressionError, evaluate, evaluate_int, names_in
from kernelcast.tools.core.language import LanguageName
from kernelcast.tools.core.preprocess import MAX_SOURCE_BYTES, blank_comments_and_literals, confinement_problem
from kernelcast.tools.core.signature import KernelParam, KernelSignatureError, kernel_params
from kernelcast.tools.core.task_errors import did_you_mean, plain_errors
from kernelcast.tools.core.workgroup import local_size_advice, workgroup_uses

if TYPE_CHECKING:
    from kernelcast.tools.core.candidate import Candidate

DTYPES = ("float32", "float64", "int32", "uint32", "int64", "uint8", "int8", "float16")
INITS = ("uniform", "normal", "ones", "zeros", "randint", "arange", "positive")
C_TYPES = {"float32": "float", "float64": "double", "int32": "int", "uint32": "uint", "int64": "long",
           "uint8": "uchar", "int8": "char", "float16": "half"}  # the kernel-side element type of each dtype
MAX_TASK_FILE_BYTES = 256 * 1024
MAX_SPACE_COMBINATIONS = 50_000  # template combinations examined; larger spaces are enumerated up to this cap
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class TaskError(InputError, ValueError):
    """A task file is missing, malformed or inconsistent; the message names file and field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BufferArg(_Strict):
    """A device buffer argument."""

    # code says `direction`; the task file, dumps and the task fingerprint keep the key `intent`
    model_config = ConfigDict(extra="forbid", frozen=True, validate_by_name=True, validate_by_alias=True,
                              serialize_by_alias=True)

    name: str
    kind: Literal["buffer"] = "buffer"
    dtype: Literal[DTYPES]  # type: ignore[valid-type]
    shape: list[str | int] = Field(min_length=1)
    # the task file's key is ``intent``; in code it is the buffer's direction (a candidate's intent is its text)
    direction: Literal["in", "out", "inout"] = Field(alias="intent")
    init: Literal[INITS] = "uniform"  # type: ignore[valid-type]
    low: float = -1.0
    high: float = 1.0


class ScalarArg(_Strict):
    """A by-value scalar argument; ``value`` may be an expression of the sizes."""

    name: str
    kind: Literal["scalar"] = "scalar"
    dtype: Literal[DTYPES]  # type: ignore[valid-type]
    value: str | int | float


class LocalArg(_Strict):
    """A ``__local`` pointer argument (OpenCL): work-group memory the host only sizes, ``shape`` elements of
    ``dtype`` per work-group (expressions of the sizes). Nothing is uploaded or read back: it holds no data
    across launches."""

    name: str
    kind: Literal["local"] = "local"
    dtype: Literal[DTYPES]  # type: ignore[valid-type]
    shape: list[str | int] = Field(min_length=1)


class Launch(_Strict):
    """Global and (optional) local work size, as expressions of sizes and parameters."""

    global_size: list[str | int] = Field(alias="global", min_length=1, max_length=3)
    local_size: list[str | int] | None = Field(default=None, alias="local", max_length=3)

    @model_validator(mode="after")
    def _same_rank(self) -> "Launch":
        if self.local_size is not None and len(self.local_size) not in (0, len(self.global_size)):
            raise ValueError("'local' must have as many dimensions as 'global'")
        return self

    def dims(self, names: dict[str, int | float]) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
        """Resolve to concrete integer tuples."""
        glob = tuple(evaluate_int(e, names) for e in self.global_size)
        loc = tuple(evaluate_int(e, names) for e in self.local_size) if self.local_size else None
        return glob, loc


class Tolerance(_Strict):
    rtol: float = 1e-5
    atol: float = 1e-6
    allow_fast_math: bool = False


class Template(_Strict):
    """A tunable version of the kernel: parameters become ``#define`` lines prepended to ``source``.

    ``source`` omitted: the task's own source, tuned as it is (Kernel Tuner's ``tune_params``): each parameter
    it defines itself must be guarded (``#ifndef BS`` / ``#define BS 4`` / ``#endif``) so the tuned value wins.
    ``launch`` omitted: the task's own launch geometry."""

    source: str | None = None
    params: dict[str, list[int | float | str]]
    launch: Launch | None = None
    constraints: list[str] = Field(default_factory=list)
    default: dict[str, int | float | str] | None = None

    @field_validator("params", mode="before")
    @classmethod
    def _literals(cls, v: Any) -> Any:
        """Parameters become ``#define NAME VALUE`` lines: names are identifiers, and each parameter's values
        are literals of one kind (integers, finite floats or identifiers), so nothing can inject a line.
        Checked before pydantic's coercion, which would read ``true`` as 1."""
        if not isinstance(v, dict) or not all(isinstance(values, list) for values in v.values()):
            return v  # the declared type reports it
        if not v:
            raise ValueError("a template needs at least one parameter")
        for key, values in v.items():
            if not _IDENTIFIER.match(key):
                raise ValueError(f"parameter name {key[:40]!r} is not an identifier")
            if not values:
                raise ValueError(f"parameter {key!r} has no allowed values")
            kinds = {_literal_kind(key, value) for value in values}
            if len(kinds) != 1:
                raise ValueError(f"parameter {key!r} mixes kinds of values ({', '.join(sorted(kinds))})")
            if len(set(map(repr, values))) != len(values):
                raise ValueError(f"parameter {key!r} lists a value twice")
        return v


def _literal_kind(key: str, value: Any) -> str:
    """'int', 'float' or 'identifier'; anything else (a bool, inf, a string with spaces or '#') is refused."""
    if isinstance(value, bool):
        raise ValueError(f"parameter {key!r}: {value!r} is a boolean; use 0 or 1")
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"parameter {key!r}: {value!r} is not a finite number")
        return "float"
    if isinstance(value, str) and _IDENTIFIER.match(value):
        return "identifier"
    raise ValueError(f"parameter {key!r}: value {str(value)[:40]!r} is not an integer, a float or an identifier")


def _arg_kind(value: Any) -> str:
    """Arguments are buffers unless they say ``kind = "scalar"`` or ``kind = "local"``."""
    return value.get("kind", "buffer") if isinstance(value, dict) else getattr(value, "kind", "buffer")


Arg = Annotated[Annotated[BufferArg, Tag("buffer")] | Annotated[ScalarArg, Tag("scalar")]
                | Annotated[LocalArg, Tag("local")], Discriminator(_arg_kind)]


class TaskSpec(_Strict):
    """The validated content of a task TOML file (paths still relative)."""

    name: str = Field(pattern=r"^[A-Za-z0-9_\-]+$")
    description: str = ""
    language: LanguageName
    source: str | None = None  # omitted: the reference is the template's source at its default point
    entry: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    args: list[Arg] = Field(min_length=1)
    sizes: dict[str, StrictInt]  # strict: TOML's true is no size (lax pydantic reads it as 1)
    small_sizes: dict[str, StrictInt] | None = None
    launch: Launch
    tolerance: Tolerance = Tolerance()
    template: Template | None = None
    flops: str | None = None
    bytes: str | None = None
    tags: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self) -> "TaskSpec":
        names = [a.name for a in self.args]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"[[args]]: argument name(s) {', '.join(map(repr, twice))} appear more than once")
        if not any(isinstance(a, BufferArg) and a.direction in ("out", "inout") for a in self.args):
            raise ValueError("[[args]]: no buffer has intent 'out' or 'inout': mark the buffer(s) the kernel "
                             "writes its result to")
        for label, table in (("sizes", self.sizes), ("small_sizes", self.small_sizes or {})):
            for key, value in table.items():
                if value <= 0:
                    raise ValueError(f"[{label}] {key} must be positive (got {value})")
        if self.small_sizes is not None and set(self.small_sizes) != set(self.sizes):
            lacking = sorted(set(self.sizes) - set(self.small_sizes))
            extra = sorted(set(self.small_sizes) - set(self.sizes))
            problems = ([f"lacks {', '.join(lacking)} (every size in [sizes] needs a small value)"] if lacking else [])
            problems += [f"names {', '.join(extra)}, which [sizes] does not define"
                         + did_you_mean(extra[0], [k for k in self.sizes if k not in self.small_sizes])] if extra else []
            raise ValueError(f"[small_sizes] {'; it '.join(problems)}")
        if self.source is None and (self.template is None or self.template.source is None
                                    or self.template.default is None):
            raise ValueError("field 'source' is missing: name the reference kernel's file, or give a [template] "
                             "with its own source and a default point (the reference is then that point)")
        known = set(self.sizes)
        for i, arg in enumerate(self.args):
            exprs = arg.shape if isinstance(arg, (BufferArg, LocalArg)) else [arg.value]
            key = "shape" if isinstance(arg, (BufferArg, LocalArg)) else "value"
            for e in exprs:
                _check_names(e, known, f"args[{i}] {arg.name!r}: {key}", "sizes")
        for key, exprs in (("global", self.launch.global_size), ("local", self.launch.local_size or [])):
            for e in exprs:
                _check_names(e, known, f"[launch] {key}", "sizes")
        if self.template is not None:
            tknown = known | set(self.template.params)
            tlaunch = self.template.launch or self.launch
            section = "[template.launch]" if self.template.launch else "[launch]"
            for key, exprs in (("global", tlaunch.global_size), ("local", tlaunch.local_size or [])):
                for e in exprs:
                    _check_names(e, tknown, f"{section} {key}", "sizes and template parameters")
            for c in self.template.constraints:
                _check_names(c, tknown, "[template] constraints", "sizes and template parameters")
            if self.template.default is not None:
                for key, chosen in self.template.default.items():
                    if key not in self.template.params:
                        raise ValueError(f"[template] default names {key!r}, which is not a template parameter "
                                         f"(parameters: {', '.join(self.template.params)})"
                                         + did_you_mean(key, self.template.params))
                    if chosen not in self.template.params[key]:
                        raise ValueError(f"[template] default {key} = {chosen!r} is not one of its values "
                                         f"{self.template.params[key]}")
        return self


def _check_names(expr: str | int | float, known: set[str], where: str, defined: str) -> None:
    """Every name ``expr`` uses is defined; the error lists what is (``defined``: what they are called)."""
    try:
        unknown = names_in(expr) - known
    except ExpressionError as exc:
        raise ValueError(f"{where}: {exc}") from None
    if unknown:
        first = sorted(unknown)[0]
        raise ValueError(f"{where} {expr!r} uses {', '.join(sorted(unknown))}, which "
                         f"{'is' if len(unknown) == 1 else 'are'} not defined (defined {defined}: "
                         f"{', '.join(sorted(known)) or 'none'})" + did_you_mean(first, known))


class Task:
    """A loaded task: the spec plus its sources, ready to measure."""

    def __init__(self, spec: TaskSpec, path: Path, source: str, template_source: str | None) -> None:
        self.spec = spec
        self.path = path
        self.source = source
        self.template_source = template_source
        self._space: list[dict[str, Any]] | None = None
        self.measured_at: Literal["full", "small"] = "full"  # "small": a view from at_sizes (see there)
        self._full: Task = self
        self._fingerprint: str | None = None

    def at_sizes(self, which: Literal["full", "small"]) -> "Task":
        """The task as a run at ``which`` sizes measures it: the same task whose full sizes are that set.

        A model that predicts "the" problem (the roofline prior, features of the launch geometry) reads the
        full sizes; a run at small sizes must get forecasts for the problem it measures, not for a larger one
        (search_bench runs at small sizes). The view is for forecasting only; ``at_sizes("full")`` of a view
        is the task itself."""
        base = self._full
        if base.size_label(which) == "full" or base.spec.small_sizes is None:  # (None: for the type checker)
            return base
        view = Task(base.spec.model_copy(update={"sizes": dict(base.spec.small_sizes)}), base.path, base.source,
                    base.template_source)
        view.measured_at, view._full = "small", base
        return view

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def language(self) -> str:
        return self.spec.language

    @property
    def backend(self) -> str:
        """The measurement backend that runs this task: its language decides (OpenCL source needs an
        OpenCL runtime, CUDA source needs CUDA), so no setting can pair a task with the wrong one."""
        return lang.language(self.language).backend

    def size_label(self, which: str) -> Literal["full", "small"]:
        """The label of the problem ``which`` sizes measure: "small" only when the task has a small set that
        differs from its full sizes. Without one, a run at small sizes measures the full problem, and its
        measurements must say so: under two labels the same problem was measured twice (a run at small sizes,
        then one at full sizes, did not see the first run's points as measured)."""
        small = self.spec.small_sizes
        return "small" if which == "small" and small and dict(small) != dict(self.spec.sizes) else "full"

    def sizes(self, which: Literal["full", "small"] = "full") -> dict[str, int]:
        """Named problem sizes; ``small`` falls back to full when no small set is given."""
        if which == "small" and self.spec.small_sizes:
            return dict(self.spec.small_sizes)
        return dict(self.spec.sizes)

    @property
    def fingerprint(self) -> str:
        """What a measurement of this task is of: its reference source, entry, arguments, sizes (both sets),
        launch and the tolerance its outputs are checked with, not its file's path or description. Two task
        files may share a name (a copy of a built-in with its own kernel or sizes, a task file edited between
        runs) and still measure different problems: measurements carry this, so no reader takes one task's
        rows for another's."""
        if self._full is not self:  # a view from at_sizes is its task
            return self._full.fingerprint
        if self._fingerprint is None:
            import hashlib
            import json

            measured = self.spec.model_dump(mode="json", include={"entry", "args", "sizes", "small_sizes", "launch",
                                                                 "tolerance"})
            text = json.dumps([self.source, measured], sort_keys=True)
            self._fingerprint = hashlib.sha256(text.encode()).hexdigest()[:16]
        return self._fingerprint

    def owns(self, fingerprint: str | None) -> bool:
        """Whether a measurement with this task fingerprint was measured on this task (None: measured before
        measurements carried one; read as this task's, as before). The store's reads by name apply the same
        rule in SQL (``tools.store._on_task``)."""
        return fingerprint is None or fingerprint == self.fingerprint

    def reference(self) -> "Candidate":
        from kernelcast.tools.core.candidate import Candidate

        launch = self.spec.launch
        return Candidate(
            task=self.name,
            source=self.source,
            global_size=[str(e) for e in launch.global_size],
            local_size=[str(e) for e in launch.local_size] if launch.local_size else None,
            origin="reference", note="reference kernel",
            generator="reference",
        )

    # ---- tunable template -------------------------------------------------
    @property
    def template_launch(self) -> Launch:
        """The template's launch geometry: its own ``[template.launch]``, else the task's ``[launch]``."""
        tmpl = self.spec.template
        return tmpl.launch if tmpl is not None and tmpl.launch is not None else self.spec.launch

    def iter_space(self, limit: int = MAX_SPACE_COMBINATIONS) -> Iterator[dict[str, Any]]:
        """Valid template points, lazily, in declaration order, among the first ``limit`` combinations."""
        if self.spec.template is None:
            return
        keys = list(self.spec.template.params)
        combos = itertools.product(*(self.spec.template.params[k] for k in keys))
        for combo in itertools.islice(combos, limit):
            point = dict(zip(keys, combo, strict=True))
            if self.is_valid_point(point):
                yield point

    def param_space(self) -> list[dict[str, Any]]:
        """Every template point that satisfies the constraints at both size sets (computed once).

        Capped: spaces of more than :data:`MAX_SPACE_COMBINATIONS` combinations are enumerated up to the cap
        (see :meth:`space_count`), so a huge space costs seconds, not hours.
        """
        if self.spec.template is None:
            return []
        if self._space is None:
            self._space = list(self.iter_space())
        return [dict(p) for p in self._space]

    def space_count(self) -> "SpaceCount":
        """How many points the template has: bounded work, exact when the space is within the cap."""
        if self.spec.template is None:
            return SpaceCount(combinations=0, examined=0, valid=0)
        combinations = math.prod(len(v) for v in self.spec.template.params.values())
        return SpaceCount(combinations=combinations, examined=min(combinations, MAX_SPACE_COMBINATIONS),
                          valid=len(self.param_space()))

    def is_valid_point(self, params: dict[str, Any]) -> bool:
        tmpl = self.spec.template
        if tmpl is None or set(params) != set(tmpl.params):
            return False
        for key, value in params.items():  # the declared value, of the declared kind (True is not 1)
            if not any(type(value) is type(allowed) and value == allowed for allowed in tmpl.params[key]):
                return False
        for which in ("full", "small"):
            names = {**self.sizes(which), **{k: v for k, v in params.items() if isinstance(v, (int, float))}}
            try:
                if not all(evaluate(c, names) for c in tmpl.constraints):
                    return False
                glob, loc = self.template_launch.dims(names)
            except (ExpressionError, ZeroDivisionError):
                return False
            if loc and any(size <= 0 or g % size for g, size in zip(glob, loc, strict=True)):
                return False
            if any(g <= 0 for g in glob):
                return False
        return True

    def instantiate(self, params: dict[str, Any], intent: str | None = None, parent: str | None = None,
                    generator: str = "template") -> "Candidate":
        """The candidate for one template point: defines prepended, template geometry."""
        from kernelcast.tools.core.candidate import Candidate

        tmpl = self.spec.template
        if tmpl is None or self.template_source is None:
            raise TaskError(f"task {self.name!r} has no tunable template")
        if not self.is_valid_point(params):
            raise TaskError(f"task {self.name!r}: {params} is not a valid template point")
        defines = point_defines(params)
        launch = self.template_launch
        return Candidate(
            task=self.name,
            source=defines + self.template_source,
            global_size=[_substitute(e, params) for e in launch.global_size],
            local_size=[_substitute(e, params) for e in launch.local_size] if launch.local_size else None,
            params=dict(params),
            origin="template", edits=[template_point(params, intent)],
            parent=parent,
            generator=generator,
        )


def point_defines(params: dict[str, Any]) -> str:
    """A template point as the ``#define`` lines prepended to the template's source, in name order."""
    return "".join(f"#define {k} {v}\n" for k, v in sorted(params.items()))


def template_point(params: dict[str, Any], label: str | None = None) -> Edit:
    """The edit that chose a template point: its parameters, and how it was chosen (``label``)."""
    return Edit(name=TEMPLATE_POINT, values=dict(params),
                label=label or "template point " + ", ".join(f"{k}={v}" for k, v in sorted(params.items())))


def _substitute(expr: str | int, params: dict[str, Any]) -> str:
    """Bind template parameters in a geometry expression so the candidate only depends on sizes."""
    if isinstance(expr, int):
        return str(expr)
    import ast

    tree = ast.parse(str(expr), mode="eval")

    class _Bind(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.AST:
            if node.id in params and isinstance(params[node.id], (int, float)):
                return ast.copy_location(ast.Constant(params[node.id]), node)
            return node

    return ast.unparse(_Bind().visit(tree))


@dataclass(frozen=True)
class SpaceCount:
    """The size of a template space, counted with bounded work."""

    combinations: int  # the product of the parameters' value counts
    examined: int  # combinations actually checked (at most MAX_SPACE_COMBINATIONS)
    valid: int  # valid points among those examined

    @property
    def exact(self) -> bool:
        return self.examined == self.combinations

    def text(self) -> str:
        if self.exact:
            return f"{self.valid} valid points"
        return (f"{self.valid} valid points among the first {self.examined} of {self.combinations} combinations "
                f"(spaces are enumerated up to {MAX_SPACE_COMBINATIONS} combinations)")


def load_task(path: str | Path) -> Task:
    """Load and validate a task TOML file; errors name the file and the field.

    Everything that can fail later is checked here: every expression at both size sets, the sources'
    confinement (inside the task's folder, under the size cap, no ``#include``) and the arguments against
    the kernel's signature, so a task-file mistake never surfaces at measure time.
    """
    path = Path(path)
    if path.is_dir():
        path = path / "task.toml"
    raw = _read_toml(path)
    try:
        spec = TaskSpec.model_validate(raw)
    except ValidationError as exc:
        raise TaskError(f"{path}: {'; '.join(plain_errors(exc, raw, TaskSpec))}") from None
    template_source = None
    if spec.template is not None and spec.template.source is not None:
        template_source = _read_source(path, spec.template.source, "template.source")
    if spec.source is not None:
        source = _read_source(path, spec.source, "source")
    else:  # the validator saw a template source and a default point: the reference is that point
        assert spec.template is not None and spec.template.default is not None and template_source is not None
        source = point_defines(spec.template.default) + template_source
    if spec.template is not None and template_source is None:  # the task's own kernel, tuned as it is
        template_source = source
    task = Task(spec, path, source, template_source)
    _check_expressions(task)
    reference = _check_arguments(task)
    _check_workgroup(task)
    if spec.template is not None:
        _check_template(task, reference)
    return task


def _check_workgroup(task: Task) -> None:
    """A kernel written for one work-group shape (``__local`` tiles, ``get_local_id``, barriers) needs
    ``[launch] local``: left to the runtime it runs past its tiles, and the reference check could only
    report a crash. Checked for the reference, and for the template's source under its own launch."""
    spec, where = task.spec, task.path
    checks: list[tuple[str, Launch, str, tuple[str, ...]]] = [("launch", spec.launch, task.source, ())]
    if spec.template is not None and task.template_source is not None:
        point = _first_point(task)
        defines = tuple(f"-D{k}={v}" for k, v in sorted(point.items()))
        checks.append(("template.launch" if spec.template.launch else "launch", task.template_launch,
                       task.template_source, defines))
    for field, launch, source, options in checks:
        if launch.local_size:
            continue
        uses = workgroup_uses(source, task.language, options)
        if uses:
            table = "template" if field.startswith("template") else "reference"
            raise TaskError(f"{where}: [{field}]: the {table} {local_size_advice(uses, spec.entry)}")


def _read_toml(path: Path) -> dict[str, Any]:
    """The parsed TOML; a missing, unreadable, oversized or malformed file is a TaskError that quotes none
    of its content."""
    try:
        size = path.stat().st_size
        if not path.is_file():
            raise OSError
    except OSError:
        raise TaskError(f"{path}: task file not found") from None
    if size > MAX_TASK_FILE_BYTES:
        raise TaskError(f"{path}: task file is {size} bytes; the limit is {MAX_TASK_FILE_BYTES}")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        raise TaskError(f"{path}: task file cannot be read as UTF-8 text") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TaskError(f"{path}: not valid TOML: {exc}") from None


def _read_source(task_path: Path, rel: str, field: str) -> str:
    """A kernel source named by the task: inside the task's folder (symlinks resolved), under the size cap,
    UTF-8, with no ``#include``."""
    folder = task_path.resolve().parent
    try:
        src = (folder / rel).resolve(strict=True)
    except (OSError, RuntimeError):
        raise TaskError(f"{task_path}: field '{field}': source file {rel!r} not found next to the task file") from None
    if not src.is_relative_to(folder):
        raise TaskError(f"{task_path}: field '{field}': source file {rel!r} is outside the task's folder "
                        "(symlinks resolved); keep sources beside the task file")
    if not src.is_file():
        raise TaskError(f"{task_path}: field '{field}': source file {rel!r} not found next to the task file")
    try:
        text = read_kernel_file(src, f"{task_path}: field '{field}': source file {rel!r}")
    except SourceFileError as exc:
        raise TaskError(str(exc)) from None
    problem = confinement_problem(text)
    if problem:
        raise TaskError(f"{task_path}: field '{field}': {problem}")
    return text


class SourceFileError(InputError, ValueError):
    """A kernel source or candidate file that cannot be read as one: the message names the file and why."""


def read_kernel_file(path: str | Path, label: str | None = None) -> str:
    """The text of a kernel source or candidate file that a user names: a regular file (a directory, FIFO or
    device is refused without reading it: opened non-blocking, so a FIFO with no writer cannot hang the
    caller), at most :data:`MAX_SOURCE_BYTES` read (``/dev/zero`` cannot fill the memory), UTF-8.
    :class:`SourceFileError` (a ``ValueError``) otherwise, starting with ``label`` (default: the path)."""
    label = label or f"file {path}"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise SourceFileError(f"{label} not found") from None
    except OSError as exc:
        raise SourceFileError(f"{label} cannot be opened ({exc.strerror or exc})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file (a FIFO, socket or device)"
            raise SourceFileError(f"{label} is {kind}; name a kernel source or candidate .json file")
        with open(fd, "rb", closefd=False) as fh:
            data = fh.read(MAX_SOURCE_BYTES + 1)
    except OSError as exc:
        raise SourceFileError(f"{label} cannot be read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    if len(data) > MAX_SOURCE_BYTES:
        size = f"{info.st_size} bytes" if info.st_size > MAX_SOURCE_BYTES else f"more than {MAX_SOURCE_BYTES} bytes"
        raise SourceFileError(f"{label} is {size}; the limit is {MAX_SOURCE_BYTES} bytes "
                              f"({MAX_SOURCE_BYTES // 1024} KiB)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise SourceFileError(f"{label} cannot be read as UTF-8 text") from None
    return text.replace("\r\n", "\n").replace("\r", "\n")  # universal newlines, as Path.read_text reads


def _check_expressions(task: Task) -> None:
    """Evaluate every expression of the task at both size sets (template ones at its first point)."""
    spec, where = task.spec, task.path

    def check(field: str, expr: str | int | float, names: dict[str, int | float], whole: bool) -> int | float:
        try:
            return evaluate_int(expr, names) if whole else evaluate(expr, names)
        except ExpressionError as exc:
            raise TaskError(f"{where}: field '{field}': {exc}") from None

    for which in ("full", "small"):
        sizes: dict[str, int | float] = dict(task.sizes(which))
        label = f" at {which} sizes" if spec.small_sizes else ""
        for arg in spec.args:
            if isinstance(arg, (BufferArg, LocalArg)):
                for i, e in enumerate(arg.shape):
                    if check(f"args.{arg.name}.shape[{i}]", e, sizes, True) <= 0:
                        raise TaskError(f"{where}: field 'args.{arg.name}.shape[{i}]': {e!r} is not positive{label}")
            else:
                value = check(f"args.{arg.name}.value", arg.value, sizes, arg.dtype not in ("float32", "float64",
                                                                                           "float16"))
                _check_scalar_range(where, arg, value)
        _check_launch(where, "launch", spec.launch, sizes, label)
        for field in ("flops", "bytes"):
            expr = getattr(spec, field)
            if expr is not None:
                check(field, expr, sizes, False)
        tmpl = spec.template
        if tmpl is not None:
            point = _first_point(task)
            names = {**sizes, **{k: v for k, v in point.items() if isinstance(v, (int, float))}}
            for i, c in enumerate(tmpl.constraints):
                check(f"template.constraints[{i}]", c, names, False)
            _check_launch(where, "template.launch", task.template_launch, names, label, divisible=False)


def _first_point(task: Task) -> dict[str, Any]:
    """The template's default point, else its first combination (only to evaluate its expressions)."""
    tmpl = task.spec.template
    assert tmpl is not None
    if tmpl.default is not None:
        return dict(tmpl.default)
    return {k: v[0] for k, v in tmpl.params.items()}


def _check_launch(where: Path, field: str, launch: Launch, names: dict[str, int | float], label: str,
                  divisible: bool = True) -> None:
    try:
        glob, loc = launch.dims(names)
    except ExpressionError as exc:
        raise TaskError(f"{where}: field '{field}': {exc}") from None
    if any(g <= 0 for g in glob):
        raise TaskError(f"{where}: field '{field}.global': {glob} must be positive{label}")
    if loc and any(size <= 0 for size in loc):
        raise TaskError(f"{where}: field '{field}.local': {loc} must be positive{label}")
    if divisible and loc and any(g % size for g, size in zip(glob, loc, strict=True)):
        raise TaskError(f"{where}: field '{field}': global size {glob} is not a multiple of local size {loc}{label}")


_INT_RANGES = {"int32": (-2**31, 2**31 - 1), "uint32": (0, 2**32 - 1), "int64": (-2**63, 2**63 - 1),
               "uint8": (0, 255), "int8": (-128, 127)}


def _check_scalar_range(where: Path, arg: "ScalarArg", value: int | float) -> None:
    bounds = _INT_RANGES.get(arg.dtype)
    if bounds and not bounds[0] <= value <= bounds[1]:
        raise TaskError(f"{where}: field 'args.{arg.name}.value': {value} does not fit in {arg.dtype}")


def _check_arguments(task: Task) -> list[KernelParam]:
    """The task's args against the reference kernel's parameters, after preprocessing: count, buffer or
    scalar, element type with typedefs resolved (buffers may be vectors of it), order."""
    spec, where = task.spec, task.path
    try:
        params = kernel_params(task.source, spec.entry, task.language)
    except KernelSignatureError as exc:
        raise TaskError(f"{where}: field 'entry': {exc} in {spec.source or 'the template at its default point'}") from None
    if len(params) != len(spec.args):
        missing = [p.name or f"#{i}" for i, p in enumerate(params)][len(spec.args):]
        extra = [a.name for a in spec.args][len(params):]
        detail = (f"the kernel's parameter(s) {', '.join(missing)} have no entry in args" if missing else
                  f"args {', '.join(extra)} have no parameter in the kernel")
        raise TaskError(f"{where}: field 'args': the task declares {len(spec.args)} arguments but kernel "
                        f"{spec.entry!r} takes {len(params)}: {detail}")
    names = [p.name for p in params]
    for i, (arg, param) in enumerate(zip(spec.args, params, strict=True)):
        field = f"args.{arg.name}"
        if arg.name in names and names.index(arg.name) != i and param.name != arg.name:
            raise TaskError(f"{where}: field '{field}': listed as argument {i}, but the kernel's parameter "
                            f"{arg.name!r} is argument {names.index(arg.name)}: the order of args must be the "
                            "kernel's")
        shown = f"{param.space} {param.base}{param.width if param.width > 1 else ''}{' *' if param.pointer else ''}"
        expected = C_TYPES[arg.dtype]
        if isinstance(arg, BufferArg):
            if not param.pointer:
                raise TaskError(f"{where}: field '{field}': a buffer, but the kernel's argument {i} "
                                f"({param.name or 'unnamed'}) is a value of type {shown}")
            if param.space not in ("global", "constant", "generic"):
                hint = ' (declare it with kind = "local")' if param.space == "local" else ""
                raise TaskError(f"{where}: field '{field}': a buffer, but the kernel's argument {i} is a "
                                f"{param.space} pointer ({shown}){hint}")
        elif isinstance(arg, LocalArg):
            if not lang.language(task.language).local_memory_args:
                raise TaskError(f"{where}: field '{field}': local-memory arguments exist in OpenCL only "
                                f"({task.language} kernels size their shared memory themselves)")
            if not param.pointer or param.space != "local":
                raise TaskError(f"{where}: field '{field}': local memory, but the kernel's argument {i} "
                                f"({param.name or 'unnamed'}) is {shown.strip()}, not a __local pointer")
        if isinstance(arg, (BufferArg, LocalArg)):
            if param.base != expected:
                raise TaskError(f"{where}: field '{field}': dtype {arg.dtype} ({expected}), but the kernel's "
                                f"argument {i} ({param.name or 'unnamed'}) points to {param.base}")
        else:
            if param.pointer:
                raise TaskError(f"{where}: field '{field}': a scalar, but the kernel's argument {i} "
                                f"({param.name or 'unnamed'}) is a pointer ({shown})")
            if param.base != expected or param.width != 1:
                raise TaskError(f"{where}: field '{field}': dtype {arg.dtype} ({expected}), but the kernel's "
                                f"argument {i} ({param.name or 'unnamed'}) is {shown.strip()}")
    return params


def _check_template(task: Task, reference: list[KernelParam]) -> None:
    """The template's default point is valid, its source lets every parameter's ``#define`` through, and its
    kernel takes the reference's arguments."""
    tmpl, where = task.spec.template, task.path
    assert tmpl is not None
    shown = tmpl.source or task.spec.source
    for name, directive in _overriding_directives(task.template_source or "", set(tmpl.params)).items():
        raise TaskError(f"{where}: field 'template.params.{name}': {shown} has '{directive}' outside an "
                        f"'#ifndef {name}' block, so a tuned value of {name} never reaches the kernel; guard it: "
                        f"#ifndef {name} / #define {name} ... / #endif")
    if tmpl.default is not None:
        if not task.is_valid_point(dict(tmpl.default)):
            raise TaskError(f"{where}: field 'template.default': {tmpl.default} violates the template's "
                            "constraints or launch geometry at the task's sizes")
        point: dict[str, Any] | None = dict(tmpl.default)
    else:
        point = next(task.iter_space(), None)
    if point is None:
        return  # an empty space: nothing to instantiate (shown as 0 valid points)
    source = point_defines(point) + (task.template_source or "")
    try:
        params = kernel_params(source, task.spec.entry, task.language)
    except KernelSignatureError as exc:
        raise TaskError(f"{where}: field 'template.source': at {point}: {exc}") from None
    if [p.abi() for p in params] != [p.abi() for p in reference]:
        raise TaskError(f"{where}: field 'template.source': at {point} kernel {task.spec.entry!r} takes "
                        f"{[p.abi() for p in params]}; the reference takes {[p.abi() for p in reference]}")


_CONDITIONAL = re.compile(r"^[ \t]*#[ \t]*(if|ifdef|ifndef|elif|elifdef|elifndef|else|endif|define|undef)\b[ \t]*(.*)$",
                          re.M)
_NOT_DEFINED = re.compile(r"^(?:([A-Za-z_]\w*)|!\s*defined\s*\(?\s*([A-Za-z_]\w*)\s*\)?)\s*$")


def _overriding_directives(source: str, names: set[str]) -> dict[str, str]:
    """Parameters the source ``#define``s or ``#undef``s outside an ``#ifndef NAME`` (or ``#if !defined(NAME)``)
    block of their own, each with the first such directive: there the source's own value would replace the
    prepended one, and every template point would be the same kernel."""
    found: dict[str, str] = {}
    guards: list[str | None] = []  # per open conditional: the name it leaves undefined-only, if any
    for match in _CONDITIONAL.finditer(blank_comments_and_literals(source)):
        word, rest = match.group(1), match.group(2).strip()
        if word in ("if", "ifndef"):
            m = _NOT_DEFINED.match(rest)
            guard = m and (m.group(1) if word == "ifndef" else m.group(2))
            guards.append(guard or None)
        elif word == "ifdef":
            guards.append(None)
        elif word in ("elif", "elifdef", "elifndef", "else"):
            if guards:
                guards[-1] = None
        elif word == "endif":
            if guards:
                guards.pop()
        else:
            name = rest.split("(", 1)[0].split()[0] if rest else ""
            if name in names and name not in guards and name not in found:
                found[name] = f"#{word} {rest}".strip()[:60]
    return found


BUILTIN_DIR = Path(__file__).resolve().parents[1] / "builtin_tasks"


def builtin_task_paths() -> dict[str, Path]:
    """Built-in tasks by name (each a folder with task.toml)."""
    return {p.parent.name: p for p in sorted(BUILTIN_DIR.glob("*/task.toml"))}


def resolve_task(name_or_path: str | Path) -> Task:
    """A built-in task name or a path to a task file/folder."""
    as_path = Path(name_or_path)
    if as_path.suffix == ".toml" or as_path.is_dir() or as_path.exists():
        return load_task(as_path)
    builtins = builtin_task_paths()
    if str(name_or_path) in builtins:
        return load_task(builtins[str(name_or_path)])
    raise TaskError(
        f"unknown task {str(name_or_path)!r}: not a file and not a built-in task "
        f"(built-ins: {', '.join(builtins) or 'none'})"
    )


def resolve_task_in_roots(name_or_path: str, roots: list[Path]) -> Task:
    """A built-in task name, or a task file/folder under one of ``roots`` (symlinks resolved).

    For callers who may not read arbitrary files (MCP, the chat's model): a path outside the roots, a
    missing one and an unreadable one get the same message, and a file that is not a valid task gets a
    message that quotes none of its content (it might be someone's secrets, not a task).
    """
    builtins = builtin_task_paths()
    if name_or_path in builtins:
        return load_task(builtins[name_or_path])
    shown = name_or_path if len(name_or_path) <= 120 else name_or_path[:120] + "..."
    unknown = TaskError(f"unknown task {shown!r}: not a built-in task (see list_tasks) and not a task file under "
                        "the task roots (KERNELCAST_TASK_PATH)")
    path = _within_roots(name_or_path, roots)
    if path is None:
        raise unknown
    try:
        return load_task(path)
    except TaskError:
        if not _readable(path):
            raise unknown from None
        raise TaskError(f"{shown!r} is not a valid task file (details are shown only locally: "
                        f"kernelcast tasks show {shown})") from None


def _within_roots(name_or_path: str, roots: list[Path]) -> Path | None:
    """The resolved task file if it lies under a root, else None (never says which part failed)."""
    if not name_or_path or "\x00" in name_or_path:
        return None
    try:
        path = Path(name_or_path).expanduser()
        path = (path if path.is_absolute() else Path.cwd() / path).resolve()
        if path.is_dir():
            path = (path / "task.toml").resolve()
        resolved_roots = [r.expanduser().resolve() for r in roots]
    except (OSError, RuntimeError, ValueError):
        return None
    if not any(path.is_relative_to(root) for root in resolved_roots):
        return None
    return path if _readable(path) else None


def _readable(path: Path) -> bool:
    try:
        with path.open("rb"):
            return path.is_file()
    except OSError:
        return False
