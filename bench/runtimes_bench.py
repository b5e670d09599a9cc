"""CPU OpenCL runtimes side by side: each built-in reference on every healthy device, in one run.

For each task and device: the reference's median device time, the CV of its launches, and the spread of
the reference measured against itself over several full measurements (the noise floor a speedup must
clear). This is the measurement behind the documented default-device order. Usage:
    python bench/runtimes_bench.py [--tasks gemm,saxpy] [--repeats 3] [--sizes full]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from kernelcast.tools.core.measurement import MeasureConfig  # noqa: E402
from kernelcast.tools.core.task import builtin_task_paths, load_task  # noqa: E402
from kernelcast.tools.hardware.probe import probe_devices  # noqa: E402
from kernelcast.tools.hardware.worker import MeasurementWorker  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", default="")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sizes", default="full", choices=["full", "small"])
    args = parser.parse_args()
    tasks = [load_task(p) for name, p in builtin_task_paths().items()
             if (not args.tasks or name in args.tasks.split(","))]
    tasks = [t for t in tasks if t.language == "opencl"]
    statuses = probe_devices()
    healthy = [s for s in statuses if s.healthy]
    for s in statuses:
        if not s.healthy:
            print(f"skipped {s.name} ({s.platform}): {s.reason}")
    config = MeasureConfig(sizes=args.sizes)
    rows: dict[str, dict[str, tuple[float, float, float]]] = {}
    for status in healthy:
        with MeasurementWorker(device=status.index) as worker:
            for task in tasks:
                runs = [worker.measure(task, task.reference(), config) for _ in range(args.repeats)]
                ok = [m for m in runs if m.ok and m.reference and m.speedup]
                if not ok:
                    rows.setdefault(task.name, {})[status.index] = (float("nan"),) * 3
                    continue
                median_ms = statistics.median(m.reference.median_ns for m in ok if m.reference) / 1e6
                cv = statistics.median(m.reference.cv for m in ok if m.reference)
                spread = max(abs(1 - (m.speedup or 1.0)) for m in ok)
                rows.setdefault(task.name, {})[status.index] = (median_ms, cv, spread)
    table = Table(title=f"reference kernels per CPU runtime ({args.sizes} sizes, {args.repeats} measurements each)")
    table.add_column("task")
    for s in healthy:
        table.add_column(f"{s.platform[:18]}: ms / CV / ref-vs-ref")
    if len(healthy) == 2:
        table.add_column(f"time {healthy[0].platform[:10]} / {healthy[1].platform[:10]}")
    for name, per in rows.items():
        cells = [f"{per[s.index][0]:.3f} / {per[s.index][1]:.1%} / {per[s.index][2]:.1%}" for s in healthy]
        if len(healthy) == 2:
            cells.append(f"{per[healthy[0].index][0] / per[healthy[1].index][0]:.2f}")
        table.add_row(name, *cells)
    Console(width=200).print(table)


if __name__ == "__main__":
    main()
