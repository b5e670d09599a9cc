"""Sessions (ask/tell): an external agent's candidates under kernelcast's budget and router, over MCP (the SDK's
stdio client against the real server process, killed and restarted), the chat's slash commands and the Python
API, on the real OpenCL device with small sizes."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

import kernelcast
from kernelcast.session import SessionError
from kernelcast.tools.core.settings import get_settings
from kernelcast.tools.core.task import resolve_task
from kernelcast.tools.store.store import Store

from support.paths import ROOT

BROKEN = ("__kernel void saxpy(__global const float *x, __global float *y, const float a, const int n)\n"
          "{ y[get_global_id(0)] = a * x[ ; }\n")
ROUTED = {"measured", "trusted", "pruned", "deferred"}


def saxpy_points(n: int, skip: int = 0) -> list[dict[str, Any]]:
    """``n`` distinct valid template points of saxpy as submissions (source, geometry, intent, task)."""
    task = resolve_task("saxpy")
    points = [p for p in ({"VEC": v, "COARSEN": c, "WG": w} for v in (1, 2, 4, 8) for c in (1, 2, 4, 8)
                          for w in (16, 64, 256)) if task.is_valid_point(p)]
    out = []
    for params in points[skip:skip + n]:
        cand = task.instantiate(params)
        out.append({"source": cand.source, "global_size": cand.global_size, "local_size": cand.local_size,
                    "intent": cand.intent, "task": "saxpy", "params": params})
    assert len(out) == n
    return out


def params(home: Path) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=["-m", "kernelcast.cli", "mcp"], cwd=str(ROOT),
                                 env={"KERNELCAST_HOME": str(home), "PYTHONPATH": str(ROOT)})


def server_pids() -> list[int]:
    """The MCP server processes this test started (children of this process)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
        except (OSError, IndexError, ValueError):
            continue
        if ppid == os.getpid() and b"kernelcast.cli mcp" in cmdline:
            found.append(int(entry.name))
    return found


KILLS: list[int] = []


def kill_server() -> None:
    """SIGKILL the one server process (no chance to clean up), and wait until it is gone."""
    pids = server_pids()
    assert len(pids) == 1, f"expected one server process, found {pids}"
    os.kill(pids[0], signal.SIGKILL)
    deadline = time.monotonic() + 30
    while pids[0] in server_pids() and time.monotonic() < deadline:
        time.sleep(0.1)
    KILLS.append(pids[0])


def until_killed(body: Any) -> None:
    """Run a client body that ends by killing its server: the transport errors after the kill are expected,
    anything raised before it is not."""
    kills = len(KILLS)
    try:
        anyio.run(body)
    except BaseException:
        if len(KILLS) == kills:
            raise
    assert len(KILLS) == kills + 1


def error_text(result: Any) -> str:
    assert result.is_error, f"expected an error, got {result.structured_content}"
    return result.content[0].text


