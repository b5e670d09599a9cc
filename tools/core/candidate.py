"""Candidates: device source + launch geometry + build options, nothing else.

A candidate never carries host code: the harness is generated from the task
spec. Its identity is a hash of its task and its preprocessed source (comments
and whitespace removed) plus geometry and options, so cosmetic edits and no-op
template points dedupe.
"""

from __future__ import annotations

import ast
import copy
import hashlib
import re
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field, computed_field, model_validator

from kernelcast.tools.core import language as lang
from kernelcast.tools.core.edit import Edit, Origin, render_intent
from kernelcast.tools.core.errors import InputError
from kernelcast.tools.core.expr import ExpressionError, evaluate
from kernelcast.tools.core.expr import parse as parse_expression
from kernelcast.tools.core.language import OPENCL, language_of_source
from kernelcast.tools.core.legacy_intent import parse_legacy_intent
from kernelcast.tools.core.preprocess import MAX_SOURCE_BYTES, PreprocessError, preprocess_all_branches
from kernelcast.tools.core.signature import KernelSignatureError, kernel_params

if TYPE_CHECKING:
    from kernelcast.tools.core.task import Task

_BLOCK_COMMENT = re.compile(r"/\*.*?\*/", re.S)
_LINE_COMMENT = re.compile(r"//[^\n]*")
_WS = re.compile(r"\s+")
_PUNCT_WS = re.compile(r"\s*([{}()\[\];,=+\-*/<>&|!?:%^~])\s*")
_PUNCT = frozenset("{}()[];,=+-*/<>&|!?:%^~")
# two characters that read as one token when nothing separates them: the space between them is kept, so
# ``j - --k`` and ``j-- - k`` stay two kernels
_MERGING = frozenset({"--", "++", "&&", "||", "<<", ">>", "->", "==", "!=", "<=", ">=", "+=", "-=", "*=", "/=",
                      "%=", "&=", "|=", "^=", "/*", "*/", "//", "::", "##"})


def normalize_source(source: str) -> str:
    """Source with comments removed and whitespace collapsed (token boundaries kept)."""
    text = _BLOCK_COMMENT.sub(" ", source)
    text = _LINE_COMMENT.sub(" ", text)
    lines = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        # keep preprocessor lines separate: a newline ends a #define
        lines.append(("\n" + line + "\n") if line.startswith("#") else line)
    text = " ".join(lines)
    parts = []
    for chunk in text.split("\n"):
        chunk = _WS.sub(" ", chunk).strip()
        if chunk.startswith("#"):
            parts.append(chunk)
        elif chunk:
            parts.append(_drop_spaces_around_punctuation(chunk))
    return "\n".join(parts)


def _drop_spaces_around_punctuation(chunk: str) -> str:
    """``chunk`` (one space between words) without the spaces next to punctuation, except where the characters
    on both sides would then read as one token (``a - -b`` is not ``a--b``)."""
    def space(match: re.Match[str]) -> str:
        left, right = chunk[match.start() - 1:match.start()], chunk[match.end():match.end() + 1]
        if (left in _PUNCT or right in _PUNCT) and left + right not in _MERGING:
            return ""
        return " "

    return _WS.sub(space, chunk)


@lru_cache(maxsize=65536)
def content_hash(task: str, source: str, global_size: tuple[str, ...], local_size: tuple[str, ...],
                 build_options: tuple[str, ...], language: str = OPENCL.name) -> str:
    """Identity of a candidate: its task, its source as the compiler sees it, geometry and options.

    Cached by content, so forecasting thousands of candidates preprocesses each source once.
    """
    key = "\x1f".join([task, canonical_source(source, language, build_options),
                       ",".join(canonical_expression(g) for g in global_size),
                       ",".join(canonical_expression(g) for g in local_size),
                       " ".join(canonical_options(build_options))])
    return hashlib.sha256(key.encode()).hexdigest()[:16]


_DEFINE_NAME = re.compile(r"^-D\s*([A-Za-z_]\w*)")


def canonical_options(build_options: tuple[str, ...]) -> list[str]:
    """The options as the compiler applies them, in a canonical order: where two options set the same thing (two
    ``-D`` of one macro, two ``-cl-std=``), the compiler takes the last, so only the last is kept; then sorted,
    since the order of options that set different things does not matter. ``-DSLOW=1 -DSLOW=0`` and
    ``-DSLOW=0 -DSLOW=1`` are two kernels."""
    effective: dict[str, str] = {}
    for option in build_options:
        define = _DEFINE_NAME.match(option)
        slot = f"-D{define.group(1)}" if define else option.split("=", 1)[0] if option.startswith("-cl-std=") else option
        effective.pop(slot, None)
        effective[slot] = option
    return sorted(effective.values())


