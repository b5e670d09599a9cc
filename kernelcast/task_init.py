"""A task file from a kernel's signature (``kernelcast init``), and what a task file still leaves to fill in.

The kernel's parameters come as the compiler sees them (``tools.kernel_signature``: preprocessed, typedefs
resolved); whether a pointer is written or read comes from its AST (``agents.kernel_ast``). What neither can
know (how large the problem is, how long each buffer is, what a scalar's value is, how many work-items to
launch) is written as ``"TODO"`` with the reason, and :func:`missing` lists the TODOs left in a file, with the
same reasons, for ``kernelcast tasks show``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import clang.cindex as ci

from kernelcast.agents.generate.kernel_ast import (
    K,
    KernelParseError,
    ParsedSource,
    ancestors,
    decl_key,
    operator,
    parents,
    parse,
    pointer_roots,
    walk,
    written_roots,
)
from kernelcast.tools.core.errors import InputError
from kernelcast.tools.core.signature import KernelParam, KernelSignatureError, kernel_params
from kernelcast.tools.core.task import C_TYPES, DTYPES

TODO = "TODO"
DTYPE_OF = {c: d for d, c in C_TYPES.items()}  # kernel-side element type -> dtype

# Why each kind of field is left to the user; keyed by the field's last name (what `missing` finds).
REASONS = {
    "sizes": "name the problem sizes (positive integers) that shapes, scalar values and the launch use, e.g. "
             "N = 1048576: how large your problem is is not in the kernel",
    "shape": "the buffer's elements per dimension, as expressions of [sizes] (e.g. \"N\" or \"M\", \"K\"): a "
             "pointer does not say how long its buffer is",
    "local_shape": "elements per work-group, as expressions of [sizes]: a __local pointer does not say how much "
                   "memory it needs",
    "value": "the value passed, a number or an expression of [sizes] (e.g. \"N\"): a scalar's value is not in "
             "the signature",
    "global": "the global work size per dimension (work-items in OpenCL, threads in CUDA), as expressions of "
              "[sizes]: how the kernel maps its work to work-items is not in its signature",
    "dtype": "the element type has no kernelcast dtype (supported: " + ", ".join(DTYPES) + ")",
    "intent": "in, out or inout: the kernel could not be parsed to see whether it writes through this pointer",
}


class InitError(InputError, ValueError):
    """The kernel cannot be read, has no such entry point, or names several kernels without --entry."""


@dataclass(frozen=True)
class ArgGuess:
    """One argument as the signature and the AST show it; ``why`` explains the guessed intent."""

    name: str
    kind: str  # buffer | scalar | local
    dtype: str  # a dtype, or TODO
    ctype: str  # the kernel-side type, for the comment
    intent: str | None = None  # buffers only: in | out | inout | TODO
    why: str = ""


def language_of(source: Path) -> str:
    return "cuda" if source.suffix in (".cu", ".cuh") else "opencl"


def kernel_names(source: str, language: str) -> list[str]:
    try:
        return [k.spelling for k in parse(source, language).kernels()]
    except KernelParseError as exc:
        raise InitError(f"cannot list the kernels of the source: {exc}") from None


def guess_args(source: str, entry: str, language: str) -> list[ArgGuess]:
    """The entry's arguments in order, with dtypes and guessed intents."""
    try:
        params = kernel_params(source, entry, language)
    except KernelSignatureError as exc:
        raise InitError(str(exc)) from None
    usage = _pointer_usage(source, entry, language)
    guesses = []
    for i, p in enumerate(params):
        name = p.name or f"arg{i}"
        ctype = f"{p.space + ' ' if p.pointer else ''}{p.base}{p.width if p.width > 1 else ''}{' *' if p.pointer else ''}"
        dtype = DTYPE_OF.get(p.base, TODO)
        if not p.pointer:
            guesses.append(ArgGuess(name, "scalar", dtype if p.width == 1 else TODO, ctype))
        elif p.space == "local":
            guesses.append(ArgGuess(name, "local", dtype, ctype))
        else:
            intent, why = _intent(p, usage)
            guesses.append(ArgGuess(name, "buffer", dtype, ctype, intent, why))
    return guesses