def ok(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content[0].text if result.content else result
    return result.structured_content


def check_store(home: Path, session: str, budget: int) -> list[Any]:
    """The budget invariants, from the store: never over budget, nothing bought twice in a phase."""
    store = Store(home / "kernelcast.db")
    try:
        bought = store.ledger.find(run_id=session)
    finally:
        store.close()
    assert len(bought) <= budget
    search = [m for m in bought if m.phase != "confirm"]
    confirms = [m for m in bought if m.phase == "confirm"]
    assert len({m.candidate_hash for m in search}) == len(search), "a candidate was bought twice"
    assert len({m.candidate_hash for m in confirms}) == len(confirms), "a candidate was confirmed twice"
    assert {m.candidate_hash for m in confirms} <= {m.candidate_hash for m in search if m.ok}
    return bought


def test_twelve_candidates_under_a_budget_of_four_survive_server_kills(tmp_path: Path) -> None:
    home = tmp_path / "home"
    found: dict[str, Any] = {}

    async def first_life() -> None:
        """Start, look at the suggestion, submit 12 candidates; kill the server at the first measurement."""
        async with Client(params(home), read_timeout_seconds=240) as client:
            started = ok(await client.call_tool("start_session", {
                "task": "saxpy", "budget": 4, "sizes": "small", "forecaster": "none", "router": "selective"}))
            assert started["state"] == "awaiting_candidates" and started["spent"] == 0
            session = found["session"] = started["session"]
            suggestion = ok(await client.call_tool("suggest_parents", {"session": session, "count": 2}))
            root = suggestion["parents"][0]
            assert root["selected"] and root["outcome"] == "root" and root["speedup_kind"] == "reference"
            assert "__kernel void saxpy" in root["source"] and root["siblings"] == []
            assert suggestion["hardware"]["compute_units"] >= 1 and suggestion["budget"] == 4
            measured_once = anyio.Event()

            async def on_progress(done: float, total: float | None, message: str | None) -> None:
                found.setdefault("progress", []).append((done, total, message))
                measured_once.set()

            async def submit() -> None:
                await client.call_tool("submit_candidates", {"session": session, "candidates": saxpy_points(12)},
                                       progress_callback=on_progress)

            async with anyio.create_task_group() as group:
                group.start_soon(submit)
                with anyio.fail_after(200):
                    await measured_once.wait()
                kill_server()
                group.cancel_scope.cancel()

    until_killed(first_life)
    session = found["session"]
    assert found["progress"][0][:2] == (1.0, 4.0) and found["progress"][0][2].startswith("measured ")
    before = check_store(home, session, 4)
    assert 1 <= len(before) <= 3, "killed during the round's measurements"

    async def second_life() -> None:
        """Reopen: the killed round completes, reusing what was bought; then a server kill between calls."""
        async with Client(params(home), read_timeout_seconds=240) as client:
            status = ok(await client.call_tool("session_status", {"session": session}))
            assert status["state"] == "awaiting_candidates" and status["submissions"] == 1
            results = status["last_round"]
            assert len(results) == 12 and all(r["valid"] for r in results)
            assert {r["decision"] for r in results} <= ROUTED
            measured = [r for r in results if r["decision"] == "measured"]
            assert 1 <= len(measured) <= 4
            assert all(r["measurement"] and r["measurement"]["status"] for r in measured)
            assert all(r["decision_reason"] for r in results), "every decision carries its reason"
            assert all(r["measurement"] is None for r in results if r["decision"] != "measured")
            assert status["spent"] == len(measured)
            found["measured"] = {r["hash"] for r in measured}
            found["spent"] = status["spent"]
            kill_server()

    until_killed(second_life)
    after = check_store(home, session, 4)
    assert {m.candidate_hash for m in before} <= {m.candidate_hash for m in after}, "nothing lost"
    assert {m.candidate_hash for m in after} == found["measured"]

    async def third_life() -> None:
        """More candidates (the search's part of the budget is spent: routed without measuring), then finish."""
        async with Client(params(home), read_timeout_seconds=240) as client:
            suggestion = ok(await client.call_tool("suggest_parents", {"session": session}))
            assert suggestion["spent"] == found["spent"] and suggestion["measurements_left"] == 0
            parent = suggestion["parents"][0]
            more = ok(await client.call_tool("submit_candidates", {"session": session, "parent": parent["hash"][:10],
                                                                   "candidates": saxpy_points(2, skip=12)}))
            assert more["parent"] == parent["hash"] and len(more["results"]) == 2
            assert all(r["decision"] in ("trusted", "pruned", "deferred") and r["decision_reason"]
                       for r in more["results"])
            assert more["spent"] == found["spent"]
            again = error_text(await client.call_tool("submit_candidates", {
                "session": session, "parent": resolve_task("saxpy").reference().hash, "candidates": saxpy_points(1)}))
            assert "duplicate" in again and "already in this session's tree" in again
            progress: list[float] = []

            async def on_progress(done: float, total: float | None, message: str | None) -> None:
                progress.append(done)

            finished = ok(await client.call_tool("finish_session", {"session": session},
                                                 progress_callback=on_progress))
            result = finished["result"]
            assert result["best_hash"] in found["measured"] and result["spent"] <= 4
            assert result["confirmed"] and result["best_interval"] is not None and result["verdict"]
            low, high = result["best_interval"]
            assert low <= result["best_speedup"] <= high
            assert progress, "the confirmation is reported as progress"
            assert Path(finished["report"]).is_file() and "__kernel" in finished["best_source"]
            late = await client.call_tool("submit_candidates", {"session": session, "candidates": saxpy_points(1)})
            assert "finished" in error_text(late)
            status = ok(await client.call_tool("session_status", {"session": session}))
            assert status["state"] == "finished" and status["spent"] == result["spent"]

    anyio.run(third_life)
    final = check_store(home, session, 4)
    assert [m.candidate_hash for m in final if m.phase != "confirm"] == [m.candidate_hash for m in after]


def test_bad_input_gets_clear_tool_errors_and_the_session_goes_on(tmp_path: Path) -> None:
    async def body() -> None:
        async with Client(params(tmp_path / "home"), read_timeout_seconds=240) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            schema = tools["submit_candidates"].input_schema
            assert set(schema["required"]) == {"session", "candidates"} and "on_event" not in schema["properties"]
            assert "decision" in json.dumps(tools["submit_candidates"].output_schema)
            assert "no session with id 'nope'" in error_text(await client.call_tool("session_status",
                                                                                    {"session": "nope"}))
            assert "no session with id 'nope'" in error_text(await client.call_tool(
                "submit_candidates", {"session": "nope", "candidates": saxpy_points(1)}))
            session = ok(await client.call_tool("start_session", {"task": "saxpy", "budget": 2, "sizes": "small",
                                                                  "forecaster": "none"}))["session"]
            broken = error_text(await client.call_tool("submit_candidates", {"session": session,
                                                                             "candidates": [{"source": BROKEN}]}))
            assert "compile_error" in broken and "nothing was measured" in broken and "\n" not in broken
            wrong = error_text(await client.call_tool("submit_candidates", {"session": session, "candidates": [
                {**saxpy_points(1)[0], "task": "gemm"}]}))
            assert "wrong_task" in wrong and "'gemm'" in wrong
            gemm = resolve_task("gemm")
            other = error_text(await client.call_tool("submit_candidates", {"session": session, "candidates": [
                {"source": gemm.source}]}))
            assert "kernel_name" in other or "signature" in other
            assert "is not a node" in error_text(await client.call_tool("submit_candidates", {
                "session": session, "parent": "ffffffff", "candidates": saxpy_points(1)}))
            assert "candidates" in error_text(await client.call_tool("submit_candidates",
                                                                     {"session": session, "candidates": []}))
            assert "has no candidate yet" in error_text(await client.call_tool("finish_session",
                                                                               {"session": session}))
            status = ok(await client.call_tool("session_status", {"session": session}))
            assert status["state"] == "awaiting_candidates" and status["spent"] == 0, "the session goes on"
            mixed = ok(await client.call_tool("submit_candidates", {"session": session, "candidates": [
                saxpy_points(1)[0], {"source": BROKEN, "intent": "broken on purpose"}]}))
            first, second = mixed["results"]
            assert first["valid"] and first["decision"] == "measured" and first["measurement"]["status"] == "correct"
            assert not second["valid"] and second["decision"] == "rejected" and second["rejection"] == "compile_error"
            root = resolve_task("saxpy").reference().hash
            duplicate = error_text(await client.call_tool("submit_candidates", {"session": session, "parent": root,
                                                                                "candidates": saxpy_points(1)}))
            assert "duplicate" in duplicate and "already in this session's tree" in duplicate
            ok(await client.call_tool("finish_session", {"session": session}))
            after = error_text(await client.call_tool("submit_candidates", {"session": session,
                                                                            "candidates": saxpy_points(1, skip=3)}))
            assert "is finished" in after and "cannot submit" in after
            assert "is finished" in error_text(await client.call_tool("suggest_parents", {"session": session}))
            again = ok(await client.call_tool("finish_session", {"session": session}))
            assert again["result"]["spent"] <= 2, "finishing twice returns the result, buys nothing"

    anyio.run(body)


def test_python_session_resumes_by_id_and_finishes_as_a_context_manager(home: Path) -> None:
    task = resolve_task("saxpy")
    first = kernelcast.Session("saxpy", budget=3, sizes="small", forecaster="learned", measure_per_round=1)
    suggestion = first.suggest()
    assert suggestion.parents[0].hash == task.reference().hash
    points = [task.instantiate(p) for p in ({"VEC": 4, "COARSEN": 1, "WG": 64}, {"VEC": 2, "COARSEN": 2, "WG": 64})]
    out = first.submit(points)  # Candidate objects are accepted as they are
    assert [r.decision for r in out.results].count("measured") == 1 and out.spent == 1
    assert {r.decision for r in out.results} == {"measured", "deferred"}  # a fresh store certifies no trust yet
    for r in out.results:  # each forecast comes back: the distribution and P(beat the incumbent)
        assert r.forecast is not None and not r.forecast.failed and len(r.forecast.probabilities) == 8
        assert sum(r.forecast.probabilities) == pytest.approx(1.0) and r.p_better is not None
        assert 0.0 <= r.p_better <= 1.0 and r.incumbent == 1.0
    first.close()  # the resources go; the session stays, resumable by id

    with kernelcast.Session(session=first.id) as again:
        status = again.status()
        assert status.state == "awaiting_candidates" and status.spent == 1 and len(status.last_round) == 2
        with pytest.raises(SessionError, match="no valid candidate"):
            again.submit(points[:1])  # a duplicate of the tree: rejected, nothing bought
        parent = again.suggest(2).parents
        assert len(parent) >= 1 and parent[0].selected
    assert again.result is not None, "leaving the block finished the session"
    result = again.result.result
    assert result.spent <= 3 and Path(again.result.report).is_file()
    assert result.best_hash is None or result.first_speedup is not None
    with pytest.raises(SessionError, match="is finished"):
        kernelcast.Session(session=first.id).submit(points)
    with pytest.raises(SessionError, match="no session with id"):
        kernelcast.Session(session="nope")
    with pytest.raises(SessionError, match="give a task"):
        kernelcast.Session()


def test_chat_slash_commands_drive_a_session(home: Path, tmp_path: Path) -> None:
    from kernelcast.chat import ChatSession

    point = resolve_task("saxpy").instantiate({"VEC": 1, "COARSEN": 1, "WG": 64})  # the reference's launch
    kernel = tmp_path / "point.cl"
    kernel.write_text(point.source)
    with ChatSession() as chat:
        assert "/session start TASK" in chat.send("/help").text
        started = chat.send("/session start saxpy --budget 2 --sizes small --forecaster none").text
        assert "awaiting_candidates" in started, started
        assert "* " in chat.send("/suggest").text
        submitted = chat.send(f"/submit {kernel}").text
        assert "1 candidates" in submitted and ("measured" in submitted or "deferred" in submitted), submitted
        assert "error: no valid candidate" in chat.send(f"/submit {kernel}").text, "a duplicate is refused"
        assert "error: candidate file" in chat.send("/submit missing.cl").text
        assert "awaiting_candidates" in chat.send("/status").text
        assert "finished" in chat.send("/finish").text
        assert "error: no unfinished session" in chat.send("/suggest").text


def test_a_session_does_not_route_a_submission_again(home: Path) -> None:
    """The caller reads each submission's verdicts: a deferred candidate stays deferred, never re-decided by a
    later submission's round (a run carries such children over: test_carry_over)."""
    task = resolve_task("saxpy")
    session = kernelcast.Session("saxpy", budget=4, sizes="small", forecaster="learned", measure_per_round=1)
    points = [task.instantiate(p) for p in ({"VEC": 4, "COARSEN": 1, "WG": 64}, {"VEC": 2, "COARSEN": 2, "WG": 64},
                                            {"VEC": 1, "COARSEN": 4, "WG": 256})]
    first = session.submit(points)
    deferred = {r.hash for r in first.results if r.decision == "deferred"}
    assert deferred, "one measurement per round leaves the others deferred"
    session.submit([task.instantiate({"VEC": 2, "COARSEN": 1, "WG": 256})])
    session.close()
    routes: dict[str | None, int] = {}
    for event in Store(get_settings().db_path).events.find(session.id, kind="route"):
        routes[event.candidate_hash] = routes.get(event.candidate_hash, 0) + 1
    assert deferred <= routes.keys() and set(routes.values()) == {1}
