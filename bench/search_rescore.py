"""Two search_bench.py runs on one device, scored on one yardstick: the mean of both brute forces (issue 13).

search_bench.py scores each tool's best point by its own brute force, whose single measurements of a good
point vary by up to 19 % on a noisy device (gemv on the 2-core AMD EPYC: one point 10.4x in one brute force,
7.1x in the next). Two runs of different code then differ by that noise as much as by what they chose. This
script reads both runs' logs and brute-force stores, takes each template point's median speedup in each brute
force, averages the two, and scores every run's chosen template point (the dict at the end of its log line)
against the best of those means. Kernel Tuner's seeded strategies choose the same points in both runs where
their timings agree, so their cells are the check that the yardstick is shared. Generic variants (a best
outside the template, logged as None) have no brute-force value and are left out: the count says how many
seeds a cell holds.

    .venv/bin/python bench/search_rescore.py --runs before=/tmp/a/out:/tmp/a.log after=/tmp/b/out:/tmp/b.log
"""

from __future__ import annotations

import argparse
import ast
import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from search_bench import OWN_TASK, bench_task, brute_rows, median_speedup  # noqa: E402

from kernelcast.tools.store.store import Store  # noqa: E402

LINE = re.compile(r"^  (\S+) b(\d+) ((?:kc|kt) \S+) s(\d+): [\d.]+% .*?(\{.*?\})")
Point = tuple[tuple[str, object], ...]


def brute_speedups(out: Path, space: str) -> dict[Point, float]:
    """Each template point's median speedup in the brute force under ``out`` (at the bench sizes), read as
    search_bench.py reads it (its own rows, not the runs' confirmations)."""
    own = Path(OWN_TASK)
    task = bench_task(OWN_TASK if space == own.parent.name else space, out)  # the log names our task's folder
    rows = brute_rows(task, Store(out / "brute" / "kernelcast.db", read_only=True), None, "small")
    speedups: dict[Point, float] = {}
    for point in task.param_space():
        median = median_speedup(rows.get(task.instantiate(point).hash, []))
        if median is not None:
            speedups[tuple(sorted(point.items()))] = median
    return speedups


def chosen_points(log: Path) -> dict[tuple[str, int, str], list[Point]]:
    """(space, budget, method) -> the template point each seed ended on."""
    out: dict[tuple[str, int, str], list[Point]] = {}
    for line in log.read_text().splitlines():
        match = LINE.match(line)
        if match:
            point = tuple(sorted(ast.literal_eval(match.group(5)).items()))
            out.setdefault((match.group(1), int(match.group(2)), match.group(3)), []).append(point)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", nargs=2, required=True, metavar="NAME=OUT:LOG",
                        help="two search_bench.py runs: a name, its --out folder and its log")
    args = parser.parse_args()
    runs: dict[str, tuple[Path, Path]] = {}
    for spec in args.runs:
        name, _, paths = spec.partition("=")
        out, _, log = paths.partition(":")
        if not (name and out and log):
            raise SystemExit(f"--runs {spec!r}: expected NAME=OUT:LOG")
        runs[name] = (Path(out), Path(log))
    chosen = {name: chosen_points(log) for name, (_, log) in runs.items()}
    spaces = sorted({key[0] for picks in chosen.values() for key in picks})
    names = list(runs)
    print(f"| space | budget | method | {' | '.join(names)} |")
    print("|---|---|---|" + "---|" * len(names))
    for space in spaces:
        per_run = [brute_speedups(out, space) for out, _ in runs.values()]
        shared = {p: statistics.mean(run[p] for run in per_run) for p in set.intersection(*map(set, per_run))}
        if not shared:
            continue
        best = max(shared.values())
        keys = sorted({k for picks in chosen.values() for k in picks if k[0] == space}, key=lambda k: (k[1], k[2]))
        for key in keys:
            cells = []
            for name in names:
                scores = [shared[p] / best for p in chosen[name].get(key, []) if p in shared]
                cells.append(f"{100 * statistics.median(scores):.1f} % ({len(scores)})" if scores else "-")
            print(f"| {space} | {key[1]} | {key[2]} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
