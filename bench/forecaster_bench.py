"""Forecaster quality on measured data: the zero-data prior, the forest, their blend, and in-task learning,
leave-one-task-out and leave-one-device-out, against the uniform baseline, side by side in one run.

Rows (each scored on pairs its model never saw):
  uniform                          the baseline
  roofline prior (zero data)       static work/traffic against the device's triad bandwidth
  forest, task held out            random forest trained on the other tasks
  blend, task held out             prior + forest, mixed by the stacking weight
  blend + N of its own (in-task)   the blend after learning N random measurements of the held-out task,
                                   scored on the task's other pairs (the situation inside a search); each
                                   group is drawn --draws times (other N each time) and the rows pooled:
                                   one draw of 4 points moves ECE by several hundredths
  ... device held out              the same, trained on the other devices only (needs >= 2 devices)

The held-out forest forecasts are written to the store as forecaster "learned-lto", so
`kernelcast calibration --forecaster learned-lto` plots them.

    python bench/forecaster_bench.py [--db .kernelcast/kernelcast.db] [--seed] [--own 4]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from kernelcast.agents.factory import SEED_DATASET  # noqa: E402
from kernelcast.agents.forecast.blend import BlendedForecaster  # noqa: E402
from kernelcast.agents.forecast.features import device_similarity  # noqa: E402
from kernelcast.agents.forecast.learned import LearnedForecaster, TrainingSet, forecasts_per_second, task_lookup, training_set  # noqa: E402
from kernelcast.agents.forecast.scoring import recovered_speedup, summarize  # noqa: E402
from kernelcast.tools.core.bins import LOG_BIN_CENTERS  # noqa: E402
from kernelcast.tools.core.settings import get_settings  # noqa: E402
from kernelcast.tools.store.pairs import read_pairs  # noqa: E402
from kernelcast.tools.store.store import Store  # noqa: E402

KS = (1.0, 10.0, 50.0)


def recovered(probs: np.ndarray, speeds: np.ndarray, groups: np.ndarray) -> dict[float, float]:
    """Mean over tasks (and devices) of best-found / best-in-pool when measuring the top k % by the forecast."""
    out = {}
    scores = probs @ LOG_BIN_CENTERS
    for k in KS:
        out[k] = float(np.mean([recovered_speedup(scores[groups == g], speeds[groups == g], k)
                                for g in sorted(set(groups)) if (groups == g).sum() > 1]))
    return out


def group_bootstrap(values: np.ndarray, groups: np.ndarray, rng: np.random.Generator, n: int = 2000
                    ) -> tuple[float, float]:
    """95 % percentile interval of the mean, resampling whole groups (the draws of one task-device group share
    its pool, so they are not independent)."""
    names = sorted(set(groups))
    members = [values[groups == g] for g in names]
    means = []
    for _ in range(n):
        picked = rng.integers(0, len(names), len(names))
        means.append(float(np.mean(np.concatenate([members[i] for i in picked]))))
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


class Held:
    """Forecasts for the rows of one held-out group from models that never saw them."""

    def __init__(self, data: TrainingSet, pairs: list, devices: dict, lookup: Callable, train_mask: np.ndarray,
                 target_device: str) -> None:
        self.train = data.subset(train_mask)
        hw = devices.get(target_device)
        weights = [device_similarity(devices.get(d), hw) for d in self.train.devices] if hw is not None else None
        self.forest = LearnedForecaster().fit(self.train, weights)
        keep = {key for key, m in zip(data.keys, train_mask, strict=True) if m}
        history = [(c, m) for c, m in pairs if (m.candidate_hash, m.device) in keep]
        self.history, self.devices, self.lookup = history, devices, lookup
        self.blend = self.fresh_blend()
        self.prior_only = BlendedForecaster(hardware=devices, tasks=lookup)

    def fresh_blend(self) -> BlendedForecaster:
        """The held-out blend with nothing learned in-task (the forest is shared, it is the costly part)."""
        return BlendedForecaster(self.forest, self.train, history=self.history, hardware=self.devices,
                                 tasks=self.lookup)


def group_probs(model: BlendedForecaster, lookup: Callable, data: TrainingSet, idx: np.ndarray, devices: dict,
                layer: str) -> np.ndarray:
    """(len(idx), 8) forecasts of rows of one (task, device) group by one layer of the blend."""
    task = lookup(data.tasks[idx[0]])
    hw = devices[data.keys[idx[0]][1]]
    cands = [data.candidates[i] for i in idx]
    if layer == "forest":
        from kernelcast.agents.forecast.features import candidate_features, context

        ctx = context(task, hw)
        return model.cross.predict_proba([candidate_features(ctx, c) for c in cands]) if model.cross else \
            np.full((len(idx), 8), 1 / 8)
    if layer == "base":
        return model.base(task, cands, hw)
    return np.array([f.probabilities for f in model.forecast_many(task, cands, hw)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", default=str(get_settings().db_path), help="store with the measured pairs")
    parser.add_argument("--seed", action="store_true", help="add the shipped seed dataset (measured on PoCL)")
    parser.add_argument("--own", type=int, default=4, help="measurements of the held-out task the in-task row learns")
    parser.add_argument("--draws", type=int, default=5, help="random draws of the N taught measurements per group")
    parser.add_argument("--no-store", action="store_true", help="do not write the held-out forecasts")
    args = parser.parse_args()
    console = Console(width=170)
    store = Store(args.db)
    pairs = store.ledger.measured_pairs(sizes="full")
    devices = store.devices.all()
    if args.seed:
        seed_pairs, seed_devices = read_pairs(SEED_DATASET)
        have = {(m.candidate_hash, m.device) for _, m in pairs}
        pairs += [(c, m) for c, m in seed_pairs if (m.candidate_hash, m.device) not in have]
        devices = {**seed_devices, **devices}
    lookup = task_lookup(store)
    data = training_set(pairs, lookup, hardware=devices)
    data = data.subset([d in devices for d in data.devices])  # rows need their device's spec
    if len(set(data.tasks)) < 2:
        sys.exit("need measured pairs from at least two tasks: run `kernelcast dataset build` first (or --seed)")
    tasks, devs = np.asarray(data.tasks), np.asarray(data.devices)
    groups = np.array([f"{t}@{d}" for t, d in zip(tasks, devs, strict=True)])
    speeds, truth = np.asarray(data.speedups), np.asarray(data.bins)
    by_key = {(m.candidate_hash, m.device): (c, m) for c, m in pairs}
    rng = np.random.default_rng(0)
    results: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}  # label -> (probs, rows, group of each row)

    def run_split(label: str, hold: Callable[[str, str], np.ndarray]) -> None:
        prior, forest, blend = (np.zeros((len(data), 8)) for _ in range(3))
        own_rows, own_probs, own_kept, own_groups = [], [], [], []
        for g in sorted(set(groups)):
            idx = np.flatnonzero(groups == g)
            held = Held(data, pairs, devices, lookup, ~hold(tasks[idx[0]], devs[idx[0]]), devs[idx[0]])
            prior[idx] = group_probs(held.prior_only, lookup, data, idx, devices, "base")
            forest[idx] = group_probs(held.blend, lookup, data, idx, devices, "forest")
            blend[idx] = group_probs(held.blend, lookup, data, idx, devices, "base")
            for draw in range(args.draws if len(idx) > args.own + 1 else 0):
                taught = set(rng.choice(idx, args.own, replace=False).tolist())
                learner = held.fresh_blend()  # a fresh blend per draw: nothing learned from the last one
                learner.learn([by_key[data.keys[i]] for i in sorted(taught)], devices)
                rest = np.array([i for i in idx if i not in taught])
                own_rows.append(rest)
                own_probs.append(group_probs(learner, lookup, data, rest, devices, "full"))
                own_kept.append(max(speeds[i] for i in taught))
                own_groups.append(np.full(len(rest), f"{g}#{draw}"))
        every = np.arange(len(data))
        results[f"roofline prior (zero data), {label}"] = (prior, every, groups)
        results[f"forest, {label}"] = (forest, every, groups)
        results[f"blend, {label}"] = (blend, every, groups)
        if own_rows:
            rows = np.concatenate(own_rows)
            drawn = np.concatenate(own_groups)  # (group, draw): "recovered" is per task and draw
            results[f"blend, same rows without learning them, {label}"] = (blend[rows], rows, drawn)
            results[f"blend + {args.own} of its own (in-task), {label}"] = (np.concatenate(own_probs), rows, drawn)
            searched[label] = (own_rows, own_probs, own_kept)

    # per split: the rows left after the 4 taught ones, their forecasts, and the best of the 4 taught (a search
    # keeps what it measured: "recovered after 4" counts the best of those 4 and of the top k % of the rest)
    searched: dict[str, tuple[list[np.ndarray], list[np.ndarray], list[float]]] = {}
    results["uniform"] = (np.full((len(data), 8), 1 / 8), np.arange(len(data)), groups)
    run_split("task held out", lambda t, d: tasks == t)
    if len(set(devs)) >= 2:
        run_split("device held out", lambda t, d: devs == d)
    table = Table(title=f"forecasters on {len(data)} measured pairs, {len(set(tasks))} tasks, {len(set(devs))} "
                        f"device(s) (Brier halved; recovered@k within each task)")
    for col in ("forecaster", "n", "accuracy", "within-1", "Brier", "CRPS", "ECE", "AURC",
                *(f"recovered@{k:g}%" for k in KS)):
        table.add_column(col)
    for label, (p, rows, by_group) in results.items():
        s = summarize(p, truth[rows])
        rec = recovered(p, speeds[rows], by_group)
        table.add_row(label, str(len(rows)), f"{s.accuracy:.1%}", f"{s.within_one:.1%}", f"{s.brier_halved:.3f}",
                      f"{s.crps:.3f}", f"{s.ece:.3f}", f"{s.aurc:.3f}", *(f"{rec[k]:.1%}" for k in KS))
    console.print(table)
    for label, (rows_list, probs_list, kept_list) in searched.items():
        p, rows, drawn = results[f"blend + {args.own} of its own (in-task), {label}"]
        group_of_draw = [g.rsplit("#", 1)[0] for g in dict.fromkeys(drawn)]  # one per draw, in draw order
        for k in KS:
            ratios = []
            for left, probs, kept in zip(rows_list, probs_list, kept_list, strict=True):
                scores = probs @ LOG_BIN_CENTERS
                take = max(1, int(np.ceil(k * len(left) / 100 - 1e-9)))
                picked = speeds[left][np.argsort(-scores, kind="stable")[:take]].max()
                ratios.append(max(kept, picked) / max(kept, speeds[left].max()))
            lo, hi = group_bootstrap(np.asarray(ratios), np.asarray(group_of_draw), np.random.default_rng(0))
            console.print(f"{label}: after {args.own} measurements of the task plus the top {k:g} % of the rest by "
                          f"the in-task forecast, best found / best in the task = {np.mean(ratios):.1%} "
                          f"(95 % interval {lo:.1%}-{hi:.1%}, resampling task-device groups; mean over "
                          f"{len(ratios)} task-device groups x draws)")
        draw_of = np.array([d.rsplit("#", 1)[1] for d in drawn])
        eces = [summarize(p[draw_of == d], truth[rows[draw_of == d]]).ece for d in sorted(set(draw_of))]
        console.print(f"{label}: in-task ECE of each of the {len(eces)} draws alone {min(eces):.3f}-{max(eces):.3f} "
                      f"(the table pools them)")
    if len(set(devs)) < 2:
        console.print("leave-device-out rows need measured pairs from at least two devices")
    name = sorted(set(data.tasks))[0]
    cands = [c for c, m in pairs if m.task == name] * 20
    model = LearnedForecaster().fit(data)
    rate = forecasts_per_second(model, lookup(name), cands, devices[devs[0]])
    console.print(f"forest throughput: {rate:,.0f} forecasts/s ({len(cands)} {name} candidates, one batch)")
    if not args.no_store:
        forest = results["forest, task held out"][0]
        for task_name, (key, device_key), p in zip(data.tasks, data.keys, forest, strict=True):
            store.forecasts.add(task_name, key, device_key, "learned-lto", "leave-task-out", [float(x) for x in p],
                                int(np.argmax(p)) + 1, float(p.max()), False, "held-out task",
                                {"bench": "forecaster_bench"})
        console.print(f"wrote {len(data)} held-out forecasts as forecaster 'learned-lto'")


if __name__ == "__main__":
    main()
