"""Offline generator vs uniform random template points, and kernels without a template vs their template.

Mode ``random`` (default): for each templated built-in task, in one session on one device:
- offline: N proposals of :class:`kernelcast.agents.offline_generator.OfflineGenerator`, one at a time, each
  expanding the best kernel measured so far (the reference at first), every result stored in an
  in-memory store so measured points are never proposed again;
- random: N distinct template points drawn uniformly from the task's valid parameter space.
Every candidate gets the full measurement protocol (correctness on 3 seeds, interleaved timing
against the reference). The table shows, per side, the fraction correct, the best speedup and the
median speedup of the correct ones, and the ratio of the best speedups.

Mode ``no-template`` (issue 14): each task's reference WITHOUT its template (the template sections are
cut from a copy of its task file, so only the derived template of source transformations is left) is
optimized offline at ``--budget`` measurements, and beside it the same task WITH its template at the
same budget; optimized by the full graph (``kernelcast.api.optimize``, measure-all router, so the
forecaster cannot hide a difference between the generators) or, with ``--driver generator``, by the
generator alone (best-first: each round proposes ``--per-round`` children of the best kernel so far and
measures them all). Every side's best is re-measured once; the table shows the confirmed speedups, the
ratio without/with template, the intent of the best kernel, and whether any incorrect candidate was
reported as a result (never).

    .venv/bin/python bench/generator_bench.py                          # quick: 5 per side, saxpy and gemm
    .venv/bin/python bench/generator_bench.py --per-task 20 --tasks all
    .venv/bin/python bench/generator_bench.py --mode no-template --budget 24 \
        --tasks gemm,gemv,transpose,stencil2d,reduce_rows,softmax
    .venv/bin/python bench/generator_bench.py --mode no-template --driver generator --budget 12 --tasks gemm
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console  # noqa: E402
from rich.markup import escape  # noqa: E402
from rich.progress import Progress  # noqa: E402
from rich.table import Table  # noqa: E402

from kernelcast.agents.generator import GenerationContext  # noqa: E402
from kernelcast.agents.offline_generator import OfflineGenerator  # noqa: E402
from kernelcast.tools.candidate import Candidate  # noqa: E402
from kernelcast.tools.measurement import Measurement, MeasureConfig  # noqa: E402
from kernelcast.tools.store import Store  # noqa: E402
from kernelcast.tools.task import Task, builtin_task_paths, resolve_task  # noqa: E402
from kernelcast.tools.worker import MeasurementWorker, WorkerError  # noqa: E402

DEFAULT_TASKS = "saxpy,gemm"
NO_TEMPLATE_TASKS = "gemm,gemv,transpose,stencil2d,reduce_rows,softmax"


@dataclass
class Side:
    """The measurements of one strategy on one task."""

    results: list[Measurement] = field(default_factory=list)

    @property
    def speedups(self) -> list[float]:
        return [m.speedup for m in self.results if m.ok and m.speedup is not None]

    def cells(self) -> list[str]:
        s = self.speedups
        return [f"{len(s)}/{len(self.results)}", f"{max(s):.2f}x" if s else "-",
                f"{statistics.median(s):.2f}x" if s else "-"]


def run_offline(task: Task, worker: MeasurementWorker, count: int, seed: int, progress: Progress) -> Side:
    """Each proposal's parent is the best kernel measured so far."""
    side, store = Side(), Store(":memory:")
    spec = worker.hardware_spec()
    generator = OfflineGenerator(worker)
    best, best_speedup = task.reference(), 1.0
    bar = progress.add_task(f"{task.name} offline", total=count)
    for _ in range(count):
        context = GenerationContext.from_store(store, task, spec.key, best, hardware=spec, seed=seed)
        proposals = generator.propose(task, best, context, 1)
        if not proposals.candidates:
            progress.console.print(f"{task.name}: offline generator stopped: {proposals.report.empty_reason}")
            break
        m = measure(task, proposals.candidates[0], worker, store)
        side.results.append(m)
        if m.ok and m.speedup is not None and m.speedup > best_speedup:
            best, best_speedup = proposals.candidates[0], m.speedup
        progress.advance(bar)
    store.close()
    return side