def _intent(param: KernelParam, usage: dict[str, tuple[bool, bool, bool]] | str) -> tuple[str, str]:
    if isinstance(usage, str):  # the AST could not be read
        if param.space == "constant":
            return "in", "guessed: a __constant pointer cannot be written"
        return TODO, f"{REASONS['intent']} ({usage})"
    const, written, read = usage.get(param.name, (False, True, True))
    if const or param.space == "constant":
        return "in", "guessed: points to const"
    if not written:
        return "in", "guessed: never written"
    if read:
        return "inout", "guessed: written and also read"
    return "out", "guessed: written, never read"


def _pointer_usage(source: str, entry: str, language: str) -> dict[str, tuple[bool, bool, bool]] | str:
    """Pointer parameter name -> (points to const, written through, read through), or why it is unknown."""
    try:
        ps = parse(source, language)
        kernel = ps.kernel(entry)
    except KernelParseError as exc:
        return str(exc)
    written = written_roots(ps, kernel)
    read = _read_roots(ps, kernel)
    out = {}
    for p in kernel.get_arguments():
        if p.type.get_canonical().kind == ci.TypeKind.POINTER:
            key = decl_key(p)
            out[p.spelling] = (p.type.get_canonical().get_pointee().is_const_qualified(), key in written, key in read)
    return out


def _read_roots(ps: ParsedSource, kernel: ci.Cursor) -> set[tuple[str, int]]:
    """Pointer parameters (roots) whose memory the kernel may read: every use of the pointer except a plain
    store (``p[i] = v``, ``*p = v``, ``vstore``), a comparison or the initializer of a derived pointer (whose
    own uses count for the root)."""
    roots = pointer_roots(ps, kernel)
    parent_of = parents(kernel)
    read: set[tuple[str, int]] = set()
    for n in walk(kernel):
        if n.kind == K.DECL_REF_EXPR and n.referenced is not None and decl_key(n.referenced) in roots:
            root = roots[decl_key(n.referenced)]
            if root not in read and _reads(ps, ancestors(kernel, n, parent_of), n):
                read.add(root)
    return read


def _reads(ps: ParsedSource, chain: list[ci.Cursor], ref: ci.Cursor) -> bool:
    node, accessed = ref, False
    for parent in reversed(chain):
        if parent.kind in (K.UNEXPOSED_EXPR, K.PAREN_EXPR) or (
                not accessed and parent.kind == K.BINARY_OPERATOR and operator(ps, parent) in ("+", "-")):
            node = parent  # pointer arithmetic, casts, parentheses: keep following
            continue
        if not accessed:
            if parent.kind == K.ARRAY_SUBSCRIPT_EXPR:
                if list(parent.get_children())[0] != node:
                    return False  # the pointer is an index: nothing is read through it here
                node, accessed = parent, True
                continue
            if parent.kind == K.UNARY_OPERATOR and operator(ps, parent) == "*":
                node, accessed = parent, True
                continue
            if parent.kind == K.CALL_EXPR:
                return not parent.spelling.startswith("vstore")
            if parent.kind == K.VAR_DECL:
                return False  # a derived pointer: its own uses are followed
            return not (parent.kind == K.BINARY_OPERATOR and operator(ps, parent) in ("<", ">", "<=", ">=", "==",
                                                                                      "!="))
        if parent.kind == K.MEMBER_REF_EXPR:  # a lane or field of the element
            node = parent
            continue
        if parent.kind == K.BINARY_OPERATOR and operator(ps, parent) == "=":
            return list(parent.get_children())[0] != node  # the element on the left is only stored to
        return True  # compound assignment, increment, or any use of the element's value
    return True


