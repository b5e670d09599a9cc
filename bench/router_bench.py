"""The paper's end-to-end experiment: selective vs topk vs measure-all at the same hardware budget.

For each task: the same seed and budget for every router; measure-all and topk each run in a fresh
store, while the selective arm keeps one store across the tasks (as a user's store grows), because its
trust thresholds come from the calibration rows of earlier decisions on the device (``--risk``,
certified by Clopper-Pearson bounds); ``--fresh-selective`` gives it a fresh store per task too. The
learned forecaster is trained on a dataset store (`kernelcast dataset build`, may be empty: then the
roofline prior and the seed dataset carry it) with the task itself left out. Afterwards a sample of the
selective router's pruned and unverified-accepted candidates is measured outside the budget to estimate
how often trusting the forecast was right against the incumbent of its moment, head to head with the
incumbent's kernel (three measurements of the child timed interleaved with the incumbent's kernel, the
median ratio; ``--recheck`` repeats the checks of an earlier bench's folder); the in-budget audits
give the measured false-prune rate with its interval, beside the bound. Memory-bound tasks are compared
with the device probe's bandwidth (the forecaster's triad), measured in the same run.

    python bench/router_bench.py --dataset .kernelcast/kernelcast.db --budget 24 --out bench/out/router
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from kernelcast.agents.forecast.device_probe import run_probe  # noqa: E402
from kernelcast.graphs.config import RunConfig, default  # noqa: E402
from kernelcast.graphs.context import RunEnv  # noqa: E402
from kernelcast.graphs.events import Spend  # noqa: E402
from kernelcast.graphs.route.risk_control import PROBATION_AUDITS  # noqa: E402
from kernelcast.graphs.route.trust import TrustedDecision, trust_summary, trusted_decisions, wrong_given  # noqa: E402
from kernelcast.graphs.run import start_run  # noqa: E402
from kernelcast.tools.core.expr import evaluate  # noqa: E402
from kernelcast.tools.core.measurement import MeasureConfig  # noqa: E402
from kernelcast.tools.core.settings import get_settings  # noqa: E402
from kernelcast.tools.core.task import resolve_task  # noqa: E402
from kernelcast.tools.hardware.worker import MeasurementWorker  # noqa: E402
from kernelcast.tools.store.store import Store  # noqa: E402

ROUTERS = ("measure-all", "topk", "selective")
FROZEN_ARM = "selective-frozen"  # --ablation: selective with a forecaster that does not learn from the run
DEFAULT_TASKS = "gemm,transpose,reduce_rows,softmax,gemv,stencil2d"


def probe_gbs(worker: MeasurementWorker) -> float | None:
    """GB/s of the forecaster's device probe (``agents/forecast/device_probe.py``: saxpy's float4 point in work-groups of
    256 at full size): the practical memory-bandwidth limit. The bench's own float4 triad, launched without a
    work-group size, read 9-12 GB/s on the Intel CPU runtime where the probe reads 52 GB/s, so its column
    showed kernels at 200-400 % of the limit."""
    measured = run_probe(worker)
    return measured / 1e9 if measured else None


def spend_curve(store: Store, run_id: str) -> list[float]:
    """Best verified speedup after each measurement (1.0 = the reference)."""
    best, curve = 1.0, []
    for event in store.events.find(run_id, kind="spend"):
        spend = Spend.model_validate(event.payload)
        if spend.speedup and spend.status == "correct":
            best = max(best, spend.speedup)
        curve.append(best)
    return curve


def first_reaching(curve: list[float], target: float, tolerance: float) -> int | None:
    for i, value in enumerate(curve):
        if value >= target * (1 - tolerance):
            return i + 1
    return None


CHECK_ROUNDS = 3  # measurements of a check: the child timed beside the incumbent's kernel, the median ratio
FINAL_ROUNDS = 5  # rounds in which the arms' best kernels are measured in turn, medians compared


def incumbent_kernel(store: Store, run_id: str, decision: TrustedDecision) -> str | None:
    """The kernel a decision was judged against (None: the reference, 1.0): recorded on the decision since
    2026-12-03; for older runs, the run's measured kernel whose speedup equals the decision's incumbent."""
    if decision.incumbent_hash or decision.incumbent <= 1.0:
        return decision.incumbent_hash
    for m in store.ledger.find(run_id=run_id):
        if m.ok and m.speedup is not None and abs(m.speedup - decision.incumbent) < 1e-9:
            return m.candidate_hash
    return None


def in_turn(store: Store, worker: MeasurementWorker, task_name: str, kernels: list[str | None], sizes: str,
            rounds: int) -> list[list[float | None]]:
    """Each kernel's speedups (None: failed; the reference, None as a kernel, is 1.0) over ``rounds`` rounds in
    which the kernels are measured one after the other, all in this session. On this CPU a memory-bound kernel's
    speedup drifts with the machine's free bandwidth: one reduce_rows kernel read 2.5-4.5x in 14 measurements over
    27 minutes (the reference's median 9.3-16.0 ms), each measurement's own 95 % interval about +-5 %. Kernels
    compared in turn share that drift; kernels measured minutes apart do not."""
    task = resolve_task(task_name)
    config = MeasureConfig(sizes=sizes)
    def speedup(candidate: str | None) -> float | None:
        if candidate is None:
            return 1.0
        m = worker.measure(task, store.candidates.get(candidate), config)
        store.ledger.add(m)  # outside the run: no run id, not counted against the budget
        return m.speedup if m.ok else None

    out: list[list[float | None]] = [[] for _ in kernels]
    for _ in range(rounds):
        for series, kernel in zip(out, kernels):
            series.append(speedup(kernel))
    return out


def median_of(series: list[float | None]) -> float:
    """A kernel's median speedup in a comparison (a failed measurement counts as 0)."""
    return statistics.median(s or 0.0 for s in series)


def head_to_head(store: Store, worker: MeasurementWorker, task_name: str, child: str, incumbent: str | None,
                 sizes: str, rounds: int = CHECK_ROUNDS) -> tuple[float | None, float]:
    """(the child's first speedup, the median over ``rounds`` measurements of the child timed interleaved with
    the incumbent's kernel of child over incumbent; 0 if the child failed). One measurement of a child against
    an incumbent measured earlier, under other load, is not a comparison: reduce_rows children that measured
    5.6x and 5.5x once against a 3.36x incumbent measured 3.0-3.6x three times beside it (2026-12-03). Against
    the reference (``incumbent`` None) the speedup is the pair."""
    task = resolve_task(task_name)
    rival = None if incumbent is None else store.candidates.get(incumbent)
    if incumbent is not None and rival is None:
        raise SystemExit(f"{task_name}: the incumbent {incumbent} of a checked decision is missing from {store.path}")
    config = MeasureConfig(sizes=sizes, rival=rival)
    candidate = store.candidates.get(child)
    ratios: list[float | None] = []
    first = None
    for round_ in range(rounds):
        m = worker.measure(task, candidate, config)
        store.ledger.add(m)  # outside the run: no run id, not counted against the budget
        if round_ == 0:
            first = m.speedup if m.ok else None
        if rival is not None and m.ok and m.rival is None:
            raise SystemExit(f"{task_name}: the check of {child[:12]} could not time the incumbent beside it: "
                             f"{m.flags}")
        ratios.append((m.rival.ratio if m.rival is not None else m.speedup) if m.ok else None)
    return first, median_of(ratios)


def bests_in_turn(out: Path, task_name: str, bests: dict[str, tuple[Store, str | None]],
                  worker: MeasurementWorker, sizes: str, rounds: int = FINAL_ROUNDS) -> dict[str, float]:
    """Each arm's best kernel (``bests``: arm -> the store of its run and the kernel, None for the reference)
    measured in turn with the others' (:func:`in_turn`), ``rounds`` rounds: the median speedup per arm. The
    runs' confirmed bests were measured minutes apart, so on a drifting CPU their ratio mixes which router found
    the faster kernel with when it was measured; this ratio does not. Arms that found the same kernel share its
    measurements."""
    kernels = list(dict.fromkeys(kernel for _, kernel in bests.values()))
    shared = Store(out / "finals.db")  # the comparison's measurements, outside every run
    try:
        for store, kernel in bests.values():
            if kernel is not None and shared.candidates.get(kernel) is None:
                candidate = store.candidates.get(kernel)
                assert candidate is not None, f"{kernel} is missing from its run's store"
                shared.candidates.add(candidate)
        medians = dict(zip(kernels, (median_of(s) for s in in_turn(shared, worker, task_name, kernels, sizes,
                                                                    rounds))))
    finally:
        shared.close()
    return {arm: medians[kernel] for arm, (_, kernel) in bests.items()}


def stored_bests(out: Path, row: dict, arms: tuple[str, ...]) -> dict[str, tuple[Store, str | None]]:
    """The best kernel of each arm's run in an earlier bench's folder, from the store the run lives in."""
    bests = {}
    for arm in arms:
        store = arm_store(out, row["task"], arm)
        run = store.runs.get(row[arm]["run"])
        if run is None:
            raise SystemExit(f"{row['task']}: no run {row[arm]['run']} in {store.path}")
        bests[arm] = (store, run.best_candidate or None)
    return bests


def sel_over_ma(in_turn_medians: dict[str, float]) -> float:
    """Selective's best over measure-all's, both measured in turn (:func:`bests_in_turn`)."""
    return in_turn_medians["selective"] / max(in_turn_medians["measure-all"], 1e-9)


def arm_store(out: Path, name: str, arm: str) -> Store:
    """The store an arm's run of a task lives in: selective's is shared across tasks unless the bench gave it a
    fresh one per task (then the per-task folder holds it)."""
    own = out / name / arm / "kernelcast.db"
    shared = out / "selective-shared" / "kernelcast.db"
    return Store(shared if arm == "selective" and not own.exists() else own)


def audit(store: Store, run_id: str, worker: MeasurementWorker, task_name: str, sample: int, seed: int,
          sizes: str) -> dict[str, Any]:
    """Measure a sample of trusted decisions outside the budget: (right, checked) for prunes and accepts, head
    to head with the incumbent's kernel (:func:`head_to_head`); "..._single": the verdicts of the child's first
    measurement against the incumbent's number, as checks read until 2026-12-03; "..._margins": each check's
    median ratio of child over incumbent, minus 1; "..._carried": (right, checked) of those taken on a child
    carried over from an earlier round (it had several chances to be trusted). A prune was right if the child
    did not beat the incumbent; an accept, if it did."""
    rng = random.Random(seed)
    decisions = trusted_decisions(store, run_id)
    out: dict[str, Any] = {}
    for kind in ("prune", "accept"):
        rows = [d for d in decisions if d.kind == kind]
        rng.shuffle(rows)
        right = right_single = checked = right_carried = checked_carried = 0
        margins = []
        for decision in rows[:sample]:
            first, ratio = head_to_head(store, worker, task_name, decision.candidate_hash,
                                        incumbent_kernel(store, run_id, decision), sizes)
            checked += 1
            right_single += not decision.wrong(first)
            verdict = not wrong_given(decision.kind, ratio > 1.0)
            right += verdict
            checked_carried += decision.carried
            right_carried += verdict and decision.carried
            margins.append(ratio - 1)
        name = "pruned" if kind == "prune" else "accepted"
        out[name], out[f"{name}_single"] = (right, checked), (right_single, checked)
        out[f"{name}_margins"] = margins
        out[f"{name}_carried"] = (right_carried, checked_carried)
    return out


def clearly_wrong(kind: str, margins: list[float], tolerance: float) -> int:
    """Checked decisions wrong by more than the tolerance the bench allows a tie: a pruned child faster than the
    incumbent by more than it, an accepted one slower by more. Beside the strict count, never instead of it: one
    check is three rounds on a CPU where a kernel's speedup moves by tens of per cent, so a true tie comes out
    "wrong" about half the time."""
    return sum(m > tolerance if kind == "pruned" else m < -tolerance for m in margins)


def recheck(out: Path, args: argparse.Namespace, console: Console) -> None:
    """The checks of an earlier bench's selective runs again (the same sample: same seed, same order), head to
    head, and its arms' best kernels measured in turn (:func:`bests_in_turn`); the verdicts go to
    results.json as "rechecks" and "in_turn". ``--bests-only``: the best kernels alone."""
    results = json.loads((out / "results.json").read_text())
    table = Table(title=f"{out} checked again: trusted decisions head to head ({CHECK_ROUNDS} rounds), the arms' "
                        f"best kernels in turn ({FINAL_ROUNDS} rounds)")
    for col in ("task", "pruned right: head to head", "pruned wrong by more than the tolerance",
                "one measurement (now)", "one measurement (the bench's)",
                "sel / MA, the runs' confirmations", "bests in turn: MA / topk / sel", "sel / MA, in turn"):
        table.add_column(col)
    wins = 0
    with MeasurementWorker(args.backend) as worker:
        for name, row in results.items():
            rechecked = "-", "-", "-"
            if not args.bests_only:
                checks = audit(arm_store(out, name, "selective"), row["selective"]["run"], worker, name, args.audit,
                               args.seed, args.sizes)
                row["rechecks"] = checks
                (hr, hn), (sr, sn) = checks["pruned"], checks["pruned_single"]
                rechecked = f"{hr}/{hn}", str(clearly_wrong("pruned", checks["pruned_margins"], args.tolerance)), \
                    f"{sr}/{sn}"
            row["in_turn"] = bests_in_turn(out, name, stored_bests(out, row, ROUTERS), worker, args.sizes)
            (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
            br, bn = row["checks"]["pruned"]
            ratio = sel_over_ma(row["in_turn"])
            wins += ratio >= 1 - args.tolerance
            table.add_row(name, *rechecked, f"{br}/{bn}",
                          f"{row['selective']['best'] / row['measure-all']['best']:.2f}",
                          " / ".join(f"{row['in_turn'][arm]:.2f}x" for arm in ROUTERS), f"{ratio:.2f}")
    console.print(table)
    console.print(f"with the arms' best kernels measured in turn: selective wins or ties measure-all (within "
                  f"{args.tolerance:.0%}) on {wins} of {len(results)} tasks")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", default=DEFAULT_TASKS)
    parser.add_argument("--budget", type=int, default=24)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--risk", type=float, default=0.1, help="selective: tolerated share of false prunes")
    parser.add_argument("--fresh-selective", action="store_true",
                        help="selective also starts from a fresh store per task (no calibration rows carried)")
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--all-task-rows", action="store_true",
                        help="selective: certify on every task's calibration rows, as for a task they do not know")
    parser.add_argument("--seed-replay", action=argparse.BooleanOptionalAction, default=default("trust_seed_replay"),
                        help="selective: certify trust on the seed's replayed decisions until the device has its own "
                             "(the default; --no-seed-replay: only on the device's own)")
    parser.add_argument("--dataset", default=str(get_settings().db_path), help="store the forecaster trains on")
    parser.add_argument("--backend", default="opencl")
    parser.add_argument("--sizes", default="full")
    parser.add_argument("--audit", type=int, default=4, help="trusted decisions to check per task")
    parser.add_argument("--tolerance", type=float, default=0.03, help="noise margin for 'reached the best'")
    parser.add_argument("--out", default=None, help="folder for runs and results.json")
    parser.add_argument("--task-seen", action="store_true",
                        help="train the forecaster on the task's own dataset pairs too (a store that has grown)")
    parser.add_argument("--frozen-forecaster", action="store_true",
                        help="no arm retrains its forecaster on the run's own measurements (as before online learning)")
    parser.add_argument("--ablation", action="store_true",
                        help=f"also run {FROZEN_ARM}: selective whose forecaster does not learn from the run")
    parser.add_argument("--recheck", action="store_true",
                        help="no runs: check again, head to head, the trusted decisions of the runs in --out, and "
                             "measure the arms' best kernels in turn")
    parser.add_argument("--bests-only", action="store_true", help="--recheck: only the arms' best kernels")
    args = parser.parse_args()
    console = Console(width=170)
    if args.recheck:
        recheck(Path(args.out), args, console)
        return
    out = Path(args.out or tempfile.mkdtemp(prefix="router-bench-"))
    if earlier := sorted(str(path.relative_to(out)) for path in out.glob("**/*.db")):
        # a store there would carry its runs' calibration rows, trials and measurements into this bench
        parser.error(f"--out {out} holds an earlier bench's stores ({', '.join(earlier[:3])}"
                     f"{', ...' if len(earlier) > 3 else ''}): choose an empty folder, or pass --recheck to check "
                     "those runs again")
    out.mkdir(parents=True, exist_ok=True)
    dataset = str(Path(args.dataset).resolve())
    if not Path(dataset).exists():
        console.print(f"[yellow]no dataset at {dataset}: the forecaster starts from the roofline prior and the "
                      f"seed dataset (`kernelcast dataset build` adds this device's data)[/]")
    rows, results = [], {}
    arms = (*ROUTERS, FROZEN_ARM) if args.ablation else ROUTERS
    shared_selective = None if args.fresh_selective else Store(out / "selective-shared" / "kernelcast.db")
    with MeasurementWorker(args.backend) as worker:
        # the practical bandwidth limit: best of three device probes now and three at the end (load varies)
        triads = [gbs for _ in range(3) if (gbs := probe_gbs(worker))] if args.backend == "opencl" else []
        for name in [t.strip() for t in args.tasks.split(",") if t.strip()]:
            task = resolve_task(name)
            per = {}
            for arm in arms:
                router = "selective" if arm == FROZEN_ARM else arm
                learn = not args.frozen_forecaster and arm != FROZEN_ARM
                home = out / name / arm
                store = shared_selective if arm == "selective" and shared_selective is not None else \
                    Store(home / "kernelcast.db")
                config = RunConfig(task=name, budget=args.budget, router=router, risk=args.risk,  # type: ignore[arg-type]
                                   measure_per_round=args.k, seed=args.seed, sizes=args.sizes,  # type: ignore[arg-type]
                                   forecaster="learned", training_db=dataset, leave_task_out=not args.task_seen,
                                   backend=args.backend, learn_online=learn, trust_seed_replay=args.seed_replay,
                                   trust_task_rows=not args.all_task_rows)
                console.print(f"[bold]{name}[/] {arm} ...")
                result = start_run(config, store, RunEnv(home))
                curve = spend_curve(store, result.run_id)
                best_m = store.ledger.find(run_id=result.run_id, candidate_hash=result.best_hash or "")
                per[arm] = {"result": result, "curve": curve, "store": store,
                            "best_ns": best_m[0].candidate.median_ns if best_m and best_m[0].candidate else None}
            target = per["measure-all"]["curve"][-1] if per["measure-all"]["curve"] else 1.0
            sel = per["selective"]
            trust = trust_summary(sel["store"], sel["result"].run_id, risk=args.risk)
            checks = audit(sel["store"], sel["result"].run_id, worker, name, args.audit, args.seed, args.sizes)
            gbs = None
            if (args.sizes == "full" and task.spec.bytes and "memory-bound" in task.spec.tags
                    and any(p["best_ns"] for p in per.values())):
                best_ns = min(p["best_ns"] for p in per.values() if p["best_ns"])
                gbs = float(evaluate(task.spec.bytes, task.sizes())) / best_ns
            row = {"task": name, "best_gbs": gbs, "checks": checks, "trust": trust.model_dump(),
                   "trust_line": trust.line()}
            for arm in arms:
                r = per[arm]["result"]
                row[arm] = {"best": r.best_speedup or 1.0, "spent": r.spent, "considered": r.considered,
                            "to_target": first_reaching(per[arm]["curve"], target, args.tolerance),
                            "to_own_best": r.measurements_to_best, "counts": r.counts, "run": r.run_id}
            row["in_turn"] = bests_in_turn(out, name, {arm: (per[arm]["store"], per[arm]["result"].best_hash)
                                                       for arm in arms}, worker, args.sizes)
            rows.append(row)
            results[name] = row
            (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
        triads += [gbs for _ in range(3) if (gbs := probe_gbs(worker))] if triads else []
    triad = max(triads) if triads else None
    trained = "with the task's own pairs" if args.task_seen else "leave-task-out"
    trained += ", frozen" if args.frozen_forecaster else ", learning from each run's measurements"
    table = Table(title=f"routers at budget {args.budget} (seed {args.seed}, risk {args.risk}, "
                        f"k {args.k}; forecaster trained {trained})")
    for col in ("task", "measure-all best", "topk best", "selective best", "sel / MA", "sel / MA, bests in turn",
                "meas. to MA best (MA / topk / sel)", "informative / considered (sel)", "trusted share (sel)",
                "accepted / pruned (sel)", "audited false prunes (95% CI)",
                "trusted right, head to head: pruned / accepted",
                "% of triad BW", *(("selective frozen best",) if args.ablation else ())):
        table.add_column(col)
    wins, wins_in_turn, fractions, per_meas = 0, 0, [], []
    trusted_total = decisions_total = 0
    for row in rows:
        ma, tk, se = row["measure-all"], row["topk"], row["selective"]
        ratio = se["best"] / ma["best"]
        wins += ratio >= 1 - args.tolerance
        in_turn_ratio = sel_over_ma(row["in_turn"])
        wins_in_turn += in_turn_ratio >= 1 - args.tolerance
        if se["to_target"]:
            fractions.append(se["to_target"] / args.budget)
        per_meas.append(se["considered"] / max(1, se["spent"]))
        pr, ac = row["checks"]["pruned"], row["checks"]["accepted"]
        prs, acs = row["checks"]["pruned_single"], row["checks"]["accepted_single"]
        tr = row["trust"]
        trusted = tr["trusted_prunes"] + tr["trusted_accepts"]
        trusted_total += trusted
        decisions_total += tr["decisions"]
        fp = tr["false_prunes"]
        table.add_row(row["task"], f"{ma['best']:.2f}x", f"{tk['best']:.2f}x", f"{se['best']:.2f}x", f"{ratio:.2f}",
                      f"{in_turn_ratio:.2f} ({row['in_turn']['selective']:.2f}x / {row['in_turn']['measure-all']:.2f}x)",
                      " / ".join(str(x["to_target"] or "-") for x in (ma, tk, se)),
                      f"{tr['considered']} / {tr['considered_all']}",
                      f"{trusted / max(1, tr['decisions']):.0%}",
                      f"{se['counts'].get('accepted', 0) + se['counts'].get('verified', 0)} / {se['counts'].get('pruned', 0)}",
                      (f"{fp['wrong']}/{fp['audited']} ({fp['interval'][0]:.0%}-{fp['interval'][1]:.0%}), "
                       f"bound {args.risk:.0%}") if fp["audited"] else "-",
                      f"{pr[0]}/{pr[1]} / {ac[0]}/{ac[1]} (one measurement: {prs[0]}/{prs[1]} / {acs[0]}/{acs[1]}; "
                      f"wrong by > {args.tolerance:.0%}: "
                      f"{clearly_wrong('pruned', row['checks']['pruned_margins'], args.tolerance)} / "
                      f"{clearly_wrong('accepted', row['checks']['accepted_margins'], args.tolerance)})",
                      f"{100 * row['best_gbs'] / triad:.0f}%" if row["best_gbs"] and triad else "-",
                      *((f"{row[FROZEN_ARM]['best']:.2f}x (MA best at {row[FROZEN_ARM]['to_target'] or '-'})",)
                        if args.ablation else ()))
    console.print(table)
    console.print(f"selective wins or ties measure-all (within {args.tolerance:.0%}) on {wins} of {len(rows)} tasks; "
                  f"median fraction of the budget to reach measure-all's best: "
                  f"{statistics.median(fractions):.0%}" if fractions else "n/a")
    console.print(f"with the arms' best kernels measured in turn ({FINAL_ROUNDS} rounds, medians): selective wins or "
                  f"ties measure-all on {wins_in_turn} of {len(rows)} tasks")
    own = [row["selective"]["to_own_best"] for row in rows]
    console.print(f"selective found its own final best after a median {statistics.median(own):g} of "
                  f"{args.budget} measurements")
    console.print(f"selective decisions taken without a measurement: {trusted_total} of {decisions_total} "
                  f"({trusted_total / max(1, decisions_total):.0%})")
    carried = sum(row["trust"]["trusted_carried"] for row in rows)
    checked = [row["checks"]["pruned_carried"] for row in rows]
    pruned = [row["checks"]["pruned"] for row in rows]
    fresh_right = sum(r for r, _ in pruned) - sum(r for r, _ in checked)
    fresh_checked = sum(n for _, n in pruned) - sum(n for _, n in checked)
    console.print(f"of those, on children carried over from an earlier round: {carried}; checked prunes right, head to "
                  f"head: carried {sum(r for r, _ in checked)}/{sum(n for _, n in checked)}, "
                  f"first routing {fresh_right}/{fresh_checked}")
    trials = [f"{row['task']} {row['trust']['probation_audits'] - row['trust']['probation_wrong']}/"
              f"{row['trust']['probation_audits']}" for row in rows if row["trust"]["probation_audits"]]
    if trials:
        console.print("probation audits of the seed's replayed thresholds, right / measured (one wrong among a "
                      f"side's first {PROBATION_AUDITS} withdraws it for the task): " + ", ".join(trials))
    paired = sum(row["trust"]["paired"] for row in rows)
    console.print(f"selective children timed beside the incumbent they were judged against: {paired}; on "
                  f"{sum(row['trust']['paired_read_otherwise'] for row in rows)} of them that pair and the two speedups "
                  "measured apart disagree on which kernel was faster")
    console.print(f"median candidates considered per measurement (selective): {statistics.median(per_meas):.1f}"
                  + (f"; triad bandwidth {triad:.1f} GB/s" if triad else ""))
    if args.ablation:
        frozen = [row[FROZEN_ARM]["best"] / row["measure-all"]["best"] >= 1 - args.tolerance for row in rows]
        console.print(f"{FROZEN_ARM} wins or ties measure-all on {sum(frozen)} of {len(rows)} tasks")
    console.print(f"runs and results.json in {out}")


if __name__ == "__main__":
    main()
