"""The task-file reference in ``docs/task-format.md``, written from the pydantic models of ``tools/core/task.py``.

Every field's TOML key, type, constraints and default come from the models; only the one-line meaning of each
field (:data:`MEANINGS`) and the prose around the tables (:data:`HEAD`, :data:`TAIL`) are written here, and
rendering fails when a model has a field without a meaning or a meaning names a field no model has. The whole
file is generated: ``python -m kernelcast.task_docs`` rewrites it, and a test fails when it is not current.
"""

from __future__ import annotations

import sys
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from kernelcast.tools.core.expr import _FUNCS as EXPRESSION_FUNCTIONS  # the functions expressions may call
from kernelcast.tools.core.preprocess import MAX_SOURCE_BYTES
from kernelcast.tools.core.task import (
    DTYPES,
    INITS,
    MAX_SPACE_COMBINATIONS,
    MAX_TASK_FILE_BYTES,
    BufferArg,
    Launch,
    LocalArg,
    ScalarArg,
    TaskSpec,
    Template,
    Tolerance,
)

DOC = Path(__file__).resolve().parents[1] / "docs" / "task-format.md"

# (TOML table, model) in the order a task file is usually written
TABLES: list[tuple[str, type[BaseModel]]] = [
    ("top level", TaskSpec),
    ('[[args]], kind = "buffer"', BufferArg),
    ('[[args]], kind = "scalar"', ScalarArg),
    ('[[args]], kind = "local"', LocalArg),
    ("[launch] (and [template.launch])", Launch),
    ("[tolerance]", Tolerance),
    ("[template]", Template),
]

MEANINGS: dict[type[BaseModel], dict[str, str]] = {
    TaskSpec: {
        "name": "The task's name; measurements are stored under it (with a fingerprint of what is measured, so two "
                "files may share a name).",
        "description": "One line, shown by `kernelcast tasks`.",
        "language": "Which backend measures it: OpenCL (pyopencl) or CUDA (pycuda).",
        "source": "The reference kernel's file, relative to the task file and inside its folder (symlinks "
                  f"resolved), at most {MAX_SOURCE_BYTES // 1024} KiB, no `#include`. It is the correctness oracle. "
                  "Omitted (only where a `[template]` names its own `source` "
                  "and a `default`): the reference is the template at its default point, its `#define` lines in name "
                  "order before the template's source, so a recorded space needs no second copy of its kernel.",
        "entry": "The kernel function to run.",
        "args": "The kernel's arguments in the kernel's order, one `[[args]]` table each (the three tables "
                "below); checked against the kernel's parameters (count, kind, element type, order).",
        "sizes": "Named problem sizes (positive integers), e.g. `N = 8388608`; every expression may use them.",
        "small_sizes": "The same names at small values, for quick runs and tests (`--sizes small`); omitted: the "
                       "full sizes.",
        "launch": "The reference's launch geometry (`[launch]`).",
        "tolerance": "How candidates' outputs are compared with the reference's (`[tolerance]`).",
        "template": "A tunable version of the kernel whose parameters become `#define` lines (`[template]`).",
        "flops": "Floating-point operations of one launch, an expression of the sizes (roofline prior, GFLOP/s).",
        "bytes": "Bytes one launch must move at least, an expression of the sizes (roofline prior, GB/s).",
        "tags": "Free labels (shown, not interpreted).",
    },
    BufferArg: {
        "name": "The parameter's name (the kernel's, by convention).",
        "kind": "A device buffer (a `__global`/`__constant` pointer, or a CUDA pointer).",
        "dtype": "Element type; the kernel may point to vectors of it (`float4 *` for `float32`).",
        "shape": "Elements per dimension, expressions of the sizes; the buffer holds their product.",
        "direction": "`in`: only read (checked unchanged after every launch); `out`: only written (poisoned before "
                  "every launch, so a kernel that reads it fails); `inout`: read and written (restored before "
                  "every launch).",
        "init": "How seeded inputs are drawn: `uniform` in [low, high), `normal`, `positive` in [0.1, 1), `ones`, "
                "`zeros`, `arange`, `randint` in [low, high). Integer dtypes draw integers in [low, high) unless "
                "`zeros`, `ones` or `arange`.",
        "low": "Lower bound of `uniform` and `randint`.",
        "high": "Upper bound (exclusive) of `uniform` and `randint`.",
    },
    ScalarArg: {
        "name": "The parameter's name.",
        "kind": "A value passed by value.",
        "dtype": "Its type; integer values must fit in it.",
        "value": "A number or an expression of the sizes (`\"N\"`, `\"N / 4\"`).",
    },
    LocalArg: {
        "name": "The parameter's name.",
        "kind": "A `__local` pointer (OpenCL only): work-group memory the host sizes and never copies.",
        "dtype": "Element type.",
        "shape": "Elements per work-group, expressions of the sizes (and, in a template, its parameters).",
    },
    Launch: {
        "global_size": "Global size per dimension (1 to 3): work-items in OpenCL, total threads in CUDA (the grid "
                       "is global / local); expressions of the sizes (and, in `[template.launch]`, the template's "
                       "parameters).",
        "local_size": "Work-group (CUDA: block) size per dimension, dividing the global size; omitted: the "
                      "runtime chooses. Required when the kernel depends on it (`__local` memory, "
                      "`get_local_id`, `get_local_size`, `get_group_id`, barriers; CUDA: `__shared__`, "
                      "`__syncthreads`): the file is refused without it.",
    },
    Tolerance: {
        "rtol": "Relative tolerance of the element-wise comparison with the reference's outputs (`allclose`).",
        "atol": "Absolute tolerance of that comparison.",
        "allow_fast_math": "Whether candidates may use fast-math build options (`-cl-fast-relaxed-math`, "
                           "`--use_fast_math`).",
    },
    Template: {
        "source": "The tunable source, beside the task file. Omitted: the task's own `source`, tuned as it is "
                  "(each parameter it `#define`s itself must sit in an `#ifndef NAME` block, or loading fails).",
        "params": "Parameter name -> allowed values, all integers, all floats or all identifiers; each point "
                  "prepends `#define NAME VALUE` lines. Spaces are enumerated up to "
                  f"{MAX_SPACE_COMBINATIONS:,} combinations.",
        "launch": "Launch geometry of a template point (`[template.launch]`), expressions of the sizes and the "
                  "parameters; omitted: the task's `[launch]`.",
        "constraints": "Expressions of the sizes and parameters that a valid point makes true (Kernel Tuner's "
                       "restrictions), e.g. `\"N % (VEC * WG) == 0\"`.",
        "default": "The point that reproduces the reference (never proposed as a candidate); must be valid.",
    },
}


