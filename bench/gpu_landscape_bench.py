"""The router and the transfer forecaster on real GPU search spaces, by replay (issue 63).

The shared folder ``../shared/gpu-landscapes`` holds Kernel Tuner caches of two kernels (a 2-D convolution and a
dedispersion) brute-forced on four GPUs (NVIDIA A100, A4000, A6000, AMD W6600). Every cache is imported into one
bench store (``kernelcast import kernel-tuner``'s code), each kernel as the template task in ``bench/tasks``.

For every (task, GPU) the GPU is left out: kernelcast replays that GPU (``--replay``: answers drawn from its recorded
times, an unrecorded kernel a failed measurement, the budget charged as if live) and the ``transfer`` forecaster
forecasts it from the other three GPUs' recordings only (it never reads the target's rows but the run's own
measurements). Arms, at each budget and seed:

- ``selective``, ``topk``: kernelcast's routers with the transfer forecaster (the run's real graph, ``start_run``);
- ``selective skill``: selective with ``RunConfig.follow_skill`` (each round's regime from measured skill, the
  forecaster's best-ranked unmeasured points proposed, template points only); its rows carry the run's regime line;
- ``random order``: measure-all in a random order, i.e. ``budget`` configurations drawn without replacement;
- ``kt random``, ``kt genetic``, ``kt bayes``: Kernel Tuner 1.5's random_sample, genetic_algorithm and bayes_opt in
  its own simulation mode on the same cache file (``max_fevals`` = the budget);
- ``random (exact)``: random sampling's exact expected score (no seed);
- ``transfer ranking``: the transfer forecaster's top ``budget`` configurations of the whole space, with nothing
  measured on the target (deterministic; what the forecaster knows, apart from what the generator proposes).

Score: the recorded time of the space's fastest configuration over the recorded time of the configuration a tool
delivers as its best (1.0: it found the optimum; a tool that found nothing that ran scores 0). Printed: one table per
budget (mean over seeds per task and GPU, then the median and the 10th percentile over every run), the cross-GPU
rank correlations of each task (Spearman of the recorded times), and which pairs transfer badly (below 0.3).

    nice .venv/bin/python bench/gpu_landscape_bench.py --out bench/out/gpu_landscapes            # about an hour
    nice .venv/bin/python bench/gpu_landscape_bench.py --tasks convolution_milo --gpus A100 --seeds 1 --budgets 8
    nice .venv/bin/python bench/gpu_landscape_bench.py --out OUT --tasks convolution_milo --seeds 3 --budgets 8 \
        --arms selective "selective skill" --no-warm          # follow_skill off against on; --no-warm for few runs
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import json
import logging
import math
import random
import statistics
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from kernelcast.agents.forecast.device_probe import Bandwidth, store_probes  # noqa: E402
from kernelcast.graphs.config import RunConfig  # noqa: E402
from kernelcast.graphs.context import RunEnv  # noqa: E402
from kernelcast.graphs.run import start_run  # noqa: E402
from kernelcast.tools.core.task import Task, load_task  # noqa: E402
from kernelcast.tools.store.kernel_tuner import CacheFile, read_cache, recorded_space  # noqa: E402
from kernelcast.tools.store.store import Store  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "gpu-landscapes"
TASKS = {"convolution_milo": ROOT / "bench" / "tasks" / "convolution_milo" / "task.toml",
         "dedispersion_milo": ROOT / "bench" / "tasks" / "dedispersion_milo" / "task.toml"}
GPUS = ("A100", "A4000", "A6000", "W6600")
KERNELCAST_ARMS = ("selective", "topk", "selective skill")
FOLLOW_SKILL = "selective skill"  # selective with RunConfig.follow_skill: regime from skill, forecast-guided points
KT_ARMS = {"kt random": "random_sample", "kt genetic": "genetic_algorithm", "kt bayes": "bayes_opt"}
RANDOM_ARM = "random order"
RANKING = "transfer ranking"  # the forecaster's top-b of the whole space (deterministic: run with --seeds 1)
EXACT = "random (exact)"
BAD_TRANSFER = 0.3


@dataclass
class Space:
    """One recorded (task, GPU) space: each configuration's recorded median time (ms; None: it failed)."""

    task: str
    gpu: str
    cache_path: Path
    cache: CacheFile
    times: dict[str, float | None]  # Kernel Tuner's key ("16,1,1,...") -> median ms

    @property
    def optimum(self) -> float:
        return min(t for t in self.times.values() if t is not None)

    def score(self, key: str | None) -> float:
        t = self.times.get(key) if key is not None else None
        return self.optimum / t if t else 0.0

    def key_of(self, params: dict[str, Any]) -> str:
        return ",".join(str(params[k]) for k in self.cache.tune_params_keys)

    def exact_random(self, budget: int) -> float:
        """E[best score] of ``budget`` configurations drawn uniformly without replacement (failures score 0)."""
        scores = sorted((self.optimum / t if t else 0.0 for t in self.times.values()), reverse=True)
        n = len(scores)
        b = min(budget, n)
        total = math.lgamma(n + 1) - math.lgamma(b + 1) - math.lgamma(n - b + 1)
        expected = 0.0
        for k, s in enumerate(scores, 1):  # P(the best drawn is the k-th best) = C(n-k, b-1) / C(n, b)
            if n - k < b - 1:
                break
            log_p = math.lgamma(n - k + 1) - math.lgamma(b) - math.lgamma(n - k - b + 2) - total
            expected += s * math.exp(log_p)
        return expected


