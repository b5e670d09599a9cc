"""The base of every kernelcast error and the exit codes it carries.

It lives in the lowest layer so every layer's errors can derive from it; each front door maps it once (the CLI
to an exit code, MCP to a tool error, the chat to a message). Errors that were a ``ValueError`` or a
``RuntimeError`` stay one too (multiple inheritance), so existing ``except`` clauses still catch them.
"""

from __future__ import annotations

# Stable exit codes for scripts and other programs.
EXIT_OK = 0
EXIT_FAILED = 1  # the operation ran but its subject failed (e.g. a candidate was incorrect, the search failed)
EXIT_USAGE = 2  # bad input: unknown task, malformed file, bad option
EXIT_DEVICE = 3  # no usable device / worker could not start
EXIT_INTERRUPTED = 130


class KernelcastError(Exception):
    """Base of every kernelcast error; ``exit_code`` is what the CLI exits with when it is not caught sooner."""

    exit_code: int = EXIT_FAILED


class InputError(KernelcastError):
    """Bad input the caller can fix: a task, file, option, id or kernel that is malformed or unknown."""

    exit_code = EXIT_USAGE


class DeviceError(KernelcastError):
    """The device or its measurement worker cannot be used."""

    exit_code = EXIT_DEVICE


class DeviceRuntimeError(DeviceError, RuntimeError):
    """The runtime reported an error while listing devices, or enqueuing or running a kernel."""
