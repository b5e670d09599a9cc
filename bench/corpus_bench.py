"""The routers on kernels nobody here wrote: the held-out suites of bench/corpus (issue 46).

For each held-out kernel (``bench/corpus/manifest.toml``: split "held-out"), budget and seed, on one device in one
session: kernelcast's selective, topk and measure-all routers each run the real graph (``start_run``, as
``bench/router_bench.py`` does) in a fresh store, as a new user's would be (the forecaster knows the shipped seed
dataset, which holds no held-out kernel: ``tests/device/test_corpus.py``, and the run's own measurements). A fourth arm,
random order, spends ``budget`` on candidates drawn uniformly from the proposals the same generator made in the
selective run (every candidate its store holds but the reference), one measurement each with the harness, keeping
the routers' confirmations of its best: what the budget buys without a forecaster.

Printed per kernel, budget and seed: each arm's best speedup (kernelcast's: the run's best, with its confirmation
interval where it was confirmed, which may be below 1.0 when no candidate beat the reference; random order's
likewise), selective / measure-all on what each run delivers (its best, or the
reference's 1.0 when nothing beat it: ``Arm.delivered``), the measurements selective needed to reach measure-all's
best (within ``--tolerance``; its curve, as router_bench's, starts at the reference's 1.0), and the transformation
families each arm measured, the selective run's forecast spread (``graphs/route/forecast_spread``: the median over its
routed rounds of the standard deviation of predicted ln S; below 0.05 the forecasts told the children apart by
nothing), the rank skill of its forecasts (``graphs/search/result.run_skill``: Spearman of each measured
child's forecast, made before its measurement, against its shown speedup, with the pairs read; "-" where nothing
varies to rank; the router counts it from 5 pairs) and its roofline verdict
(``graphs/search/roofline``: the reference's and the best's share of the device's probed roof that the work's
arithmetic intensity meets first).
Then, per budget: the share of (kernel, seed) pairs where selective wins or ties measure-all (its best at
least measure-all's, or their confirmation intervals overlap, both as delivered), the geometric mean of selective /
measure-all (delivered, and on the best candidates themselves) and
the median share of the budget selective needed to reach measure-all's best (the issue's targets: at least 90 %,
1.25 at budget 8 and 1.10 at 24, at most half).

    .venv/bin/python bench/corpus_bench.py --out bench/out/corpus                  # hours: 13 kernels x 2 x 3 x 4
    .venv/bin/python bench/corpus_bench.py --tasks heteromark_fir --budgets 8 --seeds 1 --out /tmp/cb
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from router_bench import first_reaching, spend_curve  # noqa: E402

from kernelcast.graphs.config import RunConfig  # noqa: E402
from kernelcast.graphs.context import RunEnv  # noqa: E402
from kernelcast.graphs.route.forecast_skill import ForecastSkill  # noqa: E402
from kernelcast.graphs.route.forecast_spread import forecast_spread  # noqa: E402
from kernelcast.graphs.run import start_run  # noqa: E402
from kernelcast.graphs.search.budget import confirmations  # noqa: E402
from kernelcast.graphs.search.result import ranked, shown_speedups  # noqa: E402
from kernelcast.graphs.search.spender import confirmation_config  # noqa: E402
from kernelcast.tools.core.candidate import Candidate  # noqa: E402
from kernelcast.tools.core.measurement import MeasureConfig, Measurement  # noqa: E402
from kernelcast.tools.core.task import Task, load_task  # noqa: E402
from kernelcast.tools.hardware.worker import MeasurementWorker  # noqa: E402
from kernelcast.tools.store.store import Store  # noqa: E402

CORPUS = Path(__file__).resolve().parent / "corpus"
ROUTERS = ("selective", "topk", "measure-all")
RANDOM = "random order"
ARMS = (*ROUTERS, RANDOM)


def held_out_tasks() -> dict[str, Path]:
    """The held-out kernels' task files by name, in manifest order."""
    manifest = tomllib.loads((CORPUS / "manifest.toml").read_text())
    split = {name: suite["split"] for name, suite in manifest["suites"].items()}
    return {k["task"]: CORPUS / k["folder"] / "task.toml" for k in manifest["kernels"]
            if split[k["suite"]] == "held-out"}


