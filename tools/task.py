"""Task files: what to optimize, written by users for their own kernels.

A task is a TOML file beside a kernel source. It fixes the reference kernel
(the correctness oracle), its ordered arguments, named problem sizes (with a
small set for tests), launch geometry as expressions of those sizes,
tolerances, and optionally a tunable template whose parameters are substituted
into a second source as ``#define`` lines (as Kernel Tuner does).
"""

from __future__ import annotations

import itertools
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError, field_validator,
                      model_validator)

from kernelcast.tools.expr import ExpressionError, evaluate, evaluate_int, names_in

if TYPE_CHECKING:
    from kernelcast.tools.candidate import Candidate

DTYPES = ("float32", "float64", "int32", "uint32", "int64", "uint8", "int8", "float16")
INITS = ("uniform", "normal", "ones", "zeros", "randint", "arange", "positive")


class TaskError(ValueError):
    """A task file is missing, malformed or inconsistent; the message names file and field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BufferArg(_Strict):
    """A device buffer argument."""

    name: str
    kind: Literal["buffer"] = "buffer"
    dtype: Literal[DTYPES]  # type: ignore[valid-type]
    shape: list[str | int] = Field(min_length=1)
    intent: Literal["in", "out", "inout"]
    init: Literal[INITS] = "uniform"  # type: ignore[valid-type]
    low: float = -1.0
    high: float = 1.0


class ScalarArg(_Strict):
    """A by-value scalar argument; ``value`` may be an expression of the sizes."""

    name: str
    kind: Literal["scalar"] = "scalar"
    dtype: Literal[DTYPES]  # type: ignore[valid-type]
    value: str | int | float


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
    """A tunable version of the kernel: parameters become ``#define`` lines."""

    source: str
    params: dict[str, list[int | float | str]]
    launch: Launch
    constraints: list[str] = Field(default_factory=list)
    default: dict[str, int | float | str] | None = None

    @field_validator("params")
    @classmethod
    def _non_empty(cls, v: dict[str, list[Any]]) -> dict[str, list[Any]]:
        if not v:
            raise ValueError("a template needs at least one parameter")
        for key, values in v.items():
            if not values:
                raise ValueError(f"parameter {key!r} has no allowed values")
        return v


def _arg_kind(value: Any) -> str:
    """Arguments are buffers unless they say ``kind = "scalar"``."""
    return value.get("kind", "buffer") if isinstance(value, dict) else getattr(value, "kind", "buffer")


Arg = Annotated[Annotated[BufferArg, Tag("buffer")] | Annotated[ScalarArg, Tag("scalar")], Discriminator(_arg_kind)]


class TaskSpec(_Strict):
    """The validated content of a task TOML file (paths still relative)."""

    name: str = Field(pattern=r"^[A-Za-z0-9_\-]+$")
    description: str = ""
    language: Literal["opencl", "cuda"]
    source: str
    entry: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    args: list[Arg] = Field(min_length=1)
    sizes: dict[str, int]
    small_sizes: dict[str, int] | None = None
    launch: Launch
    tolerance: Tolerance = Tolerance()
    template: Template | None = None
    flops: str | None = None
    bytes: str | None = None
    tags: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self) -> "TaskSpec":
        names = [a.name for a in self.args]
        if len(set(names)) != len(names):
            raise ValueError("argument names must be unique")
        if not any(isinstance(a, BufferArg) and a.intent in ("out", "inout") for a in self.args):
            raise ValueError("at least one buffer must have intent 'out' or 'inout'")
        sizes = dict(self.sizes)
        for label, table in (("sizes", self.sizes), ("small_sizes", self.small_sizes or {})):
            for key, value in table.items():
                if value <= 0:
                    raise ValueError(f"{label}.{key} must be positive")
        if self.small_sizes is not None and set(self.small_sizes) != set(self.sizes):
            raise ValueError("small_sizes must name the same sizes as sizes")
        known = set(sizes)
        for arg in self.args:
            exprs = arg.shape if isinstance(arg, BufferArg) else [arg.value]
            for e in exprs:
                _check_names(e, known, f"args.{arg.name}")
        for e in [*self.launch.global_size, *(self.launch.local_size or [])]:
            _check_names(e, known, "launch")
        if self.template is not None:
            tknown = known | set(self.template.params)
            for e in [*self.template.launch.global_size, *(self.template.launch.local_size or [])]:
                _check_names(e, tknown, "template.launch")
            for c in self.template.constraints:
                _check_names(c, tknown, "template.constraints")
            if self.template.default is not None:
                for key, value in self.template.default.items():
                    if key not in self.template.params or value not in self.template.params[key]:
                        raise ValueError(f"template.default.{key}={value!r} is not an allowed value")
        return self


