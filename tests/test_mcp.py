"""The MCP server through the SDK's own client against the real server process (stdio and streamable HTTP)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from kernelcast.mcp_server import PUBLISHED

ROOT = Path(__file__).resolve().parents[1]
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


def test_http_transport_serves_on_loopback(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "KERNELCAST_HOME": str(tmp_path / "home"), "PYTHONPATH": str(ROOT)}
    server = subprocess.Popen([sys.executable, "-m", "kernelcast.cli", "mcp", "--transport", "http", "--port",
                               str(port)], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not _listening_addresses(port) and time.monotonic() < deadline:
            assert server.poll() is None, server.stderr.read().decode() if server.stderr else "server exited"
            time.sleep(0.2)
        if os.path.exists("/proc/net/tcp"):
            assert _listening_addresses(port) == {"0100007F"}, "HTTP must bind 127.0.0.1 only by default"

        async def main() -> None:
            async with Client(f"http://127.0.0.1:{port}/mcp") as client:
                assert {t.name for t in (await client.list_tools()).tools} == set(PUBLISHED)
                described = await client.call_tool("describe_task", {"task": "saxpy"})
                assert described.structured_content["entry"] == "saxpy"

        anyio.run(main)
    finally:
        server.terminate()
        server.wait(timeout=20)


def test_unknown_transport_is_a_usage_error() -> None:
    result = subprocess.run([sys.executable, "-m", "kernelcast.cli", "mcp", "--transport", "carrier-pigeon"],
                            cwd=ROOT, capture_output=True, text=True, check=False, timeout=60)
    assert result.returncode == 2
    assert "--transport must be 'stdio' or 'http'" in result.stderr