def load_space(task: str, gpu: str) -> Space:
    path = SHARED / "cachefiles" / task / f"{gpu}.json.gz"
    cache = read_cache(path)
    times: dict[str, float | None] = {}
    for key, entry in cache.cache.items():
        value = entry.get("time")
        samples = entry.get("times") or [value]
        times[key] = float(np.median(samples)) if not isinstance(value, str) else None
    return Space(task, gpu, path, cache, times)


def bench_store(out: Path, tasks: dict[str, Task], log: Any, warm: bool) -> Store:
    """The bench store with every (task, GPU) recording imported once (kept between invocations). ``warm``: map
    every recording onto its task even when stored (hashing each point, minutes): kernelcast's runs then find
    the identities of the generator's proposals cached."""
    store = Store(out / "kernelcast.db")
    for name, task in tasks.items():
        for gpu in GPUS:
            path = SHARED / "cachefiles" / name / f"{gpu}.json.gz"
            cache = read_cache(path)
            key = f"cuda:recorded:{cache.device_name}"
            have = store.db.execute("select count(*) from measurements where provenance = 'recorded' and task = ? "
                                    "and device = ?", [name, key]).fetchone()[0]
            if have < len(cache.cache) or warm:
                started = time.time()
                space = recorded_space(cache, task, path.name)
                if have < len(cache.cache):
                    store.ledger.replace_recorded(task, space.device, space.rows)
                log(f"mapped {name} on {gpu}: {len(space.rows)} rows in {time.time() - started:.1f} s")
            spec = store.devices.all()[key]
            peak = spec.extra.get("peak_bandwidth_gbs")
            if isinstance(peak, int | float):
                store_probes(store, spec, Bandwidth(peak * 1e9, "data sheet"), {"source": "data sheet"})
    return store


def transfer_ranking(store: Store, task: Task, gpu_key: str, budget: int, space: Space) -> float:
    """The transfer forecaster's own ranking of the whole space with nothing measured on the target: the best
    recorded score among its top ``budget`` configurations (what the forecaster knows, apart from which points the
    generator proposes and the router's order)."""
    from kernelcast.agents.forecast.transfer import TransferForecaster

    forecaster = TransferForecaster(store)
    sources = forecaster.sources(task, store.devices.all()[gpu_key])
    ranked: list[tuple[float, str]] = []
    rows = store.db.execute("select hash, params from candidates where task = ? and params != 'null'", [task.name])
    for key, params in rows.fetchall():  # stored identities: recomputing them preprocesses every point
        belief = forecaster.belief(key, sources)
        if belief is not None:
            ranked.append((belief[0], space.key_of(json.loads(params))))
    ranked.sort(reverse=True)
    return max(space.score(k) for _, k in ranked[:budget])


def device_key(store: Store, gpu: str) -> str:
    keys = [k for k in store.devices.all() if k.startswith("cuda:recorded:") and gpu.lower() in k.lower()]
    if len(keys) != 1:
        raise SystemExit(f"no single recorded device for {gpu}: {keys}")
    return keys[0]