def _check_names(expr: str | int | float, known: set[str], where: str) -> None:
    try:
        unknown = names_in(expr) - known
    except ExpressionError as exc:
        raise ValueError(f"{where}: {exc}") from None
    if unknown:
        raise ValueError(f"{where}: expression {expr!r} uses undefined name(s) {sorted(unknown)}")


class Task:
    """A loaded task: the spec plus its sources, ready to measure."""

    def __init__(self, spec: TaskSpec, path: Path, source: str, template_source: str | None) -> None:
        self.spec = spec
        self.path = path
        self.source = source
        self.template_source = template_source
        self._space: list[dict[str, Any]] | None = None

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
        return "cuda" if self.language == "cuda" else "opencl"

    def sizes(self, which: Literal["full", "small"] = "full") -> dict[str, int]:
        """Named problem sizes; ``small`` falls back to full when no small set is given."""
        if which == "small" and self.spec.small_sizes:
            return dict(self.spec.small_sizes)
        return dict(self.spec.sizes)

    def reference(self) -> "Candidate":
        from kernelcast.tools.candidate import Candidate

        launch = self.spec.launch
        return Candidate(
            task=self.name,
            source=self.source,
            global_size=[str(e) for e in launch.global_size],
            local_size=[str(e) for e in launch.local_size] if launch.local_size else None,
            intent="reference kernel",
            generator="reference",
        )

    # ---- tunable template -------------------------------------------------
    def param_space(self) -> list[dict[str, Any]]:
        """Every template point that satisfies the constraints at both size sets (computed once)."""
        if self.spec.template is None:
            return []
        if self._space is not None:
            return [dict(p) for p in self._space]
        keys = list(self.spec.template.params)
        points = [dict(zip(keys, combo)) for combo in itertools.product(*(self.spec.template.params[k] for k in keys))]
        self._space = [p for p in points if self.is_valid_point(p)]
        return [dict(p) for p in self._space]

    def is_valid_point(self, params: dict[str, Any]) -> bool:
        tmpl = self.spec.template
        if tmpl is None or set(params) != set(tmpl.params):
            return False
        if any(params[k] not in tmpl.params[k] for k in params):
            return False
        for which in ("full", "small"):
            names = {**self.sizes(which), **{k: v for k, v in params.items() if isinstance(v, (int, float))}}
            try:
                if not all(evaluate(c, names) for c in tmpl.constraints):
                    return False
                glob, loc = tmpl.launch.dims(names)
            except (ExpressionError, ZeroDivisionError):
                return False
            if loc and any(g % l for g, l in zip(glob, loc)):
                return False
            if any(g <= 0 for g in glob):
                return False
        return True

    def instantiate(self, params: dict[str, Any], intent: str | None = None, parent: str | None = None,
                    generator: str = "template") -> "Candidate":
        """The candidate for one template point: defines prepended, template geometry."""
        from kernelcast.tools.candidate import Candidate

        tmpl = self.spec.template
        if tmpl is None or self.template_source is None:
            raise TaskError(f"task {self.name!r} has no tunable template")
        if not self.is_valid_point(params):
            raise TaskError(f"task {self.name!r}: {params} is not a valid template point")
        defines = "".join(f"#define {k} {v}\n" for k, v in sorted(params.items()))
        return Candidate(
            task=self.name,
            source=defines + self.template_source,
            global_size=[_substitute(e, params) for e in tmpl.launch.global_size],
            local_size=[_substitute(e, params) for e in tmpl.launch.local_size] if tmpl.launch.local_size else None,
            params=dict(params),
            intent=intent or "template point " + ", ".join(f"{k}={v}" for k, v in sorted(params.items())),
            parent=parent,
            generator=generator,
        )


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


def load_task(path: str | Path) -> Task:
    """Load and validate a task TOML file; errors name the file and the field."""
    path = Path(path)
    if path.is_dir():
        path = path / "task.toml"
    if not path.exists():
        raise TaskError(f"{path}: task file not found")
    try:
        raw = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise TaskError(f"{path}: not valid TOML: {exc}") from None
    try:
        spec = TaskSpec.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"field '{'.'.join(str(p) for p in err['loc']) or '(top level)'}': {err['msg']}"
            + (f" (got {err['input']!r})" if isinstance(err.get("input"), (str, int, float)) else "")
            for err in exc.errors()
        )
        raise TaskError(f"{path}: {problems}") from None
    source = _read_source(path, spec.source, "source")
    template_source = _read_source(path, spec.template.source, "template.source") if spec.template else None
    if spec.entry not in source:
        raise TaskError(f"{path}: field 'entry': kernel {spec.entry!r} not found in {spec.source}")
    return Task(spec, path, source, template_source)


def _read_source(task_path: Path, rel: str, field: str) -> str:
    src = task_path.parent / rel
    if not src.exists():
        raise TaskError(f"{task_path}: field '{field}': source file {rel!r} not found next to the task file")
    return src.read_text()


BUILTIN_DIR = Path(__file__).parent / "builtin_tasks"


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
