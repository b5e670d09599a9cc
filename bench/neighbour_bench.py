"""Is P(child beats the incumbent) calibrated where a search asks it: at the incumbent's neighbours? (issue 13)

A search measures a few points, makes the best its incumbent, and expands that point's template neighbours;
the router prunes a neighbour when the forecast's p = P(S_child > S_incumbent) is low. This bench replays that
question on spaces whose every point was measured (``bench/search_bench.py``'s brute force, which must have
run first with the same ``--out``): for each draw it teaches the forecaster ``K`` random points (their first
measurement, as a run sees it), takes the best as the incumbent, and forecasts the neighbours the offline
generator would propose (one or two adjacent steps). It then compares p with what the brute force says: did
the neighbour's first measurement beat the incumbent's?

Two in-task models side by side in one run: the current one and the same with the local residual off
(``task_model.NEIGHBOUR_SHARE = 0``: the whole residual is independent noise, the model before 2026-12-01).
The forecaster is the run's (``learned_forecaster``: roofline prior + forest on the shipped seed dataset +
the in-task model), without a store.

    .venv/bin/python bench/neighbour_bench.py --out bench/out/search_quiet
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from search_bench import CONFIRM_FLAG, OWN_TASK, bench_task  # noqa: E402

from kernelcast.agents.factory import learned_forecaster  # noqa: E402
from kernelcast.agents.forecast.base import (
    Provenance,  # noqa: E402
    task_model,  # noqa: E402
)
from kernelcast.agents.forecast.distributions import belief_above  # noqa: E402
from kernelcast.agents.generate.offline import neighbours  # noqa: E402
from kernelcast.tools.core.candidate import Candidate  # noqa: E402
from kernelcast.tools.core.measurement import Measurement  # noqa: E402
from kernelcast.tools.core.task import Task  # noqa: E402
from kernelcast.tools.store.store import Store  # noqa: E402

SPACES = ("gemv", "softmax", "stencil2d", OWN_TASK)
LOW_P = (0.1, 0.2)


@dataclass
class Outcome:
    """One neighbour's forecast p and whether it beat the incumbent."""

    p: float
    beat: bool


def first_measurements(task: Task, store: Store) -> dict[str, tuple[Candidate, dict, Measurement]]:
    """hash -> (candidate, point, its first ok brute-force measurement at the bench sizes)."""
    rows: dict[str, Measurement] = {}
    for m in store.ledger.find(task=task.name, sizes="small", fingerprint=task.fingerprint):
        if m.ok and m.speedup and CONFIRM_FLAG not in m.flags:
            rows.setdefault(m.candidate_hash, m)
    out = {}
    for point in task.param_space():
        cand = task.instantiate(point)
        if cand.hash in rows:
            out[cand.hash] = (cand, point, rows[cand.hash])
    return out


def replay(task: Task, space: dict[str, tuple[Candidate, dict, Measurement]], device: str, hw, taught: int,
           draws: int) -> list[Outcome]:
    forecaster = learned_forecaster(None, device)
    view = task.at_sizes("small")
    by_point = {tuple(sorted(p.items())): h for h, (_, p, _) in space.items()}
    assert task.spec.template is not None
    params = dict(task.spec.template.params)
    outcomes: list[Outcome] = []
    for draw in range(draws):
        rng = random.Random(draw)
        chosen = rng.sample(sorted(space), taught)
        forecaster.learn([(space[h][0], space[h][2]) for h in chosen], {device: hw})  # replaces the last draw's
        best = max(chosen, key=lambda h: space[h][2].speedup or 0.0)
        incumbent = max(1.0, space[best][2].speedup or 1.0)
        near = [by_point[key] for point, _ in neighbours(params, space[best][1], task.is_valid_point, rng)
                if (key := tuple(sorted(point.items()))) in by_point and by_point[key] not in chosen]
        forecasts = forecaster.forecast_many(view, [space[h][0] for h in near], hw)
        for h, forecast in zip(near, forecasts, strict=True):
            belief = Provenance.model_validate(forecast.provenance)
            if belief.log_speedup_mean is None or belief.log_speedup_sd is None:
                continue
            p = belief_above(math.log(incumbent), belief.log_speedup_mean, belief.log_speedup_sd,
                             belief.log_speedup_dof)
            outcomes.append(Outcome(p, (space[h][2].speedup or 0.0) > incumbent))
    return outcomes


def row(label: str, outcomes: list[Outcome]) -> str:
    n = len(outcomes)
    beat = sum(o.beat for o in outcomes)
    mean_p = sum(o.p for o in outcomes) / max(n, 1)
    brier = sum((o.p - o.beat) ** 2 for o in outcomes) / max(n, 1)
    cells = [label, str(n), f"{beat / max(n, 1):.1%}", f"{mean_p:.1%}", f"{brier:.3f}"]
    for limit in LOW_P:
        low = [o for o in outcomes if o.p <= limit]
        cells.append(f"{sum(o.beat for o in low)} of {len(low)}" + (f" ({sum(o.beat for o in low) / len(low):.1%})"
                                                                     if low else ""))
    return "| " + " | ".join(cells) + " |"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/out/search_quiet"),
                        help="search_bench's output folder (its brute-force store)")
    parser.add_argument("--taught", default="4,8", help="measured points before the incumbent's neighbours")
    parser.add_argument("--draws", type=int, default=8)
    args = parser.parse_args()
    db = args.out / "brute" / "kernelcast.db"
    if not db.exists():
        print(f"no brute-force store at {db}: run bench/search_bench.py --out {args.out} first", file=sys.stderr)
        return 2
    store = Store(db)
    device, hw = next(iter(store.devices.all().items()))
    shipped = task_model.NEIGHBOUR_SHARE
    header = ("| space | taught | in-task model | neighbours | beat the incumbent | mean p | Brier | "
              + " | ".join(f"beat among p <= {t}" for t in LOW_P) + " |")
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    totals: dict[tuple[int, str], list[Outcome]] = {}
    for name in SPACES:
        task = bench_task(name, args.out)
        space = first_measurements(task, store)
        if not space:
            print(f"{task.name}: no brute-force rows in {db}", file=sys.stderr)
            continue
        for taught in (int(k) for k in args.taught.split(",")):
            for label, share in (("local residual", shipped), ("independent residual", 0.0)):
                task_model.NEIGHBOUR_SHARE = share
                outcomes = replay(task, space, device, hw, taught, args.draws)
                totals.setdefault((taught, label), []).extend(outcomes)
                lines.append(row(f"{task.name} | {taught} | {label}", outcomes))
                print(lines[-1], flush=True)
    task_model.NEIGHBOUR_SHARE = shipped
    for (taught, label), outcomes in sorted(totals.items()):
        lines.append(row(f"all | {taught} | {label}", outcomes))
    print(f"\nP(beat the incumbent) at the incumbent's neighbours, {args.draws} draws, {device}:")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
