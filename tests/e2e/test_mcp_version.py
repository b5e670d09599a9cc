"""The MCP server names its version (issue 64, item 9): the installed package's, never empty, as a client sees it
over stdio."""

from __future__ import annotations

import sys
from importlib.metadata import version
from pathlib import Path

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from support.paths import ROOT


def test_the_server_reports_the_package_version(tmp_path: Path) -> None:
    seen: dict[str, str] = {}

    async def body() -> None:
        server = StdioServerParameters(command=sys.executable, args=["-m", "kernelcast.cli", "mcp"], cwd=str(ROOT),
                                       env={"KERNELCAST_HOME": str(tmp_path / "home"), "PYTHONPATH": str(ROOT)})
        async with Client(server, read_timeout_seconds=120) as client:
            assert client.server_info is not None
            seen.update(name=client.server_info.name, version=client.server_info.version)

    anyio.run(body)
    assert seen["name"] == "kernelcast" and seen["version"] == version("kernelcast") != ""
