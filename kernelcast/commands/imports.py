"""`kernelcast import kernel-tuner`: another tool's recorded timings of a device as recorded measurements."""

from __future__ import annotations

from pathlib import Path

import typer

from kernelcast.commands.stores import writable_store
from kernelcast.console import console
from kernelcast.tools.core.task import resolve_task

app = typer.Typer(help="Import timings other tools recorded (replayed as a device, learned from by transfer).",
                  no_args_is_help=True)


@app.command("kernel-tuner")
def kernel_tuner(
    cache: Path = typer.Argument(..., help="a Kernel Tuner cache file (.json or .json.gz, the original format)"),
    task: str = typer.Option(..., "--task", help="the template task (TOML) whose parameters the cache tunes"),
) -> None:
    """Store a Kernel Tuner cache as recorded measurements of TASK on the GPU it names (replacing an earlier import
    of the same task and GPU); replay it with `kernelcast optimize TASK --replay GPU`."""
    from kernelcast.agents.forecast.device_probe import Bandwidth, store_probes
    from kernelcast.tools.store.kernel_tuner import import_cache

    chosen = resolve_task(task)
    space = import_cache(cache, chosen)
    with writable_store() as store:
        stored = store.replace_recorded(chosen, space.device, space.rows)
        peak = space.device.extra.get("peak_bandwidth_gbs")
        if isinstance(peak, int | float) and peak > 0:  # the prior's bandwidth: the data sheet's, never probed
            store_probes(store, space.device, Bandwidth(peak * 1e9, "data sheet"), {"source": "vendor data sheet"})
    sheet = space.device.extra.get("spec_source")
    console.print(f"imported {stored} recorded rows of {chosen.name} on {space.device.key} ({space.recorded} timed, "
                  f"{space.failed} failed configurations; {space.unrecorded} valid points of the task unrecorded; "
                  f"device spec: {sheet})")