def render(name: str, source_rel: str, language: str, entry: str, args: list[ArgGuess], origin: str) -> str:
    """The task file's text: the signature filled in, every unknown a TODO with its reason."""
    q = json.dumps
    lines = [f"# Written by `kernelcast init` from {origin} (kernel {entry}). Replace every TODO, then run",
             "# `kernelcast tasks show` on this file: it lists what is still missing. Every field is described",
             "# in docs/task-format.md; add [small_sizes] for quick runs and [template] to tune #defines.",
             f"name = {q(name)}", 'description = ""', f"language = {q(language)}", f"source = {q(source_rel)}",
             f"entry = {q(entry)}", "", f"# TODO: {REASONS['sizes']}", "[sizes]", ""]
    for arg in args:
        lines += ["[[args]]", f"name = {q(arg.name)}", f"kind = {q(arg.kind)}",
                  f"dtype = {q(arg.dtype)}" + (f"  # TODO: {arg.ctype}: {REASONS['dtype']}" if arg.dtype == TODO
                                               else f"  # {arg.ctype}")]
        if arg.kind == "scalar":
            lines.append(f"value = {q(TODO)}  # TODO: {REASONS['value']}")
        else:
            reason = REASONS["local_shape"] if arg.kind == "local" else REASONS["shape"]
            lines.append(f"shape = [{q(TODO)}]  # TODO: {reason}")
        if arg.kind == "buffer":
            lines.append(f"intent = {q(arg.intent)}" + (f"  # TODO: {arg.why}" if arg.intent == TODO
                                                       else f"  # {arg.why}"))
        lines.append("")
    lines += ["[launch]", f"global = [{q(TODO)}]  # TODO: {REASONS['global']}",
              "# local = [...]  # optional: the work-group size; omitted, the runtime chooses", ""]
    return "\n".join(lines)


def write_task(name: str, source: Path, entry: str | None = None, out: Path | None = None,
               language: str | None = None, force: bool = False) -> tuple[Path, list[ArgGuess]]:
    """Write the task file for ``source`` (default: ``task.toml`` beside it) and return it with its guesses."""
    source = source.resolve()
    if not source.is_file():
        raise InitError(f"kernel source {source} not found")
    out = (out or source.parent / "task.toml").resolve()
    if out.is_dir():
        out = out / "task.toml"
    if not source.is_relative_to(out.parent):
        raise InitError(f"the task file must sit in the kernel's folder or above it ({out} does not)")
    if out.exists() and not force:
        raise InitError(f"{out} exists; pass --force to replace it or --out to write another file")
    language = language or language_of(source)
    try:
        text = source.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        raise InitError(f"{source} cannot be read as UTF-8 text") from None
    if entry is None:
        names = kernel_names(text, language)
        if len(names) != 1:
            raise InitError(f"{source.name} defines {len(names)} kernels ({', '.join(names) or 'none'}); "
                            "name one with --entry")
        entry = names[0]
    args = guess_args(text, entry, language)
    out.write_text(render(name, source.relative_to(out.parent).as_posix(), language, entry, args, source.name))
    return out, args


def missing(raw: dict[str, Any]) -> list[tuple[str, str]]:
    """(field, reason) for every TODO left in a parsed task file, and for its sizes when they are absent, or
    empty while TODOs are left (a finished task may need no sizes)."""
    found: list[tuple[str, str]] = []

    def visit(value: Any, path: str, reason_key: str) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                visit(v, f"{path}.{k}", str(k))
        elif isinstance(value, list):
            for i, v in enumerate(value):
                visit(v, f"{path}[{i}]", reason_key)
        elif value == TODO:
            found.append((path, REASONS.get(reason_key, "replace the TODO")))

    for key, value in raw.items():
        if key == "args" and isinstance(value, list):
            for i, arg in enumerate(value):
                if isinstance(arg, dict):
                    for k, v in arg.items():
                        local = k == "shape" and arg.get("kind") == "local"
                        visit(v, f"args.{arg.get('name', i)}.{k}", "local_shape" if local else k)
        else:
            visit(value, key, key)
    if "sizes" not in raw or (found and not raw["sizes"]):
        found.insert(0, ("sizes", REASONS["sizes"]))
    return found
