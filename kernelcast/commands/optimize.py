"""`kernelcast optimize`, `runs`, `show`, `resume`: the main job from the command line."""

from __future__ import annotations

import json
import sys
from typing import Any

import typer
from pydantic import ValidationError
from rich.live import Live
from rich.table import Table

from kernelcast import api
from kernelcast.agents.registry import FORECASTERS, SELECTABLE_GENERATORS, forecaster_spec, generator_spec
from kernelcast.commands.stores import readable_store, store_exists, writable_store
from kernelcast.console import console, err_console, fail
from kernelcast.graphs import events as ev
from kernelcast.graphs.config import default, listed_router
from kernelcast.graphs.events import logged, parse
from kernelcast.graphs.route.routers import ROUTERS, router_spec
from kernelcast.graphs.search.result import (
    RunResult,
    ShownSpeedup,
    interval_text,
    ranked,
    run_roofline,
    shown_speedups,
    spend_text,
)
from kernelcast.graphs.search.roofline import RooflineVerdict, Throughput, run_throughput
from kernelcast.report import report_note
from kernelcast.tools.core.errors import EXIT_INTERRUPTED, EXIT_USAGE
from kernelcast.tools.core.settings import get_settings

app = typer.Typer()


class LiveView:
    """Budget, candidate counts and best speedup, updated on every graph event; with ``lines`` (output piped),
    one line per measurement instead."""

    def __init__(self, title: str, events: str | None, lines: bool = False) -> None:
        self.title = title
        self.events = events
        self.lines = lines
        self.run_id = ""
        self.state: dict[str, Any] = {"spent": 0, "budget": "?", "considered": 0, "counts": {}, "best_speedup": None}
        self.last = ""
        self.live: Live | None = None

    def __call__(self, kind: str, payload: dict[str, Any]) -> None:
        if self.events == "jsonl":
            print(json.dumps({"event": kind, **payload}, default=str), flush=True)
        self.run_id = str(payload["run_id"])  # every event of a run names it (RunContext.emit)
        event = parse(kind, payload)
        if isinstance(event, ev.Progress):
            self.state.update(spent=event.spent, budget=event.budget, considered=event.considered,
                              counts=event.counts, best_speedup=event.best_speedup)
        elif isinstance(event, ev.InFlight):
            self.state["in_flight"] = f"{len(event.candidates)} candidates on {event.workers} worker(s)"
        elif isinstance(event, ev.Spend):
            self.state["in_flight"] = f"{len(event.in_flight)} still running" if event.in_flight else "-"
            self.state["spent"] = event.spent
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


def print_result(result: RunResult, best: ShownSpeedup | None = None, rate: Throughput | None = None,
                 roofline: RooflineVerdict | None = None) -> None:
    """A run's result; ``best``: the best node's shown speedup as the store has it now (default: the result's);
    ``rate``: its throughput against the device's peaks (default: read from the store); ``roofline``: the
    run's verdict (default: the result's)."""
    best = best or result.best
    roofline = roofline or result.roofline
    if rate is None and result.best_hash:
        rate = _throughput(result.run_id, result.best_hash)
    table = Table(title=f"run {result.run_id}")
    table.add_column("", no_wrap=True)
    table.add_column("", overflow="fold")
    table.add_row("task / device", f"{result.task} / {result.device}")
    table.add_row("router, budget spent", f"{result.router}, {result.spent} of {result.budget}")
    table.add_row("stop reason", result.stop_reason)
    table.add_row("candidates considered", f"{result.considered} ({result.considered_per_measurement:.1f} per "
                                           f"measurement; {result.considered_all} proposed)")
    if result.trust:
        table.add_row("forecasts and trust", result.trust)
    table.add_row("outcomes", ", ".join(f"{k} {v}" for k, v in sorted(result.counts.items())))
    if result.best_hash and best is None:  # a run whose ledger is gone: what its summary recorded
        table.add_row("best", f"{result.best_speedup or 0:.3f}x — {result.verdict}")
    elif result.best_hash and best is not None:
        colour = "green" if result.significant else "yellow"
        table.add_row("best (confirmed)" if best.confirmed else "best (first measurement, not confirmed)",
                      f"[{colour}]{best.speedup:.3f}x[/]" + (f" ({interval_text(best.interval)})" if best.confirmed
                                                             and best.interval else "") + f" — {result.verdict}")
        table.add_row("first measurement", f"{best.first:.3f}x (CV {best.cv or 0:.1%}), candidate "
                                           f"{result.best_hash[:8]}, after {best.found_at} measurements")
        if rate is not None:
            table.add_row("throughput", rate.text())
        table.add_row("geometry", json.dumps(result.best_geometry))
        table.add_row("path", " → ".join(result.best_path))
    else:
        table.add_row("best", "[yellow]no correct candidate was measured; the reference stays best[/]")
    if roofline is not None:
        table.add_row("roofline", roofline.text)
    table.add_row("run folder", result.folder)
    console.print(table)
    console.print(report_note(result), highlight=False)


