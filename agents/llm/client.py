"""The one LLM client of kernelcast, over litellm.

Any OpenAI-compatible server (llama.cpp, vLLM) or hosted provider works by
model string and base URL. Here, once, live the things every model call
needs: retries with exponential backoff on transport errors, rate limits and
timeouts (never on request errors such as 400/422), a per-call timeout, token
and latency accounting, a concurrency limit, and structured output validated
by pydantic with fallbacks (JSON-schema response format -> forced tool call ->
JSON found in plain text). Every failure leaves as :class:`LLMError` with a
kind, so callers can degrade instead of crashing.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ValidationError
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from kernelcast.tools.core.errors import KernelcastError
from kernelcast.tools.core.settings import get_settings

StructuredMode = Literal["json_schema", "tool", "text"]
STRUCTURED_FALLBACK: tuple[StructuredMode, ...] = ("json_schema", "tool", "text")
ErrorKind = Literal["transport", "request", "parse", "validation"]
Messages = list[dict[str, Any]]

RETRYABLE_STATUS = frozenset({408, 409, 425, 429})


class LLMError(KernelcastError, RuntimeError):
    """A model call that produced nothing usable.

    kind: ``transport`` (connection, timeout, rate limit, 5xx; after retries),
    ``request`` (the server rejected the request), ``parse`` (no JSON object in
    the reply), ``validation`` (JSON that does not fit the schema).
    """

    def __init__(self, kind: ErrorKind, message: str, attempts: int = 1, text: str | None = None,
                 data: dict[str, Any] | None = None) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.attempts = attempts
        self.text = text
        self.data = data
        self.latency_s = 0.0  # wall time of the failed complete() call, retries included


@dataclass
class Usage:
    """Running totals for one client (thread-safe through the client's lock)."""

    calls: int = 0  # complete() calls that returned a usable reply
    errors: int = 0  # complete() calls that raised LLMError (tokens of unusable replies still count)
    attempts: int = 0  # HTTP requests, retries included
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token with its log-probability and the top alternatives at that position."""

    token: str
    logprob: float
    top: dict[str, float]


@dataclass
class Completion:
    """A model reply: text, the validated object if a schema was asked, and its cost."""

    text: str
    model: str
    latency_s: float
    prompt_tokens: int = 0
    completion_tokens: int = 0
    attempts: int = 1
    mode: str = "plain"  # plain | json_schema | tool | text (how structured output was obtained)
    finish_reason: str | None = None
    data: dict[str, Any] | None = None  # the JSON object found in the reply
    parsed: BaseModel | None = None  # ``data`` validated by the schema
    logprobs: list[TokenLogprob] = field(default_factory=list)


def is_retryable(exc: BaseException) -> bool:
    """Transport problems, timeouts, rate limits and server errors; not request errors."""
    import openai

    if isinstance(exc, (openai.APIConnectionError, TimeoutError, ConnectionError)):
        return True
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        return status in RETRYABLE_STATUS or status >= 500
    return False


def load_litellm() -> Any:
    """Import litellm lazily and offline: by default it fetches a price list from the network at import."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.suppress_debug_info = True
    return litellm


def resolve_api_base(model: str, api_base: str | None = None) -> str | None:
    """Argument, else KERNELCAST_API_BASE, else OPENAI_BASE_URL for OpenAI-style model strings."""
    if api_base:
        return api_base
    if get_settings().api_base:
        return get_settings().api_base
    if "/" not in model or model.startswith("openai/"):
        return os.environ.get("OPENAI_BASE_URL") or None
    return None


def resolve_api_key(api_key: str | None, api_base: str | None) -> str | None:
    """Argument, else KERNELCAST_API_KEY; a custom base URL (local server) gets OPENAI_API_KEY or "none".

    With neither, litellm reads the provider's own variable (e.g. ANTHROPIC_API_KEY).
    """
    if api_key:
        return api_key
    key = get_settings().api_key
    if key is not None and key.get_secret_value():
        return key.get_secret_value()
    if api_base:
        return os.environ.get("OPENAI_API_KEY") or "none"
    return None


_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.S)


def extract_json(text: str) -> dict[str, Any] | None:
    """The first JSON object in a reply: whole text, fenced block, or embedded in prose."""
    candidates = [text.strip(), *(m.strip() for m in _FENCE.findall(text))]
    for chunk in candidates:
        try:
            value = json.loads(chunk)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    decoder = json.JSONDecoder()
    for match in re.finditer(r"\{", text):
        try:
            value, _ = decoder.raw_decode(text, match.start())
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


def _get(obj: Any, name: str, default: Any = None) -> Any:
    """Attribute or key access: litellm returns objects or dicts depending on provider."""
    if obj is None:
        return default
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


