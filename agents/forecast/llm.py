"""Forecasting speedup bins with an LLM, in two modes.

``json``: the model writes short reasoning and eight probabilities as JSON
(schema-constrained where the server supports it); the numbers are repaired
or rejected by :func:`kernelcast.agents.forecast.base.repair_probabilities`.
``logprobs``: the model names one bin digit and the distribution is read from
the top log-probabilities over the tokens "1".."8" (no trust in stated numbers).

Whatever goes wrong (transport after retries, no JSON, bad numbers, even a
bug in prompt building) becomes an uninformative forecast flagged failed and
counted in :attr:`LLMForecaster.stats`; nothing raises into the caller.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import structlog
from pydantic import BaseModel, ConfigDict

from kernelcast.agents.forecast.base import Forecast, Provenance, RepairError, parse_bin, repair_probabilities
from kernelcast.agents.llm.client import Completion, LLMClient, LLMError, Messages, TokenLogprob
from kernelcast.agents.llm.prompting import bin_table, clip_source, device_guide, launch_text, load_prompt, work_estimate
from kernelcast.tools.core.bins import NUM_BINS
from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.measurement import HardwareSpec
from kernelcast.tools.core.task import Task

log = structlog.get_logger(__name__)

Mode = Literal["json", "logprobs"]
DIGITS = tuple(str(b) for b in range(1, NUM_BINS + 1))


class ForecastReply(BaseModel):
    """What the model must return in JSON mode; lenient on purpose (repair comes after)."""

    model_config = ConfigDict(extra="ignore")

    reasoning: str = ""
    probabilities: list[Any] | None = None
    predicted_bin: Any = None


# Sent to the server: stricter than ForecastReply so a grammar-constrained server
# must produce all three fields and exactly eight numbers. (No maxLength on the
# reasoning: llama.cpp's grammar for it is pathologically slow to build.)
REPLY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "reasoning": {"type": "string"},
        "probabilities": {"type": "array", "items": {"type": "number"}, "minItems": NUM_BINS, "maxItems": NUM_BINS},
        "predicted_bin": {"type": "integer", "minimum": 1, "maximum": NUM_BINS},
    },
    "required": ["reasoning", "probabilities", "predicted_bin"],
}


# ---- prompt ---------------------------------------------------------------------
def build_prompt(task: Task, candidate: Candidate, hardware: HardwareSpec, mode: Mode = "json",
                 max_source_chars: int = 6000) -> str:
    """The forecast prompt: bins, task, device, guide, both kernels with geometry, answer format."""
    sizes = task.sizes("full")
    reference = task.reference()
    return load_prompt("forecast").substitute(
        language="CUDA" if task.language == "cuda" else "OpenCL",
        bin_table=bin_table(),
        task_name=task.name,
        task_description=task.spec.description or "(no description)",
        sizes=", ".join(f"{k} = {v}" for k, v in sizes.items()),
        work_estimate=work_estimate(task, sizes),
        hardware=hardware.summary(),
        guide=device_guide(hardware),
        reference_launch=launch_text(reference.global_size, reference.local_size, sizes),
        reference_source=clip_source(task.source.strip(), max_source_chars),
        candidate_launch=launch_text(candidate.global_size, candidate.local_size, sizes),
        build_options=" ".join(candidate.build_options) or "(none)",
        params=", ".join(f"{k}={v}" for k, v in (candidate.params or {}).items()) or "(none)",
        intent=candidate.intent or "(not stated)",
        candidate_source=clip_source(candidate.source.strip(), max_source_chars),
        answer=load_prompt("answer_json" if mode == "json" else "answer_digit").template.strip(),
    )


# ---- reading replies ---------------------------------------------------------------
def digit_distribution(logprobs: Sequence[TokenLogprob]) -> tuple[np.ndarray, float]:
    """(distribution over bins, probability mass the model put on bin digits) from top log-probs.

    Uses the first generated position whose alternatives include a digit 1-8
    (" 5" counts as "5"). Digits outside the top-k get the smallest top-k
    probability, an upper bound on what they had, so no bin is called impossible
    merely because k was small. Raises RepairError when no digit appears.
    """
    for position in logprobs:
        digit_p = dict.fromkeys(DIGITS, 0.0)
        for token, lp in position.top.items():
            if token.strip() in digit_p:
                digit_p[token.strip()] += math.exp(lp)
        mass = sum(digit_p.values())
        if mass > 0:
            floor = min(math.exp(lp) for lp in position.top.values())
            p = np.array([digit_p[d] or floor for d in DIGITS])
            return p / p.sum(), mass
    raise RepairError("no bin digit 1-8 among the top log-probabilities")


@dataclass
class ForecasterStats:
    """How often the model's answers were usable as given, repaired, or replaced by an uninformative forecast."""

    calls: int = 0
    ok: int = 0
    repaired: int = 0
    failed: int = 0
    failures: Counter[str] = field(default_factory=Counter)  # by kind: transport, parse, repair, ...

    @property
    def failure_rate(self) -> float:
        return self.failed / self.calls if self.calls else 0.0


