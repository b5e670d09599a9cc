"""`kernelcast mcp`: serve kernelcast's tools to MCP clients (stdio, or streamable HTTP with a bearer token)."""

from __future__ import annotations

import typer

from kernelcast.console import fail

app = typer.Typer()


def _help() -> str:
    from kernelcast.tools_registry import TOOLS

    return (f"Run the MCP server. Its {len(TOOLS)} tools: {', '.join(TOOLS)}. The session tools (start_session ... "
            "finish_session) let an agent write the candidates while kernelcast spends the budget.")


@app.command("mcp", help=_help())
def mcp(
    transport: str = typer.Option("stdio", "--transport", help="stdio | http (streamable HTTP at /mcp)"),
    port: int = typer.Option(8765, "--port", help="HTTP port"),
    host: str = typer.Option("127.0.0.1", "--host", help="HTTP bind address (loopback unless you mean otherwise; "
                                                         "beyond loopback a --token is required)"),
    token: str | None = typer.Option(None, "--token", help="bearer token HTTP clients must send (default: "
                                                           "KERNELCAST_MCP_TOKEN, else <home>/mcp_token, generated "
                                                           "on first start and printed once)"),
    no_auth: bool = typer.Option(False, "--no-auth", help="HTTP without a token (loopback addresses only)"),
    max_busy: int = typer.Option(1, "--max-busy", min=1, max=16,
                                 help="concurrent measure_kernel/optimize_kernel calls; more are refused as busy"),
) -> None:
    if transport not in ("stdio", "http"):
        fail(f"--transport must be 'stdio' or 'http', got {transport!r}")
    if transport == "http" and not 1 <= port <= 65535:
        fail(f"--port must be a TCP port from 1 to 65535, got {port}")
    if transport == "stdio" and (token or no_auth):
        fail("--token and --no-auth apply to --transport http only (stdio has no network listener)")
    from kernelcast.mcp_server import run

    run(transport, host=host, port=port, token=token, no_auth=no_auth, max_busy=max_busy)
