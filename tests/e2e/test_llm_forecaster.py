"""The LLM forecaster: prompt, reading replies, and never raising, against real servers.

Real-model tests use SmolLM2-135M on llama.cpp (tiny and often wrong on
purpose). Scripted replies come from a real HTTP server speaking the OpenAI
API, standing in for a remote provider that returns garbage.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from kernelcast.agents.forecast.base import Forecast, RepairError
from kernelcast.agents.forecast.llm import LLMForecaster, build_prompt, digit_distribution
from kernelcast.agents.llm.client import LLMClient, TokenLogprob
from kernelcast.agents.llm.prompting import bin_table
from kernelcast.tools.core.bins import EDGES
from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.measurement import HardwareSpec
from kernelcast.tools.core.task import Task, resolve_task

from support.llm_server import CannedServer, LlamaServer, find_gguf, free_port

CPU = HardwareSpec(backend="opencl", platform="Portable Computing Language", name="pthread-AMD EPYC",
                   device_type="CPU", compute_units=2, clock_mhz=2596, global_mem_bytes=4 << 30,
                   local_mem_bytes=1 << 20, max_work_group_size=4096, preferred_vector_width_float=16,
                   native_vector_width_float=8, global_cache_bytes=32 << 20, global_cacheline_bytes=64)
GPU = HardwareSpec(backend="cuda", name="NVIDIA H200", device_type="GPU", compute_units=132, clock_mhz=1980)

VEC4_SOURCE = """__kernel void saxpy(__global const float4 *x, __global float4 *y, const float a, const int n)
{
    int i = get_global_id(0);
    y[i] = a * x[i] + y[i];
}
"""
SMOL_GARBAGE = [1.58, 1.99, 2e-16, 5.5e24, 9.2e24, -2.7e24, 4.6e24, -1.9e24]


@pytest.fixture(scope="module")
def task() -> Task:
    return resolve_task("saxpy")


@pytest.fixture(scope="module")
def vec4(task: Task) -> Candidate:
    return Candidate(task=task.name, source=VEC4_SOURCE, global_size=["N / 4"], local_size=["64"],
                     build_options=["-cl-fast-relaxed-math"], intent="float4 loads and stores", generator="test")


def check_accounted(f: Forecast, forecaster: LLMForecaster) -> None:
    """The invariant: a valid distribution, and exactly one of ok / repaired / failed counted for it."""
    assert sum(f.probabilities) == pytest.approx(1.0) and len(f.probabilities) == 8
    assert 1 <= f.predicted_bin <= 8
    s = forecaster.stats
    assert s.calls == s.ok + s.repaired + s.failed
    if f.failed:
        assert f.provenance.failure_reason and s.failed >= 1
        assert f.probabilities == pytest.approx([1 / 8] * 8)
    elif f.provenance.repaired:
        assert f.provenance.repair_notes and s.repaired >= 1
    else:
        assert s.ok >= 1


# ---- prompt ---------------------------------------------------------------------------
def test_prompt_has_bins_sources_geometry_and_hardware(task: Task, vec4: Candidate) -> None:
    prompt = build_prompt(task, vec4, CPU)
    assert "$" not in prompt  # every placeholder substituted
    assert "S = T_ref / T_cand" in prompt
    assert all(f"bin {b}:" in prompt for b in range(1, 9))
    assert "float4 *x" in prompt and "if (i < n)" in prompt  # candidate and reference
    assert "global [N / 4] = (2097152), local (64)" in prompt
    assert "-cl-fast-relaxed-math" in prompt and "float4 loads and stores" in prompt
    assert "pthread-AMD EPYC" in prompt and "preferred 16" in prompt
    assert '"probabilities"' in prompt


def test_bin_table_uses_the_single_edge_definition() -> None:
    table = bin_table()
    for edge in EDGES:
        assert f"{edge:.3g}" in table


def test_guide_follows_the_device_type(task: Task, vec4: Candidate) -> None:
    cpu, gpu = build_prompt(task, vec4, CPU), build_prompt(task, vec4, GPU)
    assert "PoCL" in cpu and "coalescing" not in cpu.lower()
    assert "coalescing" in gpu.lower() and "warp" in gpu.lower() and "PoCL" not in gpu


def test_digit_prompt_asks_for_one_digit(task: Task, vec4: Candidate) -> None:
    assert "single digit" in build_prompt(task, vec4, CPU, mode="logprobs")


# ---- reading log-probabilities ---------------------------------------------------------------
def test_digit_distribution_merges_variants_and_floors_missing_digits() -> None:
    pos = TokenLogprob("5", math.log(0.5), {"5": math.log(0.5), " 6": math.log(0.2), "The": math.log(0.1)})
    probs, mass = digit_distribution([pos])
    assert mass == pytest.approx(0.7)
    raw = np.array([0.1, 0.1, 0.1, 0.1, 0.5, 0.2, 0.1, 0.1])  # unseen digits get the top-k floor 0.1
    assert probs == pytest.approx(raw / raw.sum())


def test_digit_distribution_skips_positions_without_digits() -> None:
    lead = TokenLogprob("Bin", -0.1, {"Bin": -0.1, "The": -3.0})
    digit = TokenLogprob("7", -0.2, {"7": -0.2, "8": -2.0})
    probs, _ = digit_distribution([lead, digit])
    assert int(np.argmax(probs)) + 1 == 7
    with pytest.raises(RepairError):
        digit_distribution([lead])


# ---- scripted garbage through the whole path -----------------------------------------------
@pytest.mark.parametrize(
    ("content", "outcome"),
    [
        (json.dumps({"reasoning": "r", "probabilities": SMOL_GARBAGE, "predicted_bin": 5}), "failed:repair"),
        (json.dumps({"reasoning": "r", "probabilities": [0.5] * 7, "predicted_bin": 5}), "failed:repair"),
        ('{"reasoning": "r", "probabilities": [NaN, 0, 0, 0, 1, 0, 0, 0], "predicted_bin": 5}', "failed:repair"),
        ("Bin 6 seems likely because of float4.", "failed:parse"),
        (json.dumps({"reasoning": "vectorized", "predicted_bin": 6}), "repaired"),
        (json.dumps({"reasoning": "r", "probabilities": [0, 0, 0, 10, 60, 20, 10, 0], "predicted_bin": 5}), "repaired"),
        (json.dumps({"reasoning": "r", "probabilities": [0, 0, 0, 0.1, 0.6, 0.2, 0.1, 0], "predicted_bin": 5}), "ok"),
    ],
)
def test_scripted_replies_are_repaired_or_deferred(task: Task, vec4: Candidate, content: str, outcome: str) -> None:
    with CannedServer(contents=[content]) as srv:
        forecaster = LLMForecaster(LLMClient("openai/canned", api_base=srv.api_base, max_retries=0))
        f = forecaster.forecast(task, vec4, CPU)
    check_accounted(f, forecaster)
    assert f.candidate_hash == vec4.hash and f.task == "saxpy"
    if outcome.startswith("failed"):
        kind = outcome.split(":")[1]
        assert f.failed and forecaster.stats.failures[kind] == 1
        assert f.provenance.failure_reason.startswith(kind)
    elif outcome == "repaired":
        assert f.provenance.repaired and not f.failed and forecaster.stats.repaired == 1
    else:
        assert forecaster.stats.ok == 1 and f.predicted_bin == 5 and f.confidence == pytest.approx(0.6)
        assert f.reasoning == "r" and f.provenance.prompt_tokens == 10


def test_closed_port_gives_a_failed_forecast_after_retries(task: Task, vec4: Candidate) -> None:
    client = LLMClient("openai/none", api_base=f"http://127.0.0.1:{free_port()}/v1", max_retries=2,
                       backoff_s=0.01, backoff_max_s=0.02, timeout_s=5)
    forecaster = LLMForecaster(client)
    forecasts = forecaster.forecast_many(task, [vec4, task.reference()], CPU)
    assert [f.failed for f in forecasts] == [True, True]
    assert all(f.provenance.failure_reason.startswith("transport") for f in forecasts)
    assert forecaster.stats.failures["transport"] == 2 and forecaster.stats.failure_rate == 1.0
    assert client.usage.attempts == 6 and client.usage.retries == 4


def test_a_bug_in_prompt_building_still_returns_failed_forecasts(task: Task, vec4: Candidate) -> None:
    """Even an internal error (here: a hardware object of the wrong type) defers instead of raising."""
    forecaster = LLMForecaster(LLMClient("openai/none", api_base="http://127.0.0.1:9/v1"))
    [f] = forecaster.forecast_many(task, [vec4], hardware=None)  # type: ignore[arg-type]
    assert f.failed and f.provenance.failure_reason.startswith("internal")
    assert forecaster.stats.failures["internal"] == 1


def test_one_bad_candidate_does_not_spoil_the_batch(task: Task, vec4: Candidate) -> None:
    """A candidate the prompt builder chokes on fails alone; its neighbours are answered."""
    good = json.dumps({"reasoning": "r", "probabilities": [0, 0, 0, 0.1, 0.6, 0.2, 0.1, 0], "predicted_bin": 5})
    broken = vec4.model_copy(update={"source": None})  # model_copy skips validation: a bug upstream
    with CannedServer(contents=[good]) as srv:
        forecaster = LLMForecaster(LLMClient("openai/canned", api_base=srv.api_base, max_retries=0))
        forecasts = forecaster.forecast_many(task, [vec4, broken, task.reference()], CPU)
    assert [f.failed for f in forecasts] == [False, True, False]
    assert forecasts[1].candidate_hash is None and forecasts[2].candidate_hash == task.reference().hash
    assert srv.hits == 2 and forecaster.stats.ok == 2 and forecaster.stats.failures["internal"] == 1


# ---- the real tiny model --------------------------------------------------------------------
@pytest.mark.llm
def test_real_model_json_forecast_is_valid_or_counted(llm_server: LlamaServer, task: Task, vec4: Candidate) -> None:
    client = LLMClient(llm_server.model, api_base=llm_server.api_base, timeout_s=120)
    forecaster = LLMForecaster(client, max_tokens=128)
    f = forecaster.forecast(task, vec4, CPU)
    check_accounted(f, forecaster)
    assert forecaster.stats.calls == 1
    assert f.provenance.model == llm_server.model and f.provenance.mode == "json"
    assert "transport" not in forecaster.stats.failures  # the server was up: whatever failed was the model
    assert client.usage.calls == 1 and client.usage.prompt_tokens > 300


@pytest.mark.llm
def test_real_model_logprob_forecast_sums_to_one(llm_server: LlamaServer, task: Task, vec4: Candidate) -> None:
    client = LLMClient(llm_server.model, api_base=llm_server.api_base, timeout_s=120)
    forecaster = LLMForecaster(client, mode="logprobs", top_logprobs=20)
    f = forecaster.forecast(task, vec4, CPU)
    assert not f.failed, f.provenance.failure_reason
    assert sum(f.probabilities) == pytest.approx(1.0) and min(f.probabilities) > 0
    assert 0 < (f.provenance.raw_sum or 0) <= 1.0 + 1e-9  # probability mass the model put on digits
    assert f.provenance.repaired == (f.provenance.raw_sum < forecaster.min_digit_mass)
    assert f.provenance.completion_tokens == 1
    check_accounted(f, forecaster)


@pytest.mark.llm
def test_real_model_forecast_many_keeps_order(llm_server: LlamaServer, task: Task, vec4: Candidate) -> None:
    client = LLMClient(llm_server.model, api_base=llm_server.api_base, timeout_s=120, max_concurrency=2)
    forecaster = LLMForecaster(client, mode="logprobs")
    candidates = [vec4, vec4.model_copy(update={"local_size": ["256"]})]
    forecasts = forecaster.forecast_many(task, candidates, CPU)
    assert [f.candidate_hash for f in forecasts] == [c.hash for c in candidates]
    assert forecaster.stats.calls == 2
    for f in forecasts:
        check_accounted(f, forecaster)


@pytest.mark.llm
def test_server_stopped_mid_run_defers_instead_of_raising(llm_server: LlamaServer, task: Task,
                                                          vec4: Candidate) -> None:
    """A second real server answers, is stopped, and the next forecasts come back failed, not raised."""
    with LlamaServer(find_gguf(), n_ctx=512, n_threads=1) as second:
        client = LLMClient(second.model, api_base=second.api_base, timeout_s=30, max_retries=2, backoff_s=0.05,
                           backoff_max_s=0.1)
        assert client.complete([{"role": "user", "content": "hi"}], max_tokens=2).completion_tokens > 0
    forecaster = LLMForecaster(client)
    forecasts = forecaster.forecast_many(task, [vec4, task.reference()], CPU)
    assert all(f.failed and f.provenance.failure_reason.startswith("transport") for f in forecasts)
    assert forecaster.stats.failures["transport"] == 2
    assert client.usage.calls == 1 and client.usage.errors == 2 and client.usage.retries == 4
