"""Candidates: device source + launch geometry + build options, nothing else.

A candidate never carries host code: the harness is generated from the task
spec. Its identity is a hash of the normalized source (comments and
whitespace removed) plus geometry and options, so cosmetic edits dedupe.
"""

from __future__ import annotations

import hashlib
import re
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, Field

_BLOCK_COMMENT = re.compile(r"/\*.*?\*/", re.S)
_LINE_COMMENT = re.compile(r"//[^\n]*")
_WS = re.compile(r"\s+")
_PUNCT_WS = re.compile(r"\s*([{}()\[\];,=+\-*/<>&|!?:%^~])\s*")


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
            parts.append(_PUNCT_WS.sub(r"\1", chunk))
    return "\n".join(parts)


@lru_cache(maxsize=65536)
def content_hash(source: str, global_size: tuple[str, ...], local_size: tuple[str, ...],
                 build_options: tuple[str, ...]) -> str:
    """Cached by content, so forecasting thousands of candidates does not re-normalize sources."""
    key = "\x1f".join([normalize_source(source), ",".join(_WS.sub("", g) for g in global_size),
                       ",".join(_WS.sub("", g) for g in local_size), " ".join(build_options)])
    return hashlib.sha256(key.encode()).hexdigest()[:16]


class Candidate(BaseModel):
    """One kernel to measure or forecast."""

    task: str
    source: str
    global_size: list[str]
    local_size: list[str] | None = None
    build_options: list[str] = Field(default_factory=list)
    params: dict[str, Any] | None = None
    parent: str | None = None
    intent: str = ""
    generator: str = "user"

    @property
    def hash(self) -> str:
        """Content hash: normalized source + geometry + options (not intent/parent)."""
        return content_hash(self.source, tuple(self.global_size), tuple(self.local_size or ()),
                            tuple(sorted(self.build_options)))

    @property
    def short(self) -> str:
        return self.hash[:8]


# ---- kernel signatures ---------------------------------------------------------
class SignatureError(ValueError):
    """The kernel's entry point is missing or its arguments differ from the reference."""


_ADDRESS_SPACES = ("__global", "global", "__local", "local", "__constant", "constant", "__private", "private")
_QUALIFIERS = {"const", "restrict", "__restrict", "__restrict__", "volatile", "unsigned", "signed"}
_VECTOR = re.compile(r"^([a-z_]+?)(2|3|4|8|16)$")


def entry_parameters(source: str, entry: str, language: str) -> str:
    if language == "opencl":
        pattern = rf"(?:__kernel|kernel)\s+(?:__attribute__\s*\(\(.*?\)\)\s*)?void\s+{re.escape(entry)}\s*\("
    else:
        pattern = rf"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+{re.escape(entry)}\s*\("
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


def signature(source: str, entry: str, language: str = "opencl") -> list[tuple[str, str, str]]:
    """(address space, base type, pointer|value) per argument, the ABI the harness relies on.

    Pointer element types may differ in vector width (float* vs float4*) since
    the host passes the same buffer; everything else must match the reference.
    """
    params = entry_parameters(source, entry, language)
    out: list[tuple[str, str, str]] = []
    if not params.strip() or params.strip() == "void":
        return out
    for raw in params.split(","):
        tokens = re.findall(r"[A-Za-z_][A-Za-z0-9_]*|\*", raw)
        is_ptr = "*" in tokens
        words = [t for t in tokens if t != "*"]
        space = next((w.strip("_") for w in words if w in _ADDRESS_SPACES), "private" if not is_ptr else "generic")
        type_words = [w for w in words[:-1] if w not in _ADDRESS_SPACES and w not in _QUALIFIERS]
        if "unsigned" in words and type_words:
            type_words = ["u" + type_words[0]]
        base = type_words[0] if type_words else "?"
        if is_ptr:
            vec = _VECTOR.match(base)
            if vec:
                base = vec.group(1)
        out.append((space, base, "pointer" if is_ptr else "value"))
    return out


def check_signature(candidate_source: str, reference_source: str, entry: str, language: str = "opencl") -> None:
    """Raise :class:`SignatureError` naming the first difference from the reference."""
    ref = signature(reference_source, entry, language)
    cand = signature(candidate_source, entry, language)
    if len(ref) != len(cand):
        raise SignatureError(f"kernel {entry!r} takes {len(cand)} arguments; the reference takes {len(ref)}")
    for i, (r, c) in enumerate(zip(ref, cand)):
        if r != c:
            raise SignatureError(
                f"argument {i} of {entry!r} is {c[0]} {c[1]} ({c[2]}); the reference has {r[0]} {r[1]} ({r[2]})"
            )


def candidate_from_source(task: "Task", source: str, global_size: list[str] | None = None,  # noqa: F821
                          local_size: list[str] | None = None, build_options: list[str] | None = None,
                          intent: str = "user kernel") -> Candidate:
    """A user's kernel source; launch geometry defaults to the reference's unless given."""
    ref = task.reference()
    return Candidate(task=task.name, source=source, global_size=global_size or ref.global_size,
                     local_size=local_size if local_size is not None else ref.local_size,
                     build_options=build_options or [], intent=intent, generator="user")


def candidate_from_file(path: str, task: "Task", global_size: list[str] | None = None,  # noqa: F821
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