def kernelcast_arm(router: str, task: Task, store: Store, out: Path, gpu_key: str, budget: int, seed: int,
                   space: Space) -> tuple[float, int, str, str]:
    """(score, measurements spent, the best's key, the regime line of its summary) of one replayed kernelcast run
    (``selective skill``: selective with RunConfig.follow_skill)."""
    home = out / "runs"
    home.mkdir(parents=True, exist_ok=True)
    config = RunConfig(task=str(task.path), budget=budget, router=router.split()[0], seed=seed,  # type: ignore[arg-type]
                       forecaster="transfer", device=gpu_key, replay=str(store.path), follow_skill=router == FOLLOW_SKILL)
    result = start_run(config, store, RunEnv(home))
    best = store.candidates.get(result.best_hash) if result.best_hash else None
    key = space.key_of(best.params) if best is not None and best.params else None
    regime = result.trust.split("regime: ", 1)[1] if "regime: " in result.trust else ""
    return space.score(key), result.spent, key or "-", regime


def random_order(space: Space, budget: int, seed: int) -> float:
    keys = sorted(space.times)
    drawn = random.Random(f"{space.task}:{space.gpu}:{seed}").sample(keys, min(budget, len(keys)))
    return max(space.score(k) for k in drawn)


def kernel_tuner_arm(strategy: str, space: Space, task: Task, budget: int, seed: int, scratch: Path) -> float:
    """Kernel Tuner's own strategy in its simulation mode on the same cache (uncompressed for it once)."""
    import kernel_tuner

    plain = scratch / f"{space.task}_{space.gpu}.json"
    if not plain.exists():
        plain.write_bytes(gzip.decompress(space.cache_path.read_bytes()))
    np.random.seed(seed)
    random.seed(seed)
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results, _ = kernel_tuner.tune_cache(cache_path=str(plain), strategy=strategy,
                                             strategy_options={"max_fevals": budget}, quiet=True, verbose=False)
    timed = [r for r in results if isinstance(r.get("time"), int | float)]
    if not timed:
        return 0.0
    best = min(timed, key=lambda r: r["time"])
    return space.score(space.key_of(best))