def _throughput(run_id: str, key: str) -> Throughput | None:
    with readable_store() as store:
        run = store.run(run_id)
        return run_throughput(store, run, key) if run is not None else None


def _drive(title: str, events: str | None, call: Any) -> Any:
    view = LiveView(title, events, lines=events != "jsonl" and not sys.stdout.isatty())
    try:
        if events == "jsonl" or not sys.stdout.isatty():
            return call(view)
        with Live(view.render(), console=console, refresh_per_second=4) as live:
            view.live = live
            return call(view)
    except ValidationError as exc:  # an option out of range: one line, not pydantic's report
        fail("; ".join(f"field '{'.'.join(map(str, e['loc']))}': {e['msg']}" for e in exc.errors()), EXIT_USAGE)
    except ValueError as exc:  # an unknown name or a bad value found below the options
        fail(str(exc), EXIT_USAGE)
    except KeyboardInterrupt:
        run = view.run_id or "RUN (see `kernelcast runs`)"
        console.print(f"[yellow]interrupted: `kernelcast resume {run}` continues where it stopped[/]", highlight=False)
        raise typer.Exit(EXIT_INTERRUPTED) from None


@app.command("optimize")
def optimize(
    task: str = typer.Argument(..., help="built-in task name or path to a task.toml"),
    budget: int = typer.Option(default("budget"), "--budget", "-b", help="hardware measurements to spend"),
    router: str = typer.Option(default("router"), "--router", help=" | ".join(ROUTERS)),
    risk: float = typer.Option(default("risk"), "--risk", help="selective: tolerated share of false prunes among "
                               "trusted decisions (certified from calibration data)"),
    generator: str = typer.Option(default("generator"), "--generator", help=" | ".join(SELECTABLE_GENERATORS)),
    forecaster: str = typer.Option(default("forecaster"), "--forecaster", help=" | ".join(FORECASTERS)),
    model: str | None = typer.Option(None, "--model", help="litellm model string for LLM agents"),
    device: str | None = typer.Option(None, "--device", "-d"),
    seed: int = typer.Option(0, "--seed"),
    k: int = typer.Option(default("measure_per_round"), "--k", help="measurements per expansion (top-k / selective cap)"),
    sizes: str = typer.Option("full", "--sizes", help="full | small (small: quick trial runs)"),
    events: str | None = typer.Option(None, "--events", help="'jsonl': one JSON event per graph step on stdout"),
    learn_online: bool = typer.Option(True, "--learn-online/--frozen-forecaster",
                                      help="retrain the learned forecaster on the run's measurements as they arrive"),
    parallel: int = typer.Option(1, "--parallel", help="measurements in flight at once (one device per worker; "
                                 "name them with --device 0:0,1:0)"),
    ray: str | None = typer.Option(None, "--ray", help="'auto' (start or join a local Ray) or a cluster address"),
    share_device: bool = typer.Option(False, "--share-device", help="let parallel workers share one device"),
    seed_replay: bool = typer.Option(default("trust_seed_replay"), "--seed-replay/--no-seed-replay",
                                     help="selective: until this device's own decisions certify trust, certify it "
                                     "on the shipped seed's replayed decisions, each side on trial per task (its "
                                     "first 2 audits here must be right)"),
    audit_share: float = typer.Option(default("audit_share"), "--audit-share", help="selective: share of the "
                                      "budget that may measure a random sample of trusted decisions (0 to 0.5)"),
) -> None:
    """Optimize a task under a fixed hardware budget; prints the best measured kernel and the run folder."""
    try:
        router_spec(router)
        forecaster_spec(forecaster)
        if not generator_spec(generator).selectable:
            raise ValueError(f"--generator {generator} is not chosen by name (start a session instead)")
    except ValueError as exc:
        fail(str(exc))
    if events not in (None, "jsonl"):
        fail("--events takes 'jsonl'")
    if not 0.0 < risk < 1.0:
        fail(f"--risk must be between 0 and 1 (exclusive), got {risk}")
    with writable_store() as store:
        result = _drive(f"optimizing {task} ({router}, budget {budget})", events, lambda view: api.optimize(
            task, budget=budget, router=router, generator=generator, forecaster=forecaster,
            model=model, device=device, seed=seed, sizes=sizes, measure_per_round=k, on_event=view,
            learn_online=learn_online, risk=risk, parallel=parallel, ray=ray, share_device=share_device,
            trust_seed_replay=seed_replay, audit_share=audit_share, store=store))
    if events == "jsonl":
        print(json.dumps({"event": "result", **result.model_dump()}), flush=True)
    else:
        print_result(result)


@app.command("resume")
def resume(run_id: str = typer.Argument(...), events: str | None = typer.Option(None, "--events")) -> None:
    """Continue an interrupted run; nothing measured is lost or bought twice."""
    with writable_store() as store:
        result = _drive(f"resuming {run_id}", events, lambda view: api.resume(run_id, on_event=view, store=store))
    if events == "jsonl":
        print(json.dumps({"event": "result", **result.model_dump()}), flush=True)
    else:
        print_result(result)