@lru_cache(maxsize=4096)
def canonical_expression(expr: str) -> str:
    """A geometry expression with constants folded and identities dropped: ``N / (4 * 2)`` reads ``N/8`` and a
    template's ``N / 1`` reads ``N``, so a point that launches like the reference hashes like it."""
    try:
        tree, _ = parse_expression(str(expr))
        return _WS.sub("", ast.unparse(_Fold().visit(copy.deepcopy(tree))))
    except (ExpressionError, ValueError, TypeError, RecursionError):
        return _WS.sub("", str(expr))


class _Fold(ast.NodeTransformer):
    """Constant folding with the evaluator's own semantics, plus x*1, 1*x, x/1, x//1, x+0, 0+x, x-0 -> x."""

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        left, right = node.left, node.right
        if isinstance(left, ast.Constant) and isinstance(right, ast.Constant):
            try:
                return ast.copy_location(ast.Constant(evaluate(ast.unparse(node), {})), node)
            except ExpressionError:
                return node
        one = isinstance(right, ast.Constant) and right.value == 1
        zero = isinstance(right, ast.Constant) and right.value == 0
        if (one and isinstance(node.op, (ast.Mult, ast.Div, ast.FloorDiv))) or \
                (zero and isinstance(node.op, (ast.Add, ast.Sub))):
            return left
        if isinstance(left, ast.Constant) and ((left.value == 1 and isinstance(node.op, ast.Mult))
                                               or (left.value == 0 and isinstance(node.op, ast.Add))):
            return right
        return node


_UNROLL_HINT_BEFORE_CONSTANT_LOOP = re.compile(
    r"\n#pragma unroll(?: [^\n]*)?\n(?=for\((?:(?:const )?(?:unsigned int|unsigned|uint|int|long|ulong|size_t|short) )?"
    r"(?P<var>[A-Za-z_]\w*)=(?P<low>-?\d+)[uUlL]*;(?P=var)(?P<op><=|<|!=)(?P<high>-?\d+)[uUlL]*;"
    r"(?:\+\+(?P=var)|(?P=var)\+\+|(?P=var)\+=(?P<step>\d+))\))")


