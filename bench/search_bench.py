"""Search at small budgets: kernelcast against Kernel Tuner on spaces whose optimum is known (issue 13).

All in one run, on one device:

1. **Brute force.** Every point of each space is measured once with kernelcast's harness (correctness on 3
   seeded inputs, reference and candidate timed interleaved by device events) into a bench store of its own
   (``OUT/brute/kernelcast.db``), kept between runs of this script (``--rebrute`` measures again); the
   ``--refine`` best points are measured twice more (until the best by median all have three: a fixed point),
   so the optimum is a median of three rather than the luckiest single measurement.
2. **kernelcast.** selective, topk and measure-all at each budget and seed run the real graph
   (``create_run`` + ``execute``, as ``start_run`` does) in a fresh run store, so the forecaster trains
   only on the run's own measurements plus the shipped seed dataset (checked after every run: the run store
   holds no measurement of the task that the run did not buy). The measurer is the harness with the brute
   force as its cache: a template point is answered with its first brute-force measurement (what a replay
   does), anything else a run picks (a generic variant: work-group edit, build option, pragma; a replay could
   not answer those) is measured live on the device and cached. The device's triad bandwidth is measured
   once and copied into each run store, as a user's store keeps it. Confirmations are part of the budget and
   are real: measured on the device with the confirmation protocol (once per kernel, cached), never answered
   with the measurement they confirm (a replay answers them so, which would make confirming a no-op).
3. **Kernel Tuner.** random_sample, genetic_algorithm and bayes_opt with ``max_fevals`` = the budget, on the
   same OpenCL device (its platform/device indices), with the same template source, sizes, geometry and
   constraints (the search spaces are checked equal).
4. **Score.** Kernel Tuner's own timer busy-polls one of the device's cores, so no tool's own number is
   compared: each tool's best point is scored by kernelcast's harness measurement of it, score = its speedup
   over the reference / the optimum's. Speedups are interleaved against the reference, so load on a shared
   machine cancels out of them; with a steady reference the score is optimum time / the point's time.

5. **Trust, with ground truth** (``--shared-selective``). The selective arm keeps one store across all its
   runs, spaces in order, so its calibration rows accumulate as in a user's store and its router starts
   trusting forecasts once they certify a threshold at ``--risk`` (the default 10 %). The forecaster still
   learns nothing from earlier runs of a task: it reads a store's full-size rows only, and these runs are at
   small sizes (checked after every run). Every decision the router trusted is then checked against the brute
   force, which knows every template point: the measured false-prune rate of all trusted prunes, not a
   sample, beside the bound.

    .venv/bin/python bench/search_bench.py --out bench/out/search
    .venv/bin/python bench/search_bench.py --out bench/out/search --methods "kc selective" --shared-selective
    .venv/bin/python bench/search_bench.py --spaces gemv --budgets 8 --seeds 2 --out /tmp/sb
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import random
import re
import shutil
import statistics
import sys
import time
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from kernelcast.agents.factory import SEED_DATASET  # noqa: E402
from kernelcast.agents.forecast.device_probe import Bandwidth, device_bandwidth, store_probes  # noqa: E402
from kernelcast.graphs.config import RunConfig  # noqa: E402
from kernelcast.graphs.context import RunEnv  # noqa: E402
from kernelcast.graphs.route.risk_control import clopper_pearson_interval, fit_thresholds  # noqa: E402
from kernelcast.graphs.route.routers import DEFAULT_RISK  # noqa: E402
from kernelcast.graphs.route.trust import calibration_rows, trust_summary, trusted_decisions  # noqa: E402
from kernelcast.graphs.run import create_run, prepare_run  # noqa: E402
from kernelcast.graphs.search.graph import execute  # noqa: E402
from kernelcast.graphs.search.spender import confirmation_config  # noqa: E402
from kernelcast.tools.core.candidate import Candidate  # noqa: E402
from kernelcast.tools.core.expr import evaluate  # noqa: E402
from kernelcast.tools.core.measurement import HardwareSpec, MeasureConfig, Measurement, Status  # noqa: E402
from kernelcast.tools.core.task import BufferArg, Task, resolve_task  # noqa: E402
from kernelcast.tools.hardware.measurers.local import LocalMeasurer  # noqa: E402
from kernelcast.tools.hardware.worker import MeasurementWorker  # noqa: E402
from kernelcast.tools.store.pairs import read_pairs  # noqa: E402
from kernelcast.tools.store.store import Store  # noqa: E402

# The built-ins' small sizes are launch-overhead bound (gemv small: 4 us kernels with a CV above 50 %), their
# full sizes cost 6-13 s a measurement: the bench searches the built-in templates at these sizes instead (a copy
# of the task folder under OUT/tasks with [small_sizes] replaced; same name, template and constraints).
BENCH_SIZES: dict[str, dict[str, int]] = {"gemv": {"M": 256, "N": 4096}, "softmax": {"M": 64, "N": 2048},
                                          "stencil2d": {"H": 256, "W": 1024}}
OWN_TASK = str(Path(__file__).resolve().parent / "tasks" / "conv2d_tiled" / "task.toml")
DEFAULT_SPACES = f"gemv,softmax,stencil2d,{OWN_TASK}"
KERNELCAST = ("selective", "topk", "measure-all")
KERNEL_TUNER = ("random_sample", "genetic_algorithm", "bayes_opt")
METHODS = tuple(f"kc {r}" for r in KERNELCAST) + tuple(f"kt {s}" for s in KERNEL_TUNER)


@dataclass
class Space:
    """One brute-forced space: each template point's harness speedup (None: failed; the median of its
    measurements where it was measured more than once)."""

    name: str
    task_ref: str
    speedups: dict[str, float | None]  # candidate hash -> speedup over the reference
    points: dict[str, dict[str, Any]]  # candidate hash -> one template point of that kernel (the last one seen)
    identities: dict[tuple[tuple[str, Any], ...], str] = field(default_factory=dict)  # every point -> its hash

    @property
    def optimum(self) -> float:
        return max(v for v in self.speedups.values() if v is not None)

    def score_of(self, speedup: float | None) -> float:
        return (speedup or 0.0) / self.optimum

    def near_optimum(self, share: float) -> int:
        """Distinct kernels within ``share`` of the optimum: how many targets a search at this score has."""
        return sum(1 for v in self.speedups.values() if v is not None and v >= share * self.optimum)

    def random_median(self, budget: int) -> float:
        """Exact median score of ``budget`` distinct points drawn uniformly (failed points score 0): the
        yardstick every search should beat, free of the noise of a 5-seed median (the tools' columns are
        medians too)."""
        scores = sorted(self.score_of(v) for v in self.speedups.values())
        n = len(scores)
        if budget >= n:
            return scores[-1]
        total = math.comb(n, budget)  # P(best of the draw <= the i-th smallest) = C(i + 1, b) / C(n, b)
        return next(v for i, v in enumerate(scores) if math.comb(i + 1, budget) / total >= 0.5)

    def hash_of(self, point: dict[str, Any]) -> str | None:
        """The identity (candidate hash) of any template point, through the map of every point: points whose
        kernels preprocess to the same code share one identity, and ``points`` keeps one parameter set per
        identity, so matching against it gave None for the others (Kernel Tuner's random_sample scored 0 % on a
        GEMM whose best point it had found: issue 46)."""
        found = self.identities.get(point_key(point))
        if found is not None:
            return found
        wanted = point_key(point)  # a space built without the map: the point kept for its identity, if it is that
        return next((h for h, p in self.points.items() if point_key(p) == wanted), None)


def point_key(point: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    """A template point as a hashable key; numpy scalars (Kernel Tuner's results) read as the Python values."""
    return tuple(sorted((str(k), v.item() if isinstance(v, np.generic) else v) for k, v in point.items()))


def space_identities(task: Task) -> tuple[dict[tuple[tuple[str, Any], ...], str], dict[str, dict[str, Any]]]:
    """Every valid template point of ``task`` mapped to its candidate hash, and one point per hash (the last)."""
    identities: dict[tuple[tuple[str, Any], ...], str] = {}
    points: dict[str, dict[str, Any]] = {}
    for point in task.param_space():
        key = task.instantiate(point).hash
        identities[point_key(point)] = key
        points[key] = point  # points that preprocess to the same code are one candidate
    return identities, points


@dataclass
class Trial:
    space: str
    method: str
    budget: int
    seed: int
    score: float
    spent: int
    seconds: float
    best: dict[str, Any] | None = None
    outside: int = 0  # kernelcast: measurements of candidates outside the template (generic variants)
    template_score: float = 0.0  # the best template point the tool measured (kernelcast: by its own measurement)
    notes: list[str] = field(default_factory=list)
    run: str = ""  # kernelcast: the run id in its store


def bench_task(name: str, out: Path) -> Task:
    """The task to search: a built-in with bench sizes as its small set (see BENCH_SIZES), else as given."""
    task = resolve_task(name)
    sizes = BENCH_SIZES.get(name)
    if sizes is None:
        return task
    folder = out / "tasks" / name
    if folder.exists():
        shutil.rmtree(folder)
    shutil.copytree(task.path.parent, folder)
    toml = folder / task.path.name
    block = "[small_sizes]\n" + "".join(f"{k} = {v}\n" for k, v in sizes.items()) + "\n"
    text = re.sub(r"\[small_sizes\]\n(?:[A-Za-z_]\w* *= *[^\n]*\n)*\n?", block, toml.read_text(), count=1)
    toml.write_text(text)
    return resolve_task(str(toml))  # its space: the points valid at the full and the bench sizes


# ---- 1. brute force ------------------------------------------------------------------------------
def brute_force(task: Task, worker: MeasurementWorker, store: Store, sizes: str, refine: int, log: Any) -> Space:
    """Measure every template point once (reusing the bench store's measurements of an earlier run), then the
    ``refine`` best twice more, until the ``refine`` best by median all have three: the optimum is the median of
    three, not the luckiest single measurement."""
    device = worker.hardware_spec().key
    store.tasks.upsert(task)
    store.devices.upsert(worker.hardware_spec())
    config = MeasureConfig(sizes=sizes)
    have = brute_rows(task, store, device, sizes)
    identities, points = space_identities(task)
    space = task.param_space()
    start, bought = time.perf_counter(), 0
    for i, point in enumerate(space):
        if identities[point_key(point)] not in have:
            candidate = task.instantiate(point)
            store.candidates.add(candidate)
            m = worker.measure(task, candidate, config)
            store.ledger.add(m)  # no run id: a bench store of its own, never a run's
            have[candidate.hash] = [m]
            bought += 1
            if bought % 50 == 0:
                log(f"  {task.name}: {i + 1}/{len(space)} points ({time.perf_counter() - start:.0f} s)")
    speedups = {key: median_speedup(have[key]) for key in points}

    def leaders(k: int) -> list[str]:
        return sorted((key for key in points if speedups[key] is not None), key=lambda key: -(speedups[key] or 0.0))[:k]

    # until a fixed point: a lucky first measurement that a median of three pulls down lets another point into
    # the top, which then needs its own three (without this loop each run of the script refined a few more
    # points and moved the scores of points it had not refined yet)
    refined = 0
    while unrefined := [key for key in leaders(refine) if len(have[key]) < 3]:
        for key in unrefined:
            for _ in range(3 - len(have[key])):
                candidate = task.instantiate(points[key])
                m = worker.measure(task, candidate, config).model_copy(update={"phase": "confirm"})
                store.ledger.add(m)  # a confirm-phase row: runs are answered with the first measurement
                have[key].append(m)
                refined += 1
            speedups[key] = median_speedup(have[key])
    top = leaders(refine)
    failed = sum(1 for v in speedups.values() if v is None)
    best = max(v for v in speedups.values() if v is not None)
    spreads = [max(ok) / min(ok) for key in top if len(ok := [m.speedup for m in have[key] if m.ok and m.speedup]) > 1]
    noise = (f"; the {len(spreads)} best measured 3 times vary by {statistics.median(spreads) - 1:.0%} (median of "
             f"max/min: the noise of one measurement here)") if spreads else ""
    log(f"  {task.name}: {len(space)} points ({len(points)} distinct kernels), {bought} measured now (+{refined} "
        f"repeats of the best), {failed} "
        f"failed; optimum {best:.2f}x the reference (median of 3){noise}")
    return Space(task.name, str(task.path), speedups, points, identities)


def brute_rows(task: Task, store: Store, device: str | None, sizes: str) -> dict[str, list[Measurement]]:
    """The brute force's own rows in ``store``, by candidate hash: a run's confirmation (another protocol,
    cached in the same store) must not move the optimum or a point's score between runs of this script."""
    have: dict[str, list[Measurement]] = {}
    for m in store.ledger.find(task=task.name, device=device, sizes=sizes, fingerprint=task.fingerprint):
        if CONFIRM_FLAG not in m.flags:
            have.setdefault(m.candidate_hash, []).append(m)
    return have


def median_speedup(rows: list[Measurement]) -> float | None:
    ok = [m.speedup for m in rows if m.ok and m.speedup]
    return statistics.median(ok) if ok else None


CONFIRM_FLAG = "search-bench: confirmation protocol"


class CachedMeasurer(LocalMeasurer):
    """kernelcast's harness with the brute force as its cache: a template point is answered with its first
    brute-force measurement (as a replay would), anything else a run picks (a generic variant: work-group
    edit, build option, pragma) is measured now on the device and added to the cache, so every candidate a
    run spends budget on has a real harness measurement and the bench never measures one twice.

    A confirmation (the run's confirmation protocol) is never answered with the measurement it confirms (a
    replay does that, which makes confirming a no-op and lets one lucky first measurement win): it is measured
    on the device with that protocol, once per candidate, and cached for later runs."""

    def __init__(self, cache: Store, device: str | None) -> None:
        super().__init__("opencl", device)
        self.cache = cache
        self.live = 0  # measurements made now (not in the brute force)

    def cached(self, task: Task, key: str, sizes: str, confirm: bool = False) -> Measurement | None:
        rows = [m for m in self.cache.ledger.find(task=task.name, device=self.hardware_spec().key,
                                                  candidate_hash=key, fingerprint=task.fingerprint) if m.sizes == sizes]
        if confirm:
            return next((m for m in rows if CONFIRM_FLAG in m.flags), None)
        rows = [m for m in rows if CONFIRM_FLAG not in m.flags]
        first = [m for m in rows if m.phase == "search"]
        return (first or rows or [None])[0]

    def build(self, task: Task, candidate: Candidate, timeout_s: float = 60.0) -> tuple[str, str]:
        known = self.cached(task, candidate.hash, "small") or self.cached(task, candidate.hash, "full")
        if known is not None:
            return (known.status.value, known.reason) if known.status is Status.compile_error else ("ok", "")
        return super().build(task, candidate, timeout_s)

    def check_reference(self, task: Task, sizes: str = "full", timeout_s: float = 120.0) -> list[str]:
        """Checked once before the brute force, on this device (so a run's creation finds nothing to say)."""
        return []

    def measure_many(self, task: Task, candidates: Iterable[Candidate],
                     config: MeasureConfig | None = None) -> Iterator[tuple[Candidate, Measurement]]:
        config = config or MeasureConfig()
        confirm = config == confirmation_config(MeasureConfig(sizes=config.sizes, timeout_s=config.timeout_s))
        for candidate in candidates:
            found = self.cached(task, candidate.hash, config.sizes, confirm)
            if found is None:
                found = self.worker.measure(task, candidate, config)
                if confirm:
                    found = found.model_copy(update={"flags": [*found.flags, CONFIRM_FLAG], "phase": "confirm"})
                self.cache.candidates.add(candidate)
                self.cache.ledger.add(found)
                self.live += 1
            yield candidate, found


# ---- 2. kernelcast (replay of the brute force) ---------------------------------------------------
def kernelcast_trial(space: Space, router: str, budget: int, seed: int, sizes: str, measurer: CachedMeasurer,
                     bandwidth: Bandwidth | None, runs: Path, shared: Store | None = None) -> Trial:
    """One run of the real graph (as ``start_run``, with the cached measurer) in a fresh run store, or in
    ``shared``, a store that keeps every earlier run of the arm (as a user's store grows)."""
    home = runs / Path(space.name).name / f"{router}-b{budget}-s{seed}"
    if home.exists():
        shutil.rmtree(home)
    home.mkdir(parents=True)
    store = shared or Store(home / "kernelcast.db")  # fresh: nothing of this task to learn from but the run itself
    hardware = measurer.hardware_spec()
    if bandwidth:
        store_probes(store, hardware, bandwidth, {"task": "saxpy", "copied_by": "search_bench"})
    config, _ = prepare_run(RunConfig(task=space.task_ref, budget=budget, router=router,
                                      seed=seed, sizes=sizes, forecaster="learned"))
    env = RunEnv(home, measure_timeout_s=60)
    started = time.perf_counter()
    result = execute(create_run(config, store, env, measurer), env.checkpoints)
    seconds = time.perf_counter() - started
    bought = [m for m in store.ledger.find(run_id=result.run_id) if m.ok]
    known = [m for m in store.ledger.find(task=result.task) if m.ok and m.phase != "noise"]  # noise: ref vs ref
    if shared is not None:  # earlier runs' rows are there by design; the forecaster reads a store's full-size
        # rows only (its history and forest), the run's own rows reach it through learn()
        bought = [m for m in bought if m.sizes == "full"]
        known = [m for m in known if m.sizes == "full"]
    if len(known) != len(bought):  # the forecaster's in-task data: the run's own measurements, nothing else
        raise SystemExit(f"leak: the run store of {home} holds {len(known) - len(bought)} correct measurements "
                         f"of {result.task} that the run did not buy")
    point = space.points.get(result.best_hash or "")
    speedup = space.speedups.get(result.best_hash or "") if point is not None else None
    notes = [result.stop_reason]
    if result.best_hash is not None and point is None:  # a generic variant won: its measurement in the cache
        found = measurer.cached(load_task_of(space), result.best_hash, sizes)
        speedup = found.speedup if found is not None and found.ok else None
        notes.insert(0, "best is a generic variant: " + (store.candidates.get(result.best_hash).intent
                                                         if store.candidates.get(result.best_hash) else "?"))
    searched = [m for m in store.ledger.find(run_id=result.run_id)
                if m.phase != "confirm" and m.ok and m.speedup and m.candidate_hash in space.points]
    template_best = max(searched, key=lambda m: m.speedup or 0.0, default=None)
    template_score = space.score_of(space.speedups.get(template_best.candidate_hash)) if template_best else 0.0
    return Trial(space.name, f"kc {router}", budget, seed, space.score_of(speedup), result.spent, seconds,
                 point, outside=sum(1 for m in store.ledger.find(run_id=result.run_id)
                                    if m.phase != "confirm" and m.candidate_hash not in space.points),
                 template_score=template_score, notes=notes, run=result.run_id)


def load_task_of(space: Space) -> Task:
    return resolve_task(space.task_ref)


# ---- 3. Kernel Tuner ------------------------------------------------------------------------------
def kt_device(spec: HardwareSpec) -> tuple[int, int]:
    """Kernel Tuner's (platform, device) indices of the harness's device."""
    import pyopencl as cl

    for pi, platform in enumerate(cl.get_platforms()):
        if platform.name != spec.platform:
            continue
        for di, dev in enumerate(platform.get_devices()):
            if dev.name.strip() == spec.name.strip():
                return pi, di
    raise SystemExit(f"Kernel Tuner: no OpenCL device {spec.platform} / {spec.name} found")


def kt_arguments(task: Task, sizes: str, seed: int) -> list[Any]:
    """The task's arguments as numpy values, in order (inputs uniform in their declared range)."""
    names = task.sizes(sizes)
    rng = np.random.default_rng(seed)
    out: list[Any] = []
    for arg in task.spec.args:
        dtype = np.dtype(arg.dtype)
        if isinstance(arg, BufferArg):
            shape = tuple(int(evaluate(s, names)) for s in arg.shape)
            if arg.direction == "out":
                out.append(np.zeros(shape, dtype=dtype))
            else:
                out.append(rng.uniform(arg.low, arg.high, size=shape).astype(dtype))
        else:
            out.append(dtype.type(evaluate(arg.value, names)))
    return out


def kt_restrictions(task: Task) -> list[str]:
    """The template's constraints and launch divisibility at both size sets, as Kernel Tuner expressions of
    the parameters alone (the task's validity rule, :meth:`Task.is_valid_point`, written out)."""
    tmpl = task.spec.template
    assert tmpl is not None
    rules: list[str] = []
    for which in ("full", "small"):
        sizes = task.sizes(which)
        rules += [_bind(c, sizes) for c in tmpl.constraints]
        for g, loc in zip(tmpl.launch.global_size, tmpl.launch.local_size or [], strict=False):
            rules.append(f"({_bind(g, sizes)}) % ({_bind(loc, sizes)}) == 0 and ({_bind(g, sizes)}) > 0")
    return rules


def _bind(expr: str | int, sizes: dict[str, int]) -> str:
    """``expr`` with the size names replaced by their values."""
    return re.sub(r"\b([A-Za-z_]\w*)\b", lambda m: str(sizes[m.group(1)]) if m.group(1) in sizes else m.group(1),
                  str(expr))


def kernel_tuner_trial(space: Space, task: Task, strategy: str, budget: int, seed: int, sizes: str,
                       device: tuple[int, int]) -> Trial:
    from kernel_tuner import tune_kernel

    tmpl = task.spec.template
    assert tmpl is not None and task.template_source is not None
    local = list(tmpl.launch.local_size or [])
    if not all(isinstance(e, str) and e in tmpl.params for e in local):
        raise SystemExit(f"{task.name}: Kernel Tuner needs each local size to be one template parameter, got {local}")
    names = task.sizes(sizes)

    def problem_size(p: dict[str, Any]) -> tuple[int, ...]:
        return tuple(int(evaluate(e, {**names, **p})) for e in tmpl.launch.global_size)

    random.seed(seed)
    np.random.seed(seed)
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results, _env = tune_kernel(
            task.spec.entry, task.template_source, problem_size, kt_arguments(task, sizes, seed),
            {k: list(v) for k, v in tmpl.params.items()}, lang="OpenCL", platform=device[0], device=device[1],
            block_size_names=local + ["block_size_y", "block_size_z"][len(local) - 1:],
            grid_div_x=lambda p: p[local[0]], grid_div_y=(lambda p: p[local[1]]) if len(local) > 1 else None,
            restrictions=kt_restrictions(task),
            strategy=strategy, strategy_options={"max_fevals": budget}, verbose=False, quiet=True,
            simulation_mode=False)
    seconds = time.perf_counter() - started
    timed = [r for r in results if isinstance(r.get("time"), (int, float))]
    if not timed:
        return Trial(space.name, f"kt {strategy}", budget, seed, 0.0, len(results), seconds, notes=["no valid point"])
    best = min(timed, key=lambda r: r["time"])
    point = {k: best[k] for k in tmpl.params}
    score = space.score_of(space.speedups.get(space.hash_of(point) or ""))
    return Trial(space.name, f"kt {strategy}", budget, seed, score, len(results), seconds, point,
                 template_score=score)


# ---- 4. the table ----------------------------------------------------------------------------------
def cell(scores: list[float]) -> str:
    if not scores:
        return "-"
    return f"{statistics.median(scores):.1%} ({min(scores):.0%}-{max(scores):.0%})"


def table(trials: list[Trial], spaces: dict[str, Space], budgets: list[int], template_only: bool = False) -> str:
    head = ("| space (points; within 5 % / 10 % of the optimum) | budget | " + " | ".join(METHODS)
            + " | random sampling, exact median |")
    lines = [head, "|" + "---|" * (len(METHODS) + 3)]
    for name, space in spaces.items():
        for budget in budgets:
            by = {m: [t for t in trials if t.space == name and t.method == m and t.budget == budget] for m in METHODS}
            label = f"{Path(name).name} ({len(space.points)}; {space.near_optimum(0.95)} / {space.near_optimum(0.9)})"
            lines.append(f"| {label} | {budget} | " + " | ".join(
                cell([t.template_score if template_only else t.score for t in by[m]]) for m in METHODS)
                + f" | {space.random_median(budget):.1%} |")
    short = [t for t in trials if t.spent != t.budget]
    lines.append("" if not short else "\nspent less than the budget: " + "; ".join(
        f"{t.space} {t.method} b{t.budget} s{t.seed}: {t.spent}" for t in short))
    return "\n".join(lines).rstrip()


def trust_table(trials: list[Trial], spaces: dict[str, Space], budgets: list[int], store: Store,
                measurer: CachedMeasurer, sizes: str) -> str:
    """Every decision the shared selective arm trusted, checked against the brute force: a pruned child was
    wrongly pruned if it beat the incumbent of its moment, an accepted one wrongly accepted if it did not. Two
    readings: the child's first brute-force measurement (what the run would have measured: the label its
    calibration rows carry) and the median of its measurements (less noise). A generic variant that no run
    measured has no answer and is counted apart."""
    head = ("| space | budget | decisions | trusted (pruned / accepted) | trusted prunes with an answer | false "
            "prunes, first measurement (95 % CI) | false prunes, median | false accepts | risk bound |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    risk = DEFAULT_RISK  # the runs above use RunConfig's default
    for name, space in spaces.items():
        task = load_task_of(space)
        for budget in budgets:
            runs = [t for t in trials if t.space == name and t.method == "kc selective" and t.budget == budget]
            decisions = pruned = accepted = answered = wrong = wrong_median = accept_wrong = 0
            for trial in runs:
                summary = trust_summary(store, trial.run, risk)
                decisions, pruned, accepted = (decisions + summary.decisions, pruned + summary.trusted_prunes,
                                               accepted + summary.trusted_accepts)
                for decision in trusted_decisions(store, trial.run):
                    found = measurer.cached(task, decision.candidate_hash, sizes)
                    if found is None:
                        continue
                    first_wrong = decision.wrong(found.speedup if found.ok else None)
                    if decision.kind == "accept":
                        accept_wrong += first_wrong
                        continue
                    answered += 1
                    wrong += first_wrong
                    wrong_median += decision.wrong(space.speedups.get(decision.candidate_hash))
            lo, hi = clopper_pearson_interval(wrong, answered)
            lines.append(f"| {Path(name).name} | {budget} | {decisions} | {pruned + accepted} "
                         f"({(pruned + accepted) / max(1, decisions):.0%}: {pruned} / {accepted}) | {answered} | "
                         f"{wrong} ({wrong / max(1, answered):.1%}; {lo:.1%}-{hi:.1%}) | {wrong_median} | "
                         f"{accept_wrong} of {accepted} | {risk:.0%} |")
    device = next(iter(store.devices.all()), "")
    lines.append(f"\nthe shared store's thresholds after the last run: "
                 f"{fit_thresholds(calibration_rows(store, device), risk).describe()}")
    return "\n".join(lines)


def sizes_text(tasks: list[Task], which: str) -> str:
    return "; ".join(f"{t.name} " + " ".join(f"{k}={v}" for k, v in t.sizes(which).items())
                     for t in tasks)


def seed_rows(task_name: str) -> int:
    """Rows of the shipped seed dataset for this task (what the forecaster may know of it besides the run)."""
    if not SEED_DATASET.exists():
        return 0
    pairs, _ = read_pairs(SEED_DATASET)
    return sum(1 for _, m in pairs if m.task == task_name)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spaces", default=DEFAULT_SPACES, help="task names or task.toml paths, comma-separated")
    parser.add_argument("--budgets", default="8,24")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--sizes", default="small", choices=["small", "full"])
    parser.add_argument("--methods", default=",".join(METHODS), help="subset of: " + ", ".join(METHODS))
    parser.add_argument("--out", default="bench/out/search", help="folder: brute-force store, run stores, results")
    parser.add_argument("--rebrute", action="store_true", help="measure the brute force again")
    parser.add_argument("--refine", type=int, default=8, help="best points of each space measured 3 times")
    parser.add_argument("--device", default=None, help="OpenCL device (default: the harness's default)")
    parser.add_argument("--shared-selective", action="store_true",
                        help="the selective arm keeps one store across all its runs (calibration rows accumulate, as "
                             "in a user's store) and every decision it trusted is checked against the brute force")
    args = parser.parse_args()
    logging.getLogger("kernel_tuner").setLevel(logging.ERROR)
    out = Path(args.out).resolve()
    budgets = [int(b) for b in args.budgets.split(",") if b.strip()]
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        parser.error(f"unknown method(s) {unknown}; expected some of {list(METHODS)}")
    try:
        tasks = [bench_task(s.strip(), out) for s in args.spaces.split(",") if s.strip()]
    except Exception as exc:  # noqa: BLE001 - a bad --spaces entry is bad input, said in one line
        parser.error(f"--spaces: {exc}")
    for task in tasks:
        if task.spec.template is None or task.language != "opencl":
            parser.error(f"--spaces: {task.name} has no OpenCL template to search")

    def log(text: str) -> None:
        print(text, flush=True)

    brute_db = out / "brute" / "kernelcast.db"
    if args.rebrute and brute_db.exists():
        for suffix in ("", "-wal", "-shm"):
            Path(str(brute_db) + suffix).unlink(missing_ok=True)
    brute_db.parent.mkdir(parents=True, exist_ok=True)
    bench_store = Store(brute_db)
    started = time.perf_counter()
    spaces: dict[str, Space] = {}
    measurer = CachedMeasurer(bench_store, args.device)  # one worker process for the brute force and the runs
    try:
        spec = measurer.hardware_spec()
        worker = measurer.worker
        log(f"device: {spec.key}; sizes {args.sizes}; brute force into {brute_db}")
        for task in tasks:
            worker.check_reference(task, args.sizes)
            spaces[task.name] = brute_force(task, worker, bench_store, args.sizes, args.refine, log)
        bandwidth = device_bandwidth(bench_store, spec, worker)
        log(f"brute force done in {time.perf_counter() - started:.0f} s; triad {bandwidth.bytes_per_s / 1e9:.1f} "
            f"GB/s ({bandwidth.source})")
        for task in tasks:
            log(f"  seed dataset rows of {task.name}: {seed_rows(task.name)} (full sizes; the runs search at "
                f"{args.sizes})")
        trials: list[Trial] = []
        shared = None
        if args.shared_selective:  # a fresh shared store per bench run: its trust starts cold
            shared_db = out / "runs" / "selective-shared" / "kernelcast.db"
            for suffix in ("", "-wal", "-shm"):
                Path(str(shared_db) + suffix).unlink(missing_ok=True)
            shared = Store(shared_db)
        kt_dev = kt_device(spec) if any(m.startswith("kt ") for m in methods) else (0, 0)
        for task in tasks:
            space = spaces[task.name]
            for budget in budgets:
                for method in methods:
                    for seed in range(args.seeds):
                        kind, name = method.split(" ", 1)
                        if kind == "kc":
                            trial = kernelcast_trial(space, name, budget, seed, args.sizes, measurer,
                                                     bandwidth if bandwidth.probed else None, out / "runs",
                                                     shared if name == "selective" else None)
                        else:
                            trial = kernel_tuner_trial(space, task, name, budget, seed, args.sizes, kt_dev)
                        trials.append(trial)
                        log(f"  {task.name} b{budget} {method} s{seed}: {trial.score:.1%} spent {trial.spent} "
                            f"(outside the template {trial.outside}, {trial.seconds:.0f} s) {trial.best} "
                            f"{'; '.join(trial.notes)[:150]}")
        trust_text = trust_table(trials, spaces, budgets, shared, measurer, args.sizes) if shared is not None else ""
    finally:
        measurer.close()
    text = table(trials, spaces, budgets)
    print()
    print(f"Search at small budgets on {spec.key} ({args.sizes} sizes: {sizes_text(tasks, args.sizes)}), "
          f"{args.seeds} seeds; load average {os.getloadavg()[1]:.1f} over the last 5 min. Median score (min-max); "
          f"score = harness speedup of the tool's best / of the brute-force optimum")
    print(text)
    template_text = table(trials, spaces, budgets, template_only=True)
    print()
    print("The same runs, kernelcast scored by the best template point it measured (its winner may be a generic "
          "variant outside the template, which Kernel Tuner cannot reach):")
    print(template_text)
    outside = {m: f"{sum(t.outside for t in trials if t.method == m)}/{sum(t.spent for t in trials if t.method == m)}"
               for m in methods if m.startswith("kc")}
    print(f"kernelcast measurements of candidates outside the template (generic variants: work-group, build option, "
          f"pragma; measured on the device once, then cached), of all measurements: {outside}")
    if trust_text:
        print()
        print("Trust with ground truth: the selective arm in one store across its runs (spaces in the order above), "
              "every trusted decision checked against the brute force:")
        print(trust_text)
    print(f"total {time.perf_counter() - started:.0f} s")
    (out / "results.json").write_text(json.dumps({"device": spec.key, "sizes": args.sizes, "table": text,
                                                  "template_table": template_text, "trust_table": trust_text,
                                                  "trials": [asdict(t) for t in trials]}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