HEAD = """# Task files

A task is a TOML file beside a kernel source: the reference kernel (the correctness oracle), its arguments in
order, named problem sizes, the launch geometry, tolerances and, optionally, a tunable template. Pass its path
(or its folder, holding `task.toml`) wherever a task name is accepted: `kernelcast tasks show PATH`,
`kernelcast measure PATH`, `kernelcast optimize PATH`.

This file is generated from the models in `tools/core/task.py` by `python -m kernelcast.task_docs`; a test fails
when it is not current.

## Start from your kernel

```bash
kernelcast init mytask --source kernel.cl            # --entry K when the file defines several kernels
kernelcast tasks show task.toml                      # lists the TODOs left, each with what to write there
```

`init` reads the kernel's signature as the compiler sees it (preprocessed, typedefs resolved) and writes the
arguments in order with their dtypes and guessed intents: a pointer to const, or one the kernel never writes
through, is `in`; one it writes is `out`, or `inout` if it also reads it. What a signature cannot say (the
sizes, each buffer's shape, each scalar's value, the launch) is `"TODO"` with the reason. A kernel that depends
on its work-group size (`__local` memory, `get_local_id`, barriers) gets `local = ["TODO"]` too: it must run with
the work-group shape it was written for. `--force` replaces an existing task file, never the kernel source or any
other file.

## Expressions

Shapes, scalar values, launch sizes, `flops`, `bytes` and template constraints are arithmetic expressions of
the sizes (and, in a template, of its parameters): `+ - * / // % **`, comparisons, `and`/`or` and the
functions {functions}. Every expression is evaluated when the file loads, at both size sets; shapes must come
out as positive whole numbers. Errors name the file, the table and the argument (`args[1] 'y': intent must be
'in', 'out' or 'inout' (got 'outt') (did you mean 'out'?)`), suggest the closest key or table for a misspelt one,
and list the defined sizes when an expression uses an undefined one.

## Tuning the kernel's own #defines

Kernel Tuner's `tune_params` tune an unchanged kernel through its `#define`s. Here a `[template]` without
`source` does the same: each point prepends `#define NAME VALUE` lines to the task's own source, so the
kernel must let them through with a guard:

```c
#ifndef BS
#define BS 4
#endif
__kernel void scale(__global const float* x, __global float* y) { /* ... uses BS ... */ }
```

```toml
[template]                      # no source: the task's kernel itself; no [template.launch]: the task's launch
constraints = ["N % BS == 0"]

[template.params]
BS = [1, 2, 4, 8, 16]
```

`kernelcast measure task.toml -p BS=8` measures one point; `kernelcast optimize task.toml` searches them (the
point equal to the reference, here BS = 4, is never proposed). A parameter the source `#define`s outside an
`#ifndef` block of its own is an error when the file loads: the source's value would replace the tuned one.

## Every field
"""