@app.command("runs")
def runs(task: str | None = typer.Option(None, "--task"), limit: int = typer.Option(20, "--limit")) -> None:
    """List recent runs."""
    if not store_exists():
        console.print(f"no runs yet ({get_settings().db_path} does not exist)", highlight=False)
        return
    with readable_store() as store:
        records, damaged = store.run_listing(task=task, limit=limit)
    table = Table(title=f"runs in {get_settings().db_path}")
    for col in ("id", "task", "status", "router", "spent/budget", "best speedup", "created"):
        table.add_column(col)
    for run in records:
        best = f"{run.best_speedup:.3f}x" if run.best_speedup else "-"
        table.add_row(run.id, run.task, run.status, listed_router(run), f"{run.spent}/{run.budget}", best,
                      run.created_at[:19])
    console.print(table)
    if damaged:
        err_console.print(f"[yellow]warning:[/] left out {len(damaged)} run row(s) that do not parse; the first: "
                          f"{damaged[0]}", highlight=False)


@app.command("show")
def show(run_id: str = typer.Argument(...), as_json: bool = typer.Option(False, "--json"),
         measured: bool = typer.Option(False, "--measured", help="only the candidates measured on the hardware"),
         top: int | None = typer.Option(None, "--top", min=1, help="only the N best candidates (confirmed first)"),
         ) -> None:
    """Show one run: its result, its best candidates, and the decision taken for each candidate (the
    router's deferrals summarized)."""
    if not store_exists():
        fail(f"no run with id {run_id!r}: nothing has run yet ({get_settings().db_path} does not exist)")
    with readable_store() as store:
        run = store.run(run_id)
        if run is None:
            matches = [r.id for r in store.runs(limit=10_000) if r.id.startswith(run_id)]
            if len(matches) > 1:
                fail(f"run id {run_id!r} is ambiguous: it starts {len(matches)} runs ({', '.join(matches[:8])}"
                     f"{', ...' if len(matches) > 8 else ''}); give more of it")
            fail(f"no run with id {run_id!r} (see `kernelcast runs`)")
        events = store.events(run.id)
        ledger = store.measurements(run_id=run.id)
        intents = store.intents(run.task)
    if as_json:
        print(json.dumps({**run.model_dump(mode="json"), "events": [e.model_dump(mode="json") for e in events]},
                         indent=1))
        return
    shown = shown_speedups(ledger)
    result = RunResult.of_run(run)
    if result is not None:
        with readable_store() as store:
            rate = run_throughput(store, run, result.best_hash) if result.best_hash else None
            roofline = run_roofline(store, run)
        print_result(result, shown.get(result.best_hash or ""), rate, roofline)
    else:
        console.print(f"run {run.id} is {run.status} ({run.spent} of {run.budget} measurements spent)")
    best = ranked(shown)[:top] if top else ranked(shown)
    if top:
        tops = Table(title=f"top {len(best)} (confirmed first, then first measurements)")
        for col in ("#", "candidate", "intent", "speedup"):
            tops.add_column(col, overflow="fold")
        for i, node in enumerate(best, start=1):
            tops.add_row(str(i), node.candidate_hash[:16], intents.get(node.candidate_hash, ""), node.text())
        console.print(tops)
    keep = ({n.candidate_hash for n in best} if top else None)
    if measured:
        bought = {m.candidate_hash for m in ledger}
        keep = bought if keep is None else keep & bought
    table = Table(title="decisions")
    for col in ("seq", "event", "candidate", "intent", "detail"):
        table.add_column(col, overflow="fold")
    deferred: set[str] = set()
    drops = 0
    for item in logged(events):
        event = item.event
        if keep is not None and item.candidate not in keep:
            continue
        if isinstance(event, ev.Route) and event.decision == "drop":
            drops += 1
            deferred.add(item.candidate or "")
            continue
        if isinstance(event, ev.Route):
            label, detail = f"route:{event.decision}", event.reason
        elif isinstance(event, ev.Spend):
            first = "confirmation" if event.phase == "confirm" else "first measurement"
            label = f"spend:{event.phase}"
            detail = f"{event.status} {f'{event.speedup:.3f}x ({first})' if event.speedup else ''}"
            if event.over_incumbent is not None:
                detail += f", {event.over_incumbent:.3f}x the incumbent timed beside it"
        elif isinstance(event, ev.Confirm):
            label = "confirm:incumbent" if event.before_trust else "confirm"
            interval = f" ({interval_text((event.interval[0], event.interval[1]))})" if event.interval else ""
            detail = f"first {event.first or 0:.3f}x, confirmed {event.confirmed or 0:.3f}x{interval}"
        elif isinstance(event, (ev.Verify, ev.Skip, ev.Leftover)):
            label, detail = event.kind, event.model_dump_json()
        else:
            continue
        key = item.candidate or ""
        table.add_row(str(item.seq), label, key[:16], intents.get(key, "")[:40], detail[:160])
    console.print(table)
    if drops:
        console.print(f"{drops} route:drop decisions not listed: {len(deferred)} candidates deferred for want of a "
                      "round's room (each routed again the next round; their later decisions are listed)",
                      highlight=False)