class LLMForecaster:
    """A :class:`kernelcast.agents.forecast.base.Forecaster` backed by any chat model through :class:`LLMClient`."""

    def __init__(self, client: LLMClient, *, mode: Mode = "json", name: str | None = None, max_tokens: int = 300,
                 top_logprobs: int = 20, min_digit_mass: float = 0.05, max_source_chars: int = 6000,
                 temperature: float | None = None) -> None:
        if mode not in ("json", "logprobs"):
            raise ValueError(f"mode must be 'json' or 'logprobs', got {mode!r}")
        self.client = client
        self.mode: Mode = mode
        self.name = name or f"llm-{mode}"
        self.max_tokens = max_tokens
        self.top_logprobs = top_logprobs
        self.min_digit_mass = min_digit_mass
        self.max_source_chars = max_source_chars
        self.temperature = temperature
        self.stats = ForecasterStats()
        self._lock = threading.Lock()

    def forecast(self, task: Task, candidate: Candidate, hardware: HardwareSpec) -> Forecast:
        return self.forecast_many(task, [candidate], hardware)[0]

    def forecast_many(self, task: Task, candidates: Sequence[Candidate], hardware: HardwareSpec) -> list[Forecast]:
        """Forecasts in order, the model calls running concurrently (up to the client's limit).

        Failures stay with their candidate: a prompt that cannot be built or a
        call that fails yields that candidate's uninformative forecast only.
        """
        replies: list[Completion | LLMError | Exception | None] = [None] * len(candidates)
        prompts: dict[int, Messages] = {}
        for i, candidate in enumerate(candidates):
            try:
                prompts[i] = self.messages(task, candidate, hardware)
            except Exception as exc:  # noqa: BLE001 - a bug here must still not take down the search
                log.exception("forecast_prompt_failed", forecaster=self.name)
                replies[i] = exc
        try:
            answered = self.client.complete_many(list(prompts.values()), **self._call_kwargs())
        except Exception as exc:  # noqa: BLE001
            log.exception("forecast_calls_failed", forecaster=self.name)
            answered = [LLMError("transport", f"{type(exc).__name__}: {exc}")] * len(prompts)
        for i, reply in zip(prompts, answered):
            replies[i] = reply
        return [_stamped(self._to_forecast(reply), task, c) for reply, c in zip(replies, candidates)]

    def messages(self, task: Task, candidate: Candidate, hardware: HardwareSpec) -> Messages:
        prompt = build_prompt(task, candidate, hardware, self.mode, self.max_source_chars)
        return [{"role": "user", "content": prompt}]

    # ---- internals ----------------------------------------------------------------
    def _call_kwargs(self) -> dict[str, Any]:
        if self.mode == "logprobs":
            return {"max_tokens": 1, "logprobs": True, "top_logprobs": self.top_logprobs,
                    "temperature": self.temperature}
        return {"schema": ForecastReply, "json_schema": REPLY_SCHEMA, "max_tokens": self.max_tokens,
                "temperature": self.temperature}

    def _to_forecast(self, reply: Completion | LLMError | Exception | None) -> Forecast:
        try:
            if isinstance(reply, LLMError):
                return self._failed(reply.kind, str(reply), latency_s=reply.latency_s)
            if not isinstance(reply, Completion):
                return self._failed("internal", f"{type(reply).__name__}: {reply}")
            forecast = self._read(reply)
        except RepairError as exc:
            return self._failed("repair", str(exc), **self._cost(reply))  # type: ignore[arg-type]
        except Exception as exc:  # noqa: BLE001 - never raise into the caller
            log.exception("forecast_read_failed", forecaster=self.name)
            return self._failed("internal", f"{type(exc).__name__}: {exc}")
        with self._lock:
            self.stats.calls += 1
            if forecast.provenance.repaired:
                self.stats.repaired += 1
            else:
                self.stats.ok += 1
        return forecast

    def _read(self, reply: Completion) -> Forecast:
        """Completion -> Forecast; raises RepairError for numbers that cannot be trusted."""
        if self.mode == "logprobs":
            probs, mass = digit_distribution(reply.logprobs)
            notes = [f"only {mass:.3g} of the probability mass was on bin digits"] if mass < self.min_digit_mass else []
            prov = self._provenance(reply, raw_sum=mass, repaired=bool(notes), repair_notes=notes)
            return Forecast.from_probabilities(probs, prov, reasoning=reply.text.strip(),
                                               stated_bin=_digit(reply.text))
        assert isinstance(reply.parsed, ForecastReply)
        parsed = reply.parsed
        fixed = repair_probabilities(parsed.probabilities, parsed.predicted_bin)
        prov = self._provenance(reply, raw_sum=fixed.raw_sum, repaired=fixed.repaired, repair_notes=fixed.notes)
        return Forecast.from_probabilities(fixed.probabilities, prov, reasoning=parsed.reasoning.strip(),
                                           stated_bin=parse_bin(parsed.predicted_bin))

    def _cost(self, reply: Completion) -> dict[str, Any]:
        return {"latency_s": reply.latency_s, "prompt_tokens": reply.prompt_tokens,
                "completion_tokens": reply.completion_tokens}

    def _provenance(self, reply: Completion, **fields: Any) -> Provenance:
        return Provenance(forecaster=self.name, model=self.client.model, mode=self.mode, **self._cost(reply), **fields)

    def _failed(self, kind: str, reason: str, **cost: Any) -> Forecast:
        with self._lock:
            self.stats.calls += 1
            self.stats.failed += 1
            self.stats.failures[kind] += 1
        log.warning("forecast_failed", forecaster=self.name, kind=kind, reason=reason[:300])
        return Forecast.uninformative(f"{kind}: {reason}" if not reason.startswith(kind) else reason,
                                      forecaster=self.name, model=self.client.model, mode=self.mode, **cost)


def _stamped(forecast: Forecast, task: Task, candidate: Candidate) -> Forecast:
    """The forecast keyed to its candidate; a candidate too broken to hash keeps only the task name."""
    try:
        return forecast.for_candidate(task, candidate)
    except Exception:  # noqa: BLE001 - never raise into the caller
        log.exception("forecast_stamp_failed")
        return forecast.model_copy(update={"task": task.name})


def _digit(text: str) -> int | None:
    stripped = text.strip()
    return int(stripped[0]) if stripped[:1] in DIGITS else None