def _example() -> str:
    from kernelcast.tools.core.task import builtin_task_paths

    path = builtin_task_paths()["saxpy"]
    return ("## A complete example\n\n`tools/builtin_tasks/saxpy/task.toml` (its template, `saxpy_tunable.cl`, is a "
            "second source):\n\n```toml\n" + path.read_text().strip() + "\n```\n")


def document() -> str:
    """The whole of ``docs/task-format.md``."""
    functions = ", ".join(f"`{name}`" for name in EXPRESSION_FUNCTIONS)
    return f"{HEAD.replace('{functions}', functions)}\n{render()}\n\n{_example()}"


def _type_text(annotation: Any) -> str:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return " \\| ".join(f"`{a!r}`".replace("'", '"') for a in args)
    if origin in (typing.Union, types.UnionType):
        parts = dict.fromkeys(_type_text(a) for a in args if a is not type(None))  # the argument kinds: "table"
        return " or ".join(parts)
    if origin is typing.Annotated:
        return _type_text(args[0])
    if origin is list:
        return f"array of {_type_text(args[0])}"
    if origin is dict:
        return f"table of {_type_text(args[1])}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "table"
    names = {str: "string", int: "integer", float: "number", bool: "boolean"}
    if annotation in names:
        return names[annotation]
    if typing.get_origin(annotation) is None and str(annotation).startswith("typing.Annotated"):
        return _type_text(typing.get_args(annotation)[0])
    return "table"  # the discriminated union of argument kinds


def _constraints(info: FieldInfo) -> str:
    out = []
    for meta in info.metadata:
        for attr, text in (("min_length", "at least {}"), ("max_length", "at most {}"), ("pattern", "matches `{}`")):
            value = getattr(meta, attr, None)
            if value is not None:
                out.append(text.format(value) + ("" if attr == "pattern" else " entr" + ("y" if value == 1 else "ies")))
    return "; ".join(out)


def _default(info: FieldInfo) -> str:
    if info.is_required():
        return "**required**"
    value = info.get_default(call_default_factory=True)
    if value is None:
        return "optional"
    if isinstance(value, BaseModel):
        return "the defaults below"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str):
        return f'`"{value}"`'
    return f"`{value}`"


def render() -> str:
    """The Markdown tables of every task-file field; raises when a field has no meaning or a meaning no field."""
    lines: list[str] = []
    for table, model in TABLES:
        meanings = MEANINGS.get(model, {})
        fields = model.model_fields
        if set(meanings) != set(fields):
            raise ValueError(f"{model.__name__}: fields without a meaning {sorted(set(fields) - set(meanings))}, "
                             f"meanings without a field {sorted(set(meanings) - set(fields))}")
        lines += [f"### {table}", "", "| key | type | default | meaning |", "|---|---|---|---|"]
        for name, info in fields.items():
            key = info.alias or name
            kind = _type_text(info.annotation)
            if name in ("dtype",):
                kind = "one of " + ", ".join(f'`"{d}"`' for d in DTYPES)
            if name == "init":
                kind = "one of " + ", ".join(f'`"{d}"`' for d in INITS)
            extra = _constraints(info)
            lines.append(f"| `{key}` | {kind}{' (' + extra + ')' if extra else ''} | {_default(info)} | "
                         f"{meanings[name]} |")
        lines.append("")
    lines += [f"A task file is at most {MAX_TASK_FILE_BYTES // 1024} KiB; unknown keys are errors."]
    return "\n".join(lines)


def write(doc: Path = DOC) -> bool:
    """Write the doc; True when it changed."""
    new = document()
    changed = not doc.exists() or doc.read_text() != new
    if changed:
        doc.write_text(new)
    return changed


if __name__ == "__main__":
    print("updated" if write() else "up to date", DOC, file=sys.stderr)
