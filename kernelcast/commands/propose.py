"""`kernelcast propose`: new candidates for a task, validated and written to a folder, nothing measured."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from kernelcast import api
from kernelcast.api import DEFAULT_GENERATOR, SELECTABLE_GENERATORS, ProposalReport
from kernelcast.console import console, fail
from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.errors import EXIT_FAILED
from kernelcast.tools.core.task import Task

app = typer.Typer()

SUFFIX = {"opencl": ".cl", "cuda": ".cu"}


def write_candidates(candidates: list[Candidate], task: Task, out: Path) -> list[Path]:
    """``<hash>.json`` (the candidate, loadable by ``measure -c``) and ``<hash>.cl|.cu`` (its source) each."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for c in candidates:
        path = out / f"{c.hash}.json"
        path.write_text(c.model_dump_json(indent=2))
        (out / f"{c.hash}{SUFFIX.get(task.language, '.txt')}").write_text(c.source)
        written.append(path)
    return written


def proposal_table(candidates: list[Candidate], report: ProposalReport, task: Task) -> Table:
    table = Table(title=f"{task.name}: {len(candidates)} proposal(s) from {report.generator}")
    for col in ("#", "hash", "intent", "global", "local", "options", "validation"):
        table.add_column(col, overflow="fold")
    for i, c in enumerate(candidates, 1):
        table.add_row(str(i), c.short, c.intent, ", ".join(c.global_size), ", ".join(c.local_size or ["runtime"]),
                      " ".join(c.build_options) or "-", f"[green]{report.validation.get(c.hash, '?')}[/]")
    return table


@app.command("propose")
def propose(
    task: str = typer.Argument(..., help="built-in task name or path to a task.toml"),
    parent: str | None = typer.Option(None, "--parent", help="parent kernel: candidate .json or kernel source "
                                      "(default: the reference)"),
    generator: str = typer.Option(DEFAULT_GENERATOR, "--generator", "-g", help=" | ".join(SELECTABLE_GENERATORS)),
    n: int = typer.Option(4, "-n", min=1, help="number of candidates to propose"),
    out: Path | None = typer.Option(None, "--out", "-o", help="folder for the candidates (default ./proposals/<task>)"),
    model: str | None = typer.Option(None, "--model", "-m", help="litellm model string for --generator llm"),
    seed: int = typer.Option(0, "--seed", help="random seed (proposals are deterministic per seed)"),
    device: str | None = typer.Option(None, "--device", "-d", help="platform:device index or name substring"),
    compile_check: bool = typer.Option(True, "--compile/--no-compile", help="compile each proposal on the device"),
) -> None:
    """Propose new candidates (children of the parent), validate them, and write them to a folder."""
    try:
        task_obj = api.as_task(task)
        parent_cand = api.candidate_file(parent, task_obj) if parent else task_obj.reference()
        with console.status(f"proposing {n} candidate(s) for {task_obj.name} with {generator}...", spinner="dots"):
            proposals = api.propose(task_obj, parent_cand, generator=generator, n=n, model=model, seed=seed,
                                    device=device, compile_check=compile_check)
    except (FileNotFoundError, ValueError) as exc:
        fail(str(exc))
    candidates, report = proposals.candidates, proposals.report
    folder = out or Path("proposals") / task_obj.name
    write_candidates(candidates, task_obj, folder)
    if candidates:
        console.print(proposal_table(candidates, report, task_obj))
    console.print(report.summary(), highlight=False)
    for line in report.feedback():
        console.print(f"  [yellow]{line}[/]", highlight=False)
    if not candidates:
        raise typer.Exit(EXIT_FAILED)
    console.print(f"wrote {len(candidates)} candidate(s) to {folder}/ (measure one with "
                  f"[bold]kernelcast measure {task_obj.name} -c {folder}/<hash>.json[/])", highlight=False)
