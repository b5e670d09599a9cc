"""A generator that asks a language model for rewritten kernels.

The prompt (agents/llm/prompts/generate*.md) shows the task, the reference, the
parent with how it did, the device, the best kernels so far and the feedback
on earlier rejections, and asks for K candidates as one JSON object. Every
entry of the reply goes through :func:`read_reply`: parsed leniently, then
validated by the same :class:`kernelcast.agents.generate.base.Validator` as offline
proposals. Anything wrong with the model's output becomes a counted
rejection whose reason is fed back in the next round; nothing raises.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

import structlog

from kernelcast.agents.generate.base import GenerationContext, ProposalReport, Proposals, Reason, Validator
from kernelcast.agents.generate.dedup import Deduplicator
from kernelcast.agents.llm.client import LLMClient, LLMError, Messages
from kernelcast.agents.llm.prompting import (
    clip_source,
    derived_space_text,
    device_guide,
    launch_text,
    load_prompt,
    tried_text,
    work_estimate,
)
from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.task import BufferArg, LocalArg, Task

if TYPE_CHECKING:
    from kernelcast.tools.hardware.measurers.base import Measurer

log = structlog.get_logger(__name__)

SYSTEM = "You write fast, correct GPU and CPU kernels. You answer with one JSON object and nothing else."
MAX_INTENT_CHARS = 300


def reply_schema(k: int) -> dict[str, Any]:
    """The JSON schema sent to the server (a grammar on llama.cpp); :func:`read_reply` stays lenient."""
    exprs = {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3}
    item = {
        "type": "object",
        "properties": {
            "intent": {"type": "string"},
            "source": {"type": "string"},
            "global_size": exprs,
            "local_size": {"anyOf": [exprs, {"type": "null"}]},
            "build_options": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["intent", "source", "global_size", "local_size", "build_options"],
    }
    return {"type": "object", "properties": {"candidates": {"type": "array", "items": item, "minItems": 1,
                                                             "maxItems": max(1, k)}},
            "required": ["candidates"]}


# ---- prompt ------------------------------------------------------------------------------
def _args(task: Task) -> str:
    lines = []
    for arg in task.spec.args:
        if isinstance(arg, BufferArg):
            lines.append(f"- {arg.name}: buffer of {arg.dtype} [{' x '.join(map(str, arg.shape))}], {arg.direction}")
        elif isinstance(arg, LocalArg):
            lines.append(f"- {arg.name}: __local memory of {arg.dtype} [{' x '.join(map(str, arg.shape))}] per "
                         "work-group (sized by the host; keep the work-group size)")
        else:
            lines.append(f"- {arg.name}: scalar {arg.dtype} = {arg.value}")
    return "\n".join(lines)


def _parent_result(context: GenerationContext) -> str:
    if context.parent_status is not None and context.parent_status != "correct":
        return f"FAILED ({context.parent_status}): {context.parent_report or 'no details'}"
    if context.parent_speedup is not None:
        how = "measured" if context.parent_speedup_kind == "measured" else "forecast, not measured"
        return f"correct, speedup {context.parent_speedup:.3g}x over the reference ({how})"
    return "not measured yet"


def _best(task: Task, parent: Candidate, context: GenerationContext, max_source_chars: int) -> str:
    if not context.best:
        return "(none measured yet)"
    sizes = task.sizes("full")
    lines = []
    for i, (cand, speedup) in enumerate(context.best if not context.tried else [], 1):  # else: in the tried list
        mark = " (this is the parent)" if cand.hash == parent.hash else ""
        lines.append(f"{i}. {speedup:.3g}x{mark}: {cand.intent or 'no intent'}; "
                     f"{launch_text(cand.global_size, cand.local_size, sizes)}")
    top, top_speedup = context.best[0]
    if top.hash != parent.hash:
        launch = launch_text(top.global_size, top.local_size, sizes)
        lines.append(f"\nSource of the best kernel ({top_speedup:.3g}x, {launch}):"
                     f"\n```\n{clip_source(top.source.strip(), max_source_chars // 2)}\n```")
    return "\n".join(lines).strip() or "(the parent is the best kernel so far)"


def _feedback(context: GenerationContext) -> str:
    lines = [f"- {line}" for line in context.feedback]
    if context.siblings:
        lines.append(f"- {len(context.siblings)} other children of this parent were already tried; do not repeat them.")
    return "\n".join(lines) or "(none yet)"


def build_prompt(task: Task, parent: Candidate, context: GenerationContext, k: int,
                 max_source_chars: int = 4000) -> str:
    """The generation prompt from agents/llm/prompts/generate.md and the language's rules."""
    sizes, tol = task.sizes("full"), task.spec.tolerance
    fast = ("Fast-math flags are allowed for this task." if tol.allow_fast_math
            else "Fast-math flags (e.g. -cl-fast-relaxed-math, --use_fast_math) are NOT allowed for this task.")
    rules = load_prompt(f"generate_{task.language}").substitute(entry=task.spec.entry, fast_math=fast).strip()
    ref = task.reference()
    hardware = context.hardware
    parent_source = ("(the same as the reference kernel above)" if parent.hash == ref.hash
                     else clip_source(parent.source.strip(), max_source_chars))
    prompt = load_prompt("generate").substitute(
        language="CUDA" if task.language == "cuda" else "OpenCL",
        k=k,
        task_name=task.name,
        task_description=task.spec.description or "(no description)",
        args=_args(task),
        sizes=", ".join(f"{n} = {v}" for n, v in sizes.items()),
        small_sizes=", ".join(f"{n} = {v}" for n, v in task.sizes("small").items()),
        work_estimate=work_estimate(task, sizes),
        rtol=tol.rtol, atol=tol.atol,
        hardware=hardware.summary() if hardware else "(unknown device)",
        guide=device_guide(hardware) if hardware else "",
        rules=rules,
        reference_launch=launch_text(ref.global_size, ref.local_size, sizes),
        reference_source=clip_source(task.source.strip(), max_source_chars),
        parent_launch=launch_text(parent.global_size, parent.local_size, sizes),
        parent_options=" ".join(parent.build_options) or "(none)",
        parent_intent=parent.intent or "(not stated)",
        parent_result=_parent_result(context),
        parent_source=parent_source,
        best=_best(task, parent, context, max_source_chars),
        feedback=_feedback(context),
        derived_space=derived_space_text(task, hardware.max_work_group_size if hardware else None),
        tried=tried_text(context.tried),
        size_names=", ".join(sizes),
        example_global=json.dumps([str(e) for e in ref.global_size]),
    )
    return re.sub(r"\n{3,}", "\n\n", prompt)


