"""`kernelcast mcp`: serve kernelcast's tools to MCP clients (stdio, or streamable HTTP on loopback)."""

from __future__ import annotations

import typer

from kernelcast.console import fail

app = typer.Typer()


@app.command("mcp")
def mcp(
    transport: str = typer.Option("stdio", "--transport", help="stdio | http (streamable HTTP at /mcp)"),
    port: int = typer.Option(8765, "--port", help="HTTP port"),
    host: str = typer.Option("127.0.0.1", "--host", help="HTTP bind address (loopback unless you mean otherwise)"),
) -> None:
    """Run the MCP server: list_tasks, describe_task, measure_kernel, forecast_speedup, optimize_kernel, get_run,
    list_runs."""
    if transport not in ("stdio", "http"):
        fail(f"--transport must be 'stdio' or 'http', got {transport!r}")
    from kernelcast.mcp_server import run

    run(transport, host=host, port=port)
