"""Driving a run from the command line (``optimize``, ``resume``): the live panel on a terminal, one line per
measurement when piped, and what an interrupt says.

Piped output starts with a line at once (the reference check and the forecaster take a while before the first
measurement) and ends with one parsable result line (:func:`result_line`), the last line, so ``| tail -1`` keeps it.
An interrupt names the run to resume only when one exists: before the run row is written nothing was spent and
nothing can be resumed (:func:`interrupt_message`).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Callable
from typing import Any

import typer
from pydantic import ValidationError
from rich.live import Live
from rich.table import Table

from kernelcast.api import RunResult, Store, parse, spend_text
from kernelcast.api import events as ev
from kernelcast.console import console, fail
from kernelcast.tools.core.errors import EXIT_INTERRUPTED, EXIT_USAGE


class LiveView:
    """Budget, candidate counts and best speedup, updated on every graph event; with ``lines`` (output piped),
    one line per measurement instead. ``budget`` and ``spent``: what the panel shows before the first event."""

    def __init__(self, title: str, events: str | None, lines: bool = False, budget: int | None = None,
                 spent: int = 0) -> None:
        self.title = title
        self.events = events
        self.lines = lines
        self.run_id = ""
        self.state: dict[str, Any] = {"spent": spent, "budget": budget if budget is not None else "?",
                                      "considered": 0, "counts": {}, "best_speedup": None}
        self.last = ""
        self.live: Live | None = None

    def __call__(self, kind: str, payload: dict[str, Any]) -> None:
        if self.events == "jsonl":
            print(json.dumps({"event": kind, **payload}, default=str), flush=True)
        self.run_id = str(payload["run_id"])  # every event of a run names it (RunContext.emit)
        event = parse(kind, payload)
        if isinstance(event, ev.Start) and self.lines:
            print(f"run {self.run_id} started on {event.device}", flush=True)
        if isinstance(event, ev.Progress):
            self.state.update(spent=event.spent, budget=event.budget, considered=event.considered,
                              counts=event.counts, best_speedup=event.best_speedup)
        elif isinstance(event, ev.InFlight):
            self.state["in_flight"] = f"{len(event.candidates)} candidates on {event.workers} worker(s)"
        elif isinstance(event, ev.Spend):
            self.state["in_flight"] = f"{len(event.in_flight)} still running" if event.in_flight else "-"
            self.state.update(spent=event.spent, budget=event.budget)
            self.last = spend_text(event, payload["candidate"])
            if self.lines:
                print(f"{event.spent}/{event.budget} {self.last}", flush=True)
        elif isinstance(event, ev.Learn):
            self.state["forecaster"] = event.model or event.error or ""
        if self.live is not None:
            self.live.update(self.render())

    def render(self) -> Table:
        s = self.state
        counts = s.get("counts", {})
        table = Table(title=self.title, show_header=False)
        table.add_row("hardware measurements", f"{s['spent']} / {s['budget']}")
        table.add_row("candidates considered", str(s.get("considered", 0)))
        table.add_row("measured (correct / failed)", f"{counts.get('measured', 0) + counts.get('verified', 0)} / "
                                                     f"{counts.get('failed', 0)}")
        table.add_row("accepted unverified / pruned / dropped",
                      f"{counts.get('accepted', 0)} / {counts.get('pruned', 0)} / {counts.get('dropped', 0)}")
        best = s.get("best_speedup")
        table.add_row("best speedup (confirmed or first measurement)", f"{best:.3f}x" if best else "-")
        if s.get("forecaster"):
            table.add_row("forecaster", s["forecaster"])
        if s.get("in_flight"):
            table.add_row("measurements in flight", s["in_flight"])
        table.add_row("last", self.last or "-")
        return table


def piped(events: str | None) -> bool:
    """Lines instead of the live panel: stdout is not a terminal and no JSONL stream was asked for."""
    return events != "jsonl" and not sys.stdout.isatty()


def drive(title: str, events: str | None, call: Callable[[LiveView], RunResult], store: Store,
          budget: int | None = None, spent: int = 0) -> RunResult:
    """Run ``call`` with the live view as its event sink; bad options are one line (exit code 2), an interrupt says
    what exists to resume (exit code 130). ``store``: where to look for the run an interrupt stopped."""
    view = LiveView(title, events, lines=piped(events), budget=budget, spent=spent)
    try:
        if view.lines:
            print(f"{title}: checking the reference and preparing the agents; one line per measurement follows",
                  flush=True)
        if events == "jsonl" or view.lines:
            return call(view)
        with Live(view.render(), console=console, refresh_per_second=4) as live:
            view.live = live
            return call(view)
    except ValidationError as exc:  # an option out of range: one line, not pydantic's report
        fail("; ".join(f"field '{'.'.join(map(str, e['loc']))}': {e['msg']}" for e in exc.errors()), EXIT_USAGE)
    except ValueError as exc:  # an unknown name or a bad value found below the options
        fail(str(exc), EXIT_USAGE)
    except KeyboardInterrupt:
        console.print(f"[yellow]{interrupt_message(view.run_id or own_run(store))}[/]", highlight=False,
                      soft_wrap=True)  # one line, also piped
        raise typer.Exit(EXIT_INTERRUPTED) from None


def own_run(store: Store) -> str | None:
    """The run this process created or claimed and has not finished (an interrupt can come before the run's first
    event names it), or None."""
    try:
        runs = store.runs.recent(limit=20)
    except Exception:  # noqa: BLE001 - only a hint for the interrupt message
        return None
    return next((r.id for r in runs if r.owner_pid == os.getpid() and r.status != "finished"), None)


def interrupt_message(run_id: str | None) -> str:
    """What an interrupt says: the command that continues the run, or that no run exists yet."""
    if not run_id:
        return "interrupted before the run was created: nothing was spent and there is nothing to resume"
    return f"interrupted: kernelcast resume {run_id} continues where it stopped"


def report_interrupted(run_id: str) -> str:
    """What an interrupt while the report is written says: the run is finished; how to write its report."""
    return (f"interrupted while writing the report: run {run_id} is finished; kernelcast resume {run_id} (or "
            f"kernelcast report {run_id}) writes it")


def result_line(result: RunResult, report: str | None) -> str:
    """The one parsable line a piped run ends with: space-separated key=value pairs (values shell-quoted)."""
    answer = result.answer
    fields: dict[str, object] = {
        "run": result.run_id, "status": result.status, "answer": answer.kernel, "speedup": f"{answer.speedup:.3f}",
        "best": result.best_hash or "-",
        "best_speedup": f"{result.best_speedup:.3f}" if result.best_speedup is not None else "-",
        "confirmed": str(result.confirmed).lower(), "significant": str(result.significant).lower(),
        "spent": result.spent, "budget": result.budget, "report": report or "-"}
    return "result " + " ".join(f"{key}={shlex.quote(str(value))}" for key, value in fields.items())
