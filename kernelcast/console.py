"""Shared rich console and the error convention of every command."""

from __future__ import annotations

import sys
from typing import NoReturn

import typer
from rich.console import Console

from kernelcast.tools.core.errors import EXIT_USAGE

console = Console()
err_console = Console(stderr=True)


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """Print a clear one-line error and exit with a stable code. Never wrapped at the console's width: a pipe or a
    log reader gets the error on one line whatever the terminal."""
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def is_tty() -> bool:
    return sys.stdout.isatty()
