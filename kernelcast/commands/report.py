"""`kernelcast report`: an HTML page with plots of one run (and the runs it is compared with)."""

from __future__ import annotations

from pathlib import Path

import typer

from kernelcast import api
from kernelcast.console import console

app = typer.Typer()


@app.command("report")
def report(
    run_id: str = typer.Argument(..., help="run id (or a unique prefix)"),
    compare: list[str] = typer.Option([], "--compare", "-c", help="another run to draw alongside (repeatable)"),
    out: Path | None = typer.Option(None, "--out", "-o", help="output folder (default: the run folder)"),
) -> None:
    """Write report.html plus PNGs: progress vs measurements, search tree, forecast confusion, reliability, top
    kernels with diffs."""
    with console.status(f"drawing the report of {run_id}...", spinner="dots"):
        page = api.write_report(run_id, compare=compare, out=out)
    console.print(f"report: {page}", highlight=False)
    for png in sorted(page.parent.glob("*.png")):
        console.print(f"  {png.name}", highlight=False)
