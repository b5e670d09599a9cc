"""`kernelcast optimize`, `runs`, `show`, `resume`: the main job from the command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from pydantic import ValidationError
from rich.table import Table

from kernelcast import api
from kernelcast.api import (
    FORECASTERS,
    ROUTERS,
    SELECTABLE_GENERATORS,
    RooflineVerdict,
    RunConfig,
    RunRecord,
    RunResult,
    ShownSpeedup,
    Throughput,
    default,
    forecaster_spec,
    generator_spec,
    interval_text,
    listed_router,
    logged,
    plural,
    ranked,
    report_note,
    router_spec,
    run_roofline,
    run_throughput,
    shown_speedups,
)
from kernelcast.api import events as ev
from kernelcast.commands.drive import drive, piped, report_interrupted, result_line
from kernelcast.commands.stores import readable_store, store_exists, writable_store
from kernelcast.console import console, err_console, fail
from kernelcast.tools.core.errors import EXIT_INTERRUPTED
from kernelcast.tools.core.settings import get_settings

app = typer.Typer()


def print_result(result: RunResult, best: ShownSpeedup | None = None, rate: Throughput | None = None,
                 roofline: RooflineVerdict | None = None, report: str | None = None, brief: bool = False) -> None:
    """A run's result, led by its answer (the reference at 1.0x when no candidate beat it significantly); ``best``:
    the best measured candidate's shown speedup as the store has it now (default: the result's); ``rate``: its
    throughput against the device's peaks (default: read from the store); ``roofline``: the run's verdict
    (default: the result's); ``report``: the line naming the report (default: write it now); ``brief``: leave out
    the trust line and the geometry (``show``'s one screen)."""
    answer = result.answer_with(best)
    candidate = answer.candidate
    roofline = roofline or result.roofline
    if rate is None and result.best_hash:
        rate = _throughput(result.run_id, result.best_hash)
    table = Table(title=f"run {result.run_id}", show_header=False)
    table.add_column(no_wrap=True)
    table.add_column(overflow="fold")
    table.add_row("task / device", f"{result.task} / {result.device}")
    table.add_row("router, budget spent", f"{result.router}, {result.spent} of {result.budget}")
    table.add_row("stop reason", result.stop_reason)
    table.add_row("candidates considered", f"{result.considered} ({result.considered_per_measurement:.1f} per "
                                           f"measurement; {result.considered_all} proposed)")
    if result.trust and not brief:
        table.add_row("forecasts and trust", result.trust)
    table.add_row("outcomes", ", ".join(f"{k} {v}" for k, v in sorted(result.counts.items())))
    colour = "yellow" if answer.is_reference else "green" if result.significant else "yellow"
    table.add_row("answer", f"[{colour}]{answer.headline()}[/]: {answer.why}")
    if candidate is not None:
        label = "best measured candidate" if answer.is_reference else "found"
        speed = f"{candidate.text()}; " if answer.is_reference else ""
        cv = f" (CV {candidate.cv:.1%})" if candidate.cv is not None else ""
        table.add_row(label, f"{speed}{candidate.candidate_hash[:8]}, first measured after "
                             f"{plural(candidate.found_at, 'measurement')}{cv}")
        if rate is not None and (rate.implausible or not brief):
            table.add_row("throughput", rate.text())
        if not brief:
            table.add_row("geometry", json.dumps(result.best_geometry))
        table.add_row("path" if not answer.is_reference else "its path", " → ".join(result.best_path))
    if roofline is not None:
        table.add_row("roofline", roofline.text)
    table.add_row("run folder", result.folder)
    console.print(table)
    console.print(report if report is not None else report_note(result), highlight=False)


def replayed_from(run: RunRecord) -> str | None:
    """The store a run replayed its measurements from (None: a live run, or a config that does not validate)."""
    try:
        return RunConfig.of_run(run).replay
    except ValidationError:
        return None


def answer_cell(run: RunRecord) -> str:
    """A run's answer in one cell of ``runs``: its speedup, or the reference at 1.000x when no candidate beat it
    significantly (before it finishes: its best so far, if any)."""
    try:
        result = RunResult.of_run(run)
    except ValidationError:  # a summary written by hand or by another kernelcast: what the row says
        result = None
    if result is None:
        return f"{run.best_speedup:.3f}x so far" if run.best_speedup else "-"
    answer = result.answer
    if answer.is_reference:
        return "1.000x (reference: " + ("no correct candidate)" if answer.candidate is None
                                        else "no significant speedup)")
    label = "confirmed" if answer.candidate and answer.candidate.confirmed else "1st measurement"
    return f"{answer.speedup:.3f}x ({label})"


def _throughput(run_id: str, key: str) -> Throughput | None:
    with readable_store() as store:
        run = store.runs.get(run_id)
        return run_throughput(store, run, key) if run is not None else None


def _conclude(result: RunResult, events: str | None) -> None:
    """After a run: its report written (an interrupt there says how to write it later), then the result; piped,
    one parsable line last (:func:`~kernelcast.commands.drive.result_line`)."""
    try:
        note = report_note(result)
    except KeyboardInterrupt:
        console.print(f"[yellow]{report_interrupted(result.run_id)}[/]", highlight=False, soft_wrap=True)
        raise typer.Exit(EXIT_INTERRUPTED) from None
    page = Path(result.folder) / "report.html"
    report = str(page) if page.is_file() else None
    if events == "jsonl":
        print(json.dumps({"event": "result", **result.model_dump(mode="json"), "report": report}), flush=True)
        return
    print_result(result, report=note)
    if piped(events):
        print(result_line(result, report), flush=True)


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
    follow_skill: bool = typer.Option(default("follow_skill"), "--follow-skill/--cover-families",
                                      help="selective: each round, follow the forecasts' ranking (as topk) where "
                                      "their rank skill is certified or measured in the run, else cover families"),
    replay: str | None = typer.Option(None, "--replay", help="measure nothing: answer from the store's recording of "
                                      "this device (a key or a fragment of one, e.g. A100; `kernelcast import "
                                      "kernel-tuner`), each answer drawn from its recorded times; an unrecorded "
                                      "point is a failed measurement; the budget is charged as if live"),
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
    if replay is not None and (device or ray):
        fail("--replay names the recorded device to answer for: leave out --device and --ray")
    replaying = {"replay": str(get_settings().db_path)} if replay is not None else {}
    with writable_store() as store:
        result = drive(f"optimizing {task} ({router}, budget {budget})", events, lambda view: api.optimize(
            task, budget=budget, router=router, generator=generator, forecaster=forecaster,
            model=model, device=replay or device, seed=seed, sizes=sizes, measure_per_round=k, on_event=view,
            learn_online=learn_online, risk=risk, parallel=parallel, ray=ray, share_device=share_device,
            trust_seed_replay=seed_replay, audit_share=audit_share, follow_skill=follow_skill,
            store=store, **replaying), store, budget=budget)
    _conclude(result, events)


@app.command("resume")
def resume(run_id: str = typer.Argument(...), events: str | None = typer.Option(None, "--events")) -> None:
    """Continue an interrupted run; nothing measured is lost or bought twice. A finished run whose report was never
    written (interrupted while writing it) gets its report."""
    with writable_store() as store:
        row = store.runs.get(run_id)
        done = RunResult.of_run(row) if row is not None and row.status == "finished" else None
        if done is None or (Path(done.folder) / "report.html").is_file():
            budget, spent = (row.budget, row.spent) if row is not None else (None, 0)
            done = drive(f"resuming {run_id}", events, lambda view: api.resume(run_id, on_event=view, store=store),
                         store, budget=budget, spent=spent)
    _conclude(done, events)


@app.command("runs")
def runs(task: str | None = typer.Option(None, "--task"), limit: int = typer.Option(20, "--limit")) -> None:
    """List recent runs."""
    if not store_exists():
        console.print(f"no runs yet ({get_settings().db_path} does not exist)", highlight=False)
        return
    with readable_store() as store:
        records, damaged = store.runs.listing(task=task, limit=limit)
    table = Table(title=f"runs in {get_settings().db_path}")
    table.add_column("id", no_wrap=True, min_width=max((len(r.id) for r in records), default=2))  # `show` needs it
    for col in ("task", "status", "router", "spent", "answer", "created"):
        table.add_column(col)
    for run in records:
        status = f"{run.status}, replayed (nothing measured)" if replayed_from(run) else run.status
        table.add_row(run.id, run.task, status, listed_router(run), f"{run.spent}/{run.budget}", answer_cell(run),
                      run.created_at[:16].replace("T", " "))
    console.print(table)
    if damaged:
        err_console.print(f"[yellow]warning:[/] left out {len(damaged)} run row(s) that do not parse; the first: "
                          f"{damaged[0]}", highlight=False)


SHOWN_TOP = 5  # `show`'s default: the best candidates on one screen


@app.command("show")
def show(run_id: str = typer.Argument(...), as_json: bool = typer.Option(False, "--json"),
         top: int = typer.Option(SHOWN_TOP, "--top", min=1, help="the N best candidates (confirmed first)"),
         show_all: bool = typer.Option(False, "--all", help="everything: every measured candidate, the trust line, "
                                       "the geometry and the decision taken for each candidate"),
         decisions: bool = typer.Option(False, "--decisions", help="the decision taken for each candidate (the "
                                        "router's deferrals summarized)"),
         measured: bool = typer.Option(False, "--measured", help="decisions of the candidates measured on the "
                                       "hardware only (implies --decisions)"),
         ) -> None:
    """Show one run on one screen: its answer, the path to its best, and its best candidates with their intervals;
    --decisions or --all for the decision taken for each candidate."""
    if not store_exists():
        fail(f"no run with id {run_id!r}: nothing has run yet ({get_settings().db_path} does not exist)")
    with readable_store() as store:
        run = store.runs.get(run_id)
        if run is None:
            matches = [r.id for r in store.runs.recent(limit=10_000) if r.id.startswith(run_id)]
            if len(matches) > 1:
                fail(f"run id {run_id!r} is ambiguous: it starts {len(matches)} runs ({', '.join(matches[:8])}"
                     f"{', ...' if len(matches) > 8 else ''}); give more of it")
            fail(f"no run with id {run_id!r} (see `kernelcast runs`)")
        events = store.events.find(run.id)
        ledger = store.ledger.find(run_id=run.id)
        intents = store.candidates.intents(run.task)
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
        print_result(result, shown.get(result.best_hash or ""), rate, roofline, report=_report_line(run),
                     brief=not show_all)
    else:
        console.print(f"run {run.id} is {run.status} ({run.spent} of {run.budget} measurements spent)")
    best = ranked(shown) if show_all else ranked(shown)[:top]
    console.print(top_table(best, intents, len(shown)))
    if show_all or decisions or measured:
        keep = {m.candidate_hash for m in ledger} if measured else None
        decision_table(events, intents, keep)
    else:
        console.print("--decisions: the decision taken for each candidate; --all: everything", highlight=False)


def _report_line(run: RunRecord) -> str:
    """Where the run's report is (``show`` reads; it never writes one)."""
    page = Path(run.folder or get_settings().runs_dir / run.id) / "report.html"
    return f"report: {page}" if page.is_file() else f"no report yet: `kernelcast report {run.id}` writes it"


def top_table(best: list[ShownSpeedup], intents: dict[str, str], measured: int) -> Table:
    """The best candidates, confirmed first, each with its 95 % interval; a first measurement is marked "1st"."""
    title = (f"top {len(best)} of {measured} measured correct (confirmed first; 1st: a first measurement)"
             if len(best) < measured else f"the {plural(measured, 'candidate')} measured correct (confirmed first)")
    table = Table(title=title)
    for col, options in (("#", {"no_wrap": True}), ("candidate", {"no_wrap": True}), ("speedup", {"no_wrap": True}),
                         ("95 % interval", {"no_wrap": True}), ("intent", {"overflow": "fold"})):
        table.add_column(col, **options)
    for i, node in enumerate(best, start=1):
        speed = f"{node.speedup:.3f}x" + ("" if node.confirmed else " 1st")
        table.add_row(str(i), node.candidate_hash[:8], speed, interval_text(node.interval) or "-",
                      intents.get(node.candidate_hash, ""))
    return table


def decision_table(events: list[Any], intents: dict[str, str], keep: set[str] | None) -> None:
    """The decision taken for each candidate, in order; cells wrap at word boundaries (nothing is cut)."""
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
        table.add_row(str(item.seq), label, key[:8], intents.get(key, ""), detail)
    console.print(table)
    if drops:
        console.print(f"{drops} route:drop decisions not listed: {len(deferred)} candidates deferred for want of a "
                      "round's room (each routed again the next round; their later decisions are listed)",
                      highlight=False)