# ---- reading replies -----------------------------------------------------------------------------
_FENCE = re.compile(r"^\s*```[A-Za-z+]*\s*\n(.*?)\n?```\s*$", re.S)


def read_reply(reply: str | dict[str, Any], task: Task, parent: Candidate, validator: Validator,
               generator: str = "llm", limit: int | None = None) -> list[Candidate]:
    """The valid candidates in one model reply; every problem is a counted rejection in ``validator.report``.

    Accepts ``{"candidates": [...]}``, a bare list, or a single candidate object; at most ``limit`` entries
    are read (the rest of an over-long answer is ignored, not rejected).
    """
    from kernelcast.agents.llm.client import extract_json

    report = validator.report
    data: Any = reply
    if isinstance(reply, str):
        data = extract_json(reply)
        if data is None:
            report.reject(Reason.not_json, f"no JSON object in the reply: {_snippet(reply)!r}")
            return []
    if isinstance(data, dict) and "candidates" not in data and "source" in data:
        data = {"candidates": [data]}
    items = data.get("candidates") if isinstance(data, dict) else data
    if not isinstance(items, list) or not items:
        report.reject(Reason.missing_fields, f"expected a non-empty 'candidates' list, got {_snippet(str(data))!r}")
        return []
    out = []
    for item in items[:limit]:
        parsed = to_candidate(item, task, parent, generator)
        if isinstance(parsed, str):
            report.reject(Reason.missing_fields, parsed, item.get("intent", "") if isinstance(item, dict) else "")
        elif validator.check(parsed):
            out.append(parsed)
    return out


