"""kernelcast as an MCP server (official SDK, v2 ``MCPServer``): the chat's tools for any MCP client.

The tools are :mod:`kernelcast.chat_tools` functions published as they are
(their annotations become the input and output schemas); this module only
adapts them: every error becomes an MCP tool error with a one-line message
(never a traceback), the tools that measure (``optimize_kernel``,
``submit_candidates``, ``finish_session``) run in a worker thread and send a
progress notification per hardware measurement, and the expensive tools
(those plus ``measure_kernel`` and ``start_session``) share a small number of
slots: a call that finds none free is refused as busy instead of queueing
device time.

Over HTTP anyone who can reach the port could spend device time, so the HTTP
server requires a bearer token (generated on first start into the home
folder, mode 0600, or given by ``--token`` / ``KERNELCAST_MCP_TOKEN``),
validates Host and Origin for the bound address through the SDK's
transport-security settings, and binds beyond loopback only with a token the
operator chose.
"""

from __future__ import annotations

import functools
import hmac
import inspect
import ipaddress
import logging
import os
import secrets
import socket
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings

from kernelcast.api import Spend, parse, spend_text
from kernelcast.tools.core.errors import InputError, KernelcastError
from kernelcast.tools_registry import TOOLS, spec

PUBLISHED = tuple(TOOLS)  # every tool of the chat's model is an MCP tool (``kernelcast mcp --help`` lists them)
INSTRUCTIONS = ("kernelcast optimizes OpenCL/CUDA kernels under a budget of hardware measurements. Start with "
                "list_tasks and describe_task; measure_kernel and forecast_speedup check one kernel; "
                "optimize_kernel runs a search (use sizes='small' and a small budget for a quick trial). To search "
                "with kernels you write yourself: start_session, then suggest_parents and submit_candidates in "
                "turn, then finish_session; a session resumes by id after a restart.")


# tools that spend device time (a session's start runs the reference; submit and finish measure)
EXPENSIVE = tuple(name for name in PUBLISHED if spec(name).spends)
PROGRESS = tuple(name for name in PUBLISHED if spec(name).progress)  # one progress notification per measurement
DEFAULT_MAX_BUSY = 1  # concurrent expensive calls: measurements share one device, queueing only hides the wait
TOKEN_FILE = "mcp_token"
LOOPBACK_NAMES = ("localhost",)
log = logging.getLogger(__name__)


class McpConfigError(InputError, ValueError):
    """The HTTP server cannot start as asked (unsafe bind, bad token file): a one-line usage error."""


def build_server(max_busy: int = DEFAULT_MAX_BUSY) -> MCPServer:
    """An MCPServer with every published tool registered; expensive tools share ``max_busy`` slots."""
    server = MCPServer("kernelcast", instructions=INSTRUCTIONS, version=server_version(), log_level="WARNING")
    slots = threading.BoundedSemaphore(max(1, max_busy))
    for name in PUBLISHED:
        fn = TOOLS[name]
        gate = slots if name in EXPENSIVE else None
        server.add_tool(_with_progress(fn, gate) if name in PROGRESS else _with_clear_errors(fn, gate),
                        name=name, description=inspect.getdoc(fn))
    return server


def server_version() -> str:
    """The version the server reports to its clients: the installed kernelcast package's."""
    try:
        return version("kernelcast")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "0+unknown"


def run(transport: str = "stdio", host: str = "127.0.0.1", port: int = 8765, token: str | None = None,
        no_auth: bool = False, home: Path | None = None, max_busy: int = DEFAULT_MAX_BUSY) -> None:
    """Serve until the client goes away (stdio) or the process is stopped (http)."""
    server = build_server(max_busy)
    if transport == "stdio":
        server.run("stdio")
    elif transport == "http":
        from kernelcast.tools.core.settings import get_settings

        settings = get_settings()
        explicit = token or (settings.mcp_token.get_secret_value() if settings.mcp_token else None)
        security = http_security(host, port, explicit, no_auth, home or settings.home)
        serve_http(server, security)
    else:
        raise ValueError(f"unknown transport {transport!r}: expected stdio or http")


