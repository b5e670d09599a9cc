"""The MCP server through the SDK's own client against the real server process (stdio and streamable HTTP)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from kernelcast.mcp_server import PUBLISHED

from support.paths import ROOT

BROKEN = ("__kernel void saxpy(__global const float *x, __global float *y, const float a, const int n)\n"
          "{ y[get_global_id(0)] = a * x[ ; }\n")


def with_server(home: Path, body: Callable[[Client], Awaitable[None]]) -> None:
    """Start ``python -m kernelcast.cli mcp`` over stdio with a private KERNELCAST_HOME and run ``body``."""
    params = StdioServerParameters(command=sys.executable, args=["-m", "kernelcast.cli", "mcp"], cwd=str(ROOT),
                                   env={"KERNELCAST_HOME": str(home), "PYTHONPATH": str(ROOT)})

    async def main() -> None:
        async with Client(params, read_timeout_seconds=240) as client:
            await body(client)

    anyio.run(main)


def error_text(result: Any) -> str:
    assert result.is_error, f"expected an error, got {result.structured_content}"
    return result.content[0].text


def test_tools_are_listed_with_schemas_and_bad_calls_get_clear_errors(tmp_path: Path) -> None:
    async def body(client: Client) -> None:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == set(PUBLISHED)
        measure = tools["measure_kernel"]
        assert measure.input_schema["required"] == ["task"]
        assert measure.input_schema["properties"]["sizes"]["enum"] == ["full", "small"]
        assert "on_event" not in tools["optimize_kernel"].input_schema["properties"]
        assert "speedup" in measure.output_schema["properties"]

        listed = await client.call_tool("list_tasks", {})
        assert not listed.is_error
        assert "saxpy" in {t["name"] for t in listed.structured_content["tasks"]}
        saxpy = await client.call_tool("describe_task", {"task": "saxpy"})
        assert saxpy.structured_content["entry"] == "saxpy"
        assert saxpy.structured_content["small_sizes"] == {"N": 4096}

        assert "unknown task 'nope'" in error_text(await client.call_tool("describe_task", {"task": "nope"}))
        assert "budget" in error_text(await client.call_tool("optimize_kernel", {"task": "saxpy", "budget": "abc"}))
        assert "sizes" in error_text(await client.call_tool("measure_kernel", {"task": "saxpy", "sizes": "huge"}))
        assert "task" in error_text(await client.call_tool("describe_task", {}))
        assert "no run with id 'nope'" in error_text(await client.call_tool("get_run", {"run_id": "nope"}))
        assert "frobnicate" in error_text(await client.call_tool("frobnicate", {}))

    with_server(tmp_path / "home", body)


def test_measure_and_optimize_end_to_end_with_progress(tmp_path: Path) -> None:
    async def body(client: Client) -> None:
        ref = await client.call_tool("measure_kernel", {"task": "saxpy", "sizes": "small"})
        assert not ref.is_error
        assert ref.structured_content["status"] == "correct" and ref.structured_content["sizes"] == "small"
        assert ref.structured_content["speedup"] > 0

        broken = await client.call_tool("measure_kernel", {"task": "saxpy", "source": BROKEN, "sizes": "small"})
        assert not broken.is_error, "a broken kernel is a measurement result, not a tool error"
        assert broken.structured_content["status"] == "compile_error"
        assert broken.structured_content["bin"] == 0 and broken.structured_content["reason"]

        progress: list[tuple[float, float | None, str | None]] = []

        async def on_progress(done: float, total: float | None, message: str | None) -> None:
            progress.append((done, total, message))

        run = await client.call_tool("optimize_kernel", {"task": "saxpy", "budget": 3, "sizes": "small",
                                                         "router": "measure-all"}, progress_callback=on_progress)
        assert not run.is_error, run.content
        info = run.structured_content
        assert info["status"] == "finished" and info["spent"] == 3 and info["budget"] == 3
        assert [(d, t) for d, t, _ in progress] == [(1.0, 3.0), (2.0, 3.0), (3.0, 3.0)]
        assert all(m and m.startswith("measured ") for _, _, m in progress)

        shown = (await client.call_tool("get_run", {"run_id": info["run_id"]})).structured_content
        assert shown["run_id"] == info["run_id"] and shown["result"]["spent"] == 3
        assert shown["result"]["roofline"]["text"] and shown["result"]["forecast_spread"] is not None
        if shown["result"]["best_hash"]:
            assert "__kernel" in shown["best_source"]
        runs = (await client.call_tool("list_runs", {"task": "saxpy"})).structured_content["runs"]
        assert [r["run_id"] for r in runs] == [info["run_id"]]

    with_server(tmp_path / "home", body)


def _listening_addresses(port: int) -> set[str]:
    """Local addresses with a TCP socket listening on ``port`` (Linux /proc)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.rsplit(":", 1)
            if state == "0A" and int(hex_port, 16) == port:  # 0A = LISTEN
                found.add(address)
    return found


