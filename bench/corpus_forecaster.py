"""The default forecaster on kernels nobody here wrote: its skill on the held-out suites of bench/corpus (issue 46).

``bench/corpus_bench.py`` runs a measure-all arm per held-out kernel, budget and seed, each in a fresh store; such a
run measured every candidate its generator proposed (up to the budget), so its store holds candidates of one
held-out kernel labelled by the hardware, chosen by no forecaster. This script reads those stores back (the union of
a kernel's measure-all runs, one label per candidate: its first correct measurement outside the confirm and noise
phases; candidates that only failed are counted apart, bin 0 lies outside the 8-bin distribution) and asks how
well the forecaster a new user's run starts from would have ranked and binned them: ``learned_forecaster`` on the
run's store with the kernel itself left out, i.e. the roofline prior blended with the forest trained on the shipped
seed dataset only (checked: no held-out kernel among its training tasks), for the device the runs measured on.

As ``bench/forecaster_bench.py``'s "blend + N of its own (in-task)" rows, per kernel with at least
``MIN_LABELLED`` labelled candidates and N in 0, 2, 4: the forecaster is taught N of the kernel's labelled
measurements drawn at random (``--draws`` draws, seeded; N = 0 has one), forecasts the rest and is scored on the rest:

  Spearman        within the kernel, of the forecast's ln S (its continuous belief where it has one, else the
                  expectation over its bins) against the measured ln S; the mean over draws
  ECE             of the max-probability confidence (``scoring.summarize``), the draws' forecasts pooled (one
                  draw of a few points moves ECE by tenths)
  recovered@10 %  best measured speedup among the top 10 % of the rest by the forecast / best of the rest
                  (``scoring.recovered_speedup``); the mean over draws

then the median over kernels, the pooled row (ECE of every forecast pooled; Spearman and recovered: the mean over
kernels), and for reference the uniform forecast's ECE and random order's expected recovered@10 % on the same rests.
One forecaster is built per kernel (the forest is the costly part) and re-taught per draw: ``learn`` replaces the
task's taught rows, so every draw starts from nothing learned of the kernel (as in bench/derived_forecaster_bench.py).

    .venv/bin/python bench/corpus_forecaster.py --from bench/out/corpus [--draws 5] [--seed 0]
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpus_bench import held_out_tasks  # noqa: E402
from scipy.stats import spearmanr  # noqa: E402

from kernelcast.agents.factory import learned_forecaster  # noqa: E402
from kernelcast.agents.forecast.base import Forecast  # noqa: E402
from kernelcast.agents.forecast.blend import BlendedForecaster  # noqa: E402
from kernelcast.agents.forecast.scoring import recovered_speedup, summarize  # noqa: E402
from kernelcast.tools.core.bins import speedup_bin  # noqa: E402
from kernelcast.tools.core.candidate import Candidate  # noqa: E402
from kernelcast.tools.core.measurement import HardwareSpec, Measurement  # noqa: E402
from kernelcast.tools.core.task import Task, TaskError, load_task  # noqa: E402
from kernelcast.tools.store.store import Store  # noqa: E402

ROUTER = "measure-all"
TAUGHT = (0, 2, 4)  # measurements of the kernel the forecaster learns before it forecasts the rest
MIN_LABELLED = 6
TOP_PERCENT = 10.0
SKIPPED_PHASES = ("confirm", "noise")  # repeats of a candidate already labelled, or of the reference


@dataclass(frozen=True)
class Label:
    candidate: Candidate
    measurement: Measurement  # its first correct search/verify measurement

    @property
    def log_speedup(self) -> float:
        assert self.measurement.speedup is not None
        return math.log(self.measurement.speedup)


@dataclass
class Kernel:
    """One held-out kernel's labelled candidates, from the union of its measure-all stores."""

    name: str
    stores: list[Path]
    labels: list[Label]
    failed: int  # candidates measured but never correct
    device: str
    sizes: str


@dataclass(frozen=True)
class Draw:
    """One draw's forecasts of the rest and their scores."""

    rho: float  # nan where either side is constant
    recovered: float
    random_recovered: float  # random order's expectation on the same rest
    probs: np.ndarray  # (rest, 8)
    truth: np.ndarray  # the rest's measured bins


@dataclass
class Result:
    kernel: Kernel
    draws: dict[int, list[Draw]] = field(default_factory=dict)  # N taught -> its draws
    failed_forecasts: int = 0

    def rho(self, n: int) -> float:
        values = [d.rho for d in self.draws[n] if not math.isnan(d.rho)]
        return statistics.fmean(values) if values else math.nan

    def ece(self, n: int) -> float:
        return pooled_ece(self.draws[n])

    def recovered(self, n: int) -> float:
        return statistics.fmean(d.recovered for d in self.draws[n])

    def random_recovered(self, n: int) -> float:
        return statistics.fmean(d.random_recovered for d in self.draws[n])


