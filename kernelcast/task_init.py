"""A task file from a kernel's signature (``kernelcast init``), and what a task file still leaves to fill in.

The kernel's parameters come as the compiler sees them (``tools.kernel_signature``: preprocessed, typedefs
resolved); whether a pointer is written or read comes from its AST (``agents.kernel_ast``). What neither can
know (how large the problem is, how long each buffer is, what a scalar's value is, how many work-items to
launch) is written as ``"TODO"`` with the reason, and :func:`missing` lists the TODOs left in a file, with the
same reasons, for ``kernelcast tasks show``.
"""

from __future__ import annotations

import tomllib
import unicodedata
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
from kernelcast.tools.core.task import C_TYPES, DTYPES, MAX_TASK_FILE_BYTES, SourceFileError, read_kernel_file
from kernelcast.tools.core.workgroup import workgroup_uses

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
    "local": "the work-group size per dimension (as many entries as global), numbers or expressions of [sizes]: "
             "the shape the kernel's tiles and barriers were written for, which the runtime cannot guess",
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


def render(name: str, source_rel: str, language: str, entry: str, args: list[ArgGuess], origin: str,
           workgroup: list[str] | None = None) -> str:
    """The task file's text: the signature filled in, every unknown a TODO with its reason.

    Every value is a TOML string escaped here and every comment is one line with control characters blanked,
    so nothing copied from the source (a file name with a newline, a diagnostic quoting a ``_Static_assert``
    message) can start a line of its own; the text is read back and must parse to exactly the document meant,
    else nothing is written."""
    doc = _document(name, source_rel, language, entry, args, workgroup or [])
    lines = [_comment(f"Written by `kernelcast init` from {origin} (kernel {entry}). Replace every TODO, then run"),
             "# `kernelcast tasks show` on this file: it lists what is still missing. Every field is described",
             "# in docs/task-format.md; add [small_sizes] for quick runs and [template] to tune #defines."]
    lines += [f"{key} = {_value(doc[key])}" for key in ("name", "description", "language", "source", "entry")]
    lines += ["", _comment(f"TODO: {REASONS['sizes']}"), "[sizes]", ""]
    for arg, table in zip(args, doc["args"]):
        lines.append("[[args]]")
        lines += [f"{key} = {_value(value)}" + (f"  {_comment(note)}" if (note := _note(arg, key)) else "")
                  for key, value in table.items()]
        lines.append("")
    lines += ["[launch]", f"global = {_value(doc['launch']['global'])}  {_comment('TODO: ' + REASONS['global'])}"]
    if workgroup:
        lines.append(f"local = {_value(doc['launch']['local'])}  "
                     + _comment(f"TODO: required: {entry} uses {', '.join(workgroup[:4])}; {REASONS['local']}"))
    else:
        lines.append("# local = [...]  # optional: the work-group size; omitted, the runtime chooses")
    text = "\n".join(lines + [""])
    if tomllib.loads(text) != doc:
        raise InitError("the task file did not read back as written; nothing was written (please report it)")
    return text


def _document(name: str, source_rel: str, language: str, entry: str, args: list[ArgGuess],
              workgroup: list[str]) -> dict[str, Any]:
    """What the task file holds, as TOML reads it back."""
    tables: list[dict[str, Any]] = []
    for arg in args:
        table: dict[str, Any] = {"name": arg.name, "kind": arg.kind, "dtype": arg.dtype}
        if arg.kind == "scalar":
            table["value"] = TODO
        else:
            table["shape"] = [TODO]
        if arg.kind == "buffer":
            table["intent"] = arg.intent
        tables.append(table)
    launch: dict[str, Any] = {"global": [TODO], **({"local": [TODO]} if workgroup else {})}
    return {"name": name, "description": "", "language": language, "source": source_rel, "entry": entry,
            "sizes": {}, "args": tables, "launch": launch}


def _note(arg: ArgGuess, key: str) -> str:
    """The comment after an argument's key: its C type, or what to write for a TODO and why."""
    if key == "dtype":
        return f"TODO: {arg.ctype}: {REASONS['dtype']}" if arg.dtype == TODO else arg.ctype
    if key == "value":
        return f"TODO: {REASONS['value']}"
    if key == "shape":
        return f"TODO: {REASONS['local_shape'] if arg.kind == 'local' else REASONS['shape']}"
    if key == "intent":
        return f"TODO: {arg.why}" if arg.intent == TODO else arg.why
    return ""


def _value(value: str | list[str]) -> str:
    return "[" + ", ".join(_string(v) for v in value) + "]" if isinstance(value, list) else _string(value)


def _string(text: str) -> str:
    """A TOML basic string: quotes, backslashes and every control character escaped."""
    out = []
    for ch in text:
        category = unicodedata.category(ch)
        if category == "Cs":  # a lone surrogate: an undecodable byte of a file name
            raise InitError(f"{text[:80]!r} is not valid Unicode text (a name in another encoding?); rename it")
        out.append("\\" + ch if ch in '"\\' else f"\\u{ord(ch):04X}" if category == "Cc" else ch)
    return '"' + "".join(out) + '"'


def _comment(text: str) -> str:
    """One comment line: control characters and line breaks of any kind become spaces."""
    return "# " + " ".join("".join(" " if unicodedata.category(ch) in ("Cc", "Cs", "Zl", "Zp") else ch
                                   for ch in text).split())


def write_task(name: str, source: Path, entry: str | None = None, out: Path | None = None,
               language: str | None = None, force: bool = False) -> tuple[Path, list[ArgGuess]]:
    """Write the task file for ``source`` (default: ``task.toml`` beside it) and return it with its guesses.

    ``force`` replaces only a task file: never the kernel source itself, nor any other file."""
    source = source.resolve()
    if not source.is_file():
        raise InitError(f"kernel source {source} not found")
    out = (out or source.parent / "task.toml").resolve()
    if out.is_dir():
        out = out / "task.toml"
    if out == source:
        raise InitError(f"--out {out} is the kernel source itself; write the task file beside it (the default: "
                        f"{source.parent / 'task.toml'})")
    if not source.is_relative_to(out.parent):
        raise InitError(f"the task file must sit in the kernel's folder or above it ({out} does not)")
    if out.exists() or out.is_symlink():
        if not force:
            raise InitError(f"{out} exists; pass --force to replace it or --out to write another file")
        if not _is_task_file(out):
            raise InitError(f"{out} is not a task file (TOML with source and entry); --force replaces only a task "
                            "file: choose another --out")
    language = language or language_of(source)
    try:
        text = read_kernel_file(source, f"kernel source {source}")
    except SourceFileError as exc:
        raise InitError(str(exc)) from None
    if entry is None:
        names = kernel_names(text, language)
        if len(names) != 1:
            raise InitError(f"{source.name} defines {len(names)} kernels ({', '.join(names) or 'none'}); "
                            "name one with --entry")
        entry = names[0]
    args = guess_args(text, entry, language)
    rendered = render(name, source.relative_to(out.parent).as_posix(), language, entry, args, source.name,
                      workgroup_uses(text, language))
    out.write_text(rendered, encoding="utf-8")
    return out, args


def _is_task_file(path: Path) -> bool:
    """A regular file of TOML naming an entry and a source, or a template in its stead (what ``--force`` may
    replace)."""
    try:
        if not path.is_file() or path.stat().st_size > MAX_TASK_FILE_BYTES:
            return False
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False
    names_source = isinstance(raw.get("source"), str) or isinstance(raw.get("template"), dict)
    return names_source and isinstance(raw.get("entry"), str)


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
