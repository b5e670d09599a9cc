"""`kernelcast tasks`: list and show tasks (built-in or a user's task file)."""

from __future__ import annotations

import typer
from rich.syntax import Syntax
from rich.table import Table

from kernelcast.console import console, fail
from kernelcast.tools.task import BufferArg, LocalArg, TaskError, builtin_task_paths, load_task, resolve_task

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
    """Print one task: arguments, sizes, geometry, tolerances, template and reference source."""
    try:
        task = resolve_task(name)
    except TaskError as exc:
        fail(str(exc))
    spec = task.spec
    console.print(f"[bold]{spec.name}[/] ({spec.language}, entry [cyan]{spec.entry}[/]) — {spec.description}")
    console.print(f"file: {task.path}")
    table = Table(title="arguments")
    for col in ("#", "name", "kind", "dtype", "shape / value", "intent", "init"):
        table.add_column(col)
    for i, arg in enumerate(spec.args):
        if isinstance(arg, BufferArg):
            table.add_row(str(i), arg.name, "buffer", arg.dtype, " x ".join(map(str, arg.shape)), arg.intent, arg.init)
        elif isinstance(arg, LocalArg):
            table.add_row(str(i), arg.name, "local", arg.dtype, " x ".join(map(str, arg.shape)), "per work-group", "")
        else:
            table.add_row(str(i), arg.name, "scalar", arg.dtype, str(arg.value), "in", "")
    console.print(table)
    console.print(f"sizes: {spec.sizes}   small sizes: {spec.small_sizes or spec.sizes}")
    console.print(f"launch: global {spec.launch.global_size} local {spec.launch.local_size or 'runtime-chosen'}")
    console.print(f"tolerance: rtol {spec.tolerance.rtol} atol {spec.tolerance.atol}")
    if spec.template:
        console.print(f"template: {spec.template.source}, {task.space_count().text()}")
        for key, values in spec.template.params.items():
            console.print(f"  {key}: {values}")
        for c in spec.template.constraints:
            console.print(f"  constraint: {c}")
    console.print(Syntax(task.source, "c", line_numbers=True))