# ---- HTTP: token, Host/Origin, bind address ---------------------------------------------------
@dataclass(frozen=True)
class HttpSecurity:
    """How the HTTP server protects itself: the bind address, the token (None: --no-auth on loopback) and the
    Host/Origin values it accepts."""

    host: str
    port: int
    token: str | None
    allowed_hosts: list[str]
    allowed_origins: list[str]

    def transport_security(self) -> TransportSecuritySettings:
        return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=self.allowed_hosts,
                                         allowed_origins=self.allowed_origins)


def is_loopback(host: str) -> bool:
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def http_security(host: str, port: int, token: str | None, no_auth: bool, home: Path) -> HttpSecurity:
    """Decide the HTTP server's protection, refusing unsafe combinations with a clear message.

    ``--no-auth`` only on loopback; beyond loopback only with a token the operator chose (``--token`` or
    KERNELCAST_MCP_TOKEN), never a generated one nobody else has seen; otherwise the token in
    ``<home>/mcp_token``, created on first start.
    """
    loopback = is_loopback(host)
    if no_auth and token:
        raise McpConfigError("--no-auth and a token (--token or KERNELCAST_MCP_TOKEN) contradict each other")
    if no_auth and not loopback:
        raise McpConfigError(f"--no-auth is allowed only on a loopback address, not {host}: anyone on the "
                             "network could spend device time")
    if not loopback and not token:
        raise McpConfigError(f"binding {host} (beyond loopback) needs a bearer token: pass --token or set "
                             "KERNELCAST_MCP_TOKEN")
    if token is not None and len(token) < 16:
        raise McpConfigError("the bearer token must be at least 16 characters")
    if not no_auth and token is None:
        token = stored_token(home)
    hosts = _host_names(host)
    return HttpSecurity(host=host, port=port, token=None if no_auth else token,
                        allowed_hosts=[f"{h}:{port}" for h in hosts] + (hosts if port == 80 else []),
                        allowed_origins=[f"http://{h}:{port}" for h in hosts] + ([f"http://{h}" for h in hosts]
                                                                                   if port == 80 else []))


def _host_names(host: str) -> list[str]:
    """The Host header values that name this server at ``host`` (IPv6 in brackets, as in a URL)."""
    def spelled(h: str) -> str:
        return f"[{h}]" if ":" in h and not h.startswith("[") else h

    if host in ("0.0.0.0", "::"):  # every interface: loopback plus the machine's own names and addresses
        names = {"127.0.0.1", "localhost", "::1", socket.gethostname(), socket.getfqdn()}
        try:
            names |= {str(info[4][0]) for info in socket.getaddrinfo(socket.gethostname(), None)}
        except OSError:
            pass
        return sorted(spelled(n) for n in names if n)
    if is_loopback(host):
        return sorted({spelled(host), "127.0.0.1", "localhost", "[::1]"} if host in ("127.0.0.1", "localhost", "::1")
                      else {spelled(host)})
    return [spelled(host)]


def stored_token(home: Path) -> str:
    """The token in ``<home>/mcp_token``; on first start it is generated (mode 0600) and printed once."""
    path = home / TOKEN_FILE
    try:
        home.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return _read_token(path)
    except OSError as exc:
        raise McpConfigError(f"cannot create the token file {path}: {exc.strerror or exc}") from None
    token = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w") as fh:
        fh.write(token + "\n")
    print(f"kernelcast MCP bearer token (saved in {path}, mode 0600; shown only this once):\n{token}",
          file=sys.stderr, flush=True)
    return token