def rank_correlations(spaces: dict[str, Space]) -> dict[tuple[str, str], float]:
    """Spearman of the recorded times of the configurations two GPUs both ran."""
    from scipy.stats import spearmanr

    out: dict[tuple[str, str], float] = {}
    gpus = sorted(spaces)
    for i, a in enumerate(gpus):
        for b in gpus[i + 1:]:
            shared = [k for k, t in spaces[a].times.items() if t is not None and spaces[b].times.get(k) is not None]
            rho = spearmanr([spaces[a].times[k] for k in shared], [spaces[b].times[k] for k in shared]).statistic
            out[(a, b)] = float(rho)
    return out


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "gpu_landscapes")
    parser.add_argument("--tasks", nargs="*", default=list(TASKS))
    parser.add_argument("--gpus", nargs="*", default=list(GPUS))
    parser.add_argument("--budgets", nargs="*", type=int, default=[8, 24])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--arms", nargs="*", default=[*KERNELCAST_ARMS, RANDOM_ARM, *KT_ARMS])
    parser.add_argument("--report", action="store_true", help="print the tables of the results stored in --out "
                        "(and --also) without running anything")
    parser.add_argument("--no-warm", action="store_true", help="do not hash every recording into this process "
                        "first (minutes per task; pays off over many runs, not a few)")
    parser.add_argument("--also", nargs="*", type=Path, default=[], help="more results.jsonl files to read")
    args = parser.parse_args()
    if not SHARED.is_dir():
        raise SystemExit(f"{SHARED} is absent: this bench replays the shared GPU recordings")
    logging.disable(logging.WARNING)
    args.out.mkdir(parents=True, exist_ok=True)

    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    spaces = {(t, g): load_space(t, g) for t in args.tasks for g in GPUS}
    results: list[dict[str, Any]] = []
    results_file = args.out / "results.jsonl"
    done = {}
    for path in [results_file, *args.also]:
        if path.exists():
            for line in path.read_text().splitlines():
                row = json.loads(line)
                done[(row["task"], row["gpu"], row["budget"], row["seed"], row["arm"])] = row
    if args.report:
        report(list(done.values()), spaces, args)
        return
    tasks = {name: load_task(TASKS[name]) for name in args.tasks}
    wants_runs = any(arm in KERNELCAST_ARMS for arm in args.arms)
    # the replay arms need the recordings in a store; Kernel Tuner and random sampling read the cache files alone
    warm = wants_runs and not args.no_warm
    store = bench_store(args.out, tasks, log, warm=warm) if wants_runs or RANKING in args.arms else None
    with results_file.open("a") as fh:  # seeds outermost: a bench stopped early still covers every space
        for seed in range(args.seeds):
            for budget in args.budgets:
                for name in args.tasks:
                    for gpu in args.gpus:
                        space = spaces[(name, gpu)]
                        key = device_key(store, gpu) if store is not None else ""
                        for arm in args.arms:
                            ident = (name, gpu, budget, seed, arm)
                            if ident in done:
                                if done[ident] not in results:
                                    results.append(done[ident])
                                continue
                            started = time.time()
                            spent: int | None = budget
                            best = regime = ""
                            if arm in KERNELCAST_ARMS:
                                assert store is not None
                                score, spent, best, regime = kernelcast_arm(arm, tasks[name], store, args.out, key, budget,
                                                                    seed, space)
                            elif arm == RANDOM_ARM:
                                score = random_order(space, budget, seed)
                            elif arm == RANKING:
                                assert store is not None
                                score = transfer_ranking(store, tasks[name], key, budget, space)
                            else:
                                score = kernel_tuner_arm(KT_ARMS[arm], space, tasks[name], budget, seed, args.out)
                            row = {"task": name, "gpu": gpu, "budget": budget, "seed": seed, "arm": arm,
                                   "score": score, "spent": spent, "best": best, "regime": regime,
                                   "seconds": round(time.time() - started, 1)}
                            log(json.dumps(row))
                            fh.write(json.dumps(row) + "\n")
                            fh.flush()
                            results.append(row)
    report(results, spaces, args)


def report(results: list[dict[str, Any]], spaces: dict[tuple[str, str], Space], args: argparse.Namespace) -> None:
    arms = [a for a in args.arms] + [EXACT]
    for budget in args.budgets:
        print(f"\n### budget {budget} ({args.seeds} seeds; mean score over seeds, 1.0 = the space's optimum)\n")
        print("| task | GPU | " + " | ".join(arms) + " |")
        print("|---|---|" + "---|" * len(arms))
        every: dict[str, list[float]] = {a: [] for a in arms}
        for name in args.tasks:
            for gpu in args.gpus:
                cells = []
                for arm in arms:
                    if arm == EXACT:
                        value = spaces[(name, gpu)].exact_random(budget)
                        every[arm].append(value)
                        cells.append(f"{value:.3f}")
                        continue
                    scores = [r["score"] for r in results if (r["task"], r["gpu"], r["budget"], r["arm"]) ==
                              (name, gpu, budget, arm)]
                    every[arm] += scores
                    cells.append(f"{statistics.mean(scores):.3f}" if scores else "-")
                print(f"| {name} | {gpu} | " + " | ".join(cells) + " |")
        print("| **median over runs** | | " + " | ".join(
            f"**{statistics.median(every[a]):.3f}**" if every[a] else "-" for a in arms) + " |")
        print("| **10th percentile** | | " + " | ".join(
            f"{percentile(every[a], 10):.3f}" if every[a] else "-" for a in arms) + " |")
    print("\n### cross-GPU rank correlation of recorded times (Spearman)\n")
    for name in args.tasks:
        pairs = rank_correlations({g: spaces[(name, g)] for g in GPUS})
        text = ", ".join(f"{a}-{b} {rho:.2f}" for (a, b), rho in sorted(pairs.items()))
        bad = [f"{a}-{b}" for (a, b), rho in pairs.items() if rho < BAD_TRANSFER]
        print(f"- {name}: {text}; below {BAD_TRANSFER}: {', '.join(bad) or 'none'}")


if __name__ == "__main__":
    main()
