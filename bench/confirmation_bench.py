"""The winner's curse, measured: each run's best as first measured and as confirmed, and the noise floor.

For each task, one optimize run (fresh store, offline generator, measure-all so the forecaster plays no part)
at the given budget; the table shows the best candidate's first measurement, its confirmation (more
repetitions, interleaved with the reference) with the 95 % interval, the gap between them, the reference
measured against itself on this device (the noise floor), and the verdict. Usage:
    python bench/confirmation_bench.py [--tasks gemm,softmax,transpose,reduce_rows,gemv] [--budget 12]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from kernelcast.graphs.config import RunConfig  # noqa: E402
from kernelcast.graphs.context import RunEnv  # noqa: E402
from kernelcast.graphs.run import start_run  # noqa: E402
from kernelcast.tools.store.store import Store  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", default="gemm,softmax,transpose,reduce_rows,gemv")
    parser.add_argument("--budget", type=int, default=12)
    parser.add_argument("--sizes", default="full", choices=["full", "small"])
    parser.add_argument("--device", default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    table = Table(title=f"first vs confirmed best (measure-all, budget {args.budget}, {args.sizes} sizes)")
    for col in ("task", "first", "confirmed (95 % interval)", "gap", "ref vs ref (noise floor)", "verdict", "device"):
        table.add_column(col)
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.tasks.split(","):
            home = Path(tmp) / name
            store = Store(home / "kernelcast.db")
            config = RunConfig(task=name, budget=args.budget, router="measure-all", forecaster="none",
                               sizes=args.sizes, seed=args.seed, device=args.device)  # type: ignore[arg-type]
            result = start_run(config, store, RunEnv(home))
            interval = (f" ({result.best_interval[0]:.3f}-{result.best_interval[1]:.3f})"
                        if result.best_interval else "")
            gap = (f"{(result.first_speedup or 0) / result.best_speedup - 1:+.1%}"
                   if result.best_speedup and result.confirmed else "-")
            floor = f"±{result.noise_floor:.1%}" if result.noise_floor is not None else "-"
            table.add_row(name, f"{result.first_speedup or 0:.3f}x",
                          f"{result.best_speedup or 0:.3f}x{interval}" if result.confirmed else "not confirmed",
                          gap, floor, result.verdict, result.device.split(":", 1)[1])
            store.close()
    Console(width=200).print(table)


if __name__ == "__main__":
    main()
