"""`kernelcast dataset build|export`: measured data for the learned forecaster and calibration."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from kernelcast import api
from kernelcast.commands.stores import readable_store, writable_store
from kernelcast.console import console, fail
from kernelcast.tools.core.measurement import MeasureConfig
from kernelcast.tools.core.settings import get_settings
from kernelcast.tools.core.task import builtin_task_paths, load_task, resolve_task

app = typer.Typer(help="Build the measured dataset (resumable).", no_args_is_help=True)


@app.command("build")
def build(
    tasks: str | None = typer.Option(None, "--tasks", help="comma-separated tasks (default: every OpenCL built-in; "
                                     "CUDA tasks are measured by the CUDA backend)"),
    per_task: int = typer.Option(40, "--per-task", "-n", help="candidates per task"),
    limit: int | None = typer.Option(None, "--limit", help="stop after this many new measurements"),
    seed: int = typer.Option(0, "--seed"),
    device: str | None = typer.Option(None, "--device", "-d"),
    sizes: str = typer.Option("full", "--sizes"),
    parallel: int = typer.Option(1, "--parallel", help="measurements in flight (one device per worker)"),
    ray: str | None = typer.Option(None, "--ray", help="'auto' or a Ray cluster address: one actor per device"),
    share_device: bool = typer.Option(False, "--share-device", help="let parallel workers share one device"),
) -> None:
    """Measure a pool of candidates per task into the store; rerun to continue where it stopped."""
    if per_task < 1:
        fail(f"--per-task must be at least 1 (candidates per task), got {per_task}")
    if limit is not None and limit < 1:
        fail(f"--limit must be at least 1 (new measurements), got {limit}")
    if parallel < 1:
        fail(f"--parallel must be at least 1 (measurements in flight), got {parallel}")
    if tasks:
        chosen = [resolve_task(t.strip()) for t in tasks.split(",") if t.strip()]
    else:
        chosen = [t for t in (load_task(p) for p in builtin_task_paths().values()) if t.language == "opencl"]
    backends = {t.backend for t in chosen}
    if len(backends) != 1:
        fail("these tasks need different backends (OpenCL and CUDA): build their datasets in two runs")
    settings = get_settings()
    config = MeasureConfig(sizes=sizes, timeout_s=settings.measure_timeout_s)
    counts = {"correct": 0, "failed": 0}
    with writable_store() as store, api.make_measurer(
            backends.pop(), device or settings.device, parallel=parallel, ray=ray, store=store,
            share_device=share_device) as worker, Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
        console=console,
    ) as progress:
        bar = progress.add_task("checking references...", total=None)
        for task in chosen:  # a broken task stops the build before anything is spent on it
            worker.check_reference(task, sizes)

        def tick(task, cand, result, done, total) -> None:  # noqa: ANN001
            counts["correct" if result is not None and result.ok else "failed"] += 1
            if not console.is_terminal:  # no live bar in logs: one line per measurement
                console.print(f"[{done}/{total}] {task.name} {cand.short}: "
                              f"{result.status.value if result else '?'}"
                              + (f" {result.speedup:.3f}x" if result is not None and result.speedup else ""))
            progress.update(bar, total=total, completed=done,
                            description=f"{task.name} {cand.short}: {result.status.value if result else '?'}")

        made = api.build_dataset(chosen, store, worker, per_task=per_task, seed=seed, config=config, limit=limit,
                             on_progress=tick)
    console.print(f"{made} new measurements ({counts['correct']} correct, {counts['failed']} failed) in "
                  f"{Path(settings.db_path)}")


@app.command("export")
def export(path: Path = typer.Argument(..., help="output .jsonl.gz"),
           device: str | None = typer.Option(None, "--device-key", help="only this device key")) -> None:
    """Write the store's measured pairs (with device specs) to a portable gzipped JSON-lines file."""
    with readable_store() as store:
        try:
            n = store.pairs.export_to(path, device)
        except OSError as exc:
            fail(f"cannot write {path}: {exc.strerror or exc}")
    console.print(f"exported {n} measured pairs to {path}")


@app.command("import")
def import_(path: Path = typer.Argument(..., help="a file written by `kernelcast dataset export`")) -> None:
    """Load measured pairs from another store as imported rows (skips pairs already present): training data for
    the learned forecaster, never taken for this device's own measurements (a run measures them again, calibration
    and trust do not read them), never rewriting a known device's spec; refused whole when a pair contradicts this
    store's own measurement of the same kernel."""
    if not path.exists():
        fail(f"{path} not found")
    with writable_store() as store:
        n = store.pairs.import_from(path)
    console.print(f"imported {n} measured pairs from {path} (marked imported: training data, not this device's "
                  "own measurements)")
