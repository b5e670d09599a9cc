"""Harness overhead, cached compile time, repeatability, and harness bias vs a bare pyopencl loop.

Prints one table; every number comes from this run. Usage:
    python bench/harness_bench.py [--task saxpy] [--params VEC=4,COARSEN=2,WG=256] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from kernelcast.tools.core.measurement import MeasureConfig  # noqa: E402
from kernelcast.tools.core.task import resolve_task  # noqa: E402
from kernelcast.tools.hardware.backends.opencl import OpenCLRunner  # noqa: E402
from kernelcast.tools.hardware.harness import Harness, bind_args, make_inputs, resolve_geometry  # noqa: E402
from kernelcast.tools.hardware.worker import MeasurementWorker  # noqa: E402


def bare_event_loop(task_name: str, params: dict, reps: int, device: str | None = None) -> tuple[float, float]:
    """Median device time of the reference and candidate with a plain pyopencl loop (no harness)."""
    import pyopencl as cl

    task = resolve_task(task_name)
    runner = OpenCLRunner(device)
    sizes = task.sizes("full")
    out = []
    for cand in (task.reference(), task.instantiate(params)):
        prog = cl.Program(runner.context, cand.source).build()
        kernel = cl.Kernel(prog, task.spec.entry)
        args, _ = bind_args(runner, task, sizes, make_inputs(task, sizes, 0))
        kernel.set_args(*[a.sub if hasattr(a, "sub") else a for a in args])
        glob, loc = resolve_geometry(cand, sizes, runner.spec.max_work_group_size)
        times = []
        for i in range(reps + 2):
            evt = cl.enqueue_nd_range_kernel(runner.queue, kernel, glob, loc)
            evt.wait()
            if i >= 2:
                times.append(evt.profile.end - evt.profile.start)
        out.append(float(np.median(times)))
    return out[0], out[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--task", default="saxpy")
    parser.add_argument("--params", default="VEC=4,COARSEN=2,WG=256")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default=None, help="platform:device index (default: the default device)")
    parser.add_argument("--check-tasks", default="saxpy,gemm,softmax,transpose,reduce_rows")
    parser.add_argument("--protection-only", action="store_true",
                        help="print only the cost of the work-group memory scrub and the fenced buffers")
    parser.add_argument("--protection-points", default="saxpy:VEC=4,COARSEN=2,WG=256;gemm:LOCAL=1;gemm:LOCAL=0",
                        help="task:params points whose measurement is timed with and without the protections")
    args = parser.parse_args()
    protection = protection_cost(args.protection_points, args.device, args.repeats)
    if args.protection_only:
        print_protection(protection)
        return
    params = {k: int(v) for k, v in (kv.split("=") for kv in args.params.split(","))}
    task = resolve_task(args.task)
    cand = task.instantiate(params)

    # 1) harness overhead on the small size (kernel time negligible), excluding compile and kernel time
    with MeasurementWorker(device=args.device) as worker:
        small = MeasureConfig(sizes="small", min_reps=5, max_reps=5, target_seconds=0.0)
        worker.measure(task, cand, small)  # warm: compile + reference outputs cached
        overhead, wall = [], []
        for _ in range(10):
            m = worker.measure(task, cand, small)
            overhead.append(m.harness_ms or 0.0)
            wall.append(m.wall_ms or 0.0)
        # 2) cached compile, measured in-process on the runner's cache
        harness = Harness(OpenCLRunner(args.device))
        harness.build(task, cand)
        t0 = time.perf_counter()
        for _ in range(100):
            _, hit, _ = harness.build(task, cand)
        cached_ms = (time.perf_counter() - t0) * 1e3 / 100
        assert hit
        cold_ms = harness.build(task, cand.model_copy(update={"source": cand.source + "\n// cold"}))[2]
        # 3) repeatability at full size, and 4) harness bias: each full measurement followed by the same
        # kernels timed with a bare pyopencl loop, so drifting load hits both alike
        full = MeasureConfig(sizes="full")
        runs, bare = [], []
        for _ in range(args.repeats):
            runs.append(worker.measure(task, cand, full))
            bare.append(bare_event_loop(args.task, params, reps=30, device=args.device))
    speedups = [m.speedup for m in runs if m.speedup]
    cv = statistics.pstdev(speedups) / statistics.mean(speedups) if len(speedups) > 1 else float("nan")
    bare_ref = statistics.median(r for r, _ in bare)
    bare_cand = statistics.median(c for _, c in bare)
    harness_ref = statistics.median(m.reference.median_ns for m in runs if m.reference)
    harness_cand = statistics.median(m.candidate.median_ns for m in runs if m.candidate)
    bias = statistics.median((m.speedup or 0.0) / (r / c) for m, (r, c) in zip(runs, bare, strict=True))

    # 5) what checking the timed launches costs: same repetitions with and without re-poisoning + checks
    check_share = timed_check_cost(args.check_tasks.split(","), args.device)

    table = Table(title=f"harness benchmark: {task.name} {params} on {runs[0].device}")
    for col in ("metric", "value", "target", "ok"):
        table.add_column(col)

    def row(name: str, value: float, unit: str, target: float | None) -> None:
        ok = "" if target is None else ("yes" if value <= target else "NO")
        table.add_row(name, f"{value:.3g} {unit}", f"<= {target:g} {unit}" if target is not None else "-", ok)

    row("harness overhead per measurement (median, excl. kernel+compile)", statistics.median(overhead), "ms", 50)
    row("wall time per small measurement (median)", statistics.median(wall), "ms", None)
    row("cached compile", cached_ms, "ms", 5)
    row("cold compile (same source + comment)", cold_ms, "ms", None)
    row(f"speedup CV over {len(speedups)} full measurements", 100 * cv, "%", 3)
    table.add_row("speedups", ", ".join(f"{s:.3f}" for s in speedups), "-", "")
    row("reference median: harness / bare pyopencl", harness_ref / bare_ref, "x", None)
    row("candidate median: harness / bare pyopencl", harness_cand / bare_cand, "x", None)
    row("speedup: harness / bare pyopencl (median of per-repeat ratios)", bias, "x", None)
    for name, share in check_share.items():
        row(f"timed-launch checks (re-poison, verify, fresh-seed launch): share of wall time, {name}",
            100 * share, "%", 10)
    Console(width=170).print(table)
    print_protection(protection)


def _point(task_name: str, text: str) -> tuple[object, object]:
    """A task and its candidate at ``text`` (``K=V,...``, completed from the template's default point)."""
    task = resolve_task(task_name)
    wanted = {k: int(v) for k, v in (kv.split("=") for kv in text.split(",") if kv)}
    template = task.spec.template
    return task, task.instantiate({**(dict(template.default) if template and template.default else {}), **wanted})


def protection_cost(points: str, device: str | None, pairs: int) -> list[tuple[str, bool, float, float, float, float]]:
    """What the integrity round 3 protections cost: each point measured (full sizes, fixed repetitions) by an
    in-process harness with them on and off, in alternation so drifting load hits both alike. Per point: whether
    the kernels use work-group memory (so the scrub runs), the median wall time per measurement on and off, and
    the speedup on and off. Off means buffers in plain device memory with 4 KiB guards and no scrub."""
    from kernelcast.tools.hardware.backends import opencl as opencl_backend

    fixed = MeasureConfig(sizes="full", min_reps=20, max_reps=20, target_seconds=0.0, remeasure=False)
    rows = []
    for spec in points.split(";"):
        task_name, _, params = spec.partition(":")
        task, cand = _point(task_name, params)
        runners = {on: OpenCLRunner(device) for on in (True, False)}
        runners[False].fenced = False
        runners[False].local_memory_scrub = lambda kernels: None  # type: ignore[method-assign]
        harnesses = {on: Harness(r) for on, r in runners.items()}
        for h in harnesses.values():
            h.measure(task, cand, fixed)  # warm: compile, inputs, reference outputs
        wall: dict[bool, list[float]] = {True: [], False: []}
        speed: dict[bool, list[float]] = {True: [], False: []}
        original = opencl_backend.guard_bytes_for  # the name the OpenCL runner calls
        for i in range(max(2, pairs)):
            for on in ((True, False) if i % 2 == 0 else (False, True)):
                opencl_backend.guard_bytes_for = original if on else (lambda nbytes: opencl_backend.GUARD_BYTES)
                m = harnesses[on].measure(task, cand, fixed)
                wall[on].append(m.wall_ms or 0.0)
                speed[on].append(m.speedup or 0.0)
        opencl_backend.guard_bytes_for = original
        kernel, _, _ = runners[True].build(cand.source, task.spec.entry, cand.build_options)
        scrubbed = runners[True].local_memory_scrub([kernel]) is not None
        rows.append((f"{task_name} {params}", scrubbed, statistics.median(wall[True]), statistics.median(wall[False]),
                     statistics.median(speed[True]), statistics.median(speed[False])))
    return rows


def print_protection(rows: list[tuple[str, bool, float, float, float, float]]) -> None:
    table = Table(title="integrity round 3 protections: work-group memory scrub + fenced buffers, on vs off "
                        "(full sizes, 20 repetitions, alternating)")
    for col in ("point", "scrubbed", "wall per measurement on / off", "extra time", "speedup on / off", "target"):
        table.add_column(col)
    for name, scrubbed, on, off, s_on, s_off in rows:
        extra = on / off - 1 if off else float("nan")
        table.add_row(name, "yes" if scrubbed else "no", f"{on:.0f} / {off:.0f} ms", f"{100 * extra:+.1f} %",
                      f"{s_on:.2f}x / {s_off:.2f}x", "<= +10 %" + (" ok" if extra <= 0.10 else " MISSED"))
    Console(width=170).print(table)


def timed_check_cost(task_names: list[str], device: str | None, pairs: int = 5) -> dict[str, float]:
    """Share of a measurement's wall time spent on re-poisoning, restoring and checking timed launches:
    the same fixed number of repetitions with the checks on and off, measured in alternation (so drifting
    load hits both alike), as the median over ``pairs`` of (checked - unchecked) / checked."""
    fixed = dict(min_reps=20, max_reps=20, target_seconds=0.0, remeasure=False, sizes="full")
    shares = {}
    with MeasurementWorker(device=device) as worker:
        for name in task_names:
            task = resolve_task(name)
            ref = task.reference()
            configs = {checked: MeasureConfig(verify_timed=checked, **fixed) for checked in (True, False)}  # type: ignore[arg-type]
            for cfg in configs.values():
                worker.measure(task, ref, cfg)  # warm: compile, reference outputs, cached inputs
            ratios = []
            for i in range(pairs):
                order = (True, False) if i % 2 == 0 else (False, True)
                wall = {checked: worker.measure(task, ref, configs[checked]).wall_ms or 0.0 for checked in order}
                ratios.append((wall[True] - wall[False]) / wall[True])
            shares[name] = max(0.0, statistics.median(ratios))
    return shares


if __name__ == "__main__":
    main()
