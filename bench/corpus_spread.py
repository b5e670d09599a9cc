"""How much of a corpus-bench difference is the bench's own noise: several runs of ``bench/corpus_bench.py`` on the
same kernels, budgets and seeds, compared.

A run of a search is not repeatable to the measurement: the tree search expands from the best it measured, so a
noisy measurement early on sends a run of the same seed elsewhere (held-out sgemm_base, seed 0, budget 24, two
runs of the same code: measure-all 4.93x and 10.12x). A corpus table's geometric mean of selective / measure-all
moves with that, so before a target is called met or missed by a few hundredths, its spread is worth knowing.

Printed per budget, on the (kernel, seed) pairs every run holds:
- per run: selective's wins or ties against measure-all (``corpus_bench.Row.wins_or_ties``) and the geometric
  mean of selective / measure-all (delivered: ``corpus_bench.Arm.delivered``);
- per arm: how far its delivered best moves from one run to another (the standard deviation of ln(best) between
  runs, pooled over pairs), and the pairs where it moved by more than ``--moved``;
- the geometric mean over every pairing of a run's selective with a run's measure-all, its own included (each
  run's arms ran in their own fresh stores, so any pairing is a fair draw): its mean, and its range over pairings;
- the ceiling: the best confirmed kernel any arm of any run given delivered for the kernel (any budget, any
  seed; an unconfirmed best, lifted by the winner's curse, counts as the reference), over each run's
  measure-all. A router shows more than that only by finding a kernel no run found, so a target above the ceiling
  asks for room these runs never saw on this device.

    .venv/bin/python bench/corpus_spread.py /tmp/kc/c24f/results.json /tmp/kc/c24t/results.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpus_bench import Arm, Row, geo_mean  # noqa: E402

Key = tuple[str, int, int]  # (kernel, budget, seed)
ROOM = 0.05  # a pair "has room" when some run delivered more than 1 + ROOM times the reference


def load_rows(path: Path) -> dict[Key, Row]:
    """A corpus bench's results.json as its rows, by (kernel, budget, seed)."""
    try:
        data = json.loads(path.read_text())
        rows = data["rows"]
    except (OSError, ValueError, KeyError) as exc:
        raise SystemExit(f"{path}: not a corpus bench's results.json ({exc})") from exc
    out = {}
    for raw in rows:
        arms = {name: Arm(**{**arm, "interval": tuple(arm["interval"]) if arm.get("interval") else None})
                for name, arm in raw["arms"].items()}
        out[(raw["task"], raw["budget"], raw["seed"])] = Row(raw["task"], raw["budget"], raw["seed"], arms)
    return out


def between_runs(runs: list[dict[Key, Row]], keys: list[Key], arm: str, moved: float) -> tuple[float, list[str]]:
    """(the pooled sd of ln(delivered best) between runs, the pairs where it moved by more than ``moved``)."""
    deviations, notes = [], []
    for key in keys:
        logs = [math.log(run[key].arms[arm].delivered) for run in runs]
        mean = statistics.fmean(logs)
        deviations += [(v - mean) ** 2 for v in logs]
        if max(logs) - min(logs) > math.log(1 + moved):
            values = "/".join(f"{math.exp(v):.2f}" for v in logs)
            notes.append(f"{key[0]} s{key[2]} {values}")
    dof = len(keys) * (len(runs) - 1)
    return math.sqrt(sum(deviations) / dof) if dof else 0.0, notes


def best_known(runs: list[dict[Key, Row]]) -> dict[str, float]:
    """The best confirmed kernel any arm of any run delivered per kernel, whatever the budget or seed (a seed and a
    budget change the search, not the kernels there are to find)."""
    out: dict[str, float] = {}
    for run in runs:
        for (task, _, _), row in run.items():
            out[task] = max(out.get(task, 1.0), *(arm.delivered for arm in row.arms.values() if arm.confirmed))
    return out


def report(every: list[dict[Key, Row]], every_name: list[str], budget: int, moved: float) -> list[str]:
    """The lines of one budget, on the runs that ran it and the pairs they all hold."""
    held = [(name, run) for name, run in zip(every_name, every) if any(k[1] == budget for k in run)]
    names, runs = [name for name, _ in held], [run for _, run in held]
    keys = sorted(set.intersection(*({k for k in run if k[1] == budget} for run in runs))) if len(runs) > 1 else []
    if not keys:
        return [f"budget {budget}: fewer than two runs share a pair: no spread to read"] if runs else []
    out = [f"budget {budget}: {len(keys)} (kernel, seed) pairs in all {len(runs)} runs"]
    for name, run in zip(names, runs):
        rows = [run[k] for k in keys]
        out.append(f"  {name}: selective wins or ties measure-all on {sum(r.wins_or_ties() for r in rows)} of "
                   f"{len(rows)}; geometric mean selective / measure-all {geo_mean([r.ratio for r in rows]):.3f}")
    for arm in ("selective", "measure-all"):
        sd, notes = between_runs(runs, keys, arm, moved)
        out.append(f"  {arm}: sd of ln(delivered best) between runs {sd:.3f} (pooled over pairs); moved by more than "
                   f"{moved:.0%}: {'; '.join(notes) or 'none'}")
    crossed = [geo_mean([a[k].arms["selective"].delivered / b[k].arms["measure-all"].delivered for k in keys])
               for a, b in itertools.product(runs, runs)]
    out.append(f"  selective of a run / measure-all of a run, every pairing, its own included ({len(crossed)}): geometric mean "
               f"{geo_mean(crossed):.3f}, range {min(crossed):.3f}-{max(crossed):.3f}")
    known = best_known(every)
    ceiling = [geo_mean([known[k[0]] / run[k].arms["measure-all"].delivered for k in keys]) for run in runs]
    roomy = sum(1 for k in keys if known[k[0]] > 1 + ROOM)
    out.append(f"  ceiling: the best confirmed kernel any arm of any run given delivered (any budget, any seed) / each run's "
               f"measure-all, geometric mean {geo_mean(ceiling):.3f} (range {min(ceiling):.3f}-{max(ceiling):.3f} "
               f"over runs): what a router that always found the best kernel these runs know would show; {roomy} of "
               f"{len(keys)} pairs know one above {1 + ROOM:.2f}x")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", nargs="+", type=Path, help="results.json of two or more corpus bench runs")
    parser.add_argument("--moved", type=float, default=0.25, help="list the pairs whose best moved by more than this")
    args = parser.parse_args()
    if len(args.results) < 2:
        parser.error("give two or more results.json files: the spread is between runs (runs of other budgets may "
                     "come along: they add to the best kernels known)")
    runs = [load_rows(path) for path in args.results]
    names = [path.parent.name for path in args.results]
    budgets = sorted({key[1] for run in runs for key in run})
    lines = [line for budget in budgets for line in report(runs, names, budget, args.moved)]
    if not lines:
        raise SystemExit("the runs share no (kernel, budget, seed) pair")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