def run_random(task: Task, worker: MeasurementWorker, count: int, seed: int, progress: Progress) -> Side:
    side, store = Side(), Store(":memory:")
    space = task.param_space()
    bar = progress.add_task(f"{task.name} random", total=min(count, len(space)))
    for point in random.Random(seed).sample(space, min(count, len(space))):
        side.results.append(measure(task, task.instantiate(point, generator="random"), worker, store))
        progress.advance(bar)
    store.close()
    return side


def measure(task: Task, candidate: Candidate, worker: MeasurementWorker, store: Store) -> Measurement:
    m = worker.measure(task, candidate, MeasureConfig(sizes="full"))
    store.add_candidate(candidate)
    store.add_measurement(m)
    return m


# ---- mode no-template: a kernel nobody wrote a template for, against its template ----------------------------
@dataclass
class Outcome:
    """The confirmed best of one optimization: speedup (re-measured), intent, measurements spent."""

    speedup: float | None
    intent: str
    spent: int
    incorrect_reported: bool = False

    def cells(self) -> list[str]:
        return [f"{self.speedup:.2f}x" if self.speedup is not None else "-", str(self.spent)]


def strip_template(task: Task, folder: Path) -> Task:
    """A copy of the task file without its template sections (they come last in every task file), renamed."""
    from kernelcast.tools.task import load_task

    text = task.path.read_text()
    cut = [i for i, line in enumerate(text.splitlines()) if line.strip().startswith("[template")]
    lines = text.splitlines()[: cut[0]] if cut else text.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("name = "))  # the task's, before any table
    lines[first] = f'name = "{task.name}_notemplate"'
    target = folder / f"{task.name}_notemplate"
    target.mkdir(parents=True, exist_ok=True)
    shutil.copy(task.path.parent / task.spec.source, target / task.spec.source)
    (target / "task.toml").write_text("\n".join(lines) + "\n")
    return load_task(target / "task.toml")


def confirm(task: Task, candidate: Candidate, worker: MeasurementWorker) -> Measurement:
    return worker.measure(task, candidate, MeasureConfig(sizes="full"))


def optimize_with_graph(task: Task, budget: int, seed: int, device: str | None, folder: Path) -> Outcome:
    from kernelcast.api import optimize

    store = Store(folder / f"{task.name}.db")
    try:
        result = optimize(task.path, budget=budget, router="measure-all", seed=seed, device=device, store=store)
        best = store.candidate(result.best_hash) if result.best_hash else None
        reported = store.latest_measurement(result.best_hash, result.device, "full") if result.best_hash else None
    finally:
        store.close()
    wrong = reported is not None and not reported.ok
    return Outcome(result.best_speedup if best is not None else None, result.best_intent, result.spent, wrong)


def optimize_with_generator(task: Task, worker: MeasurementWorker, budget: int, per_round: int, seed: int,
                            progress: Progress) -> Outcome:
    """Best-first: each round, ``per_round`` children of the best kernel so far, all measured."""
    store, spec = Store(":memory:"), worker.hardware_spec()
    generator = OfflineGenerator(worker)
    best, best_speedup, spent = task.reference(), 1.0, 0
    bar = progress.add_task(f"{task.name} generator", total=budget)
    while spent < budget:
        context = GenerationContext.from_store(store, task, spec.key, best, hardware=spec, seed=seed)
        proposals = generator.propose(task, best, context, min(per_round, budget - spent)).candidates
        if not proposals:
            break
        round_best = None
        for c in proposals:
            m = measure(task, c, worker, store)
            spent += 1
            progress.advance(bar)
            if m.ok and m.speedup is not None and m.speedup > best_speedup:
                round_best, best_speedup = c, m.speedup
        best = round_best or best
    store.close()
    if best.generator == "reference":
        return Outcome(1.0, "reference", spent)
    final = confirm(task, best, worker)
    return Outcome(final.speedup if final.ok else None, best.intent, spent, not final.ok)


