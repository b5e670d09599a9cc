"""Shared rich console and the error convention of every command."""

from __future__ import annotations

import sys
from typing import NoReturn

import typer
from rich.console import Console

console = Console()
err_console = Console(stderr=True)

# Stable exit codes for scripts and other programs.
EXIT_OK = 0
EXIT_FAILED = 1  # the operation ran but its subject failed (e.g. a candidate was incorrect)
EXIT_USAGE = 2  # bad input: unknown task, malformed file, bad option
EXIT_DEVICE = 3  # no usable device / worker could not start
EXIT_INTERRUPTED = 130


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """Print a clear one-line error and exit with a stable code."""
    err_console.print(f"[bold red]error:[/] {message}", highlight=False)
    raise typer.Exit(code)


def is_tty() -> bool:
    return sys.stdout.isatty()