def _read_token(path: Path) -> str:
    try:
        mode = path.stat().st_mode & 0o777
        if mode & 0o077:
            raise McpConfigError(f"the token file {path} is readable by others (mode {mode:o}); "
                                 f"run: chmod 600 {path}")
        token = path.read_text().strip()
    except OSError as exc:
        raise McpConfigError(f"cannot read the token file {path}: {exc.strerror or exc}") from None
    if len(token) < 16:
        raise McpConfigError(f"the token file {path} holds no usable token (delete it to generate a new one)")
    print(f"kernelcast MCP: clients must send the bearer token saved in {path}", file=sys.stderr, flush=True)
    return token


class BearerTokenMiddleware:
    """ASGI middleware: every HTTP request must carry ``Authorization: Bearer <token>`` (constant-time check)."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.token = token.encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = next((v for k, v in scope.get("headers", []) if k.lower() == b"authorization"), b"")
            scheme, _, value = given.partition(b" ")
            if scheme.lower() != b"bearer" or not hmac.compare_digest(value.strip(), self.token):
                body = b"missing or wrong bearer token (Authorization: Bearer <token>)"
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"text/plain"), (b"www-authenticate", b"Bearer"),
                                        (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def http_app(server: MCPServer, security: HttpSecurity) -> Any:
    """The streamable-HTTP ASGI app with Host/Origin validation and, unless --no-auth, the bearer check."""
    app = server.streamable_http_app(transport_security=security.transport_security(), host=security.host)
    return BearerTokenMiddleware(app, security.token) if security.token else app


def serve_http(server: MCPServer, security: HttpSecurity) -> None:
    import uvicorn

    config = uvicorn.Config(http_app(server, security), host=security.host, port=security.port,
                            log_level="warning")
    anyio.run(uvicorn.Server(config).serve)


# ---- tool adapters ------------------------------------------------------------------------------
def _busy(name: str) -> ToolError:
    return ToolError(f"busy: another measurement or optimization is running ({', '.join(EXPENSIVE)} run one at a "
                     f"time on this server); try {name} again when it has finished")


def _tool_error(exc: Exception) -> ToolError:
    """The MCP door's one error mapping: a :class:`KernelcastError` is its one-line message; anything else is an
    internal error, one line for the caller and one in the server log. Never a traceback to the caller."""
    if isinstance(exc, KernelcastError):
        return ToolError(str(exc))
    text = " ".join(str(exc).split())[:300] or type(exc).__name__
    log.warning("tool failed: %s: %s", type(exc).__name__, text)
    return ToolError(f"internal error ({type(exc).__name__}): {text}")


def _with_clear_errors(fn: Callable[..., Any], gate: threading.BoundedSemaphore | None = None) -> Callable[..., Any]:
    """The tool, raising ToolError (a clean error result, no server traceback) for every failure."""

    @functools.wraps(fn)
    def tool(**kwargs: Any) -> Any:
        if gate is not None and not gate.acquire(blocking=False):
            raise _busy(fn.__name__)
        try:
            return fn(**kwargs)
        except Exception as exc:  # noqa: BLE001 - mapped to a tool error
            raise _tool_error(exc) from None
        finally:
            if gate is not None:
                gate.release()

    return _published_signature(tool, fn)


def _with_progress(fn: Callable[..., Any], gate: threading.BoundedSemaphore | None = None) -> Callable[..., Any]:
    """An async tool that runs ``fn`` in a thread and forwards each ``spend`` event as MCP progress."""

    async def tool(ctx: Context, **kwargs: Any) -> Any:
        def on_event(kind: str, payload: dict[str, Any]) -> None:
            event = parse(kind, payload)
            if not isinstance(event, Spend):
                return
            message = spend_text(event, payload["candidate"])  # the sink's envelope: run id and candidate hash
            anyio.from_thread.run(ctx.report_progress, float(event.spent), float(event.budget) or None, message)

        if gate is not None and not gate.acquire(blocking=False):
            raise _busy(fn.__name__)
        try:
            return await anyio.to_thread.run_sync(functools.partial(fn, on_event=on_event, **kwargs))
        except Exception as exc:  # noqa: BLE001 - mapped to a tool error
            raise _tool_error(exc) from None
        finally:
            if gate is not None:
                gate.release()

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
