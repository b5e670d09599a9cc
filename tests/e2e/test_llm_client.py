"""The LLM client against real HTTP servers: llama.cpp on loopback, and a tiny status-code server."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from pydantic import BaseModel

from kernelcast.agents.llm.client import (
    LLMClient,
    LLMError,
    extract_json,
    is_retryable,
    load_litellm,
    resolve_api_base,
    resolve_api_key,
)
from kernelcast.tools.core.settings import get_settings

from support.llm_server import CannedServer, LlamaServer, free_port


# ---- pure helpers ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": 1}', {"a": 1}),
        ('Sure! Here it is:\n```json\n{"a": [1, 2]}\n```\nDone.', {"a": [1, 2]}),
        ('I think {"a": 2} and then {"b": 3}', {"a": 2}),
        ('broken {"a": } then {"c": 4}', {"c": 4}),
        ("[1, 2, 3]", None),
        ("no json here", None),
        ('{"reasoning": "cut off by max_toke', None),
    ],
)
def test_extract_json(text: str, expected: dict | None) -> None:
    assert extract_json(text) == expected


def test_retry_classification() -> None:
    litellm = load_litellm()
    assert is_retryable(litellm.APIConnectionError(message="refused", llm_provider="openai", model="m"))
    assert is_retryable(litellm.Timeout(message="slow", model="m", llm_provider="openai"))
    assert is_retryable(litellm.RateLimitError(message="429", llm_provider="openai", model="m"))
    assert is_retryable(litellm.InternalServerError(message="500", llm_provider="openai", model="m"))
    assert not is_retryable(litellm.BadRequestError(message="400", model="m", llm_provider="openai"))
    assert not is_retryable(litellm.AuthenticationError(message="401", llm_provider="openai", model="m"))
    assert not is_retryable(ValueError("a bug is not a transport problem"))


def test_endpoint_and_key_resolution(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("KERNELCAST_API_BASE", "OPENAI_BASE_URL", "KERNELCAST_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    get_settings.cache_clear()  # KERNELCAST_* are read through the settings
    assert resolve_api_base("openai/m") is None
    monkeypatch.setenv("OPENAI_BASE_URL", "http://o/v1")
    assert resolve_api_base("openai/m") == "http://o/v1"
    assert resolve_api_base("anthropic/claude") is None  # an OpenAI URL is not applied to other providers
    monkeypatch.setenv("KERNELCAST_API_BASE", "http://k/v1")
    get_settings.cache_clear()
    assert resolve_api_base("openai/m") == "http://k/v1"
    assert resolve_api_base("openai/m", "http://arg/v1") == "http://arg/v1"
    assert resolve_api_key(None, "http://local/v1") == "none"  # local servers need no key
    assert resolve_api_key(None, None) is None  # litellm reads the provider's own variable
    monkeypatch.setenv("KERNELCAST_API_KEY", "sk-test")
    get_settings.cache_clear()
    assert resolve_api_key(None, None) == "sk-test"
    assert "sk-test" not in repr(LLMClient("openai/m"))
    get_settings.cache_clear()  # the next reader sees the environment monkeypatch restores


# ---- retries and errors, against a real HTTP server with scripted status codes --------------
@pytest.fixture
def status_server(request: pytest.FixtureRequest) -> Iterator[CannedServer]:
    server = CannedServer(status=request.param)
    yield server
    server.close()


def fast_client(api_base: str, **kw: object) -> LLMClient:
    return LLMClient("openai/test", api_base=api_base, timeout_s=5, max_retries=2, backoff_s=0.01,
                     backoff_max_s=0.05, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("status_server", [429, 500, 503], indirect=True)
def test_rate_limits_and_server_errors_are_retried(status_server: CannedServer) -> None:
    client = fast_client(status_server.api_base)
    with pytest.raises(LLMError) as err:
        client.complete([{"role": "user", "content": "hi"}], max_tokens=2)
    assert err.value.kind == "transport"
    assert status_server.hits == 3 and err.value.attempts == 3  # no hidden retries below tenacity
    assert client.usage.retries == 2 and client.usage.errors == 1 and client.usage.calls == 0


@pytest.mark.parametrize("status_server", [400, 401, 422], indirect=True)
def test_request_errors_are_not_retried(status_server: CannedServer) -> None:
    client = fast_client(status_server.api_base)
    with pytest.raises(LLMError) as err:
        client.complete([{"role": "user", "content": "hi"}], max_tokens=2)
    assert err.value.kind == "request"
    assert status_server.hits == 1


@pytest.mark.parametrize("status_server", [400], indirect=True)
def test_rejected_response_format_falls_back_to_tool_then_text(status_server: CannedServer) -> None:
    client = fast_client(status_server.api_base)
    with pytest.raises(LLMError):
        client.complete([{"role": "user", "content": "hi"}], schema=Answer, max_tokens=2)
    assert status_server.hits == 3  # json_schema, tool, text
    assert client.structured == "text"  # remembered for the next call


def test_complete_many_respects_the_concurrency_limit() -> None:
    server = CannedServer(status=400, delay_s=0.2)
    try:
        client = fast_client(server.api_base, max_concurrency=2)
        out = client.complete_many([[{"role": "user", "content": str(i)}] for i in range(6)], max_tokens=2)
    finally:
        server.close()
    assert len(out) == 6 and all(isinstance(r, LLMError) and r.kind == "request" for r in out)
    assert server.hits == 6 and server.max_in_flight == 2
    assert client.usage.errors == 6


def test_closed_port_retries_then_fails_with_transport_error() -> None:
    client = fast_client(f"http://127.0.0.1:{free_port()}/v1", max_concurrency=1)
    start = time.perf_counter()
    with pytest.raises(LLMError) as err:
        client.complete([{"role": "user", "content": "hi"}], max_tokens=2)
    assert err.value.kind == "transport" and err.value.attempts == 3
    assert client.usage.attempts == 3 and client.usage.retries == 2
    assert time.perf_counter() - start < 10


# ---- against the real llama.cpp server ------------------------------------------------
class Answer(BaseModel):
    city: str
    population: int


@pytest.mark.llm
def test_structured_output_is_validated(llm_server: LlamaServer) -> None:
    client = LLMClient(llm_server.model, api_base=llm_server.api_base, timeout_s=60)
    reply = client.complete([{"role": "user", "content": "Name a big city and its population as JSON."}],
                            schema=Answer, max_tokens=40)
    assert reply.mode == "json_schema"
    assert isinstance(reply.parsed, Answer) and reply.data == reply.parsed.model_dump()
    assert reply.prompt_tokens > 0 and reply.completion_tokens > 0 and reply.latency_s > 0
    assert client.usage.calls == 1 and client.usage.total_tokens == reply.prompt_tokens + reply.completion_tokens


@pytest.mark.llm
def test_schema_mismatch_is_a_validation_error(llm_server: LlamaServer) -> None:
    """The server is constrained to one schema, the validator wants another: a validation error, data kept."""
    client = LLMClient(llm_server.model, api_base=llm_server.api_base, timeout_s=60)
    wire = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    with pytest.raises(LLMError) as err:
        client.complete([{"role": "user", "content": "Name a city as JSON."}], schema=Answer, json_schema=wire,
                        max_tokens=20)
    assert err.value.kind == "validation" and "city" in (err.value.data or {})


@pytest.mark.llm
def test_tool_call_mode(llm_server: LlamaServer) -> None:
    """The request goes out as a forced tool call and the server answers with one. The tiny model's arguments
    are not always valid JSON (llama-cpp-python 0.3.36 on an 8-lane AMD EPYC wrote '{ "city": "Santoramarket,
    Spain }' and prose): then the parse error carries the call's arguments for the caller to repair or defer,
    never an empty reply."""
    client = LLMClient(llm_server.model, api_base=llm_server.api_base, timeout_s=60, structured="tool")
    try:
        reply = client.complete([{"role": "user", "content": "Name a big city and its population."}],
                                schema=Answer, max_tokens=40)
    except LLMError as exc:
        assert exc.kind == "parse" and (exc.text or "").lstrip().startswith("{"), exc  # the tool call's own arguments
        assert client.structured == "tool"  # a malformed answer is no reason to leave the mode
    else:
        assert reply.mode == "tool" and isinstance(reply.parsed, Answer)


@pytest.mark.llm
def test_logprobs_passthrough(llm_server: LlamaServer) -> None:
    client = LLMClient(llm_server.model, api_base=llm_server.api_base, timeout_s=60)
    reply = client.complete([{"role": "user", "content": "Pick a number from 1 to 8."}], max_tokens=1,
                            logprobs=True, top_logprobs=5)
    assert len(reply.logprobs) == 1
    first = reply.logprobs[0]
    assert len(first.top) == 5 and all(lp <= 0 for lp in first.top.values())
    assert first.token in first.top


@pytest.mark.llm
def test_complete_many_keeps_order(llm_server: LlamaServer) -> None:
    client = LLMClient(llm_server.model, api_base=llm_server.api_base, timeout_s=60, max_concurrency=2)
    dead = f"http://127.0.0.1:{free_port()}/v1"
    prompts = [[{"role": "user", "content": "Repeat: " + "apple " * n}] for n in (1, 20, 40)]
    replies = client.complete_many(prompts, max_tokens=2)
    assert all(not isinstance(r, LLMError) for r in replies)
    tokens = [r.prompt_tokens for r in replies if not isinstance(r, LLMError)]
    assert tokens == sorted(tokens) and tokens[0] < tokens[2]  # replies line up with their prompts
    assert client.usage.calls == 3
    # a failing endpoint: errors come back in place, nothing raises
    broken = LLMClient("openai/x", api_base=dead, max_retries=0, max_concurrency=2)
    out = broken.complete_many(prompts[:2], max_tokens=4)
    assert [type(r) for r in out] == [LLMError, LLMError]


# ---- JSON found in plain-text replies (servers without constrained decoding) ----------------
def test_json_is_extracted_from_prose_replies() -> None:
    with CannedServer(contents=['Sure. ```json\n{"city": "Paris", "population": 2100000}\n``` Anything else?']) as srv:
        client = fast_client(srv.api_base, structured="text")
        reply = client.complete([{"role": "user", "content": "city?"}], schema=Answer, max_tokens=50)
    assert reply.mode == "text"
    assert reply.parsed == Answer(city="Paris", population=2100000)


def test_reply_without_json_is_a_parse_error() -> None:
    with CannedServer(contents=["I would rather not answer in JSON."]) as srv:
        client = fast_client(srv.api_base)
        with pytest.raises(LLMError) as err:
            client.complete([{"role": "user", "content": "city?"}], schema=Answer, max_tokens=50)
    assert err.value.kind == "parse" and err.value.text == "I would rather not answer in JSON."
    assert srv.hits == 1  # a parse error is not retried: the same prompt would fail the same way
    assert client.usage.errors == 1 and client.usage.total_tokens == 15  # the unusable reply still cost tokens
