"""The chat session: slash commands end to end on the real device, approval before spending, resume by
session id, and the LLM path against the real llama.cpp server (tiny model: robustness, not smarts)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernelcast import api
from kernelcast.chat import ChatSession
from kernelcast.chat_commands import CommandError, parse_command, validate_call
from kernelcast.chat_protocol import NO_MODEL_HELP
from kernelcast.tools.core.settings import get_settings
from kernelcast.tools_registry import TOOLS


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A private KERNELCAST_HOME for this module (store, run folders, chat.db)."""
    path = tmp_path_factory.mktemp("chat-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KERNELCAST_HOME", str(path))
        mp.delenv("KERNELCAST_MODEL", raising=False)
        get_settings.cache_clear()
        yield path
    get_settings.cache_clear()


def run_ids() -> list[str]:
    store = api.open_store()
    try:
        return [r.id for r in store.runs.recent()]
    finally:
        store.close()


# ---- parsing -------------------------------------------------------------------------------
def test_parse_command_maps_positionals_options_and_lists() -> None:
    call = parse_command("/optimize saxpy --budget=5 --router topk --sizes small")
    assert call == {"tool": "optimize_kernel", "arguments": {"task": "saxpy", "budget": 5, "router": "topk",
                                                             "sizes": "small"}}
    assert parse_command("/compare a b c") == {"tool": "compare_runs", "arguments": {"run_ids": ["a", "b", "c"]}}
    assert parse_command("/report r1 --compare r2 --compare r3")["arguments"] == {"run_id": "r1",
                                                                                 "compare": ["r2", "r3"]}
    assert parse_command("/report r1 --compare r2")["arguments"]["compare"] == ["r2"]
    assert "/optimize" in parse_command("/help")


@pytest.mark.parametrize("line, message", [
    ("/frob", "unknown command /frob"),
    ("/optimize saxpy --budget abc", "budget"),
    ("/optimize saxpy --router fastest", "router"),
    ("/optimize saxpy --bogus 1", "bogus"),
    ("/optimize saxpy --budget", "needs a value"),
    ("/task", "task: Field required"),
    ("/task saxpy gemm", "unexpected argument"),
    ('/task "saxpy', "cannot parse"),
    ("/compare", "run_ids"),
])
def test_bad_slash_lines_raise_clear_errors(line: str, message: str) -> None:
    with pytest.raises(CommandError, match=message):
        parse_command(line)


def test_model_calls_are_checked_against_the_published_tools() -> None:
    with pytest.raises(CommandError, match="no tool named 'frobnicate'.*list_tasks"):
        validate_call("frobnicate", {}, TOOLS)
    with pytest.raises(CommandError, match="no tool named 'measure_file'"):  # chat-only: reads local files
        validate_call("measure_file", {"task": "saxpy"}, TOOLS)
    with pytest.raises(CommandError, match="arguments must be an object"):
        validate_call("describe_task", ["saxpy"], TOOLS)
    with pytest.raises(CommandError, match="budget"):
        validate_call("optimize_kernel", {"task": "saxpy", "budget": 0}, TOOLS)
    assert validate_call("describe_task", '{"task": "saxpy"}', TOOLS) == {"task": "saxpy"}
    assert validate_call("list_tasks", None, TOOLS) == {}


# ---- the slash path, end to end -----------------------------------------------------------------
def test_slash_commands_answer_and_errors_do_not_end_the_session(home: Path) -> None:
    with ChatSession() as chat:
        assert chat.client is None
        assert "saxpy (opencl)" in chat.send("/tasks").text
        assert "entry saxpy" in chat.send("/task saxpy").text
        assert "error: unknown task 'nope'" in chat.send("/task nope").text
        assert chat.send("how fast is gemm?").text == NO_MODEL_HELP
        assert "error: unknown command /frob" in chat.send("/frob").text
        assert "error: no run with id 'nope'" in chat.send("/show nope").text
        assert "error: optimize_kernel: budget" in chat.send("/optimize saxpy --budget abc").text
        assert chat.send("/tasks").messages, "the session still answers after errors"
        assert chat.send("/quit").quit


