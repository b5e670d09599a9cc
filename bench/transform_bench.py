"""Each source transformation alone (and a few compositions) on naive kernels, measured at full size.

For every kernel: the transformation is applied to the reference (or the stated base), the result gets
the full measurement protocol (correctness on 3 seeds, interleaved timing against the reference), and
the table shows status, speedup over the reference and the candidate's CV. Kernels: the built-in
references (their templates unused) and the naive kernels under bench/kernels/.

    .venv/bin/python bench/transform_bench.py
    .venv/bin/python bench/transform_bench.py --tasks gemm,bench/kernels/matvec_cols
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console  # noqa: E402
from rich.markup import escape  # noqa: E402
from rich.table import Table  # noqa: E402

from kernelcast.agents.generate.transforms import NotApplicable, Rewritten  # noqa: E402
from kernelcast.agents.generate.transforms.coarsen import coarsen  # noqa: E402
from kernelcast.agents.generate.transforms.restrict import restrict_const  # noqa: E402
from kernelcast.agents.generate.transforms.scalar_replace import scalar_replace  # noqa: E402
from kernelcast.agents.generate.transforms.unroll import unroll  # noqa: E402
from kernelcast.tools.core.candidate import Candidate  # noqa: E402
from kernelcast.tools.core.measurement import MeasureConfig  # noqa: E402
from kernelcast.tools.core.task import Task, resolve_task  # noqa: E402
from kernelcast.tools.hardware.worker import MeasurementWorker  # noqa: E402

DEFAULT_TASKS = ("gemm,gemv,transpose,stencil2d,reduce_rows,softmax,"
                 "bench/kernels/matvec_cols,bench/kernels/reduce_global,bench/kernels/conv2d")
Step = Callable[[Task, Candidate], Rewritten]


def _chain(*steps: Step) -> Step:
    def run(task: Task, c: Candidate) -> Rewritten:
        labels = []
        for step in steps:
            r = step(task, c)
            c, labels = r.candidate, [*labels, r.label]
        return Rewritten(c, "; ".join(labels))

    return run


def _local(shape: list[str]) -> Step:
    return lambda t, c: Rewritten(c.model_copy(update={"local_size": shape}), f"work-group ({', '.join(shape)})")


def variants(task: Task) -> list[Step]:
    """The single transformations and the compositions worth a row."""
    two_d = len(task.reference().global_size) == 2
    sr: Step = scalar_replace
    out: list[Step] = [sr, restrict_const, lambda t, c: unroll(t, c, 4)]
    out += [_local(["8"]) if not two_d else _local(["8", "4"])]
    if two_d:
        out += [lambda t, c: coarsen(t, c, 4, 4, "cyclic"), lambda t, c: coarsen(t, c, 4, 4, "block"),
                lambda t, c: coarsen(t, c, 2, 2, "cyclic"), lambda t, c: coarsen(t, c, 4, 4, "vector"),
                lambda t, c: coarsen(t, c, 8, 4, "vector")]
    else:
        out += [lambda t, c: coarsen(t, c, 4, 1, "cyclic"), lambda t, c: coarsen(t, c, 4, 1, "block"),
                lambda t, c: coarsen(t, c, 4, 1, "vector"), lambda t, c: coarsen(t, c, 8, 1, "vector")]
    fy = 4 if two_d else 1
    out += [_chain(sr, lambda t, c: coarsen(t, c, 4, fy, "block")),
            _chain(sr, lambda t, c: coarsen(t, c, 4, fy, "vector")),
            _chain(sr, lambda t, c: coarsen(t, c, 4, fy, "vector"), lambda t, c: unroll(t, c, 4))]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default=DEFAULT_TASKS, help="comma-separated task names or paths")
    parser.add_argument("--device", default=None)
    args = parser.parse_args()
    console = Console(width=None if sys.stdout.isatty() else 160)
    table = Table(title="source transformations on naive kernels: full-size measurements, speedup over the reference")
    for col in ("kernel", "transformation", "status", "speedup", "cand. CV"):
        table.add_column(col, justify="left" if col in ("kernel", "transformation", "status") else "right")
    with MeasurementWorker("opencl", args.device) as worker:
        for name in [t.strip() for t in args.tasks.split(",") if t.strip()]:
            task = resolve_task(name)
            seen: set[str] = set()
            for step in variants(task):
                try:
                    result = step(task, task.reference())
                except NotApplicable:
                    continue
                if result.candidate.hash in seen:
                    continue
                seen.add(result.candidate.hash)
                m = worker.measure(task, result.candidate, MeasureConfig(sizes="full"))
                cv = f"{m.candidate.cv:.1%}" if m.candidate is not None else "-"
                table.add_row(task.name, escape(result.label), m.status.value,
                              f"{m.speedup:.2f}x" if m.speedup is not None else "-", cv)
        device = worker.hardware_spec().name
    console.print(table)
    console.print(f"device: {device}")


if __name__ == "__main__":
    main()
