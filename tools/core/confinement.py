"""What a candidate may ask of the compiler: its own source, under a size cap, and allowlisted options.

A candidate is device code only; the harness, the host code and the inputs are
ours. These checks keep it that way before anything is compiled: no
``#include`` (nor ``#import``, ``#embed``, ``__has_include``), so no file on the
machine can surface in a compile log, an error message or the store; build
options from an allowlist (no ``-I``, no ``-D`` whose value could smuggle a
newline or a directive, nothing that names a file or a host compiler); and
the entry point's signature equal to the reference's after preprocessing with
the candidate's own ``-D`` macros. Every caller (harness, generators, CLI,
chat, MCP) goes through :func:`check_candidate`.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from kernelcast.tools.core import language as lang
from kernelcast.tools.core.candidate import Candidate, SignatureError, check_signature
from kernelcast.tools.core.language import OPENCL
from kernelcast.tools.core.preprocess import MAX_SOURCE_BYTES, confinement_problem
from kernelcast.tools.core.program_state import mutable_state_problem

if TYPE_CHECKING:
    from kernelcast.tools.core.task import Task

__all__ = ["ConfinementError", "FAST_MATH_OPTIONS", "MAX_SOURCE_BYTES", "check_candidate", "option_problem",
           "source_problem"]

FAST_MATH_OPTIONS = frozenset({
    "-cl-fast-relaxed-math", "-cl-unsafe-math-optimizations", "-cl-finite-math-only", "-cl-denorms-are-zero",
    "--use_fast_math", "-use_fast_math", "--ftz=true", "-ftz=true", "--prec-div=false", "-prec-div=false",
    "--prec-sqrt=false", "-prec-sqrt=false", "--fmad=true",
})
# each language's own allowlist is in kernelcast.tools.core.language (Language.build_flags and build_flag_patterns)
# -DNAME or -DNAME=VALUE; a value is one token of C: no spaces, quotes, '#', '\' or line breaks
_DEFINE = re.compile(r"-D([A-Za-z_][A-Za-z0-9_]{0,63})(?:=([A-Za-z0-9_.+\-*/()]{1,64}))?")
MAX_OPTIONS = 32


class ConfinementError(SignatureError):
    """The candidate asks for something outside its own source (a file, a disallowed option, too many bytes).

    A :class:`SignatureError`, so every caller that refuses a candidate with a bad signature (the harness
    marks it ``invalid`` without compiling) refuses these the same way.
    """


def source_problem(source: str) -> str | None:
    """Why a kernel source may not be compiled (size cap, ``#include`` and relatives), or None."""
    return confinement_problem(source)


def option_problem(options: list[str] | tuple[str, ...], language: str = OPENCL.name,
                   allow_fast_math: bool = False) -> str | None:
    """Why ``options`` are not acceptable, or None. The message quotes the option (at most 80 characters)."""
    if len(options) > MAX_OPTIONS:
        return f"{len(options)} build options; at most {MAX_OPTIONS} are accepted"
    spec = lang.language(language)
    flags, patterns = spec.build_flags, spec.build_flag_patterns
    for opt in options:
        shown = opt if len(opt) <= 80 else opt[:80] + "..."
        if not isinstance(opt, str) or not opt.startswith("-") or any(ch.isspace() for ch in opt):
            return f"build option {shown!r} is not a single flag"
        if opt in FAST_MATH_OPTIONS:
            if not allow_fast_math:
                return f"build option {opt} relaxes float semantics, which the task does not allow"
            continue
        if opt.startswith("-D"):
            if not _DEFINE.fullmatch(opt):
                return (f"build option {shown!r}: a macro is defined as -DNAME or -DNAME=VALUE, with VALUE one "
                        "token of letters, digits and _ . + - * / ( )")
            continue
        if opt in flags or any(p.fullmatch(opt) for p in patterns):
            continue
        if opt.startswith(("-I", "-include", "-imacros", "-isystem", "-iquote", "--include", "--pre-include",
                           "-s", "-o", "-x", "-ccbin", "--compiler-bindir", "-X", "--options-file", "-optf")):
            return f"build option {shown!r} is not allowed: candidates may not name files, paths or tools"
        return f"build option {shown!r} is not in the allowlist of {language} options"
    return None


def check_candidate(task: "Task", candidate: Candidate) -> None:
    """Raise :class:`ConfinementError` (or :class:`SignatureError`) unless the harness may compile ``candidate``.

    Order matters: size and file directives first (before any parsing), then options, then the signature,
    read after preprocessing with the candidate's own ``-D`` macros, then state that would outlive a launch
    (program-scope and ``static`` variables, :mod:`kernelcast.tools.core.program_state`).
    """
    problem = source_problem(candidate.source)
    if problem:
        raise ConfinementError(problem)
    problem = option_problem(candidate.build_options, task.language, task.spec.tolerance.allow_fast_math)
    if problem:
        raise ConfinementError(problem)
    check_signature(candidate.source, task.source, task.spec.entry, task.language, candidate.build_options)
    problem = mutable_state_problem(candidate.source, task.language, tuple(candidate.build_options))
    if problem:
        raise ConfinementError(problem)
