"""`kernelcast import kernel-tuner`: another tool's recorded timings of a device as recorded measurements."""

from __future__ import annotations

from pathlib import Path

import typer

from kernelcast import api
from kernelcast.commands.stores import writable_store
from kernelcast.console import console

app = typer.Typer(help="Import timings other tools recorded (replayed as a device, learned from by transfer).",
                  no_args_is_help=True)


@app.command("kernel-tuner")
def kernel_tuner(
    cache: Path = typer.Argument(..., help="a Kernel Tuner cache file (.json or .json.gz, the original format)"),
    task: str = typer.Option(..., "--task", help="the template task (TOML) whose parameters the cache tunes"),
) -> None:
    """Store a Kernel Tuner cache as recorded measurements of TASK on the GPU it names (replacing an earlier import
    of the same task and GPU); replay it with `kernelcast optimize TASK --replay GPU`."""
    chosen, space = api.read_kernel_tuner(cache, task)
    with writable_store() as store:
        done = api.store_kernel_tuner(store, chosen, space)
    console.print(f"imported {done.stored} recorded rows of {done.task} on {done.device} ({done.timed} timed, "
                  f"{done.failed} failed configurations; {done.unrecorded} valid points of the task unrecorded; "
                  f"device spec: {done.spec_source})")