class LLMClient:
    """Model calls with retries, timeouts, accounting, a concurrency limit and structured output."""

    def __init__(
        self,
        model: str,
        api_base: str | None = None,
        api_key: str | None = None,
        *,
        timeout_s: float = 60.0,
        max_retries: int = 3,
        backoff_s: float = 0.5,
        backoff_max_s: float = 8.0,
        max_concurrency: int = 4,
        temperature: float = 0.0,
        structured: StructuredMode = "json_schema",
        extra: dict[str, Any] | None = None,
    ) -> None:
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        if structured not in STRUCTURED_FALLBACK:
            raise ValueError(f"structured must be one of {STRUCTURED_FALLBACK}, got {structured!r}")
        self.model = model
        self.api_base = resolve_api_base(model, api_base)
        self._api_key = resolve_api_key(api_key, self.api_base)
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self.max_concurrency = max_concurrency
        self.temperature = temperature
        self.structured: StructuredMode = structured
        self.extra = dict(extra or {})
        self.usage = Usage()
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(max_concurrency)

    def __repr__(self) -> str:  # never shows the key
        return f"LLMClient(model={self.model!r}, api_base={self.api_base!r})"

    # ---- public API ---------------------------------------------------------
    def complete(
        self,
        messages: Messages,
        *,
        schema: type[BaseModel] | None = None,
        json_schema: dict[str, Any] | None = None,
        max_tokens: int = 256,
        temperature: float | None = None,
        logprobs: bool = False,
        top_logprobs: int | None = None,
        **kwargs: Any,
    ) -> Completion:
        """One chat completion; with ``schema``, the reply is validated into ``Completion.parsed``.

        ``json_schema`` overrides the schema sent to the server (e.g. stricter
        than the pydantic model used to validate, so a grammar-constrained
        server is pushed harder than the validator requires). Raises LLMError.
        """
        wire_schema = json_schema or (schema.model_json_schema() if schema else None)
        request: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "max_tokens": max_tokens,
            "temperature": self.temperature if temperature is None else temperature,
            **self.extra,
            **kwargs,
        }
        if logprobs:
            request["logprobs"] = True
            if top_logprobs is not None:
                request["top_logprobs"] = top_logprobs
        start = time.perf_counter()
        attempts = 0
        try:
            with self._slots:
                while True:
                    mode = self.structured if wire_schema is not None else None
                    try:
                        response, n = self._send(self._with_structure(request, mode, wire_schema, schema))
                        attempts += n
                        break
                    except LLMError as exc:
                        attempts += exc.attempts
                        if mode in ("json_schema", "tool") and _format_rejected(exc):
                            self._downgrade(mode)
                            continue
                        exc.attempts = attempts
                        raise
            completion = self._completion(response, time.perf_counter() - start, attempts, mode or "plain")
            with self._lock:  # tokens were spent even if the reply turns out unusable
                self.usage.prompt_tokens += completion.prompt_tokens
                self.usage.completion_tokens += completion.completion_tokens
            if schema is not None or wire_schema is not None:
                self._parse(completion, response, schema)
        except LLMError as exc:
            exc.latency_s = time.perf_counter() - start
            with self._lock:
                self.usage.errors += 1
                self.usage.latency_s += exc.latency_s
            raise
        with self._lock:
            self.usage.calls += 1
            self.usage.latency_s += completion.latency_s
        return completion

    def complete_many(self, requests: Sequence[Messages], **kwargs: Any) -> list[Completion | LLMError]:
        """Many completions in parallel (at most ``max_concurrency`` at once), in order; errors in place."""

        def one(messages: Messages) -> Completion | LLMError:
            try:
                return self.complete(messages, **kwargs)
            except LLMError as exc:
                return exc

        if len(requests) <= 1:
            return [one(m) for m in requests]
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(requests))) as pool:
            return list(pool.map(one, requests))

    # ---- internals ----------------------------------------------------------
    def _downgrade(self, failed: StructuredMode) -> None:
        """Move to the next structured-output mode after the server rejected ``failed`` (kept for later calls)."""
        with self._lock:
            if self.structured == failed:
                self.structured = STRUCTURED_FALLBACK[STRUCTURED_FALLBACK.index(failed) + 1]

    @staticmethod
    def _with_structure(request: dict[str, Any], mode: StructuredMode | None, wire_schema: dict[str, Any] | None,
                        schema: type[BaseModel] | None) -> dict[str, Any]:
        if mode is None or wire_schema is None or mode == "text":
            return request
        if mode == "json_schema":
            # llama.cpp's server turns this schema into a grammar; OpenAI treats it as JSON mode
            return {**request, "response_format": {"type": "json_object", "schema": wire_schema}}
        name = (schema.__name__ if schema else "answer").lower()
        tool = {"type": "function", "function": {"name": name, "description": "Give the answer.",
                                                 "parameters": wire_schema}}
        return {**request, "tools": [tool], "tool_choice": {"type": "function", "function": {"name": name}}}

    def _send(self, request: dict[str, Any]) -> tuple[Any, int]:
        """POST with tenacity retries; returns (response, attempts) or raises LLMError."""
        litellm = load_litellm()
        retryer = Retrying(
            stop=stop_after_attempt(self.max_retries + 1),
            wait=wait_exponential(multiplier=self.backoff_s, max=self.backoff_max_s),
            retry=retry_if_exception(is_retryable),
            before_sleep=self._count_retry,
            reraise=True,
        )
        attempt_no = 0
        try:
            for attempt in retryer:
                with attempt:
                    attempt_no = attempt.retry_state.attempt_number
                    with self._lock:
                        self.usage.attempts += 1
                    return (
                        litellm.completion(
                            **request, api_base=self.api_base, api_key=self._api_key, timeout=self.timeout_s,
                            num_retries=0, max_retries=0,  # tenacity is the only retry layer
                        ),
                        attempt_no,
                    )
        except Exception as exc:  # noqa: BLE001 - litellm raises many types; all leave as LLMError
            kind: ErrorKind = "transport" if is_retryable(exc) else "request"
            raise LLMError(kind, f"{type(exc).__name__}: {_short(str(exc))}", attempts=max(attempt_no, 1)) from exc
        raise AssertionError("unreachable: tenacity either returns or raises")

    def _count_retry(self, state: RetryCallState) -> None:
        with self._lock:
            self.usage.retries += 1

    def _completion(self, response: Any, latency_s: float, attempts: int, mode: str) -> Completion:
        choice = response.choices[0]
        message = choice.message
        usage = _get(response, "usage")
        return Completion(
            text=_get(message, "content") or "",
            model=_get(response, "model") or self.model,
            latency_s=latency_s,
            prompt_tokens=int(_get(usage, "prompt_tokens") or 0),
            completion_tokens=int(_get(usage, "completion_tokens") or 0),
            attempts=attempts,
            mode=mode,
            finish_reason=_get(choice, "finish_reason"),
            logprobs=_token_logprobs(_get(choice, "logprobs")),
        )

    @staticmethod
    def _parse(completion: Completion, response: Any, schema: type[BaseModel] | None) -> None:
        """Fill ``data``/``parsed`` from a tool call or the text; raise LLMError(parse|validation)."""
        data = None
        said = completion.text  # what the model answered: a tool call's arguments, else the message text
        tool_calls = _get(response.choices[0].message, "tool_calls") or []
        if tool_calls:
            arguments = _get(_get(tool_calls[0], "function"), "arguments") or ""
            data = extract_json(arguments) if isinstance(arguments, str) else arguments
            if isinstance(arguments, str) and arguments and not completion.text:
                said = arguments  # a malformed call is reported with its arguments, not as an empty reply
        if data is None:
            data = extract_json(completion.text)
        if data is None:
            truncated = " (reply truncated: finish_reason=length)" if completion.finish_reason == "length" else ""
            raise LLMError("parse", f"no JSON object in the reply{truncated}: {_short(said)!r}",
                           attempts=completion.attempts, text=said)
        completion.data = data
        if schema is not None:
            try:
                completion.parsed = schema.model_validate(data)
            except ValidationError as exc:
                raise LLMError("validation", _short(str(exc)), attempts=completion.attempts,
                               text=completion.text, data=data) from exc


def _format_rejected(exc: LLMError) -> bool:
    """A 400/422 that may mean "this server does not support that structured-output option"."""
    cause = exc.__cause__
    if exc.kind != "request" or "ContextWindow" in type(cause).__name__:
        return False
    return getattr(cause, "status_code", None) in (400, 422) or "UnsupportedParams" in type(cause).__name__


def _token_logprobs(raw: Any) -> list[TokenLogprob]:
    out = []
    for item in _get(raw, "content") or []:
        top: dict[str, float] = {}
        for alt in _get(item, "top_logprobs") or []:
            token, lp = _get(alt, "token"), _get(alt, "logprob")
            if token is not None and lp is not None:
                top[token] = max(float(lp), top.get(token, float("-inf")))
        out.append(TokenLogprob(token=_get(item, "token") or "", logprob=float(_get(item, "logprob") or 0.0), top=top))
    return out


def _short(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
