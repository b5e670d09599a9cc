"""How measurement scales out: wall time of ``measure_many`` over a round of candidates with 1, 2 and 4 workers.

Two parts, one table, every number from this run:

* real: the task's first N template points measured on the OpenCL device by 1 worker (a LocalMeasurer),
  then by a 2-worker pool on the same device (``share_device=True``). On a 2-core machine the two CPU
  devices share those cores, so this shows the cost of the orchestration rather than a gain;
* replay: the 1-worker measurements, stored, answered by the replay measurer with 1, 2 and 4 workers while
  each answer waits its stored device time (``wall_ms``): how the orchestration scales when the devices are
  separate (targets: >= 1.8x at 2 workers, >= 3.5x at 4).

Usage:
    python bench/scaling_bench.py [--task saxpy] [--count 32] [--sizes small|full] [--store PATH]

With ``--store`` the replay part answers from that store's measurements (for example a dataset built with
``kernelcast dataset build``) and the real part is skipped.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from kernelcast.tools.core.candidate import Candidate  # noqa: E402
from kernelcast.tools.core.measurement import MeasureConfig, Measurement  # noqa: E402
from kernelcast.tools.core.task import Task, resolve_task  # noqa: E402
from kernelcast.tools.hardware.measurers.base import Measurer  # noqa: E402
from kernelcast.tools.hardware.measurers.factory import make_measurer  # noqa: E402
from kernelcast.tools.hardware.measurers.local import LocalMeasurer  # noqa: E402
from kernelcast.tools.store.store import Store  # noqa: E402

TARGETS = {2: 1.8, 4: 3.5}


def timed_round(measurer: Measurer, task: Task, candidates: list[Candidate],
                config: MeasureConfig) -> tuple[float, dict[str, Measurement]]:
    """Wall seconds of one measure_many over the round (workers already started), and its results."""
    measurer.start()
    start = time.perf_counter()
    results = {c.hash: m for c, m in measurer.measure_many(task, candidates, config)}
    elapsed = time.perf_counter() - start
    if sorted(results) != sorted(c.hash for c in candidates):
        raise SystemExit("a candidate was lost or yielded twice: the measurer is broken")
    return elapsed, results


def list_schedule_s(device_ms: list[float], workers: int) -> float:
    """Makespan of handing each item, in order, to the first free worker (what measure_many does) with no
    overhead at all: the best any orchestration can do with these device times."""
    free_at = [0.0] * workers
    for ms in device_ms:
        i = free_at.index(min(free_at))
        free_at[i] += ms / 1e3
    return max(free_at)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="saxpy")
    parser.add_argument("--count", type=int, default=32, help="candidates in the round")
    parser.add_argument("--sizes", default="small", choices=["full", "small"],
                        help="small (default) takes seconds; full takes ~7 s a candidate per worker here")
    parser.add_argument("--store", type=Path, help="replay this store's measurements instead of measuring")
    args = parser.parse_args()
    task = resolve_task(args.task)
    config = MeasureConfig(sizes=args.sizes)
    console = Console(width=150)
    table = Table(title=f"measure_many over {args.count} candidates of {task.name} ({args.sizes} sizes)")
    for col in ("measurer", "workers", "wall s", "no-overhead floor s", "speedup vs 1 worker", "target",
                "same statuses as 1 worker"):
        table.add_column(col, justify="right" if col not in ("measurer",) else "left")

    scratch: Path | None = None
    if args.store is not None:
        store = Store(args.store)
        replay_probe = make_measurer(task.backend, None, replay_store=store)
        device = replay_probe.hardware_spec().key
        stored = {m.candidate_hash: m for m in store.ledger.find(task=task.name, device=device, sizes=args.sizes,
                                                                 fingerprint=task.fingerprint)}
        candidates = [c for c in store.candidates.of_task(task.name) if c.hash in stored][: args.count]
        baseline = {c.hash: stored[c.hash] for c in candidates}
        if len(candidates) < args.count:
            console.print(f"[yellow]the store has {len(candidates)} measured candidates of {task.name}; using those")
    else:
        candidates = [task.instantiate(p) for p in task.param_space()][: args.count]
        if len(candidates) < args.count:
            console.print(f"[yellow]{task.name} has {len(candidates)} template points; using those")
        scratch = Path(tempfile.mkdtemp(prefix="kc-scaling-"))
        store = Store(scratch / "kernelcast.db")
        with console.status("real OpenCL, 1 worker..."), LocalMeasurer(task.backend) as local:
            one_s, baseline = timed_round(local, task, candidates, config)
            store.tasks.upsert(task)
            store.devices.upsert(local.hardware_spec())
            for cand in candidates:
                store.candidates.add(cand)
                store.ledger.add(baseline[cand.hash], run_id="scaling-bench")
        with console.status("real OpenCL, 2 workers on the same device..."), \
                make_measurer(task.backend, None, parallel=2, share_device=True) as pool:
            two_s, two = timed_round(pool, task, candidates, config)
        same = all(two[h].status is baseline[h].status for h in baseline)
        table.add_row("real OpenCL, local", "1", f"{one_s:.2f}", "", "1.00x", "", "")
        table.add_row("real OpenCL, pool on 1 shared device", "2", f"{two_s:.2f}", "", f"{one_s / two_s:.2f}x",
                      "(shares 2 cores)", "yes" if same else "NO")

    device_ms = [baseline[c.hash].wall_ms or 0.0 for c in candidates]
    device_s = sum(device_ms) / 1e3
    replay_times: dict[int, float] = {}
    for workers in (1, 2, 4):
        with console.status(f"replay with stored device time as latency, {workers} worker(s)..."), \
                make_measurer(task.backend, None, parallel=workers, replay_store=store, replay_latency=True) as rp:
            replay_times[workers], replayed = timed_round(rp, task, candidates, config)
        exact = all(replayed[h] == baseline[h] for h in baseline)
        ratio = replay_times[1] / replay_times[workers]
        target = TARGETS.get(workers)
        verdict = "" if target is None else f">= {target}x " + ("met" if ratio >= target else "MISSED")
        table.add_row("replay, stored wall_ms as latency", str(workers), f"{replay_times[workers]:.2f}",
                      f"{list_schedule_s(device_ms, workers):.2f}", f"{ratio:.2f}x", verdict,
                      "identical" if exact else "NO")
    store.close()
    if scratch is not None:
        shutil.rmtree(scratch, ignore_errors=True)
    console.print(table)
    console.print(f"{len(candidates)} candidates; stored device time {device_s:.2f} s in all, longest "
                  f"{max(device_ms) / 1e3:.2f} s. The floor is the makespan of these device times handed out in "
                  "order with no overhead: wall above it is orchestration. The machine is shared: single-run "
                  "differences under ~5 % are noise.")


if __name__ == "__main__":
    main()
