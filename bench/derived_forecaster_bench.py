"""The run's forecaster on kernels without a template: how well it ranks a new kernel's derived points, from
zero data and after k of its own measurements, with the forest's share earned per family of candidate (as
shipped) beside the share earned on template points applied to every candidate (as before 2026-12-02).

For each kernel of ``bench/kernels`` named, ``--points`` random points of its derived template (the offline
generator's transformations of the reference) are measured on the device with the ordinary harness and kept in
``--db`` (a later run with the same ``--db`` measures only what is missing). Then the run's forecaster
(``learned_forecaster`` on an empty store: roofline prior, forest on the shipped seed, in-task model) is
taught k random measured points of the kernel (``--draws`` draws) and scored on the others:

  recovered@10 %   best of (the k taught + the top 10 % of the rest by the forecast) / best measured
  Spearman         of the forecast mean of ln S against the measured ln S, within the kernel
  log loss         of the measured bin under the forecast's 8 bins

    .venv/bin/python bench/derived_forecaster_bench.py --db bench/out/derived_points.db
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402
from scipy.stats import spearmanr  # noqa: E402

from kernelcast.agents.factory import learned_forecaster  # noqa: E402
from kernelcast.agents.forecast.blend import WRITTEN, BlendedForecaster  # noqa: E402
from kernelcast.agents.generate.derived_space import DerivedSpace  # noqa: E402
from kernelcast.agents.generate.offline import DERIVED_BASE  # noqa: E402
from kernelcast.tools.core.bins import (
    expected_log_speedup,  # noqa: E402
    speedup_bin,  # noqa: E402
)
from kernelcast.tools.core.candidate import Candidate  # noqa: E402
from kernelcast.tools.core.measurement import HardwareSpec, MeasureConfig, Measurement  # noqa: E402
from kernelcast.tools.core.task import Task, load_task  # noqa: E402
from kernelcast.tools.hardware.measurers.local import LocalMeasurer  # noqa: E402
from kernelcast.tools.store.store import Store  # noqa: E402

KERNELS = Path(__file__).resolve().parent / "kernels"
Pairs = list[tuple[Candidate, Measurement]]


def measure_points(task: Task, worker: LocalMeasurer, store: Store, hw: HardwareSpec, count: int, log: Callable
                   ) -> Pairs:
    """``count`` random valid points of the task's derived template, measured (or read back from the store)."""
    reference = task.reference()
    space = DerivedSpace(task, reference, hw.max_work_group_size or 256)
    rng = random.Random(f"derived points of {task.name}")
    have = {m.candidate_hash: (c, m) for c, m in store.ledger.measured_pairs(sizes="full")
            if m.task == task.name and task.owns(m.task_fingerprint)}
    pairs: Pairs = []
    seen: set[str] = set()
    started, bought = time.perf_counter(), 0
    for _ in range(200 * count):
        if len(pairs) == count:
            break
        made = space.instantiate({k: rng.choice(v) for k, v in space.params.items()})
        if made is None:
            continue
        cand, label = made
        cand = cand.model_copy(update={"parent": reference.hash, "origin": "derived", "edits": list(label), "generator": "bench",
                                       "params": {**(cand.params or {}), DERIVED_BASE: reference.hash[:12]}})
        if cand.hash in seen:
            continue
        seen.add(cand.hash)
        if cand.hash not in have:
            store.candidates.add(cand)
            m = worker.measure(task, cand, MeasureConfig())
            store.ledger.add(m)
            have[cand.hash] = (cand, m)
            bought += 1
        c, m = have[cand.hash]
        if m.ok and m.speedup:
            pairs.append((c, m))
    log(f"  {task.name}: {len(pairs)} points ({bought} measured now, {time.perf_counter() - started:.0f} s), "
        f"best {max(m.speedup or 0.0 for _, m in pairs):.2f}x")
    return pairs