TOKEN = "test-token-0123456789abcdef"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def http_server(home: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[tuple[int, subprocess.Popen]]:
    """``kernelcast mcp --transport http`` in a child process; yields (port, process) once it listens."""
    port = free_port()
    inherited = {k: v for k, v in os.environ.items() if k != "KERNELCAST_MCP_TOKEN"}
    full_env = {**inherited, "KERNELCAST_HOME": str(home), "PYTHONPATH": str(ROOT), **(env or {})}
    server = subprocess.Popen([sys.executable, "-m", "kernelcast.cli", "mcp", "--transport", "http", "--port",
                               str(port), *args], cwd=ROOT, env=full_env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not _listening_addresses(port) and time.monotonic() < deadline:
            assert server.poll() is None, server.stderr.read().decode() if server.stderr else "server exited"
            time.sleep(0.2)
        yield port, server
    finally:
        server.terminate()
        server.wait(timeout=20)


def http_client(url: str, token: str | None = TOKEN, host: str | None = None) -> Client:
    """The SDK's client over streamable HTTP, sending the bearer token (and a Host header) given."""
    headers = {**({"Authorization": f"Bearer {token}"} if token else {}), **({"Host": host} if host else {})}
    return Client(streamable_http_client(url, http_client=httpx2.AsyncClient(headers=headers, timeout=240)))


def status_of(url: str, **headers: str) -> int:
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    return httpx2.post(url, json=body, headers={"Accept": "application/json, text/event-stream", **headers},
                       timeout=30).status_code


def test_http_transport_serves_on_loopback_with_a_bearer_token(tmp_path: Path) -> None:
    with http_server(tmp_path / "home", env={"KERNELCAST_MCP_TOKEN": TOKEN}) as (port, _):
        if os.path.exists("/proc/net/tcp"):
            assert _listening_addresses(port) == {"0100007F"}, "HTTP must bind 127.0.0.1 only by default"
        url = f"http://127.0.0.1:{port}/mcp"
        assert status_of(url) == 401
        assert status_of(url, Authorization="Bearer wrong-token-wrong-token") == 401
        assert status_of(url, Authorization=f"Bearer {TOKEN}", Host="evil.example:80") == 421
        assert status_of(url, Authorization=f"Bearer {TOKEN}", Origin="http://evil.example") == 403

        async def main() -> None:
            async with http_client(url) as client:
                assert {t.name for t in (await client.list_tools()).tools} == set(PUBLISHED)
                described = await client.call_tool("describe_task", {"task": "saxpy"})
                assert described.structured_content["entry"] == "saxpy"
                secret = tmp_path / "secrets.toml"
                secret.write_text('api_key = "sk-not-for-you"\n')
                for name in (str(secret), str(tmp_path / "missing.toml")):
                    text = error_text(await client.call_tool("describe_task", {"task": name}))
                    assert "not a task file under the task roots" in text and "sk-not" not in text

        anyio.run(main)


def test_token_is_generated_once_with_mode_0600(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with http_server(home) as (port, server):
        token_file = home / "mcp_token"
        assert token_file.stat().st_mode & 0o777 == 0o600
        token = token_file.read_text().strip()
        assert len(token) >= 32
        url = f"http://127.0.0.1:{port}/mcp"
        assert status_of(url) == 401

        async def main() -> None:
            async with http_client(url, token=token) as client:
                assert (await client.call_tool("list_tasks", {})).structured_content["tasks"]

        anyio.run(main)
    first = server.stderr.read().decode() if server.stderr else ""
    assert token in first, "the generated token is printed on first start"
    with http_server(home) as (_, again):
        pass
    assert token not in (again.stderr.read().decode() if again.stderr else ""), "and only then"
    assert token_file.read_text().strip() == token


def test_host_is_validated_for_every_bound_address(tmp_path: Path) -> None:
    with http_server(tmp_path / "home", "--host", "127.0.0.2", "--token", TOKEN) as (port, _):
        url = f"http://127.0.0.2:{port}/mcp"
        auth = f"Bearer {TOKEN}"
        assert status_of(url, Authorization=auth, Host="evil.example") == 421
        assert status_of(url, Authorization=auth, Host=f"127.0.0.1:{port}") == 421
        assert status_of(url, Authorization=auth) == 200


@pytest.mark.parametrize(("args", "message"), [
    (["--host", "0.0.0.0"], "needs a bearer token"),
    (["--host", "0.0.0.0", "--no-auth"], "only on a loopback address"),
    (["--no-auth", "--token", TOKEN], "contradict"),
    (["--token", "short"], "at least 16 characters"),
])
def test_unsafe_http_setups_are_refused(tmp_path: Path, args: list[str], message: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "KERNELCAST_MCP_TOKEN"}
    result = subprocess.run([sys.executable, "-m", "kernelcast.cli", "mcp", "--transport", "http", *args], cwd=ROOT,
                            env={**env, "KERNELCAST_HOME": str(tmp_path / "home"), "PYTHONPATH": str(ROOT)},
                            capture_output=True, text=True, check=False, timeout=60)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr


def test_no_auth_on_loopback_and_store_problems_are_one_line_tool_errors(tmp_path: Path) -> None:
    db_dir = tmp_path / "db-is-a-folder"
    db_dir.mkdir()
    with http_server(tmp_path / "home", "--no-auth", env={"KERNELCAST_DB": str(db_dir)}) as (port, server):
        url = f"http://127.0.0.1:{port}/mcp"

        async def main() -> None:
            async with http_client(url, token=None) as client:
                for tool, args in (("list_runs", {}), ("get_run", {"run_id": "abc"})):
                    text = error_text(await client.call_tool(tool, args))
                    assert "store problem" in text and "\n" not in text and "Traceback" not in text

        anyio.run(main)
    server.terminate()
    server.wait(timeout=20)
    log = server.stderr.read().decode() if server.stderr else ""
    assert "Traceback" not in log and len(log) < 5000


def test_damaged_store_is_a_clear_tool_error(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "kernelcast.db").write_bytes(b"this is not a database" * 100)

    async def body(client: Client) -> None:
        text = error_text(await client.call_tool("list_runs", {}))
        assert "not a usable kernelcast database" in text and "\n" not in text

    with_server(home, body)


def test_concurrent_expensive_calls_are_refused_as_busy(tmp_path: Path) -> None:
    async def body(client: Client) -> None:
        started = anyio.Event()
        results: dict[str, Any] = {}

        async def on_progress(done: float, total: float | None, message: str | None) -> None:
            started.set()

        async def optimize() -> None:
            results["run"] = await client.call_tool("optimize_kernel", {"task": "saxpy", "budget": 4, "sizes": "small",
                                                                        "router": "measure-all"},
                                                    progress_callback=on_progress)

        async with anyio.create_task_group() as group:
            group.start_soon(optimize)
            with anyio.fail_after(200):
                await started.wait()
            results["measure"] = await client.call_tool("measure_kernel", {"task": "saxpy", "sizes": "small"})
        assert "busy" in error_text(results["measure"])
        assert not results["run"].is_error, results["run"].content
        after = await client.call_tool("measure_kernel", {"task": "saxpy", "sizes": "small"})
        assert not after.is_error, "the slot is free again once the run has finished"

    with_server(tmp_path / "home", body)


def test_unknown_transport_is_a_usage_error() -> None:
    result = subprocess.run([sys.executable, "-m", "kernelcast.cli", "mcp", "--transport", "carrier-pigeon"],
                            cwd=ROOT, capture_output=True, text=True, check=False, timeout=60)
    assert result.returncode == 2
    assert "--transport must be 'stdio' or 'http'" in result.stderr


