"""`kernelcast measure` and `kernelcast devices`: the hardware tool from the command line."""

from __future__ import annotations

import json
from contextlib import AbstractContextManager, closing, nullcontext

import typer
from rich.table import Table

from kernelcast import api
from kernelcast.api import Store, interval_text, shown_flags, throughput
from kernelcast.commands.stores import readable_store, store_exists, writable_store
from kernelcast.console import console, fail
from kernelcast.tools.core.bins import BIN_NAMES
from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.errors import EXIT_DEVICE, EXIT_FAILED
from kernelcast.tools.core.measurement import MeasureConfig, Measurement
from kernelcast.tools.core.settings import get_settings

app = typer.Typer()


def parse_params(items: list[str]) -> dict[str, int | float | str]:
    """``k=v`` pairs; numbers become numbers."""
    out: dict[str, int | float | str] = {}
    for item in items:
        if "=" not in item:
            fail(f"--params expects NAME=VALUE, got {item!r}")
        key, value = item.split("=", 1)
        try:
            out[key.strip()] = int(value)
        except ValueError:
            try:
                out[key.strip()] = float(value)
            except ValueError:
                out[key.strip()] = value.strip()
    return out


def candidate_from_options(task_obj, candidate: str | None, params: list[str], global_size: str | None,  # noqa: ANN001
                           local_size: str | None, build_options: str) -> Candidate:
    """The candidate named on the command line: a file (with optional geometry), a template point, or the reference."""
    if candidate:
        return api.candidate_file(candidate, task_obj, global_size.split(",") if global_size else None,
                                  local_size.split(",") if local_size else None, build_options.split())
    return api.make_candidate(task_obj, None, parse_params(params) if params else None)


def measurement_table(m: Measurement, candidate: Candidate) -> Table:
    table = Table(title=f"{m.task} · candidate {candidate.short} · {m.device} · {m.sizes} size")
    for col in ("status", "ref median", "cand median", "cand CV", "speedup", "95 % interval", "bin", "flags"):
        table.add_column(col)
    style = "green" if m.ok else "red"
    table.add_row(
        f"[{style}]{m.status.value}[/]",
        f"{m.reference.median_ns / 1e6:.3f} ms" if m.reference else "-",
        f"{m.candidate.median_ns / 1e6:.3f} ms" if m.candidate else "-",
        f"{m.candidate.cv:.1%}" if m.candidate else "-",
        f"{m.speedup:.3f}x" if m.speedup else "-",
        interval_text(m.speedup_ci) or "-",
        f"{m.bin()} {BIN_NAMES[m.bin()]}",
        "; ".join(shown_flags(m.flags)) or "-",
    )
    return table


@app.command("measure")
def measure(
    task: str = typer.Argument(..., help="built-in task name or path to a task.toml"),
    candidate: str | None = typer.Option(None, "--candidate", "-c", help="kernel source file or candidate .json"),
    params: list[str] = typer.Option([], "--params", "-p", help="template point NAME=VALUE (repeatable)"),
    global_size: str | None = typer.Option(None, "--global", help="global size expressions, comma separated"),
    local_size: str | None = typer.Option(None, "--local", help="local size expressions, comma separated"),
    build_options: str = typer.Option("", "--options", help="build options for the candidate"),
    device: str | None = typer.Option(None, "--device", "-d", help="platform:device index or name substring"),
    sizes: str = typer.Option("full", "--sizes", help="full or small problem sizes"),
    as_json: bool = typer.Option(False, "--json", help="print the measurement as JSON"),
) -> None:
    """Measure the reference (and a candidate) on the device, store the result, print it."""
    try:
        task_obj = api.as_task(task)
        cand = candidate_from_options(task_obj, candidate, params, global_size, local_size, build_options)
    except (FileNotFoundError, ValueError) as exc:
        fail(str(exc))
    if sizes not in ("full", "small"):
        fail("--sizes must be 'full' or 'small'")
    config = MeasureConfig(sizes=sizes, timeout_s=get_settings().measure_timeout_s)
    with writable_store() as store:
        with console.status(f"measuring {task_obj.name} candidate {cand.short} ({sizes} size)...",
                            spinner="dots") if not as_json else nullcontext():
            result = api.measure(task_obj, cand, device=device, config=config, store=store)
        hw = store.devices.all().get(result.device)
        rate = throughput(task_obj, result, hw, store) if hw is not None else None
    if as_json:
        extra = {"throughput": rate.model_dump(mode="json") if rate is not None else None}
        print(json.dumps({"bin": result.bin(), **result.model_dump(mode="json"), **extra}, indent=2))
    else:
        console.print(measurement_table(result, cand))
        if rate is not None:
            console.print(f"throughput: {rate.text()}", highlight=False)
        if result.status.failed:
            console.print(f"[red]{result.reason}[/]", highlight=False)
    if result.status.failed:
        raise typer.Exit(EXIT_FAILED)


@app.command("devices")
def devices(as_json: bool = typer.Option(False, "--json"),
            refresh: bool = typer.Option(False, "--refresh", help="probe again instead of using cached verdicts"),
            ray: str | None = typer.Option(None, "--ray", help="list the devices of a Ray cluster (address or 'auto')"),
            backend: str = typer.Option("opencl", "--backend", help="with --ray: opencl or cuda")) -> None:
    """List OpenCL (and CUDA, where present) devices: probe verdict (healthy or why skipped), the default, specs."""
    if ray is not None:
        _cluster_devices(ray, backend, as_json)
        return
    with _verdict_store(refresh) as store:
        rows, default = api.device_rows(store, refresh=refresh)
    if as_json:
        print(json.dumps([{"index": r.index, "healthy": r.healthy, "reason": r.reason, "default": r.index == default,
                           **r.spec.model_dump()} for r in rows], indent=2))
        return
    if not rows:
        fail("no OpenCL or CUDA device found", EXIT_DEVICE)
    for row in rows:
        status = ("[green]healthy[/]" + (" [bold](default)[/]" if row.index == default else "")) if row.healthy else \
            f"[red]skipped:[/] {row.reason}"
        console.print(f"[bold]{row.index}[/]  {status}\n{row.spec.summary()}\n", highlight=False)
    if default is None:
        fail("no usable OpenCL device (see the reasons above)", EXIT_DEVICE)


def _verdict_store(refresh: bool) -> AbstractContextManager[Store | None]:
    """Where probe verdicts come from: --refresh probes again and records them (a writable store); a listing
    reads the cached ones, so a read-only store serves it (no database yet: probe, remember nothing)."""
    if refresh:
        return closing(api.open_store())
    return readable_store() if store_exists() else nullcontext(None)


def _cluster_devices(address: str, backend: str, as_json: bool) -> None:
    """One actor per device of the cluster (GPU for CUDA, node for OpenCL), started, asked, stopped."""
    try:
        actors = api.cluster_devices(address, backend)
    except ImportError as exc:
        fail(f"--ray needs the ray package (pip install 'kernelcast[ray]'): {exc}", EXIT_DEVICE)
    if as_json:
        print(json.dumps([{"host": a.host, "node": a.node_id, "gpus": list(a.gpu_ids), **a.spec.model_dump()}
                          for a in actors], indent=2))
        return
    for a in actors:
        gpus = f", GPU {','.join(a.gpu_ids)}" if a.gpu_ids else ""
        console.print(f"[bold]{a.host}[/] (node {a.node_id[:12]}{gpus})\n{a.spec.summary()}\n", highlight=False)
