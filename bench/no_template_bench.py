"""Kernels nobody wrote a template for (issue 14): `optimize` on each reference without its template, beside
the hand-written template's best, in one session on one device with the same harness.

For each built-in task (gemm, gemv, transpose, stencil2d, reduce_rows, softmax) two copies of its task file
are written to a temporary folder: one without the template sections (only the derived template of source
transformations is left) and one with them. Both are optimized by the real graph
(``kernelcast.api.optimize``: offline generator, confirmation of the best 3 at the end, noise floor of the
reference against itself) at the same ``--budget``; the template side is thus the template's best over a
budget-``--budget`` run, not a brute force of its space (gemm's template has 2304 valid points). The naive
kernels of ``bench/kernels`` (not built-ins, no template) run the same way, without a template side.

The reported speedup is the run's confirmed one with its 95 % interval. Before a row is printed the script
checks what could make it too good: both copies measure the same reference kernel (same source and launch),
and the reported winner of each side has no measurement other than ``correct`` in its store (column
"incorrect reported", must be 0; "caught": incorrect candidates the harness stopped). Rows whose best lies
inside the noise floor say so ("noise"). "local-tiled measured" counts the no-template side's local-tiled
candidates the search measured, with the best first measurement among them.

Sizes: at their full sizes (128 MB matrices) the memory-bound built-ins take well over 10 min per side on a
loaded 2-core CPU, so by default they run at an eighth of their elements (softmax a quarter; BENCH_SIZES:
16 MB matrices, half the 32 MiB last-level cache, so part of the traffic may hit it); gemm and our own
kernels keep their sizes. ``--task-sizes`` keeps every task's own sizes.

    .venv/bin/python bench/no_template_bench.py                      # everything, budget 24 (~20 min, loaded)
    .venv/bin/python bench/no_template_bench.py --tasks gemm --budget 12
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console  # noqa: E402
from rich.markup import escape  # noqa: E402
from rich.table import Table  # noqa: E402

from kernelcast.tools.core.measurement import Status  # noqa: E402
from kernelcast.tools.core.task import Task, load_task, resolve_task  # noqa: E402
from kernelcast.tools.store.store import Store  # noqa: E402

BUILTINS = ("gemm", "gemv", "transpose", "stencil2d", "reduce_rows", "softmax")
OWN = ("matvec_cols", "reduce_global", "conv2d", "colsum_macros", "blur_u8", "partial_sums")
KERNELS = Path(__file__).resolve().parent / "kernels"
# an eighth of the elements of the memory-bound built-ins (softmax: a quarter): 16 MB matrices, 8 MB for softmax
BENCH_SIZES: dict[str, dict[str, int]] = {
    "gemv": {"M": 2048, "N": 2048}, "transpose": {"M": 2048, "N": 1024}, "stencil2d": {"H": 2048, "W": 2048},
    "reduce_rows": {"M": 2048, "N": 2048}, "softmax": {"M": 1024, "N": 2048},
}


def task_copy(task: Task, folder: Path, *, template: bool, sizes: dict[str, int] | None = None) -> Task:
    """A copy of ``task``'s folder with a new name, with or without its template sections (they come last in
    every task file), with ``sizes`` replacing values of its [sizes] table."""
    suffix = "template" if template else "notemplate"
    target = folder / f"{task.name}_{suffix}"
    shutil.copytree(task.path.parent, target, dirs_exist_ok=True)
    lines = task.path.read_text().splitlines()
    if not template:
        cut = [i for i, line in enumerate(lines) if line.strip().startswith("[template")]
        lines = lines[: cut[0]] if cut else lines
    table, out = "", []
    for line in lines:
        header = re.match(r"^\s*\[([^\]]+)\]", line)
        table = header.group(1).strip() if header else table
        assignment = re.match(r"^(\w+)\s*=", line)
        if table == "" and assignment and assignment.group(1) == "name":
            line = f'name = "{task.name}_{suffix}"'
        elif table == "sizes" and assignment and sizes and assignment.group(1) in sizes:
            line = f"{assignment.group(1)} = {sizes[assignment.group(1)]}"
        out.append(line)
    (target / task.path.name).write_text("\n".join(out) + "\n")
    return load_task(target / task.path.name)


@dataclass
class Side:
    """The result of one optimize run as the table shows it."""

    speedup: float | None
    interval: tuple[float, float] | None
    verdict: str
    significant: bool
    noise_floor: float | None
    intent: str
    spent: int
    incorrect_reported: int  # the reported winner has a measurement that is not correct (must be 0)
    incorrect_caught: int  # measured candidates the harness found incorrect (not reported: the safety net)
    minutes: float
    tiled: list[float]  # first-measurement speedups of the correct local-tiled candidates the search measured

    def cell(self) -> str:
        if self.speedup is None:
            return "-"
        ci = f" ({self.interval[0]:.2f}-{self.interval[1]:.2f})" if self.interval else ""
        return f"{self.speedup:.2f}x{ci}" + ("" if self.significant else " noise")


def optimize_side(task: Task, budget: int, seed: int, device: str | None, router: str, folder: Path) -> Side:
    from kernelcast.api import optimize

    started = time.monotonic()
    store = Store(folder / f"{task.name}.db")
    try:
        result = optimize(task.path, budget=budget, router=router, seed=seed, device=device, store=store)
        measured = store.ledger.find(task=task.name)
        wrong = 0
        if result.best_hash:
            wrong = sum(1 for m in measured if m.candidate_hash == result.best_hash and m.status is not Status.correct)
        caught = sum(1 for m in measured if m.status is Status.incorrect)
        tiled_hashes = {c.hash for c in store.candidates.of_task(task.name) if "local-tile" in c.intent}
        tiled = [m.speedup for m in measured if m.candidate_hash in tiled_hashes and m.phase == "search"
                 and m.ok and m.speedup is not None]
    finally:
        store.close()
    return Side(result.best_speedup, result.best_interval, result.verdict, result.significant, result.noise_floor,
                result.best_intent or "reference", result.spent, wrong, caught, (time.monotonic() - started) / 60,
                tiled)


def same_reference(a: Task, b: Task) -> None:
    """Both copies time the same reference kernel: the ratio compares two searches, not two baselines."""
    ra, rb = a.reference(), b.reference()
    if (ra.source, ra.global_size, ra.local_size, a.sizes("full")) != (rb.source, rb.global_size, rb.local_size,
                                                                       b.sizes("full")):
        raise SystemExit(f"{a.name} and {b.name} do not share their reference kernel, launch and sizes")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default=",".join((*BUILTINS, *OWN)),
                        help="comma-separated built-in names and/or names of folders in bench/kernels")
    parser.add_argument("--budget", type=int, default=24)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default=None, help="platform:device index or name substring")
    parser.add_argument("--router", default="measure-all",
                        help="router of both sides (default measure-all: the forecaster cannot hide a difference "
                             "between the generators)")
    parser.add_argument("--task-sizes", action="store_true", help="keep every task's own sizes (slow)")
    args = parser.parse_args()
    console = Console(width=None if sys.stdout.isatty() else 200)
    names = [n.strip() for n in args.tasks.split(",") if n.strip()]
    table = Table(title=f"no template (derived transformations) vs the template's best: optimize, budget "
                        f"{args.budget} per side, router {args.router}, seed {args.seed}; confirmed speedup over "
                        f"the reference (95 % interval)")
    for col in ("task", "sizes", "template best (budget run)", "no-template confirmed best", "ratio",
                "incorrect reported", "caught", "local-tiled measured (best)", "minutes",
                "intent of the winner (no template)"):
        table.add_column(col, justify="left" if col in ("task", "sizes") or col.startswith("intent") else "right")
    ratios: list[float] = []
    gemm_speedup: float | None = None
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for name in names:
            own = (KERNELS / name / "task.toml").is_file()
            task = load_task(KERNELS / name / "task.toml") if own else resolve_task(name)
            sizes = None if args.task_sizes else BENCH_SIZES.get(name)
            bare = task_copy(task, folder, template=False, sizes=sizes)
            without = optimize_side(bare, args.budget, args.seed, args.device, args.router, folder)
            with_template = None
            if task.spec.template is not None:
                templated = task_copy(task, folder, template=True, sizes=sizes)
                same_reference(bare, templated)
                with_template = optimize_side(templated, args.budget, args.seed, args.device, args.router, folder)
            ratio = (without.speedup / with_template.speedup
                     if with_template and without.speedup and with_template.speedup else None)
            if ratio is not None and name in BUILTINS:
                ratios.append(ratio)
            if name == "gemm":
                gemm_speedup = without.speedup
            wrong = without.incorrect_reported + (with_template.incorrect_reported if with_template else 0)
            caught = without.incorrect_caught + (with_template.incorrect_caught if with_template else 0)
            minutes = without.minutes + (with_template.minutes if with_template else 0)
            shown = ", ".join(f"{k}={v}" for k, v in bare.sizes("full").items())
            table.add_row(name + (" (ours)" if own else ""), shown,
                          with_template.cell() if with_template else "(no template)", without.cell(),
                          f"{ratio:.0%}" if ratio is not None else "-", str(wrong), str(caught),
                          f"{len(without.tiled)} ({max(without.tiled):.2f}x)" if without.tiled else "0",
                          f"{minutes:.1f}",
                          escape(without.intent.removeprefix("derived: ")[:110]))
            console.print(f"[dim]{name}: done ({minutes:.1f} min; no template: {without.verdict}; noise floor "
                          f"{without.noise_floor if without.noise_floor is not None else '-'})[/dim]")
    console.print(table)
    if ratios:
        median = statistics.median(ratios)
        console.print(f"median ratio no-template / template over {len(ratios)} built-ins: {median:.0%} "
                      f"(target >= 60 %: {'met' if median >= 0.6 else 'MISSED'})")
    if gemm_speedup is not None:
        console.print(f"naive GEMM without template: {gemm_speedup:.2f}x (target >= 3x: "
                      f"{'met' if gemm_speedup >= 3 else 'MISSED'})")
    console.print(f"total {(time.monotonic() - started) / 60:.1f} min")


if __name__ == "__main__":
    main()
