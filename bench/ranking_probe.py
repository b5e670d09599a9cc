"""How the run's forecaster ranks a whole template space on this device, against the brute force (issue 13).

A search at a small budget measures the few points its opening forecast ranks first; when a space's best
region is ranked just below another, every opening misses it. This probe shows where: the forecaster a run
starts with (``learned_forecaster`` without a store: roofline prior + forest on the shipped seed dataset,
nothing learned in the task yet) forecasts every point of a space that ``bench/search_bench.py`` brute-forced
(run it first with the same ``--out``), at the bench sizes, and the table compares, per group of points that
share the values of ``--by`` parameters, the measured mean speedup with the forecast's (prior alone and
blended), beside the Spearman correlation over all points and the measured speedups of the forecast's top 8.

    .venv/bin/python bench/ranking_probe.py --out bench/out/sb --space softmax --by VEC,WG
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from neighbour_bench import first_measurements  # noqa: E402
from search_bench import bench_task  # noqa: E402

from kernelcast.agents.factory import learned_forecaster  # noqa: E402
from kernelcast.agents.forecast.device_probe import device_bandwidth  # noqa: E402
from kernelcast.tools.core.bins import LOG_BIN_CENTERS  # noqa: E402
from kernelcast.tools.store.store import Store  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("bench/out/sb"), help="search_bench.py's --out")
    parser.add_argument("--space", default="softmax", help="a built-in name or a task path, as search_bench takes")
    parser.add_argument("--by", default="VEC", help="comma-separated template parameters to group by")
    args = parser.parse_args()
    db = args.out / "brute" / "kernelcast.db"
    if not db.exists():
        raise SystemExit(f"{db}: no brute force here; run bench/search_bench.py --out {args.out} first")
    store = Store(db, read_only=True)
    task = bench_task(args.space, args.out)
    space = first_measurements(task, store)
    if not space:
        raise SystemExit(f"{db}: no brute-force measurement of {task.name} with this task's fingerprint "
                         "(measured before fingerprints, or at other sizes): run search_bench.py --rebrute")
    device, hw = next(iter(store.devices.all().items()))
    keys = [k.strip() for k in args.by.split(",") if k.strip()]
    points = [p for _, p, _ in space.values()]
    unknown = [k for k in keys if k not in points[0]]
    if unknown:
        raise SystemExit(f"--by {', '.join(unknown)}: not a parameter of {task.name} ({', '.join(points[0])})")
    candidates = [c for c, _, _ in space.values()]
    truth = np.log([m.speedup or 1.0 for _, _, m in space.values()])
    forecaster = learned_forecaster(None, device)
    forecaster.bandwidth_source = lambda hw: device_bandwidth(store, hw)  # the brute force's triad, as a run has it
    view = task.at_sizes("small")
    prior, _ = forecaster.prior(view, candidates, hw)
    blend = forecaster.base(view, candidates, hw) @ np.asarray(LOG_BIN_CENTERS)
    print(f"{task.name} at {view.sizes('full')} on {device}: {len(points)} points; {forecaster.model_name}, "
          f"forest share {forecaster.stack_weight(hw):.2f}; bandwidth {forecaster.bandwidth(hw).bytes_per_s / 1e9:.1f} "
          f"GB/s ({forecaster.bandwidth(hw).source})")
    print(f"Spearman with the measured speedups: prior {spearmanr(prior, truth)[0]:.2f}, "
          f"blended {spearmanr(blend, truth)[0]:.2f}")
    print(f"| {' / '.join(keys)} | points | measured mean (max) | prior mean | blended mean |")
    print("|---|---|---|---|---|")
    groups: dict[tuple, list[int]] = {}
    for i, point in enumerate(points):
        groups.setdefault(tuple(point[k] for k in keys), []).append(i)
    for group in sorted(groups):
        idx = groups[group]
        print(f"| {' / '.join(map(str, group))} | {len(idx)} | {math.exp(truth[idx].mean()):.2f}x "
              f"({math.exp(truth[idx].max()):.2f}x) | {math.exp(prior[idx].mean()):.2f}x | "
              f"{math.exp(blend[idx].mean()):.2f}x |")
    best = int(np.argmax(truth))
    print(f"optimum {points[best]} {math.exp(truth[best]):.2f}x; the blended forecast ranks it "
          f"{int((blend > blend[best]).sum()) + 1} of {len(points)}")
    top = np.argsort(-blend)[:8]
    print("blended top 8, measured:", ", ".join(f"{points[i]} {math.exp(truth[i]):.2f}x" for i in top))


if __name__ == "__main__":
    main()
