"""`kernelcast forecast` and `kernelcast calibration`: the forecaster from the command line."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table

from kernelcast import api
from kernelcast.api import DEFAULT_FORECASTER, FORECASTERS
from kernelcast.commands.measure import candidate_from_options
from kernelcast.commands.stores import readable_store
from kernelcast.console import console, fail
from kernelcast.tools.core.bins import BIN_NAMES, bin_label
from kernelcast.tools.core.settings import get_settings

app = typer.Typer()


@app.command("forecast")
def forecast(
    task: str = typer.Argument(..., help="built-in task name or path to a task.toml"),
    candidate: str | None = typer.Option(None, "--candidate", "-c", help="kernel source or candidate .json"),
    params: list[str] = typer.Option([], "--params", "-p", help="template point NAME=VALUE (repeatable)"),
    global_size: str | None = typer.Option(None, "--global", help="global size expressions, comma separated"),
    local_size: str | None = typer.Option(None, "--local", help="local size expressions, comma separated"),
    build_options: str = typer.Option("", "--options", help="build options for the candidate"),
    forecaster: str = typer.Option(DEFAULT_FORECASTER, "--forecaster", "-f", help=" | ".join(FORECASTERS)),
    model: str | None = typer.Option(None, "--model", help="litellm model string (LLM forecasters)"),
    device: str | None = typer.Option(None, "--device", "-d"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Forecast a candidate's speedup distribution over the 8 bins, without measuring it."""
    try:
        task_obj = api.as_task(task)
        cand = candidate_from_options(task_obj, candidate, params, global_size, local_size, build_options)
        result = api.forecast(task_obj, cand, forecaster=forecaster, model=model, device=device)
    except (FileNotFoundError, ValueError) as exc:
        fail(str(exc))
    if as_json:
        print(json.dumps(result.model_dump(mode="json"), indent=2))
        return
    prov = result.provenance
    console.print(f"[bold]{task_obj.name}[/] candidate {cand.short} — forecaster {prov.forecaster}"
                  f"{' / ' + prov.model if prov.model else ''} ({prov.latency_s:.2f} s)")
    for b, p in enumerate(result.probabilities, start=1):
        bar = "█" * int(round(40 * p))
        mark = " ◀ predicted" if b == result.predicted_bin else ""
        console.print(f"{b} {bin_label(b):<42} {p:6.1%} [cyan]{bar}[/]{mark}", highlight=False)
    console.print(f"confidence {result.confidence:.2f} · expected speedup "
                  f"{2.718281828 ** result.expected_log_speedup:.2f}x · {BIN_NAMES[result.predicted_bin]}")
    if result.failed:
        console.print(f"[yellow]uninformative forecast: {prov.failure_reason}[/] (the router defers such "
                      "candidates to the hardware)")
    elif prov.repaired:
        console.print(f"[yellow]repaired: {'; '.join(prov.repair_notes)}[/]")
    if result.reasoning:
        console.print(f"reasoning: {result.reasoning}", highlight=False)


@app.command("calibration")
def calibration(
    forecaster: str | None = typer.Option(None, "--forecaster", "-f", help="only this forecaster's forecasts"),
    model: str | None = typer.Option(None, "--model"),
    task: str | None = typer.Option(None, "--task"),
    out: Path | None = typer.Option(None, "--out", help="folder for the PNGs (default <KERNELCAST_HOME>/calibration)"),
) -> None:
    """Score stored forecasts against measurements (table) and write reliability and risk-coverage plots."""
    with readable_store() as store:
        data = api.calibration_pairs(store, forecaster, model, task)
    try:
        summary, recovered = api.score_calibration(data)
    except ValueError as exc:
        fail(f"{exc} (forecasts are stored by `kernelcast forecast`, `optimize` and bench/forecaster_bench.py)")
    label = forecaster or "all forecasters"
    table = Table(title=f"calibration of {label}: {summary.n} forecasts with a measurement")
    table.add_column("metric")
    table.add_column("value")
    rows = [("accuracy (bin exact)", summary.accuracy), ("within one bin", summary.within_one),
            ("Brier (halved)", summary.brier_halved), ("CRPS (ordinal)", summary.crps), ("NLL", summary.nll),
            ("ECE (10 buckets)", summary.ece), ("AURC", summary.aurc), ("mean confidence", summary.mean_confidence)]
    rows += [(f"recovered speedup @ top {k:g}%", v) for k, v in recovered.items()]
    for name, value in rows:
        table.add_row(name, f"{value:.3f}")
    table.add_row("left out: failed measurements / failed forecasts",
                  f"{data.failed_measurements} / {data.failed_forecasts}")
    console.print(table)
    for path in api.calibration_plots(data, out or get_settings().home / "calibration", label):
        console.print(f"wrote {path}")
