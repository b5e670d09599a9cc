"""Offline generator vs uniform random template points.

For each templated built-in task, in one session on one device:
- offline: N proposals of :class:`kernelcast.agents.generate.offline.OfflineGenerator`, one at a time, each
  expanding the best kernel measured so far (the reference at first), every result stored in an
  in-memory store so measured points are never proposed again;
- random: N distinct template points drawn uniformly from the task's valid parameter space.
Every candidate gets the full measurement protocol (correctness on 3 seeds, interleaved timing
against the reference). The table shows, per side, the fraction correct, the best speedup and the
median speedup of the correct ones, and the ratio of the best speedups.

Kernels without a template against their template: ``bench/no_template_bench.py``.

    .venv/bin/python bench/generator_bench.py                          # quick: 5 per side, saxpy and gemm
    .venv/bin/python bench/generator_bench.py --per-task 20 --tasks all
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console  # noqa: E402
from rich.progress import Progress  # noqa: E402
from rich.table import Table  # noqa: E402

from kernelcast.agents.generate.base import GenerationContext  # noqa: E402
from kernelcast.agents.generate.offline import OfflineGenerator  # noqa: E402
from kernelcast.tools.core.candidate import Candidate  # noqa: E402
from kernelcast.tools.core.measurement import MeasureConfig, Measurement  # noqa: E402
from kernelcast.tools.core.task import Task, builtin_task_paths, resolve_task  # noqa: E402
from kernelcast.tools.hardware.worker import MeasurementWorker, WorkerError  # noqa: E402
from kernelcast.tools.store.store import Store  # noqa: E402

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
    store.candidates.add(candidate)
    store.ledger.add(m)
    return m


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default=DEFAULT_TASKS, help=f"comma-separated task names or 'all' "
                                                               f"(default {DEFAULT_TASKS})")
    parser.add_argument("--per-task", type=int, default=5, help="measurements per strategy and task (default 5)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default=None, help="platform:device index or name substring")
    args = parser.parse_args()
    console = Console(width=None if sys.stdout.isatty() else 160)  # a piped table keeps its columns
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