def family_of(candidate: Candidate | None) -> str:
    """The candidate's transformation family (``agents.families`` where this checkout has it; else the
    generator that wrote it)."""
    if candidate is None:
        return "?"
    try:
        from kernelcast.agents.generate.families import transformation_family
    except ImportError:
        return candidate.generator or "?"
    return transformation_family(candidate)


@dataclass
class Arm:
    best: float  # best speedup over the reference (1.0: nothing beat it)
    spent: int
    curve: list[float]  # best speedup after each measurement
    families: dict[str, int]  # family -> measurements of it
    interval: tuple[float, float] | None = None  # the best's confirmation interval, where it was confirmed
    confirmed: bool = False
    run: str = ""
    roofline: str = ""  # the run's roofline verdict in one line (empty: none)
    spread: float | None = None  # median spread of predicted ln S within the run's routed rounds (None: no round)
    skill: float | None = None  # Spearman of the run's forecasts against its measured children (None: nothing to rank)
    skill_pairs: int = 0  # measured children it was read from
    best_hash: str = ""  # the best candidate (empty: the reference), in the run's store (random order: the selective run's)

    @property
    def delivered(self) -> float:
        """The speedup the run hands its user: its best, or the reference's 1.0 when no candidate beat the
        reference (the run's verdict is then no speedup, significant or not, and the reference is what a user
        keeps). Until 2026-12-06 the bench compared the best candidates themselves, so of two runs that both found
        nothing, the one whose best slowdown was milder won (heteromark_be, budget 8: 0.60x against 0.99x, a loss)."""
        return max(self.best, 1.0)

    @property
    def delivered_interval(self) -> tuple[float, float] | None:
        """The confirmation interval of :meth:`delivered` (the reference's, exactly 1.0, when it is the reference)."""
        if self.best < 1.0 or (self.best == 1.0 and self.interval is None):  # the reference (or nothing correct)
            return (1.0, 1.0)
        return self.interval


@dataclass
class Row:
    task: str
    budget: int
    seed: int
    arms: dict[str, Arm] = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        """selective / measure-all on what each run delivers (:meth:`Arm.delivered`)."""
        return self.ratio_of("selective")

    def ratio_of(self, arm: str) -> float:
        """``arm`` / measure-all on what each delivers (:meth:`Arm.delivered`)."""
        return self.arms[arm].delivered / self.arms["measure-all"].delivered

    @property
    def raw_ratio(self) -> float:
        """selective / measure-all on the best candidates themselves, slower than the reference or not."""
        return self.arms["selective"].best / max(self.arms["measure-all"].best, 1e-9)

    def wins_or_ties(self, arm: str = "selective") -> bool:
        """Whether ``arm`` delivers at least measure-all's best, or their confirmation intervals overlap."""
        mine, ma = self.arms[arm], self.arms["measure-all"]
        if mine.delivered >= ma.delivered:
            return True
        low, high = mine.delivered_interval, ma.delivered_interval
        return bool(low and high and low[1] >= high[0])

    def to_target(self, tolerance: float) -> int | None:
        return first_reaching(self.arms["selective"].curve, self.arms["measure-all"].best, tolerance)


def run_router(task: Task, router: str, budget: int, seed: int, sizes: str, out: Path) -> tuple[Arm, Store]:
    home = out / task.name / f"{router}-b{budget}-s{seed}"
    if any(home.glob("*.db")):
        raise SystemExit(f"{home} holds an earlier bench's store: choose an empty --out")
    home.mkdir(parents=True, exist_ok=True)
    store = Store(home / "kernelcast.db")  # fresh: the seed dataset and the run itself, as a new user's
    config = RunConfig(task=str(task.path), budget=budget, router=router, seed=seed, sizes=sizes,  # type: ignore[arg-type]
                       forecaster="learned")
    result = start_run(config, store, RunEnv(home))
    families: dict[str, int] = {}
    for m in store.ledger.find(run_id=result.run_id):
        if m.phase not in ("confirm", "noise"):
            name = family_of(store.candidates.get(m.candidate_hash))
            families[name] = families.get(name, 0) + 1
    interval = tuple(result.best_interval) if result.best_interval else None
    roofline = result.roofline.text if result.roofline else ""
    spread = forecast_spread(store, result.run_id).median
    skill = result.forecast_skill or ForecastSkill(0, None)
    return Arm(result.best_speedup or 1.0, result.spent, spend_curve(store, result.run_id), families,
               interval, result.confirmed, result.run_id, roofline, spread, skill.rho,  # type: ignore[arg-type]
               skill.pairs, result.best_hash or ""), store


