"""Semantics-preserving source transformations on the AST of a task's entry kernel.

Each transformation is one module with one job. It checks its preconditions on the AST of the entry
kernel only (other kernels in the file are never edited), prints valid source (the result is parsed
again before it is returned), and returns what it did as an :class:`~kernelcast.tools.core.edit.Edit`: its
name, its parameter values and a label the candidate's intent is rendered from ("coarsen x4 y4 cyclic + jam;
scalar-replace C[i]"), so the forecaster reads the edit, not the text. A transformation that does not apply
raises :class:`NotApplicable` with the reason. The harness's correctness check (3 seeds against the reference)
stays the safety net.

The library (each module's docstring says why its edit is legal): :mod:`.scalar_replace`,
:mod:`.restrict`, :mod:`.coarsen` (with jam; its ``vector`` mapping is :mod:`.vectorize`), :mod:`.unroll`,
:mod:`.local_tiling`; :mod:`kernelcast.agents.generate.derived_space` turns them, with work-group shapes, into a
derived template.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from kernelcast.agents.generate.kernel_ast import KernelParseError, ParsedSource, observes_work_group, parse
from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.edit import Edit, Value
from kernelcast.tools.core.errors import InputError


class NotApplicable(InputError, ValueError):
    """The transformation's preconditions do not hold for this kernel (the message says which)."""


@dataclass(frozen=True)
class Rewritten:
    """A transformed candidate and the edit that made it."""

    candidate: Candidate
    edit: Edit

    @property
    def label(self) -> str:
        return self.edit.label


def rewritten(candidate: Candidate, name: str, label: str, **values: Value) -> Rewritten:
    """The result of transformation ``name`` with its parameter ``values``."""
    return Rewritten(candidate, Edit(name=name, values=values, label=label))


@lru_cache(maxsize=64)
def parsed(source: str, language: str) -> ParsedSource:
    """Parse once per source text (transformations of one kernel share the parses of their inputs)."""
    return parse(source, language)


def entry_of(candidate_source: str, language: str, entry: str) -> tuple[ParsedSource, object]:
    """The parse and the entry kernel's cursor; NotApplicable when the source does not parse cleanly."""
    try:
        ps = parsed(candidate_source, language)
        return ps, ps.kernel(entry)
    except KernelParseError as exc:
        raise NotApplicable(str(exc)) from None


def work_item_kernel(candidate: Candidate, task_language: str, entry: str, what: str) -> tuple[ParsedSource, object]:
    """The parse and entry kernel of an OpenCL kernel whose text has no macro of its file and that does not
    observe its work-group: what a transformation that gives work-items new work (``what``: its name, for the
    reasons) needs; NotApplicable says which does not hold."""
    if task_language != "opencl":
        raise NotApplicable(f"{what} is implemented for OpenCL kernels")
    ps, kernel = entry_of(candidate.source, task_language, entry)
    if ps.uses_macros(kernel):
        raise NotApplicable("the entry kernel uses the file's macros")
    if observes_work_group(ps, kernel):
        raise NotApplicable("the kernel observes its work-group (local ids, local memory or barriers)")
    return ps, kernel


def checked(candidate: Candidate, source: str, language: str, entry: str, **update: object) -> Candidate:
    """The candidate with the new source, after checking that the source parses and still has the entry."""
    try:
        parsed(source, language).kernel(entry)
    except KernelParseError as exc:
        raise NotApplicable(f"the rewrite did not print valid source ({exc})") from None
    return candidate.model_copy(update={"source": source, **update})


def fresh_name(source: str, stem: str) -> str:
    """An identifier that does not occur in ``source``."""
    n = 0
    while f"{stem}{n}" in source:
        n += 1
    return f"{stem}{n}"