def _trip_count(low: int, op: str, high: int, step: int) -> int | None:
    """Iterations of ``for (v = low; v op high; v += step)``, or None when the loop may not end."""
    if step <= 0:
        return None
    if op == "<":
        return max(0, -(-(high - low) // step))
    if op == "<=":
        return max(0, (high - low) // step + 1)
    return high - low if step == 1 and high >= low else None  # "!="


def drop_noop_unroll_hints(normalized: str) -> str:
    """Without the ``#pragma unroll`` lines that sit on a loop of at most one iteration with literal bounds
    (after preprocessing, ``for(int k=0;k<1;k++)``): unrolling such a loop changes nothing, so a template
    point that differs only there is the same kernel. Only this exact literal form is recognized; anything
    else keeps its pragma (a missed no-op costs a measurement, a wrong merge would hide a kernel)."""
    def keep_or_drop(match: re.Match[str]) -> str:
        trips = _trip_count(int(match["low"]), match["op"], int(match["high"]), int(match["step"] or 1))
        if trips is None or trips > 1:
            return match.group(0)
        before = normalized[match.start() - 1:match.start()]
        return "" if not before or _PUNCT_WS.match(before) else " "  # joined as if the line had never been there

    return _UNROLL_HINT_BEFORE_CONSTANT_LOOP.sub(keep_or_drop, normalized)


def canonical_source(source: str, language: str = OPENCL.name, build_options: tuple[str, ...] = ()) -> str:
    """The preprocessed source with comments and whitespace normalized: two template points that preprocess
    to the same code (a parameter acting only in an inactive ``#if`` branch, a default point equal to the
    reference, an unroll hint on a one-trip loop) read the same. Every branch the compiler decides (``#ifdef
    __clang__``, ``#if __OPENCL_C_VERSION__ >= 200``) is kept (``preprocess_all_branches``), so code hidden there is
    part of the identity; ``build_options`` in their given order (the last ``-D`` of a name wins). A source the
    preprocessor refuses (an ``#include``) keeps its own text, marked so it can never equal a preprocessed one: it
    still needs an identity to record its rejection."""
    try:
        return "pp:" + drop_noop_unroll_hints(normalize_source(preprocess_all_branches(source, language,
                                                                                       build_options)))
    except PreprocessError:
        return "raw:" + normalize_source(source)


# key of a derived point's params naming the kernel its transformations were applied to (the short hash of that
# kernel): bookkeeping for the generator, not a tunable value, so no model reads it as one
DERIVED_BASE = "base"


class Candidate(BaseModel):
    """One kernel to measure or forecast."""

    task: str
    # the byte cap (MAX_SOURCE_BYTES) is checked before compiling; this bound keeps a 50 MB "kernel" from even
    # becoming a candidate, so it can never reach the store
    source: str = Field(max_length=MAX_SOURCE_BYTES)
    global_size: list[str]
    local_size: list[str] | None = None
    build_options: list[str] = Field(default_factory=list, max_length=64)
    params: dict[str, Any] | None = None
    parent: str | None = None
    origin: Origin = "written"
    edits: list[Edit] = Field(default_factory=list)  # what made it (tools.core.edit); models read these
    note: str = ""  # its author's own words (a user's, an LLM's, an external agent's), for written kernels
    generator: str = "user"

    @model_validator(mode="before")
    @classmethod
    def _old_intent(cls, data: Any) -> Any:
        """A candidate serialized before edits were data carries only its intent text: read it into its origin
        and edits once, here (a dump's rendered ``intent`` beside its edits is dropped)."""
        if isinstance(data, dict) and "intent" in data:
            data = dict(data)
            intent = data.pop("intent")
            if not {"origin", "edits", "note"} & set(data):
                data.update(parse_legacy_intent(str(intent or ""), data.get("params"), data.get("generator")))
        return data

    @computed_field  # type: ignore[prop-decorator]
    @property
    def intent(self) -> str:
        """What the change is, in one line for people and prompts: rendered from the edits, never parsed."""
        return render_intent(self.origin, self.edits, self.note)

    @property
    def hash(self) -> str:
        """Content hash: task + preprocessed source + geometry + options (not origin, edits or parent)."""
        return content_hash(self.task, self.source, tuple(self.global_size), tuple(self.local_size or ()),
                            tuple(self.build_options), language_of_source(self.source).name)

    @property
    def short(self) -> str:
        return self.hash[:8]


# ---- kernel signatures ---------------------------------------------------------
class SignatureError(InputError, ValueError):
    """The kernel's entry point is missing, its arguments differ from the reference, or its source is not one
    the harness accepts (an ``#include``, over the size cap): the candidate is invalid, never compiled."""


def entry_parameters(source: str, entry: str, language: str) -> str:
    """The raw text of the entry point's parameter list (a cheap approximation for features only;
    the signature check uses :func:`signature`, which preprocesses first)."""
    pattern = lang.language(language).entry_pattern(entry)
    text = _LINE_COMMENT.sub(" ", _BLOCK_COMMENT.sub(" ", source))
    match = re.search(pattern, text, re.S)
    if not match:
        raise SignatureError(f"kernel entry point {entry!r} not found")
    depth, start = 1, match.end()
    for i in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return text[start:i]
    raise SignatureError(f"unbalanced parentheses in the parameter list of {entry!r}")


def signature(source: str, entry: str, language: str = OPENCL.name,
              build_options: list[str] | tuple[str, ...] = ()) -> list[tuple[str, str, str]]:
    """(address space, base type, pointer|value) per argument, the ABI the harness relies on.

    Read from the preprocessed source (with the macros ``build_options`` define), typedefs resolved.
    Pointer element types may differ in vector width (float* vs float4*) since the host passes the same
    buffer; everything else must match the reference.
    """
    try:
        return [p.abi() for p in kernel_params(source, entry, language, tuple(build_options))]
    except KernelSignatureError as exc:
        raise SignatureError(str(exc)) from None


def check_signature(candidate_source: str, reference_source: str, entry: str, language: str = OPENCL.name,
                    build_options: list[str] | tuple[str, ...] = ()) -> None:
    """Raise :class:`SignatureError` naming the first difference from the reference."""
    ref = signature(reference_source, entry, language)
    cand = signature(candidate_source, entry, language, build_options)
    if len(ref) != len(cand):
        raise SignatureError(f"kernel {entry!r} takes {len(cand)} arguments; the reference takes {len(ref)}")
    for i, (r, c) in enumerate(zip(ref, cand, strict=True)):
        if r != c:
            raise SignatureError(
                f"argument {i} of {entry!r} is {c[0]} {c[1]} ({c[2]}); the reference has {r[0]} {r[1]} ({r[2]})"
            )


def candidate_from_source(task: "Task", source: str, global_size: list[str] | None = None,
                          local_size: list[str] | None = None, build_options: list[str] | None = None,
                          note: str = "user kernel") -> Candidate:
    """A user's kernel source; launch geometry defaults to the reference's unless given."""
    ref = task.reference()
    return Candidate(task=task.name, source=source, global_size=global_size or ref.global_size,
                     local_size=local_size if local_size is not None else ref.local_size,
                     build_options=build_options or [], origin="written", note=note, generator="user")


def candidate_from_file(path: str, task: "Task", global_size: list[str] | None = None,
                        local_size: list[str] | None = None, build_options: list[str] | None = None) -> Candidate:
    """A candidate from a JSON file (as ``kernelcast propose`` writes) or a bare kernel source.

    A bare source takes the reference's launch geometry unless ``global_size``/``local_size`` are given.
    """
    from pathlib import Path

    file = Path(path)
    if not file.exists():
        raise FileNotFoundError(f"candidate file {path} not found")
    text = file.read_text()
    if file.suffix == ".json":
        candidate = Candidate.model_validate_json(text)
        if candidate.task != task.name:
            raise ValueError(f"{path}: candidate is for task {candidate.task!r}, not {task.name!r}")
        return candidate
    return candidate_from_source(task, text, global_size, local_size, build_options, f"user kernel from {file.name}")