def random_order(task: Task, pool: list[Candidate], budget: int, seed: int, sizes: str,
                 worker: MeasurementWorker) -> Arm:
    """The budget spent without a forecaster, as the routers spend theirs: proposals drawn uniformly from ``pool``
    measured once each, then the run's confirmations (``graphs/search/budget.confirmations``, the routers' count)
    of the best of them, so the arm's best stands on a confirmation as theirs does. As a run's reserve
    (``graphs/search/budget.confirm_reserve``), the confirmations kept back are at most the correct measurements:
    a budget whose measurements all fail is spent on first measurements. Until 2026-12-07 this arm reported its
    best single measurement, which the winner's curse lifts: it read above the routers on kernels where nothing
    beats the reference."""
    confirm = confirmations(RunConfig(task=str(task.path), budget=budget))
    first_config = MeasureConfig(sizes=sizes)
    ledger: list[Measurement] = []
    curve: list[float] = []
    families: dict[str, int] = {}

    def spend(measurement: Measurement) -> None:
        ledger.append(measurement)
        speed = measurement.speedup if measurement.ok and measurement.speedup else 1.0
        curve.append(max(curve[-1] if curve else 1.0, speed))

    correct = 0  # first measurements that came back correct: the confirmations they can use are kept back
    for candidate in random.Random(f"corpus-{task.name}-{seed}").sample(pool, len(pool)):
        if len(ledger) + min(confirm, correct) >= budget:
            break
        spend(worker.measure(task, candidate, first_config))
        correct += bool(ledger[-1].ok and ledger[-1].speedup)
        name = family_of(candidate)
        families[name] = families.get(name, 0) + 1
    by_hash = {c.hash: c for c in pool}
    for shown in ranked(shown_speedups(ledger))[:min(confirm, budget - len(ledger))]:
        again = worker.measure(task, by_hash[shown.candidate_hash], confirmation_config(first_config))
        spend(again.model_copy(update={"phase": "confirm"}))
    best = next(iter(ranked(shown_speedups(ledger))), None)
    if best is None:
        return Arm(1.0, len(ledger), curve, families)
    return Arm(best.speedup, len(ledger), curve, families, best.interval if best.confirmed else None, best.confirmed,
               best_hash=best.candidate_hash)


def line(row: Row, tolerance: float) -> str:
    def shown(arm: Arm | None) -> str:
        if arm is None:
            return "- (not run)"
        ci = f" [{arm.interval[0]:.2f}-{arm.interval[1]:.2f}]" if arm.interval else ""
        return f"{arm.best:.2f}x{ci}{'' if arm.confirmed else ' (unconfirmed)'}"

    sel = row.arms["selective"]
    spread = "-" if sel.spread is None else f"{sel.spread:.2f}"
    skill = ("-" if sel.skill is None else f"{sel.skill:.2f}") + f" ({sel.skill_pairs})"
    fams = "; ".join(f"{a}: " + ", ".join(f"{k} {v}" for k, v in sorted(row.arms[a].families.items()))
                     for a in ("selective", "measure-all", RANDOM) if a in row.arms)
    return (f"| {row.task} | {row.budget} | {row.seed} | " + " | ".join(shown(row.arms.get(a)) for a in ARMS)
            + f" | {row.ratio:.2f} | {row.to_target(tolerance) or '-'} | {spread} | {skill} "
            f"| {sel.roofline or '-'} | {fams} |")


def geo_mean(values: list[float]) -> float:
    """The geometric mean of ratios (a ratio of 0, nothing delivered, counts as 1e-9)."""
    return math.exp(statistics.fmean(math.log(max(v, 1e-9)) for v in values))