def score(forecaster: BlendedForecaster, task: Task, hw: HardwareSpec, pairs: Pairs, k: int, draws: int
          ) -> tuple[float, float, float]:
    """Mean recovered@10 %, Spearman and log loss over ``draws`` draws of ``k`` taught points."""
    best = max(m.speedup or 0.0 for _, m in pairs)
    rec, rho, loss = [], [], []
    for draw in range(draws if k else 1):
        order = list(range(len(pairs)))
        random.Random(draw).shuffle(order)
        taught, rest = [pairs[i] for i in order[:k]], [pairs[i] for i in order[k:]]
        forecaster.learn(taught, {hw.key: hw})  # replaces the task's run rows: every draw starts from zero
        forecasts = forecaster.forecast_many(task, [c for c, _ in rest], hw)
        mu = np.array([f.provenance.log_speedup_mean if f.provenance.log_speedup_mean is not None
                       else expected_log_speedup(f.probabilities) for f in forecasts])
        speed = np.array([m.speedup or 0.0 for _, m in rest])
        top = np.argsort(-mu, kind="stable")[: max(1, round(0.1 * len(rest)))]
        rec.append(max([m.speedup or 0.0 for _, m in taught] + list(speed[top])) / best)
        rho.append(float(spearmanr(mu, np.log(speed)).statistic))
        loss.append(float(np.mean([-math.log(max(f.probabilities[speedup_bin(s) - 1], 1e-9))
                                   for f, s in zip(forecasts, speed, strict=True)])))
    return float(np.mean(rec)), float(np.mean(rho)), float(np.mean(loss))


def one_share_for_all(forecaster: BlendedForecaster) -> BlendedForecaster:
    """The forecaster as before 2026-12-02: the share the forest earned on template points, for every candidate."""
    earned = forecaster.stack_weight
    forecaster.stack_weight = lambda hw, kind=WRITTEN: earned(hw, WRITTEN)  # type: ignore[method-assign]
    return forecaster


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", default="matvec_cols,reduce_global,conv2d,colsum_macros")
    parser.add_argument("--points", type=int, default=120, help="random derived points measured per kernel")
    parser.add_argument("--taught", default="0,4,8,16", help="k: measured points the forecaster learns first")
    parser.add_argument("--draws", type=int, default=10)
    parser.add_argument("--db", default="bench/out/derived_points.db")
    parser.add_argument("--device", default=None, help="platform:device index or name substring")
    args = parser.parse_args()
    console = Console(width=140)
    db = Path(args.db)
    db.parent.mkdir(parents=True, exist_ok=True)
    store = Store(db)
    tasks = {name: load_task(KERNELS / name) for name in args.tasks.split(",")}
    with LocalMeasurer(device=args.device, store=store) as worker:
        hw = worker.start()
        store.devices.upsert(hw)
        console.print(f"device: {hw.key}; measuring up to {args.points} derived points per kernel")
        data = {}
        for name, task in tasks.items():
            store.tasks.upsert(task)
            data[name] = measure_points(task, worker, store, hw, args.points, console.print)
    empty = Store(db.with_name(db.stem + "-empty.db"))  # the forecaster's own store: none of these points in it
    empty.devices.upsert(hw)
    for task in tasks.values():
        empty.tasks.upsert(task)
    forecasters = {"per family (shipped)": learned_forecaster(empty, hw.key),
                   "one share for all (before)": one_share_for_all(learned_forecaster(empty, hw.key))}
    table = Table(title=f"the run's forecaster on {len(tasks)} kernels' derived points ({args.points} each, "
                        f"{args.draws} draws of k taught; mean over the kernels)")
    for col in ("taught k", "forest share on derived points", "recovered@10 %", "Spearman within a kernel",
                "log loss"):
        table.add_column(col, justify="right")
    for k in (int(x) for x in args.taught.split(",")):
        for label, forecaster in forecasters.items():
            assert isinstance(forecaster, BlendedForecaster)
            rows = [score(forecaster, tasks[name], hw, pairs, k, args.draws) for name, pairs in data.items()]
            rec, rho, loss = (float(np.mean(col)) for col in zip(*rows, strict=True))
            table.add_row(str(k), label, f"{rec:.1%}", f"{rho:.2f}", f"{loss:.2f}")
    console.print(table)
    for label, forecaster in forecasters.items():
        assert isinstance(forecaster, BlendedForecaster)
        console.print(f"{label}: forest share {forecaster.stack_weight(hw, 'derived'):.2f} on derived points, "
                      f"{forecaster.stack_weight(hw):.2f} on the others")


if __name__ == "__main__":
    main()
