"""The generator interface: what every generator gets, returns and reports.

A generator turns a parent kernel into new candidates. It never measures: the
router decides what the hardware sees. It gets a :class:`GenerationContext`
(how the parent did, the best kernels so far, the device, what was already
tried or rejected) and returns validated candidates, each naming its parent
and its intent, together with a :class:`ProposalReport` of what it dropped and
why (:class:`Proposals`); the report's :meth:`ProposalReport.feedback` lines
are fed back on the next attempt.

Validation (:class:`Validator`) is shared by all generators so an offline
move and an LLM rewrite pass exactly the same checks: no host code, the
entry point and its argument list unchanged, not the parent, not already
known, launch geometry valid at both problem-size sets, build options
allowed by the task's tolerance, and (when a compiler is at hand) it builds.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, Field, field_validator

from kernelcast.agents.generate.dedup import Deduplicator
from kernelcast.tools.core.candidate import Candidate, SignatureError, check_signature, signature
from kernelcast.tools.core.confinement import FAST_MATH_OPTIONS, option_problem, source_problem  # noqa: F401 (re-export)
from kernelcast.tools.core.measurement import HardwareSpec, Measurement, Status
from kernelcast.tools.core.task import Task
from kernelcast.tools.hardware.harness import InvalidCandidate, resolve_geometry

if TYPE_CHECKING:
    from kernelcast.tools.hardware.measurers.base import Measurer
    from kernelcast.tools.hardware.worker import MeasurementWorker
    from kernelcast.tools.store.store import Store

REPORT_CHARS = 1500  # error / wrong-result text kept in a context (enough for the first compiler errors)


class Reason(str, Enum):
    """Why a proposal was rejected (one counter each in :class:`ProposalReport`)."""

    not_json = "not_json"  # the model's reply holds no JSON object (prose, broken or truncated JSON)
    missing_fields = "missing_fields"  # an entry lacks source or global_size, or has the wrong types
    host_code = "host_code"  # main(), OpenCL/CUDA host API calls, host headers, kernel launches
    kernel_name = "kernel_name"  # the task's entry point is not defined (renamed or missing)
    signature = "signature"  # the entry point's argument list differs from the reference
    unchanged = "unchanged"  # the same kernel as the parent (same hash)
    duplicate = "duplicate"  # already known: in the store, in this search, or earlier in this batch
    build_options = "build_options"  # malformed option, or fast-math the task's tolerance does not allow
    geometry = "geometry"  # launch geometry does not resolve or does not divide at some size set
    compile_error = "compile_error"  # the device compiler rejected it


FEEDBACK_HINTS: dict[Reason, str] = {
    Reason.not_json: "reply with one JSON object exactly as specified, no prose around it",
    Reason.missing_fields: "every candidate needs a non-empty 'source' and a 'global_size' list",
    Reason.host_code: "send device code only: no main(), no host API calls, no host #includes",
    Reason.kernel_name: "keep the kernel's name exactly as in the reference",
    Reason.signature: "keep the kernel's argument list exactly as in the reference (same order and types)",
    Reason.unchanged: "change the kernel: the parent itself is not a new candidate",
    Reason.duplicate: "propose something not tried before",
    Reason.build_options: "use only well-formed build options the task allows",
    Reason.geometry: "the global size must be a multiple of the local size at every problem size",
    Reason.compile_error: "the kernel must compile; fix the error shown",
}


@dataclass
class Rejection:
    """One dropped proposal: why, the detail (e.g. the compiler's first error), and what it meant to do."""

    reason: Reason
    detail: str
    intent: str = ""


@dataclass
class ProposalReport:
    """Counters of one ``propose`` call: proposed = accepted + rejected (by reason).

    Duplicates dropped are the ``duplicate`` rejections. ``empty_reason``
    explains an empty result; ``errors`` holds failures that produced no
    proposal at all (e.g. the model server was unreachable).
    """

    generator: str
    requested: int = 0
    proposed: int = 0
    accepted: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    rejections: list[Rejection] = field(default_factory=list)
    validation: dict[str, str] = field(default_factory=dict)  # accepted hash -> how it was validated
    skipped_measured: int = 0  # template points not proposed because the store has them measured
    calls: int = 0  # model calls (LLM generators)
    rounds: int = 0
    feedback_sent: list[str] = field(default_factory=list)  # the feedback lines the last round's prompt showed
    errors: list[str] = field(default_factory=list)
    empty_reason: str = ""

    @property
    def duplicates(self) -> int:
        return self.rejected[Reason.duplicate.value]

    def reject(self, reason: Reason, detail: str, intent: str = "") -> None:
        self.proposed += 1
        self.rejected[reason.value] += 1
        self.rejections.append(Rejection(reason, _trim(detail, 400), intent))

    def accept(self, candidate: Candidate, how: str) -> None:
        self.proposed += 1
        self.accepted += 1
        self.validation[candidate.hash] = how

    def feedback(self, limit: int = 6) -> list[str]:
        """One line per rejection reason, most frequent first, with the first example's detail and a hint."""
        lines = []
        for reason, count in self.rejected.most_common(limit):
            example = next(r for r in self.rejections if r.reason.value == reason)
            lines.append(f"{count} proposal(s) rejected ({reason}): {_trim(example.detail, 240)} -> "
                         f"{FEEDBACK_HINTS[Reason(reason)]}")
        return lines

    def summary(self) -> str:
        parts = [f"{self.generator}: requested {self.requested}, proposed {self.proposed}, accepted {self.accepted}"]
        if self.rejected:
            parts.append("rejected " + ", ".join(f"{k} {v}" for k, v in self.rejected.most_common()))
        if self.skipped_measured:
            parts.append(f"{self.skipped_measured} measured template point(s) skipped")
        if self.errors:
            parts.append(f"{len(self.errors)} error(s): {self.errors[-1]}")
        if self.empty_reason:
            parts.append(self.empty_reason)
        return "; ".join(parts)


class Tried(BaseModel):
    """A kernel of the task already measured on this device: what it meant to do and how it did (latest)."""

    intent: str
    status: str  # a kernelcast.tools.core.measurement.Status value
    speedup: float | None = None  # measured, correct kernels only


class GenerationContext(BaseModel):
    """What a generator knows when it expands a parent. Build one with :meth:`from_store` or by hand."""

    parent_speedup: float | None = None
    parent_speedup_kind: Literal["measured", "forecast", "unknown"] = "unknown"
    parent_status: str | None = None  # a kernelcast.tools.core.measurement.Status value, None when not measured
    parent_report: str = ""  # trimmed compiler error / wrong-result report of the parent
    best: list[tuple[Candidate, float]] = Field(default_factory=list)  # best kernels so far with speedups
    hardware: HardwareSpec | None = None
    siblings: set[str] = Field(default_factory=set)  # hashes of the parent's children already tried
    feedback: list[str] = Field(default_factory=list)  # lines from earlier rejections (ProposalReport.feedback)
    seed: int = 0
    known_hashes: set[str] = Field(default_factory=set)  # store + search: never propose these again
    measured_points: list[dict[str, Any]] = Field(default_factory=list)  # template points measured on this device
    tried: list[Tried] = Field(default_factory=list)  # every kernel measured on this device (all generators)
    guided: list[dict[str, Any]] = Field(default_factory=list)  # template points the forecaster ranks best, best
    # first (agents.generate.guided): proposed before the generator's own choice of points
    template_only: bool = False  # the device answers template points only (a replayed recording): no generic edits

    @field_validator("parent_report")
    @classmethod
    def _trim_report(cls, value: str) -> str:
        return _trim(value, REPORT_CHARS)

    def with_feedback(self, lines: Iterable[str]) -> "GenerationContext":
        """A copy with more feedback lines (each once)."""
        merged = list(dict.fromkeys([*self.feedback, *lines]))
        return self.model_copy(update={"feedback": merged})

    def excluded(self) -> set[str]:
        """Every hash a new proposal must avoid."""
        return self.known_hashes | self.siblings

    @classmethod
    def from_store(cls, store: "Store", task: Task, device: str, parent: Candidate, *,
                   hardware: HardwareSpec | None = None, seed: int = 0, best_k: int = 3,
                   siblings: Iterable[str] = (), extra_known: Iterable[str] = (),
                   feedback: Iterable[str] = (), sizes: str = "full", run_id: str | None = None
                   ) -> "GenerationContext":
        """Fill the context from the store: kernels measured on ``device`` at ``sizes`` are known, the best
        are shown; ``run_id``: the run asking, whose replayed measurements count as measured too.

        Only measurements on ``device`` at the run's size set count: a kernel measured elsewhere, or only at
        the other sizes (a quick run at small sizes before the real one), is still new here.
        """
        measurements = store.ledger.find(task=task.name, device=device, sizes=sizes, fingerprint=task.fingerprint,
                                         visible_to=run_id)
        best: dict[str, float] = {}
        for m in measurements:
            if m.ok and m.speedup is not None:
                best[m.candidate_hash] = m.speedup  # later rows win: the latest measurement of each kernel
        ranked = []
        for key, speedup in sorted(best.items(), key=lambda kv: -kv[1])[:best_k]:
            candidate = store.candidates.get(key)
            if candidate is not None:
                ranked.append((candidate, speedup))
        latest = store.ledger.latest(parent.hash, device, sizes, fingerprint=task.fingerprint, visible_to=run_id)
        return cls(
            parent_speedup=latest.speedup if latest else None,
            parent_speedup_kind="measured" if latest is not None and latest.ok else "unknown",
            parent_status=latest.status.value if latest else None,
            parent_report="" if latest is None or latest.ok else latest.reason,
            best=ranked, hardware=hardware, siblings=set(siblings), feedback=list(feedback), seed=seed,
            known_hashes={m.candidate_hash for m in measurements} | set(extra_known),
            measured_points=store.ledger.measured_params(task.name, device, sizes, fingerprint=task.fingerprint,
                                                         visible_to=run_id),
            tried=_tried(store, task, measurements),
        )


def _tried(store: "Store", task: Task, measurements: list[Measurement]) -> list[Tried]:
    """The latest result of every measured kernel, with its intent (one query for the intents)."""
    latest = {m.candidate_hash: m for m in measurements}
    intents = store.candidates.intents(task.name)
    return [Tried(intent=intents.get(h) or "(no intent)", status=m.status.value, speedup=m.speedup if m.ok else None)
            for h, m in latest.items()]


@dataclass(frozen=True)
class Proposals:
    """What one ``propose`` call returns: the accepted candidates and the report of the whole call (returned,
    not kept on the generator, so two callers of one generator never read each other's report)."""

    candidates: list[Candidate]
    report: ProposalReport


@runtime_checkable
class Generator(Protocol):
    """Proposes up to ``n`` new, validated children of ``parent``; never raises on bad proposals."""

    name: str

    def propose(self, task: Task, parent: Candidate, context: GenerationContext, n: int) -> Proposals:
        ...


# ---- validation shared by every generator ------------------------------------------------
_HOST_CODE = [
    (re.compile(r"\bint\s+main\s*\("), "defines main()"),
    (re.compile(r"\bcl(Create|Enqueue|Build|SetKernelArg|GetPlatform|GetDevice|Finish|Release)\w*\s*\("),
     "calls the OpenCL host API"),
    (re.compile(r"\bcuda(Malloc|Memcpy|Free|DeviceSynchronize|LaunchKernel|SetDevice|StreamCreate)\w*\s*\("),
     "calls the CUDA host API"),
    (re.compile(r"#\s*include\s*[<\"](stdio\.h|stdlib\.h|string\.h|iostream|vector|CL/[\w.]+|OpenCL/[\w.]+|"
                r"cuda_runtime(_api)?\.h|cuda\.h)[>\"]"), "includes a host header"),
    (re.compile(r"<<<.*?>>>", re.S), "launches a kernel (<<<...>>>)"),
]


def host_code(source: str) -> str | None:
    """Why ``source`` looks like host code, or None. Generators only produce device code."""
    for pattern, why in _HOST_CODE:
        if pattern.search(source):
            return why
    return None


class Validator:
    """The checks every proposal passes before a generator returns it; records into a report.

    ``worker`` compiles proposals of its backend in an isolated process; a CUDA
    task with a worker of another backend is compile-checked with nvcc when
    it exists. Without a worker nothing is compiled (the measurement will
    catch it, at the price of a measurement).
    """

    def __init__(self, task: Task, parent: Candidate, report: ProposalReport, dedup: Deduplicator,
                 worker: "Measurer | MeasurementWorker | None" = None, hardware: HardwareSpec | None = None) -> None:
        self.task = task
        self.parent = parent
        self.report = report
        self.dedup = dedup
        self.worker = worker
        self.max_wg = hardware.max_work_group_size if hardware else 0
        self._reference_signature = signature(task.source, task.spec.entry, task.language)

    def check(self, candidate: Candidate) -> bool:
        """True (and recorded as accepted) when the candidate passes; else the rejection is recorded.

        A candidate that reaches the duplicate check is remembered even if a later check fails:
        a kernel that did not compile is not worth proposing twice either.
        """
        reason, detail = self._verdict(candidate)
        if reason is not None:
            self.report.reject(reason, detail, candidate.intent)
            return False
        self.report.accept(candidate, detail)
        return True

    def _verdict(self, c: Candidate) -> tuple[Reason | None, str]:
        """(reason, detail) of the first failed check, or (None, how it was validated)."""
        task, entry = self.task, self.task.spec.entry
        why = host_code(c.source)
        if why:
            return Reason.host_code, f"the source {why}"
        confined = source_problem(c.source)
        if confined:
            return Reason.host_code, confined
        try:
            signature(c.source, entry, task.language)
        except SignatureError as exc:
            return Reason.kernel_name, f"{exc} (renamed or missing)"
        try:
            check_signature(c.source, task.source, entry, task.language, c.build_options)
        except SignatureError as exc:
            return Reason.signature, str(exc)
        if c.hash == self.parent.hash:
            return Reason.unchanged, f"identical to the parent {self.parent.short} (after removing comments/whitespace)"
        if not self.dedup.add(c):
            return Reason.duplicate, f"{c.short} is already known"
        bad = bad_options(task, c.build_options)
        if bad:
            return Reason.build_options, bad
        for which in ("small", "full"):
            try:
                resolve_geometry(c, task.sizes(which), self.max_wg)
            except InvalidCandidate as exc:
                return Reason.geometry, f"{which} sizes: {exc}"
        return self._build(c)

    def _build(self, c: Candidate) -> tuple[Reason | None, str]:
        """Compile where a compiler is at hand: (None, how it was validated) or (compile_error, log)."""
        wanted = self.task.backend
        if self.worker is not None and self.worker.backend == wanted:
            status, log = self.worker.build(self.task, c)
            return (None, "compiles") if status == "ok" else (Reason.compile_error, f"{status}: {log}")
        if self.worker is not None and wanted == "cuda":
            from kernelcast.tools.hardware.nvcc import compile_check, nvcc_available

            if nvcc_available():
                ok, log = compile_check(c.source, c.build_options)
                if ok:
                    return None, "compiles (nvcc)"
                return Reason.compile_error, f"{Status.compile_error.value}: {log}"
        return None, "signature and geometry ok (not compiled)"


def bad_options(task: Task, options: list[str]) -> str | None:
    """Why ``options`` are not acceptable for ``task``, or None."""
    return option_problem(options, task.language, task.spec.tolerance.allow_fast_math)


def _trim(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 20] + f" ... [{len(text) - limit + 20} chars cut]"
