"""`kernelcast tasks`: list and show tasks (built-in or a user's task file)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import typer
from rich.markup import escape
from rich.syntax import Syntax
from rich.table import Table

from kernelcast.api import missing
from kernelcast.console import console, err_console
from kernelcast.tools.core.errors import EXIT_USAGE
from kernelcast.tools.core.task import (
    MAX_TASK_FILE_BYTES,
    BufferArg,
    LocalArg,
    TaskError,
    builtin_task_paths,
    load_task,
    resolve_task,
)

app = typer.Typer(help="List built-in tasks or show one task.", invoke_without_command=True)


@app.callback()
def list_tasks(ctx: typer.Context) -> None:
    """List the built-in tasks."""
    if ctx.invoked_subcommand is not None:
        return
    table = Table(title="built-in tasks")
    for col in ("name", "language", "template points", "sizes", "description"):
        table.add_column(col)
    for name, path in builtin_task_paths().items():
        try:
            task = load_task(path)
        except TaskError as exc:
            table.add_row(name, "?", "?", "?", f"[red]{exc}[/]")
            continue
        count = task.space_count()
        sizes = ", ".join(f"{k}={v}" for k, v in task.spec.sizes.items())
        points = "-" if not task.spec.template else (str(count.valid) if count.exact else count.text())
        table.add_row(name, task.language, points, sizes, task.spec.description)
    console.print(table)


@app.command("show")
def show(name: str = typer.Argument(..., help="built-in task name or path to a task.toml")) -> None:
    """Print one task: arguments, sizes, geometry, tolerances, template and reference source. A task file with
    TODOs left (from `kernelcast init`) lists each with what to write there."""
    _explain_todos(name)
    task = resolve_task(name)
    spec = task.spec
    console.print(f"[bold]{spec.name}[/] ({spec.language}, entry [cyan]{spec.entry}[/]) — {spec.description}")
    console.print(f"file: {task.path}")
    table = Table(title="arguments")
    for col in ("#", "name", "kind", "dtype", "shape / value", "intent", "init"):
        table.add_column(col)
    for i, arg in enumerate(spec.args):
        if isinstance(arg, BufferArg):
            table.add_row(str(i), arg.name, "buffer", arg.dtype, " x ".join(map(str, arg.shape)), arg.direction, arg.init)
        elif isinstance(arg, LocalArg):
            table.add_row(str(i), arg.name, "local", arg.dtype, " x ".join(map(str, arg.shape)), "per work-group", "")
        else:
            table.add_row(str(i), arg.name, "scalar", arg.dtype, str(arg.value), "in", "")
    console.print(table)
    console.print(f"sizes: {spec.sizes}   small sizes: {spec.small_sizes or spec.sizes}")
    console.print(f"launch: global {spec.launch.global_size} local {spec.launch.local_size or 'runtime-chosen'}")
    console.print(f"tolerance: rtol {spec.tolerance.rtol} atol {spec.tolerance.atol}")
    if spec.template:
        own = spec.template.source is None
        console.print(f"template: {'the task source itself, tuned as it is' if own else spec.template.source}, "
                      f"{task.space_count().text()}")
        for key, values in spec.template.params.items():
            console.print(f"  {key}: {values}")
        for c in spec.template.constraints:
            console.print(f"  constraint: {c}")
    console.print(Syntax(task.source, "c", line_numbers=True))


def _explain_todos(name: str) -> None:
    """Exit (code 2) with the TODOs a task file still holds and why each is needed; return when there are none
    or the file cannot be read as TOML (loading it reports that)."""
    path = Path(name)
    if path.is_dir():
        path = path / "task.toml"
    if path.suffix != ".toml" or not path.is_file() or path.stat().st_size > MAX_TASK_FILE_BYTES:
        return
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return
    todos = missing(raw)
    if not todos:
        return
    err_console.print(f"[bold red]error:[/] {escape(str(path))} is not complete: {len(todos)} field(s) still to "
                      "fill in", highlight=False)
    for field, reason in todos:
        err_console.print(f"  {escape(field)}: {escape(reason)}", highlight=False)
    raise typer.Exit(EXIT_USAGE)