# ---- reading the corpus bench's stores --------------------------------------------------------------------------
def measure_all_stores(out: Path, held: dict[str, Path]) -> dict[str, list[Path]]:
    """The measure-all stores under ``out`` by kernel (``OUT/<task>/measure-all-b<budget>-s<seed>/kernelcast.db``);
    refuses a kernel that is not held out and an ``out`` without any."""
    if not out.is_dir():
        raise SystemExit(f"{out}: no such folder (give the --out folder of bench/corpus_bench.py)")
    found: dict[str, list[Path]] = {}
    for db in sorted(out.glob(f"*/{ROUTER}-b*-s*/kernelcast.db")):
        found.setdefault(db.parent.parent.name, []).append(db)
    if not found:
        raise SystemExit(f"{out}: no {ROUTER} stores (<task>/{ROUTER}-b<budget>-s<seed>/kernelcast.db): give the "
                         "--out folder of a bench/corpus_bench.py run that finished at least one kernel")
    if foreign := sorted(set(found) - set(held)):
        raise SystemExit(f"{out}: not held-out corpus kernels: {', '.join(foreign)} (held out: {', '.join(held)}); "
                         "scoring on a training kernel would report skill on data the forecaster may have seen")
    return found


def store_labels(store: Store, name: str) -> tuple[dict[str, Label], set[str]]:
    """One store's labels of ``name``'s proposed candidates (the reference left out) and the hashes measured."""
    proposed = {c.hash: c for c in store.candidates.of_task(name) if c.generator != "reference"}
    labels: dict[str, Label] = {}
    tried: set[str] = set()
    for m in store.ledger.find(task=name):
        if m.phase in SKIPPED_PHASES or m.candidate_hash not in proposed:
            continue
        tried.add(m.candidate_hash)
        if m.ok and m.speedup is not None and m.speedup > 0 and m.candidate_hash not in labels:
            labels[m.candidate_hash] = Label(proposed[m.candidate_hash], m)
    return labels, tried


def read_kernel(name: str, stores: list[Path]) -> Kernel:
    """The union of the kernel's measure-all stores, de-duplicated by candidate hash (the first store's label wins)."""
    labels: dict[str, Label] = {}
    tried: set[str] = set()
    for path in stores:
        store = Store(path, read_only=True)
        try:
            own, measured = store_labels(store, name)
        finally:
            store.close()
        labels = {**own, **labels}
        tried |= measured
    where = {(lab.measurement.device, lab.measurement.sizes) for lab in labels.values()}
    if len(where) > 1:
        raise SystemExit(f"{name}: its measure-all stores measured on several devices or size sets {sorted(where)}: "
                         "give one bench's output")
    device, sizes = next(iter(where)) if where else ("", "full")
    return Kernel(name, stores, list(labels.values()), len(tried - labels.keys()), device, sizes)


def measured_task(kernel: Kernel, held: dict[str, Path]) -> Task:
    """The kernel's task as its candidates were measured: the held-out task file of this checkout, else the one
    the store recorded (a bench run from another worktree), whichever owns every label's task fingerprint."""
    paths = [held[kernel.name]]
    for path in kernel.stores:
        store = Store(path, read_only=True)
        try:
            recorded = store.tasks.paths()
        finally:
            store.close()
        if kernel.name in recorded:
            paths.append(Path(recorded[kernel.name]))
    prints = {lab.measurement.task_fingerprint for lab in kernel.labels}
    for path in dict.fromkeys(paths):
        try:
            task = load_task(path)
        except TaskError:
            continue
        if task.name == kernel.name and all(task.owns(p) for p in prints):
            return task.at_sizes("small" if kernel.sizes == "small" else "full")
    raise SystemExit(f"{kernel.name}: no task file owns its measurements (fingerprints {sorted(map(str, prints))}; "
                     f"tried {', '.join(map(str, dict.fromkeys(paths)))})")