def to_candidate(item: Any, task: Task, parent: Candidate, generator: str) -> Candidate | str:
    """One reply entry as a Candidate, or what is missing or malformed in it."""
    if not isinstance(item, dict):
        return f"candidate entry is not an object: {_snippet(str(item))!r}"
    source = item.get("source")
    if not isinstance(source, str) or not source.strip():
        return "candidate has no 'source' text"
    fenced = _FENCE.match(source)
    source = fenced.group(1) if fenced else source
    global_size = _exprs(item.get("global_size"))
    if not global_size:
        return "candidate has no usable 'global_size' (a list of 1-3 non-empty expressions)"
    local_raw = item.get("local_size")
    local_size = None if local_raw in (None, [], "", "null") else _exprs(local_raw)
    if local_raw not in (None, [], "", "null") and not local_size:
        return f"'local_size' must be null or a list of 1-3 expressions, got {local_raw!r}"
    options = item.get("build_options") or []
    if isinstance(options, str):
        options = options.split()
    if not isinstance(options, list) or not all(isinstance(o, str) for o in options):
        return f"'build_options' must be a list of strings, got {options!r}"
    intent = item.get("intent")
    intent = " ".join(intent.split())[:MAX_INTENT_CHARS] if isinstance(intent, str) and intent.strip() else ""
    return Candidate(task=task.name, source=source.strip() + "\n", global_size=global_size, local_size=local_size,
                     build_options=[o.strip() for o in options if o.strip()], parent=parent.hash,
                     origin="llm", note=intent or "llm rewrite (no intent given)", generator=generator)


def _exprs(value: Any) -> list[str] | None:
    """A list of 1-3 non-empty expressions (numbers become strings; one bare value is one dimension)."""
    if isinstance(value, (str, int)) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, list) or not 1 <= len(value) <= 3:
        return None
    out = []
    for v in value:
        if isinstance(v, bool) or not isinstance(v, (str, int)) or not str(v).strip():
            return None
        out.append(str(v).strip())
    return out


def _snippet(text: str, limit: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


# ---- the generator --------------------------------------------------------------------------------
class LLMGenerator:
    """Rounds of: prompt -> one model call -> read and validate; rejections feed the next round's prompt."""

    def __init__(self, client: LLMClient, worker: "Measurer | None" = None, *, max_rounds: int = 2,
                 max_per_call: int = 4, max_tokens: int = 3000, temperature: float = 0.7,
                 max_source_chars: int = 4000) -> None:
        self.client = client
        self.worker = worker
        self.max_rounds = max_rounds
        self.max_per_call = max_per_call
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.max_source_chars = max_source_chars
        self.name = f"llm:{client.model}"

    def messages(self, task: Task, parent: Candidate, context: GenerationContext, k: int) -> Messages:
        prompt = build_prompt(task, parent, context, k, self.max_source_chars)
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}]

    def propose(self, task: Task, parent: Candidate, context: GenerationContext, n: int) -> Proposals:
        report = ProposalReport(generator=self.name, requested=n)
        validator = Validator(task, parent, report, Deduplicator(context.excluded()), self.worker, context.hardware)
        accepted: list[Candidate] = []
        for round_no in range(self.max_rounds):
            want = n - len(accepted)
            if want <= 0:
                break
            k = min(want, self.max_per_call)
            report.rounds += 1
            report.feedback_sent = list(context.feedback)
            reply = self._ask(task, parent, context, k, round_no, report)
            if reply is None:
                break
            accepted += read_reply(reply, task, parent, validator, self.name, limit=k)
            context = context.with_feedback(report.feedback())
        if not accepted and n > 0:
            report.empty_reason = "the model produced no valid candidate: " + (
                "; ".join(report.feedback(3)) or (report.errors[-1] if report.errors else "no reply"))
        log.info("llm proposals", task=task.name, parent=parent.short, summary=report.summary())
        return Proposals(accepted, report)

    def _ask(self, task: Task, parent: Candidate, context: GenerationContext, k: int, round_no: int,
             report: ProposalReport) -> str | dict[str, Any] | None:
        """The reply (parsed JSON or raw text), or None after an error that another round will not fix."""
        try:
            messages = self.messages(task, parent, context, k)
            completion = self.client.complete(messages, json_schema=reply_schema(k), max_tokens=self.max_tokens,
                                              temperature=self.temperature, seed=context.seed + round_no)
        except LLMError as exc:
            report.calls += 1
            if exc.kind in ("parse", "validation"):
                return exc.data if exc.data is not None else (exc.text or "")
            report.errors.append(str(exc))
            return None
        except Exception as exc:  # noqa: BLE001 - a bug in prompt building must not stop a search
            report.errors.append(f"{type(exc).__name__}: {exc}")
            return None
        report.calls += 1
        return completion.data if completion.data is not None else completion.text