def test_measure_and_forecast_kernel_files(home: Path, tmp_path: Path) -> None:
    reference = api.as_task("saxpy").source
    good = tmp_path / "good.cl"
    good.write_text(reference.replace("y[i] = a", "y[i] = a"))  # same kernel, a file of the user's
    bad = tmp_path / "bad.cl"
    bad.write_text("__kernel void saxpy(__global const float *x, __global float *y, const float a, const int n)"
                   "\n{ y[get_global_id(0)] = a * x[ ; }\n")
    with ChatSession() as chat:
        measured = chat.send(f"/measure saxpy {good} --sizes small").text
        assert "small sizes): correct, speedup" in measured
        broken = chat.send(f"/measure saxpy {bad} --sizes small").text
        assert "compile_error" in broken and "correct, speedup" not in broken
        assert "candidate file" in chat.send(f"/measure saxpy {tmp_path / 'missing.cl'}").text
        forecast = chat.send(f"/forecast saxpy {good}").text
        assert "learned forecast bin" in forecast and "P(bin 1..8)" in forecast
        assert "saxpy candidate" in chat.send("/measure saxpy --sizes small").text  # the reference


def test_optimize_waits_for_approval_then_runs_and_the_run_is_browsable(home: Path) -> None:
    events: list[tuple[str, dict]] = []
    before = set(run_ids())
    with ChatSession(on_event=lambda kind, payload: events.append((kind, payload))) as chat:
        reply = chat.send("/optimize saxpy --budget 3 --sizes small --router measure-all")
        assert reply.approval is not None
        assert reply.approval["plan"] == {"task": "saxpy", "router": "measure-all", "budget": 3,
                                          "sizes": "small", "forecaster": "learned", "generator": "offline",
                                          "seed": 0}
        assert "Approve?" in reply.text
        assert set(run_ids()) == before, "nothing may be spent before the user approves"
        done = chat.send("yes")
        assert done.approval is None
        assert "3/3 measurements" in done.text
        (run_id,) = set(run_ids()) - before
        assert f"run {run_id}" in done.text
        assert [p["spent"] for k, p in events if k == "spend"] == [1, 2, 3]
        assert run_id in chat.send("/runs").text
        assert "run folder" in chat.send(f"/show {run_id}").text
        compared = chat.send(f"/compare {run_id} {run_id}").text
        assert compared.count(f"run {run_id}") == 2
        report = chat.send(f"/report {run_id}").text
        assert "report written" in report and Path(report.split("written: ")[1].split(" (")[0]).exists()


def test_pending_approval_survives_a_restart_and_can_be_declined(home: Path) -> None:
    before = set(run_ids())
    with ChatSession() as first:
        session_id = first.session_id
        assert first.send("/optimize saxpy --budget 2 --sizes small").approval is not None
    with ChatSession(session_id=session_id) as again:
        pending = again.pending_approval()
        assert pending is not None and pending["plan"]["budget"] == 2
        assert any(m["content"].startswith("/optimize saxpy") for m in again.history())
        reply = again.send("no")
        assert "plan declined" in reply.text and reply.approval is None
        assert again.send("/optimize saxpy --budget 2 --sizes small").approval is not None
        moved_on = again.send("/task saxpy")  # a new command declines the plan and is answered
        assert "plan declined" in moved_on.text and "entry saxpy" in moved_on.text
        assert again.pending_approval() is None
    assert set(run_ids()) == before


def test_chat_command_is_a_repl_around_the_session(home: Path) -> None:
    from kernelcast.cli import app

    result = CliRunner().invoke(app, ["chat"], input="/tasks\n/task nope\nhello\n/quit\n")
    assert result.exit_code == 0, result.output
    assert "saxpy (opencl)" in result.output
    assert "unknown task 'nope'" in result.output
    assert "No model is configured" in result.output
    assert "resume with: kernelcast chat --session chat-" in result.output


# ---- the LLM path -------------------------------------------------------------------------------------
def test_unreachable_model_is_a_message_not_a_crash(home: Path) -> None:
    with ChatSession(model="openai/nothing", api_base="http://127.0.0.1:9/v1", timeout_s=5) as chat:
        reply = chat.send("list the tasks please")
        assert "reply was unusable" in reply.text and "transport" in reply.text
        assert "saxpy (opencl)" in chat.send("/tasks").text


@pytest.mark.llm
def test_tiny_model_garbage_is_handled_and_the_session_continues(home: Path, llm_server) -> None:
    with ChatSession(model=llm_server.model, api_base=llm_server.api_base, max_steps=2, max_tokens=48) as chat:
        reply = chat.send("Which kernels can you optimize? Use a tool.")
        assert reply.messages, "every turn shows something"
        assert {m["role"] for m in reply.messages} <= {"assistant", "tool", "note"}
        usage = chat.client.usage
        assert 1 <= usage.calls + usage.errors <= 2, "the model gets at most max_steps calls per message"
        for m in reply.messages:
            if m["role"] == "tool":  # whatever it called was executed or refused with a reason
                assert m["content"] and not m["content"].startswith("internal error")
        assert "entry saxpy" in chat.send("/task saxpy").text
        assert len(chat.history()) >= len(reply.messages) + 3