# ---- the forecaster and its scores ------------------------------------------------------------------------------
def seed_forecaster(store: Store, kernel: Kernel, held: dict[str, Path]) -> tuple[BlendedForecaster, HardwareSpec]:
    """The forecaster a new user's run on this device starts from: the run's store with the kernel left out, so the
    forest knows the shipped seed dataset only. ``store`` stays open while it forecasts (its device probes)."""
    devices = store.devices.all()
    if kernel.device not in devices:
        raise SystemExit(f"{kernel.name}: {store.path} holds no spec of the device {kernel.device!r}")
    forecaster = learned_forecaster(store, kernel.device, exclude_task=kernel.name)
    if not isinstance(forecaster, BlendedForecaster):
        raise SystemExit(f"the default forecaster is a {type(forecaster).__name__}, not the blend this bench scores")
    if leaked := sorted(set(forecaster.data.tasks) & set(held)):
        raise SystemExit(f"the forecaster's training data holds held-out kernels {leaked}: the split is broken")
    return forecaster, devices[kernel.device]


def belief(forecast: Forecast) -> float:
    """The forecast's ln S: its continuous belief where it has one, else the expectation over its bins."""
    mean = forecast.provenance.log_speedup_mean
    return mean if mean is not None else forecast.expected_log_speedup


def spearman(predicted: np.ndarray, measured: np.ndarray) -> float:
    if len(predicted) < 2 or np.ptp(predicted) == 0 or np.ptp(measured) == 0:
        return math.nan
    return float(spearmanr(predicted, measured).statistic)


def random_order_recovered(speedups: np.ndarray, k_percent: float) -> float:
    """The expected recovered@k % of taking k % of the pool in random order: P(max of the take is the i-th
    smallest) = C(i, take - 1) / C(n, take)."""
    ordered = np.sort(speedups)
    n = len(ordered)
    take = max(1, math.ceil(k_percent * n / 100 - 1e-9))
    weights = np.array([math.comb(i, take - 1) for i in range(n)], dtype=float) / math.comb(n, take)
    return float(weights @ ordered / ordered[-1])


def pooled_ece(draws: list[Draw]) -> float:
    return summarize(np.concatenate([d.probs for d in draws]), np.concatenate([d.truth for d in draws])).ece


def uniform_ece(draws: list[Draw]) -> float:
    truth = np.concatenate([d.truth for d in draws])
    return summarize(np.full((len(truth), 8), 1 / 8), truth).ece


def score_draw(forecaster: BlendedForecaster, task: Task, hw: HardwareSpec, rest: list[Label]
               ) -> tuple[Draw, int]:
    """Forecast the rest and score it; also the number of forecasts that failed (uninformative)."""
    forecasts = forecaster.forecast_many(task, [lab.candidate for lab in rest], hw)
    predicted = np.array([belief(f) for f in forecasts])
    measured = np.array([lab.log_speedup for lab in rest])
    speedups = np.exp(measured)
    draw = Draw(spearman(predicted, measured), recovered_speedup(predicted, speedups, TOP_PERCENT),
                random_order_recovered(speedups, TOP_PERCENT), np.array([f.probabilities for f in forecasts]),
                np.array([speedup_bin(lab.measurement.speedup) for lab in rest]))
    return draw, sum(f.failed for f in forecasts)


def evaluate(kernel: Kernel, forecaster: BlendedForecaster, task: Task, hw: HardwareSpec, draws: int, seed: int
             ) -> Result:
    """Every N of TAUGHT in order (N = 0 first, before anything is taught), ``draws`` random draws of N > 0."""
    rng = random.Random(f"corpus-forecaster-{kernel.name}-{seed}")
    result = Result(kernel)
    for n in TAUGHT:
        result.draws[n] = []
        for _ in range(draws if n else 1):
            picked = set(rng.sample(range(len(kernel.labels)), n))
            taught = [kernel.labels[i] for i in sorted(picked)]
            rest = [lab for i, lab in enumerate(kernel.labels) if i not in picked]
            if n:  # replaces what the last draw taught: each draw starts from nothing learned of the kernel
                forecaster.learn([(lab.candidate, lab.measurement) for lab in taught], {hw.key: hw})
            draw, failed = score_draw(forecaster, task, hw, rest)
            result.draws[n].append(draw)
            result.failed_forecasts += failed
    return result


def run_kernel(kernel: Kernel, held: dict[str, Path], draws: int, seed: int) -> tuple[Result, str]:
    """The kernel's result and the forecaster's model name."""
    task = measured_task(kernel, held)
    store = Store(kernel.stores[0], read_only=True)
    try:
        forecaster, hw = seed_forecaster(store, kernel, held)
        result = evaluate(kernel, forecaster, task, hw, draws, seed)
        return result, forecaster.model_name.split(" + in-task")[0]  # its stacking weights are fitted by now
    finally:
        store.close()


# ---- the report -------------------------------------------------------------------------------------------------
def number(value: float, percent: bool = False) -> str:
    if math.isnan(value):
        return "n/a"
    return f"{value:.0%}" if percent else f"{value:.2f}"


