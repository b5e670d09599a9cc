"""kernelcast as an MCP server (official SDK, v2 ``MCPServer``): the chat's tools for any MCP client.

The tools are :mod:`kernelcast.chat_tools` functions published as they are
(their annotations become the input and output schemas); this module only
adapts them: errors become MCP tool errors with the one-line message, and
``optimize_kernel`` runs in a worker thread and sends a progress notification
per hardware measurement.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import anyio
import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from kernelcast import chat_tools as ops

PUBLISHED = ("list_tasks", "describe_task", "measure_kernel", "forecast_speedup", "optimize_kernel", "get_run",
             "list_runs")
INSTRUCTIONS = ("kernelcast optimizes OpenCL/CUDA kernels under a budget of hardware measurements. Start with "
                "list_tasks and describe_task; measure_kernel and forecast_speedup check one kernel; "
                "optimize_kernel runs a search (use sizes='small' and a small budget for a quick trial).")


def build_server() -> MCPServer:
    """An MCPServer with every published tool registered."""
    server = MCPServer("kernelcast", instructions=INSTRUCTIONS, log_level="WARNING")
    for name in PUBLISHED:
        fn = ops.TOOLS[name]
        server.add_tool(_with_progress(fn) if name == "optimize_kernel" else _with_clear_errors(fn), name=name,
                        description=inspect.getdoc(fn))
    return server


def run(transport: str = "stdio", host: str = "127.0.0.1", port: int = 8765) -> None:
    """Serve until the client goes away (stdio) or the process is stopped (http)."""
    server = build_server()
    if transport == "stdio":
        server.run("stdio")
    elif transport == "http":
        server.run("streamable-http", host=host, port=port)
    else:
        raise ValueError(f"unknown transport {transport!r}: expected stdio or http")


def _with_clear_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The tool, raising ToolError (a clean error result, no server traceback) for bad input."""

    @functools.wraps(fn)
    def tool(**kwargs: Any) -> Any:
        try:
            return fn(**kwargs)
        except ops.OperationError as exc:
            raise ToolError(str(exc)) from None

    return _published_signature(tool, fn)


def _with_progress(fn: Callable[..., Any]) -> Callable[..., Any]:
    """An async tool that runs ``fn`` in a thread and forwards each ``spend`` event as MCP progress."""

    async def tool(ctx: Context, **kwargs: Any) -> Any:
        def on_event(kind: str, payload: dict[str, Any]) -> None:
            if kind != "spend":
                return
            speed = f" {payload['speedup']:.3f}x" if payload.get("speedup") else ""
            message = f"measured {str(payload.get('candidate'))[:8]}: {payload.get('status')}{speed}"
            anyio.from_thread.run(ctx.report_progress, float(payload.get("spent", 0)),
                                  float(payload.get("budget") or 0) or None, message)

        try:
            return await anyio.to_thread.run_sync(functools.partial(fn, on_event=on_event, **kwargs))
        except ops.OperationError as exc:
            raise ToolError(str(exc)) from None

    functools.update_wrapper(tool, fn)
    return _published_signature(tool, fn, with_context=True)


def _published_signature(tool: Callable[..., Any], fn: Callable[..., Any],
                         with_context: bool = False) -> Callable[..., Any]:
    """Give the wrapper ``fn``'s evaluated parameters (callbacks left out) so the SDK builds the schema."""
    sig = inspect.signature(fn, eval_str=True)
    params = [p for name, p in sig.parameters.items() if name != "on_event"]
    if with_context:
        params.append(inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=Context))
    tool.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    tool.__annotations__ = {**{p.name: p.annotation for p in params}, "return": sig.return_annotation}
    del tool.__wrapped__  # type: ignore[attr-defined]  # the SDK must see the wrapper, not fn
    return tool
