"""Spread of the built-in tasks' tunable templates at full size.

For each templated built-in task: time the reference and a few seeded random
template points (plus the template's default point) with the full measurement
protocol (correctness on the full size, interleaved event timing) and print
the speedups side by side, so one can see that each search space contains real
speedups and real slowdowns.

    .venv/bin/python bench/template_spread.py                 # all templated tasks, 6 random points each
    .venv/bin/python bench/template_spread.py gemm -n 10      # one task, 10 points
    .venv/bin/python bench/template_spread.py gemm -p TM=4,TN=8,WGX=8,WGY=4,KU=2,LOCAL=0,TK=8
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console
from rich.table import Table

from kernelcast.tools.core.measurement import MeasureConfig, Measurement
from kernelcast.tools.core.task import Task, builtin_task_paths, load_task
from kernelcast.tools.hardware.worker import MeasurementWorker


def parse_point(text: str, task: Task) -> dict[str, Any]:
    """'A=1,B=2' -> {'A': 1, 'B': 2}, typed like the template's allowed values."""
    assert task.spec.template is not None
    point: dict[str, Any] = {}
    for item in text.split(","):
        key, _, value = item.partition("=")
        allowed = task.spec.template.params[key.strip()]
        point[key.strip()] = type(allowed[0])(value.strip())
    return point


def pick_points(task: Task, count: int, seed: int) -> list[dict[str, Any]]:
    """The default point (if any) plus ``count`` distinct random valid points."""
    space = task.param_space()
    rng = random.Random(seed)
    picked: list[dict[str, Any]] = []
    tmpl = task.spec.template
    if tmpl is not None and tmpl.default is not None and task.is_valid_point(dict(tmpl.default)):
        picked.append(dict(tmpl.default))
    for point in rng.sample(space, min(count, len(space))):
        if point not in picked:
            picked.append(point)
    return picked


def short_flag(flag: str) -> str:
    """'noisy: CV ref 12% ...' -> 'noisy'."""
    return flag.split(":", 1)[0]


def fmt_point(point: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in point.items())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tasks", nargs="*", help="built-in task names (default: every OpenCL task with a template)")
    parser.add_argument("-n", "--points", type=int, default=6, help="random template points per task")
    parser.add_argument("-s", "--seed", type=int, default=0, help="seed for picking points")
    parser.add_argument("-p", "--point", action="append", default=[], help="explicit point A=1,B=2 (repeatable)")
    parser.add_argument("--sizes", default="full", choices=["full", "small"])
    parser.add_argument("--seeds", type=int, default=1, help="correctness seeds per measurement")
    args = parser.parse_args()

    paths = builtin_task_paths()
    # the worker measures on OpenCL; CUDA built-ins (``*_cuda``) need the CUDA backend
    names = args.tasks or [n for n, p in paths.items()
                           if (t := load_task(p)).spec.template is not None and t.spec.language == "opencl"]
    console = Console()
    table = Table(title=f"template spread at {args.sizes} size (speedup = median_ref / median_cand)")
    for col in ("task", "space", "ref ms", "point", "status", "cand ms", "speedup"):
        table.add_column(col, justify="right" if col in ("space", "ref ms", "cand ms", "speedup") else "left")
    config = MeasureConfig(sizes=args.sizes, seeds=list(range(args.seeds)), target_seconds=0.5, max_reps=20,
                           timeout_s=300)
    summary: list[tuple[str, float, float]] = []
    started = time.perf_counter()
    with MeasurementWorker() as worker:
        for name in names:
            task = load_task(paths[name])
            if task.spec.template is None:
                console.print(f"[yellow]{name}: no template, skipped[/]")
                continue
            points = [parse_point(p, task) for p in args.point] if args.point else pick_points(task, args.points, args.seed)
            speedups: list[float] = []
            for i, point in enumerate(points):
                m: Measurement = worker.measure(task, task.instantiate(point), config)
                ref_ms = f"{m.reference.median_ns / 1e6:.1f}" if m.reference else "-"
                cand_ms = f"{m.candidate.median_ns / 1e6:.2f}" if m.candidate else "-"
                speed = f"{m.speedup:.2f}x" if m.speedup is not None else "-"
                if m.speedup is not None:
                    speedups.append(m.speedup)
                status = m.status.value + (" (" + ", ".join(short_flag(f) for f in m.flags) + ")" if m.flags else "")
                if m.status.value != "correct" and m.reason:
                    status += ": " + m.reason.splitlines()[0][:60]
                table.add_row(name if i == 0 else "", str(len(task.param_space())) if i == 0 else "", ref_ms,
                              fmt_point(point), status, cand_ms, speed)
                console.print(f"{name}: {fmt_point(point)} -> {m.status.value} {speed}", highlight=False)
            if speedups:
                summary.append((name, min(speedups), max(speedups)))
            table.add_section()
    console.print(table)
    for name, lo, hi in summary:
        console.print(f"{name}: speedups from {lo:.2f}x to {hi:.2f}x over the measured points", highlight=False)
    console.print(f"wall time {time.perf_counter() - started:.0f} s", highlight=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
