"""Issue 4: the LLM generator: prompt, reply parsing and validation, and a real llama.cpp server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernelcast.agents.generate.base import GenerationContext, ProposalReport, Reason, Validator
from kernelcast.agents.generate.dedup import Deduplicator
from kernelcast.agents.generate.llm import LLMGenerator, build_prompt, read_reply
from kernelcast.agents.llm.client import LLMClient
from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.measurement import HardwareSpec, MeasureConfig, Status
from kernelcast.tools.core.task import Task, resolve_task
from kernelcast.tools.hardware.worker import MeasurementWorker

SMALL = MeasureConfig(sizes="small", time_kernels=False)
SAXPY_BODY = "{\n    int i = get_global_id(0);\n    if (i < n)\n        y[i] += a * x[i];\n}\n"
SAXPY_SIG = "__kernel void saxpy(__global const float *x, __global float *y, const float a, const int n)\n"
GOOD_SOURCE = SAXPY_SIG + SAXPY_BODY


@pytest.fixture(scope="module")
def worker() -> Iterator[MeasurementWorker]:
    with MeasurementWorker("opencl") as w:
        yield w


@pytest.fixture(scope="module")
def saxpy() -> Task:
    return resolve_task("saxpy")


def reply(source: str = GOOD_SOURCE, **fields: object) -> str:
    item = {"intent": "accumulate in place", "source": source, "global_size": ["N"], "local_size": None,
            "build_options": [], **fields}
    return json.dumps({"candidates": [item]})


def read(text: str | dict, task: Task, *, worker: MeasurementWorker | None = None,
         known: set[str] = frozenset(), limit: int | None = None) -> tuple[list[Candidate], ProposalReport]:
    report = ProposalReport(generator="test")
    validator = Validator(task, task.reference(), report, Deduplicator(known), worker)
    return read_reply(text, task, task.reference(), validator, "llm:test", limit=limit), report


# ---- garbage in, counted rejections out ----------------------------------------------------------------
GARBAGE = {
    "prose": ("Sure! To make saxpy faster, use float4 vectors and unroll the loop.", Reason.not_json),
    "broken json": ('{"candidates": [{"source": "__kernel void saxpy(", "global_size": ["N"],, ]', Reason.not_json),
    "truncated json": (reply()[:60], Reason.not_json),
    "no candidates list": ('{"answer": 3}', Reason.missing_fields),
    "empty candidates": ('{"candidates": []}', Reason.missing_fields),
    "no source": (json.dumps({"candidates": [{"intent": "x", "global_size": ["N"]}]}), Reason.missing_fields),
    "no global size": (json.dumps({"candidates": [{"source": GOOD_SOURCE}]}), Reason.missing_fields),
    "entry not an object": ('{"candidates": ["__kernel void saxpy() {}"]}', Reason.missing_fields),
    "renamed kernel": (reply(GOOD_SOURCE.replace("void saxpy", "void saxpy_fast")), Reason.kernel_name),
    "changed args": (reply(GOOD_SOURCE.replace(", const int n)", ")").replace("i < n", "i < 4096")),
                     Reason.signature),
    "host main": (reply(GOOD_SOURCE + "\nint main(void) { return 0; }\n"), Reason.host_code),
    "host include": (reply("#include <stdio.h>\n" + GOOD_SOURCE), Reason.host_code),
    "host api": (reply(GOOD_SOURCE + "\nvoid setup(void) { clCreateBuffer(0, 0, 0, 0, 0); }\n"), Reason.host_code),
    "cuda host api": (reply(GOOD_SOURCE + "\nvoid setup(float *p) { cudaMalloc(&p, 4); }\n"), Reason.host_code),
    "unchanged parent": (reply("// the same, reformatted\n" + resolve_task("saxpy").source.replace("    ", "  ")),
                         Reason.unchanged),
    "fast math": (reply(build_options=["-cl-fast-relaxed-math"]), Reason.build_options),
    "odd geometry": (reply(local_size=["3"]), Reason.geometry),
}


@pytest.mark.parametrize("case", sorted(GARBAGE))
def test_bad_replies_are_rejected_with_the_right_reason(case: str, saxpy: Task) -> None:
    text, reason = GARBAGE[case]
    accepted, report = read(text, saxpy)
    assert accepted == []
    assert report.rejected == {reason.value: 1}, report.rejections
    assert report.proposed == 1 and report.accepted == 0
    assert report.rejections[0].detail
    assert report.feedback()[0].startswith(f"1 proposal(s) rejected ({reason.value})")


def test_duplicates_and_compile_errors_are_rejected(saxpy: Task, worker: MeasurementWorker) -> None:
    good = Candidate(task="saxpy", source=GOOD_SOURCE, global_size=["N"])
    accepted, report = read(reply(), saxpy, known={good.hash})
    assert accepted == [] and report.rejected == {Reason.duplicate.value: 1} and report.duplicates == 1

    broken = GOOD_SOURCE.replace("y[i] += a * x[i];", "y[i] += a * x[i]")  # missing semicolon
    accepted, report = read(reply(broken), saxpy, worker=worker)
    assert accepted == [] and report.rejected == {Reason.compile_error.value: 1}
    assert "compile_error" in report.rejections[0].detail


def test_valid_reply_is_accepted_leniently_and_is_correct(saxpy: Task, worker: MeasurementWorker) -> None:
    fenced = "```c\n" + GOOD_SOURCE + "```"
    two = {"candidates": [
        {"intent": "in place", "source": fenced, "global_size": "N", "local_size": [64],
         "build_options": "-cl-mad-enable"},
        {"intent": "same again", "source": GOOD_SOURCE + "\n\n", "global_size": ["N"], "local_size": [64],
         "build_options": ["-cl-mad-enable"]},  # a whitespace-only copy of the first: a duplicate
        {"intent": "ignored: beyond the limit", "source": "garbage", "global_size": ["N"]},
    ]}
    accepted, report = read(json.dumps(two), saxpy, worker=worker, limit=2)
    assert len(accepted) == 1, report.rejections
    c = accepted[0]
    assert c.global_size == ["N"] and c.local_size == ["64"] and c.build_options == ["-cl-mad-enable"]
    assert c.parent == saxpy.reference().hash and c.generator == "llm:test" and c.intent == "in place"
    assert report.rejected == {Reason.duplicate.value: 1} and report.proposed == 2
    assert report.validation[c.hash] == "compiles"
    assert worker.measure(saxpy, c, SMALL).status is Status.correct

    single, report = read({"source": GOOD_SOURCE, "global_size": ["N"]}, saxpy)  # one bare object
    assert len(single) == 1 and single[0].intent == "llm rewrite (no intent given)"


# ---- the prompt ------------------------------------------------------------------------------------
def test_prompt_shows_task_parent_feedback_device_and_best(saxpy: Task) -> None:
    spec = HardwareSpec(backend="opencl", name="TestCPU", device_type="CPU", compute_units=2, max_work_group_size=4096)
    parent = Candidate(task="saxpy", source=GOOD_SOURCE.replace("+=", "= y[i] +"), global_size=["N"],
                       intent="a broken try")
    best = Candidate(task="saxpy", source=GOOD_SOURCE, global_size=["N / 4"], intent="float4 loads")
    context = GenerationContext(parent_status="incorrect", parent_report="seed 0: output y differs at 17 elements",
                                best=[(best, 1.8)], hardware=spec, siblings={"abc"},
                                feedback=["2 proposal(s) rejected (kernel_name): keep the name"])
    prompt = build_prompt(saxpy, parent, context, 3)
    for expected in ["Rewrite the parent kernel below into 3 new versions",  # from agents/llm/prompts/generate.md
                     saxpy.spec.description, "- x: buffer of float32 [N], in", "N = 8388608", "N = 4096",
                     "TestCPU", "multicore CPU", "FAILED (incorrect): seed 0: output y differs", "a broken try",
                     "1.8x", "float4 loads", "2 proposal(s) rejected (kernel_name)", "1 other children",
                     "__kernel void saxpy", "no `clCreate*`", "NOT allowed", '"candidates"']:
        assert expected in prompt, expected


def test_cuda_prompt_has_cuda_rules(tmp_path: Path) -> None:
    task = resolve_task("gemm_cuda")
    prompt = build_prompt(task, task.reference(), GenerationContext(parent_speedup=1.2,
                                                                     parent_speedup_kind="forecast"), 2)
    assert 'extern "C" __global__ void gemm' in prompt and "<<<...>>>" in prompt and "cudaMalloc" in prompt
    assert "__kernel" not in prompt.split("## Reference kernel")[0]
    assert "1.2x over the reference (forecast, not measured)" in prompt
    assert "(the same as the reference kernel above)" in prompt  # the parent's source is not shown twice


# ---- the generator end to end -------------------------------------------------------------------------
def test_unreachable_server_is_reported_not_raised(saxpy: Task) -> None:
    from support.llm_server import free_port

    client = LLMClient("openai/none", f"http://127.0.0.1:{free_port()}/v1", timeout_s=5, max_retries=0)
    gen = LLMGenerator(client, max_rounds=2)
    result = gen.propose(saxpy, saxpy.reference(), GenerationContext(), 2)
    report = result.report
    assert result.candidates == []
    assert report.errors and "transport" in report.errors[0]
    assert report.rounds == 1 and report.proposed == 0  # a dead server is not retried round after round
    assert "no valid candidate" in report.empty_reason


@pytest.mark.llm
@pytest.mark.timeout(900)
def test_real_server_proposals_are_valid_or_counted_rejections(llm_server, saxpy: Task,  # type: ignore[no-untyped-def]
                                                               worker: MeasurementWorker) -> None:
    client = LLMClient(llm_server.model, llm_server.api_base, timeout_s=400, max_retries=1)
    gen = LLMGenerator(client, worker, max_rounds=2, max_tokens=200, max_source_chars=1500)
    reference = saxpy.reference()
    result = gen.propose(saxpy, reference, GenerationContext(seed=0), 1)
    accepted, report = result.candidates, result.report
    assert report.calls == client.usage.calls + client.usage.errors >= 1
    assert report.proposed == report.accepted + sum(report.rejected.values()) == len(accepted) + len(report.rejections)
    assert report.proposed >= 1 or report.errors
    assert set(report.rejected) <= {r.value for r in Reason}
    for c in accepted:
        assert c.parent == reference.hash and c.generator == gen.name
        assert report.validation[c.hash] == "compiles"
    if not accepted:
        assert report.empty_reason
        if report.rounds == 2 and report.rejected:
            # the second prompt carried the first round's rejections back to the model
            assert report.feedback_sent and any("rejected" in line for line in report.feedback_sent)


# ---- one picture for both generators (issue 14): the derived template and what was tried --------------------
def measured_context(task: Task, worker: MeasurementWorker) -> tuple[GenerationContext, list[Candidate]]:
    """A context from a real store holding real full-size measurements of two kernels of ``task``."""
    from kernelcast.agents.generate.offline import OfflineGenerator
    from kernelcast.tools.store.store import Store

    store, spec = Store(":memory:"), worker.hardware_spec()
    kernels = OfflineGenerator(worker).propose(task, task.reference(), GenerationContext(hardware=spec, seed=0),
                                               2).candidates
    assert len(kernels) == 2
    broken = Candidate(task=task.name, source=GOOD_SOURCE.replace("a * x[i]", "a * x[i] + 1.0f"),
                       global_size=["N"], intent="adds one to every element")
    for c in [*kernels, broken]:
        store.candidates.add(c)
        store.ledger.add(worker.measure(task, c, MeasureConfig(sizes="full")))
    context = GenerationContext.from_store(store, task, spec.key, task.reference(), hardware=spec, seed=0)
    store.close()
    return context, [*kernels, broken]


def test_context_from_the_store_lists_every_measured_kernel_with_its_result(saxpy: Task,
                                                                             worker: MeasurementWorker) -> None:
    context, kernels = measured_context(saxpy, worker)
    by_intent = {t.intent: t for t in context.tried}
    assert set(by_intent) == {c.intent for c in kernels}
    assert by_intent["adds one to every element"].status == "incorrect"
    assert by_intent["adds one to every element"].speedup is None
    assert all(by_intent[c.intent].speedup is not None for c in kernels[:2])


def test_tried_list_is_compact_best_first_with_failures_grouped() -> None:
    from kernelcast.agents.generate.base import Tried
    from kernelcast.agents.llm.prompting import MAX_TRIED_LINES, tried_text

    tried = [Tried(intent=f"variant {i}", status="correct", speedup=1.0 + i / 10) for i in range(30)]
    tried += [Tried(intent=f"bad {i}", status="incorrect") for i in range(5)]
    tried += [Tried(intent="no build", status="compile_error")]
    text = tried_text(tried)
    lines = text.splitlines()
    assert lines[0] == "36 kernel(s) measured (30 correct):"
    assert lines[1] == "- 3.9x: variant 29"  # the fastest first
    assert "- 5 incorrect, e.g.: bad 0" in lines and "- 1 compile_error, e.g.: no build" in lines
    assert lines[-1] == "- ... and 20 slower correct kernel(s)"
    assert len(lines) <= MAX_TRIED_LINES + 2
    assert tried_text([]) == "(nothing measured yet)"


def test_prompt_carries_the_derived_space_of_the_reference() -> None:
    from kernelcast.agents.generate.derived_space import DerivedSpace

    gemm = resolve_task("gemm")
    spec = HardwareSpec(backend="opencl", name="TestCPU", device_type="CPU", compute_units=2, max_work_group_size=256)
    prompt = build_prompt(gemm, gemm.reference(), GenerationContext(hardware=spec), 2)
    section = prompt.split("## Source transformations that apply to the reference")[1].split("## Feedback")[0]
    space = DerivedSpace(gemm, gemm.reference(), 256)
    for name in space.params:
        assert f"{name} in " in section, name
    assert "local_tile in [0, 8, 16]" in section and "coarsen_x in [1, 2, 4, 8]" in section
    assert "(scalar_replace unavailable:" in section  # and why the others do not apply
    assert "(nothing measured yet)" in prompt
    cuda = resolve_task("gemm_cuda")  # a CUDA kernel: the transformations say they are OpenCL-only
    assert "coarsening is implemented for OpenCL kernels" in build_prompt(cuda, cuda.reference(),
                                                                           GenerationContext(), 1)


@pytest.mark.llm
@pytest.mark.timeout(900)
def test_real_server_gets_the_same_picture_and_garbage_is_still_counted(llm_server, saxpy: Task,  # type: ignore[no-untyped-def]
                                                                         worker: MeasurementWorker) -> None:
    context, kernels = measured_context(saxpy, worker)
    context = context.model_copy(update={"hardware": None})  # no device guide: the prompt fits the tiny model's
    client = LLMClient(llm_server.model, llm_server.api_base, timeout_s=400, max_retries=1)  # 2048-token context
    gen = LLMGenerator(client, worker, max_rounds=1, max_tokens=100, max_source_chars=1000)
    prompt = gen.messages(saxpy, saxpy.reference(), context, 1)[1]["content"]
    assert "3 kernel(s) measured (2 correct):" in prompt and "- 1 incorrect, e.g.: adds one to every element" in prompt
    assert len(prompt) < 6000  # with the reply, within the 2048-token context of the test server
    for t in context.tried:
        if t.speedup is not None:
            assert f"- {t.speedup:.3g}x: {t.intent.removeprefix('derived: ')[:60]}" in prompt
    assert "coarsen_x in [1, 2, 4, 8]" in prompt and "work_group in ['keep', '1', '2'" in prompt

    gen.propose(saxpy, saxpy.reference(), GenerationContext(seed=0), 1)
    bare_tokens = client.usage.prompt_tokens  # the same prompt without the measured kernels
    result = gen.propose(saxpy, saxpy.reference(), context, 1)
    accepted, report = result.candidates, result.report
    assert client.usage.prompt_tokens - bare_tokens > bare_tokens  # the server read the longer prompt
    # whatever the tiny model answered, every entry is an accepted candidate or a counted rejection
    assert report.proposed == report.accepted + sum(report.rejected.values()) == len(accepted) + len(report.rejections)
    assert report.proposed >= 1 or report.errors
    assert set(report.rejected) <= {r.value for r in Reason}
    known = {c.hash for c in kernels}
    for c in accepted:
        assert report.validation[c.hash] == "compiles"
        assert c.hash not in known  # never a kernel the store has measured
