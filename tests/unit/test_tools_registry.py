"""The front doors derive their tools from one registry: MCP publishes, the chat parses and helps, the CLI has
a command for each."""

from __future__ import annotations

import typer.main

from kernelcast.chat_commands import COMMANDS, HELP
from kernelcast.cli import app
from kernelcast.mcp_server import EXPENSIVE, PROGRESS, PUBLISHED
from kernelcast.tools_registry import SPECS, TOOLS


def cli_commands() -> set[str]:
    """Every CLI command path ("optimize", "tasks show"), groups included."""
    root = typer.main.get_command(app)
    found: set[str] = set()

    def walk(group: object, prefix: str) -> None:
        for name, command in getattr(group, "commands", {}).items():
            found.add(f"{prefix}{name}")
            walk(command, f"{prefix}{name} ")

    walk(root, "")
    return found


def test_every_cli_command_a_tool_names_exists() -> None:
    named = {spec.cli for spec in SPECS if spec.cli}
    assert named and named <= cli_commands(), named - cli_commands()


def test_mcp_and_the_chat_publish_the_registry() -> None:
    assert set(PUBLISHED) == set(TOOLS) == {s.name for s in SPECS if s.published}
    assert set(EXPENSIVE) == {s.name for s in SPECS if s.published and s.spends}
    assert set(PROGRESS) == {"optimize_kernel", "submit_candidates", "finish_session"}
    slashes = {s.slash: s.name for s in SPECS if s.slash}
    assert {name: tool for name, (tool, _) in COMMANDS.items()} == slashes
    assert all(f"/{name}" in HELP for name in slashes)