def header() -> str:
    cols = ["task", "labelled candidates", *(f"Spearman after {n}" for n in TAUGHT), *(f"ECE after {n}" for n in TAUGHT),
            *(f"recovered top-{TOP_PERCENT:g} % after {n}" for n in TAUGHT)]
    return "| " + " | ".join(cols) + " |\n|" + "---|" * len(cols)


def task_row(result: Result) -> str:
    kernel = result.kernel
    count = f"{len(kernel.labels)}" + (f" (+{kernel.failed} failed)" if kernel.failed else "")
    cells = [kernel.name, count, *(number(result.rho(n)) for n in TAUGHT), *(number(result.ece(n)) for n in TAUGHT),
             *(number(result.recovered(n), True) for n in TAUGHT)]
    return "| " + " | ".join(cells) + " |"


def nanmedian(values: list[float]) -> float:
    kept = [v for v in values if not math.isnan(v)]
    return statistics.median(kept) if kept else math.nan


def nanmean(values: list[float]) -> float:
    kept = [v for v in values if not math.isnan(v)]
    return statistics.fmean(kept) if kept else math.nan


def summary_rows(results: list[Result]) -> list[str]:
    labelled = sum(len(r.kernel.labels) for r in results)
    every = {n: [d for r in results for d in r.draws[n]] for n in TAUGHT}
    median = [f"median over {len(results)} kernels", str(labelled),
              *(number(nanmedian([r.rho(n) for r in results])) for n in TAUGHT),
              *(number(statistics.median(r.ece(n) for r in results)) for n in TAUGHT),
              *(number(statistics.median(r.recovered(n) for r in results), True) for n in TAUGHT)]
    pooled = ["pooled (ECE: every forecast; Spearman, recovered: mean over kernels)", str(labelled),
              *(number(nanmean([r.rho(n) for r in results])) for n in TAUGHT),
              *(number(pooled_ece(every[n])) for n in TAUGHT),
              *(number(statistics.fmean(r.recovered(n) for r in results), True) for n in TAUGHT)]
    reference = ["uniform forecast (ECE, pooled) / random order (recovered, mean over kernels)", str(labelled),
                 *("-" for _ in TAUGHT), *(number(uniform_ece(every[n])) for n in TAUGHT),
                 *(number(statistics.fmean(r.random_recovered(n) for r in results), True) for n in TAUGHT)]
    return ["| " + " | ".join(cells) + " |" for cells in (median, pooled, reference)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--from", dest="source", required=True, help="the --out folder of bench/corpus_bench.py")
    parser.add_argument("--draws", type=int, default=5, help="random draws of the N taught measurements per kernel")
    parser.add_argument("--seed", type=int, default=0, help="seeds the draws")
    args = parser.parse_args()
    if args.draws < 1:
        parser.error("--draws must be at least 1")
    held = held_out_tasks()
    started = time.perf_counter()
    found = measure_all_stores(Path(args.source).resolve(), held)
    results: list[Result] = []
    skipped: list[str] = []
    models: set[str] = set()
    for name in (n for n in held if n in found):  # manifest order
        kernel = read_kernel(name, found[name])
        runs = ", ".join(p.parent.name for p in kernel.stores)
        if len(kernel.labels) < MIN_LABELLED:
            skipped.append(f"{name} ({len(kernel.labels)} labelled, {kernel.failed} failed; {runs})")
            continue
        result, model = run_kernel(kernel, held, args.draws, args.seed)
        results.append(result)
        models.add(model)
        print(f"{name}: {len(kernel.labels)} labelled candidates from {runs} on {kernel.device} ({kernel.sizes} "
              f"sizes), best {max(lab.measurement.speedup or 0.0 for lab in kernel.labels):.2f}x; "
              f"{time.perf_counter() - started:.0f} s", flush=True)
    if skipped:
        print(f"skipped, fewer than {MIN_LABELLED} labelled candidates: {'; '.join(skipped)}")
    if not results:
        raise SystemExit(f"no held-out kernel has {MIN_LABELLED} labelled candidates yet under {args.source}")
    print(f"\nforecaster (before in-task learning): {'; '.join(sorted(models))}")
    print(f"draws: {args.draws} per N > 0 (seed {args.seed}); scored on the candidates not taught\n")
    print(header())
    for result in results:
        print(task_row(result))
    for row in summary_rows(results):
        print(row)
    if failed := sum(r.failed_forecasts for r in results):
        print(f"\n{failed} forecasts failed (uninformative, uniform): a layer of the blend raised")
    print(f"\ntotal {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
