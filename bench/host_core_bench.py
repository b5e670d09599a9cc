"""What leaving the host a core does to measurements on CPU devices, side by side in one run.

A CPU OpenCL runtime spreads a kernel over every core, so the harness's own thread (and anything else on
the machine) competes with the timed launches. ``--device intel@N`` measures on a sub-device of N compute
units (OpenCL device fission), leaving the rest to the host. For each device, whole and with one core
left, this script measures the reference against itself (the noise floor: how far from 1.0 a no-op lands)
and one template point of each task several times, and prints the spread of the speedups, the median 95 %
interval half-width, the kernel time and the wall time per measurement. Usage:
    python bench/host_core_bench.py [--tasks saxpy,softmax,gemm] [--repeats 5] [--devices intel,portable]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from kernelcast.tools.core.measurement import MeasureConfig, Measurement  # noqa: E402
from kernelcast.tools.core.task import Task, resolve_task  # noqa: E402
from kernelcast.tools.hardware.worker import MeasurementWorker, WorkerError  # noqa: E402


def a_template_point(task: Task) -> dict:
    """A fixed, non-default point (the middle of the enumerated space), so every device times the same code."""
    space = task.param_space()
    return space[len(space) // 2]


def summarize(measurements: list[Measurement]) -> tuple[float, float, float, float]:
    """(spread of speedups max-min, median CI half-width, median candidate kernel ms, median wall ms)."""
    speedups = [m.speedup for m in measurements if m.speedup]
    halves = [(m.speedup_ci[1] - m.speedup_ci[0]) / 2 for m in measurements if m.speedup_ci]
    kernel = [m.candidate.median_ns / 1e6 for m in measurements if m.candidate]
    wall = [m.wall_ms or 0.0 for m in measurements]
    spread = (max(speedups) - min(speedups)) if speedups else float("nan")
    return spread, statistics.median(halves), statistics.median(kernel), statistics.median(wall)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", default="saxpy,softmax,gemm")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--devices", default="intel,portable", help="device selectors (name fragments or indices)")
    parser.add_argument("--sizes", default="full", choices=["full", "small"])
    args = parser.parse_args()
    config = MeasureConfig(sizes=args.sizes)
    table = Table(title=f"leaving the host a core: {args.repeats} measurements each, {args.sizes} sizes")
    for col in ("task", "device", "kernel", "self: spread", "self: max |S-1|", "self: CI +-", "point: spread",
                "point: median S", "point: CI +-", "kernel ms", "wall ms"):
        table.add_column(col)
    for selector in args.devices.split(","):
        for variant in (selector, f"{selector}@{{left}}"):
            try:
                with MeasurementWorker(device=selector) as probe:
                    units = probe.start().compute_units
            except WorkerError as exc:
                Console().print(f"[yellow]skipping {selector}: {exc}")
                break
            device = variant.format(left=units - 1) if "{left}" in variant else variant
            if units < 2 and device != selector:
                continue
            with MeasurementWorker(device=device) as worker:
                name = worker.start().name
                for task_name in args.tasks.split(","):
                    task = resolve_task(task_name)
                    for label, candidate in (("reference", task.reference()),
                                             ("point", task.instantiate(a_template_point(task)))):
                        worker.measure(task, candidate, config)  # warm: compile, reference outputs
                        runs = [worker.measure(task, candidate, config) for _ in range(args.repeats)]
                        if label == "reference":
                            self_runs = runs
                            continue
                        s_spread, s_half, _, _ = summarize(self_runs)
                        worst = max(abs((m.speedup or 1.0) - 1.0) for m in self_runs)
                        p_spread, p_half, kernel_ms, wall_ms = summarize(runs)
                        median_s = statistics.median(m.speedup for m in runs if m.speedup)
                        table.add_row(task_name, name, str(a_template_point(task)), f"{s_spread:.3f}",
                                      f"{worst:.3f}", f"{s_half:.3f}", f"{p_spread:.3f}", f"{median_s:.2f}x",
                                      f"{p_half:.3f}", f"{kernel_ms:.2f}", f"{wall_ms:.0f}")
    Console(width=200).print(table)


if __name__ == "__main__":
    main()