def run_no_template(args: argparse.Namespace, console: Console) -> None:
    names = [t.strip() for t in (args.tasks if args.tasks != DEFAULT_TASKS else NO_TEMPLATE_TASKS).split(",")]
    tasks = [t for t in map(resolve_task, names) if t.language == "opencl" and t.spec.template is not None]
    table = Table(title=f"without template (derived transformations) vs with template: budget {args.budget}, "
                        f"driver {args.driver}, seed {args.seed}; confirmed speedup over the reference")
    for col in ("task", "no template", "spent", "template", "spent", "ratio", "incorrect reported",
                "best without template"):
        table.add_column(col, justify="left" if col in ("task", "best without template") else "right")
    ratios, devices = [], set()
    with tempfile.TemporaryDirectory() as tmp, MeasurementWorker("opencl", args.device) as worker:
        devices.add(worker.hardware_spec().name)
        with Progress(console=console, transient=True) as progress:
            for task in tasks:
                bare = strip_template(task, Path(tmp))
                if args.driver == "graph":
                    without = optimize_with_graph(bare, args.budget, args.seed, args.device, Path(tmp))
                    with_template = optimize_with_graph(task, args.budget, args.seed, args.device, Path(tmp))
                else:
                    without = optimize_with_generator(bare, worker, args.budget, args.per_round, args.seed, progress)
                    with_template = optimize_with_generator(task, worker, args.budget, args.per_round, args.seed,
                                                            progress)
                ratio = (without.speedup / with_template.speedup
                         if without.speedup and with_template.speedup else None)
                if ratio is not None:
                    ratios.append(ratio)
                table.add_row(task.name, *without.cells(), *with_template.cells(),
                              f"{ratio:.0%}" if ratio is not None else "-",
                              "yes" if without.incorrect_reported or with_template.incorrect_reported else "no",
                              escape(without.intent[:90]))
    console.print(table)
    if ratios:
        console.print(f"median ratio without/with template: {statistics.median(ratios):.0%} over {len(ratios)} tasks")
    console.print(f"device: {', '.join(sorted(devices))}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default=DEFAULT_TASKS, help=f"comma-separated task names or 'all' "
                                                               f"(default {DEFAULT_TASKS})")
    parser.add_argument("--per-task", type=int, default=5, help="measurements per strategy and task (default 5)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default=None, help="platform:device index or name substring")
    parser.add_argument("--mode", choices=["random", "no-template"], default="random")
    parser.add_argument("--budget", type=int, default=24, help="measurements per side in no-template mode")
    parser.add_argument("--driver", choices=["graph", "generator"], default="graph",
                        help="no-template mode: the full optimize graph or the generator alone")
    parser.add_argument("--per-round", type=int, default=4, help="generator driver: children measured per round")
    args = parser.parse_args()
    console = Console(width=None if sys.stdout.isatty() else 160)  # a piped table keeps its columns
    if args.mode == "no-template":
        run_no_template(args, console)
        return

    names = sorted(builtin_task_paths()) if args.tasks == "all" else [t.strip() for t in args.tasks.split(",")]
    tasks = [t for t in map(resolve_task, names) if t.spec.template is not None]
    skipped = sorted(set(names) - {t.name for t in tasks})
    if skipped:
        console.print(f"no template, skipped: {', '.join(skipped)}")

    table = Table(title=f"offline generator vs random template points: {args.per_task} full-size measurements per "
                        f"side (seed {args.seed}); speedup over the reference; median of the correct ones")
    for col in ("task", "offline correct", "offline best", "offline median",
                "random correct", "random best", "random median", "best offline/random"):
        table.add_column(col, justify="left" if col == "task" else "right")
    workers: dict[str, MeasurementWorker | None] = {}
    devices: set[str] = set()
    try:
        with Progress(console=console, transient=True) as progress:
            for task in tasks:
                backend = task.backend
                if backend not in workers:
                    try:
                        workers[backend] = MeasurementWorker(backend, args.device)
                        workers[backend].start()  # type: ignore[union-attr]
                    except WorkerError as exc:
                        console.print(f"{backend} device unavailable, {backend} tasks skipped: {exc}")
                        workers[backend] = None
                worker = workers[backend]
                if worker is None:
                    continue
                offline = run_offline(task, worker, args.per_task, args.seed, progress)
                rand = run_random(task, worker, args.per_task, args.seed, progress)
                ratio = (f"{max(offline.speedups) / max(rand.speedups):.2f}"
                         if offline.speedups and rand.speedups else "-")
                table.add_row(task.name, *offline.cells(), *rand.cells(), ratio)
                devices.add(worker.hardware_spec().name)
    finally:
        for w in workers.values():
            if w is not None:
                w.close()
    console.print(table)
    console.print(f"device: {', '.join(sorted(devices)) or 'none'}")


if __name__ == "__main__":
    main()