def summary(rows: list[Row], budgets: list[int], tolerance: float) -> list[str]:
    out = []
    for budget in budgets:
        at = [r for r in rows if r.budget == budget]
        if not at:
            continue
        wins = sum(r.wins_or_ties() for r in at)
        geo, raw = geo_mean([r.ratio for r in at]), geo_mean([r.raw_ratio for r in at])
        reach = [(r.to_target(tolerance) or budget + 1) / budget for r in at]
        out.append(f"budget {budget}: selective wins or ties measure-all on {wins} of {len(at)} (kernel, seed) pairs "
                   f"({wins / len(at):.0%}; target 90 %); geometric mean selective / measure-all {geo:.2f} (target "
                   f"{1.25 if budget <= 8 else 1.10}; {raw:.2f} on the best candidates themselves, slowdowns "
                   f"included); median share of the budget to reach measure-all's best "
                   f"{statistics.median(reach):.0%} (target <= 50 %; above 100 %: not reached)")
        for arm in (a for a in ARMS if a not in ("selective", "measure-all") and all(a in r.arms for r in at)):
            wins = sum(r.wins_or_ties(arm) for r in at)
            out.append(f"budget {budget}: {arm} wins or ties measure-all on {wins} of {len(at)} pairs; geometric mean "
                       f"{arm} / measure-all {geo_mean([r.ratio_of(arm) for r in at]):.2f}")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    held = held_out_tasks()
    parser.add_argument("--tasks", default=",".join(held), help="held-out corpus tasks, comma-separated")
    parser.add_argument("--budgets", default="8,24")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=0, help="seeds run: first-seed .. first-seed + seeds - 1")
    parser.add_argument("--sizes", default="full", choices=["full", "small"])
    parser.add_argument("--tolerance", type=float, default=0.03, help="noise margin for 'reached measure-all's best'")
    parser.add_argument("--arms", default=",".join(ARMS),
                        help=f"arms to run, comma-separated (selective and measure-all always; of {', '.join(ARMS)}): "
                             "'selective,measure-all' halves a quick comparison of a router change")
    parser.add_argument("--out", required=True, help="an empty folder: one fresh store per run, results.json")
    args = parser.parse_args()
    if args.first_seed < 0 or args.seeds < 1:
        parser.error("--first-seed must be >= 0 and --seeds >= 1")
    names = [t.strip() for t in args.tasks.split(",") if t.strip()]
    if unknown := [n for n in names if n not in held]:
        parser.error(f"not held-out corpus tasks: {unknown} (held out: {', '.join(held)})")
    arms = {a.strip() for a in args.arms.split(",") if a.strip()} | {"selective", "measure-all"}
    if unknown := sorted(arms - set(ARMS)):
        parser.error(f"unknown arms: {unknown} (arms: {', '.join(ARMS)})")
    budgets = [int(b) for b in args.budgets.split(",") if b.strip()]
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    rows: list[Row] = []
    started = time.perf_counter()
    head = ("| kernel | budget | seed | " + " | ".join(f"{a} best" for a in ARMS)
            + " | selective / measure-all (delivered) | selective's measurements to measure-all's best "
            "| forecast spread (selective, median ln S sd per round) | rank skill (selective: Spearman of its "
            "forecasts against the children it measured, pairs) | roofline (selective run) | families measured |")
    with MeasurementWorker() as worker:
        device = worker.hardware_spec().key
        print(f"device {device}; sizes {args.sizes}; held-out kernels {', '.join(names)}", flush=True)
        for name in names:
            task = load_task(held[name])
            for budget in budgets:
                for seed in range(args.first_seed, args.first_seed + args.seeds):
                    row = Row(name, budget, seed)
                    stores = {}
                    for router in (r for r in ROUTERS if r in arms):
                        row.arms[router], stores[router] = run_router(task, router, budget, seed, args.sizes, out)
                    if RANDOM in arms:
                        pool = [c for c in stores["selective"].candidates.of_task(task.name) if c.generator != "reference"]
                        row.arms[RANDOM] = random_order(task, pool, budget, seed, args.sizes, worker)
                    for store in stores.values():
                        store.close()
                    rows.append(row)
                    if len(rows) == 1:
                        print(head + "\n|" + "---|" * (head.count("|") - 1))
                    print(line(row, args.tolerance), flush=True)
                    (out / "results.json").write_text(json.dumps({"device": device, "sizes": args.sizes,
                                                                  "rows": [asdict(r) for r in rows]}, indent=1))
    print()
    for text in summary(rows, budgets, args.tolerance):
        print(text)
    print(f"total {time.perf_counter() - started:.0f} s on {device}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
