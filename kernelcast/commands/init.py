"""`kernelcast init`: a task file from a kernel's signature, with TODOs for what the signature cannot say."""

from __future__ import annotations

import tomllib
from pathlib import Path

import typer
from rich.table import Table

from kernelcast.api import missing, write_task
from kernelcast.console import console, fail

app = typer.Typer()


@app.command("init")
def init(
    name: str = typer.Argument(..., help="the task's name (letters, digits, _ and -)"),
    source: Path = typer.Option(..., "--source", "-s", help="the kernel source (.cl: OpenCL, .cu: CUDA)"),
    entry: str | None = typer.Option(None, "--entry", "-e", help="the kernel to optimize (needed when the "
                                                                  "source defines several)"),
    out: Path | None = typer.Option(None, "--out", "-o", help="the task file to write (default: task.toml "
                                                               "beside the source; the source must be in its "
                                                               "folder or below)"),
    language: str | None = typer.Option(None, "--language", help="opencl or cuda (default: from the suffix)"),
    force: bool = typer.Option(False, "--force", help="replace an existing task file"),
) -> None:
    """Write a task file from KERNEL's parsed signature: arguments in order, dtypes, guessed intents; sizes,
    shapes, scalar values and the launch are TODOs with the reason. `kernelcast tasks show FILE` then lists
    what is still missing."""
    if language not in (None, "opencl", "cuda"):
        fail(f"--language must be opencl or cuda, got {language!r}")
    if not name or not all(c.isalnum() or c in "_-" for c in name):
        fail(f"task name {name!r}: use letters, digits, _ and -")
    path, args = write_task(name, source, entry, out, language, force)
    table = Table(title=f"arguments of {path.name}")
    for col in ("#", "name", "kind", "dtype", "intent", "why"):
        table.add_column(col)
    for i, arg in enumerate(args):
        table.add_row(str(i), arg.name, arg.kind, arg.dtype, arg.intent or "", arg.why)
    console.print(table)
    todos = missing(tomllib.loads(path.read_text()))
    console.print(f"wrote {path}: {len(todos)} TODO(s) to fill in ({', '.join(f for f, _ in todos)}); then "
                  f"kernelcast tasks show {path}", markup=False, highlight=False)
