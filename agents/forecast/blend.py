"""The forecaster a run uses: roofline prior, cross-task forest and in-task correction, blended by evidence.

Three layers, each used as far as its evidence goes:

1. the roofline prior (:mod:`kernelcast.agents.forecast.prior`): needs nothing, so the first forecast on a
   new device and kernel is informative;
2. the cross-task random forest (:mod:`kernelcast.agents.forecast.learned`) trained on every device's
   measured pairs, rows weighted by how similar their device is to this one. It is mixed with the prior by
   stacking: the mixture weight minimizes the held-out (task-held-out folds) log loss of
   ``(1 - w) prior + w forest`` on the training rows, weighted by device similarity, and is then shrunk
   by the effective amount of data, ``n_eff / (n_eff + STACK_N0)``. The weight is fitted per family of
   candidate (:func:`family`): a derived template's source transformations are another population than the
   template points and hand-written variants the forest has mostly seen, so its skill on them is measured on
   derived rows alone, and with none (the shipped seed has none) derived candidates get the prior alone;
3. the in-task model (:mod:`kernelcast.agents.forecast.task_model`): a Bayesian linear correction fitted on the
   measured candidates of this task on this device (earlier runs from the store plus this run's
   measurements, taught through :meth:`BlendedForecaster.learn`), starting from the first measurement.

Every forecast is informative (never the "untrained" uniform), and failures inside any layer fall back to
the layer below; only a failure of the prior itself yields an uninformative, deferred forecast.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from kernelcast.agents.forecast.base import Forecast, Provenance
from kernelcast.agents.forecast.device_probe import Bandwidth, bandwidth_from, guessed_bandwidth
from kernelcast.agents.forecast.distributions import lognormal_bins, moments
from kernelcast.agents.forecast.features import candidate_features, context, device_similarity
from kernelcast.agents.forecast.learned import LearnedForecaster, TrainingSet, measured_task
from kernelcast.agents.forecast.prior import RooflinePrior
from kernelcast.agents.forecast.task_model import PREDICTIVE_DOF, TaskModel, task_features
from kernelcast.agents.generate.families import TEMPLATE, transformation_family
from kernelcast.agents.generate.families import WRITTEN as WRITTEN_FAMILY
from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.measurement import HardwareSpec, Measurement
from kernelcast.tools.core.task import Task, TaskError

PRIOR_SHRINK = 0.3  # the prior's ln-speedup is scaled by this before it becomes a distribution
PRIOR_SIGMA = 0.9  # ... with this spread (both fitted once by log loss on the shipped PoCL seed dataset)
STACK_N0 = 40.0  # effective rows at which the forest gets half the weight its held-out skill earns
STACK_GRID = np.linspace(0.0, 1.0, 21)
# Epistemic spread per transformation family (agents.families): a family this forecaster has no evidence of gets
# FAMILY_SPREAD more sd of ln S (added in quadrature), shrinking as evidence of the family comes in: its variance
# halves at FAMILY_N0 measurements of the family in this task; a training row of the family (another task,
# another device) counts as CROSS_TASK_EVIDENCE of one. Not fitted on the held-out corpus, nor on anything:
# 0.8 is a factor of 2.2 either way, the size of the errors the prior made on families it had never seen
# (coarsening on a matrix-vector kernel forecast at 0.35x, measured 7-11x)
FAMILY_SPREAD = 0.8
FAMILY_N0 = 2.0
CROSS_TASK_EVIDENCE = 0.05
DERIVED = "derived"  # the family of a derived template's points and their variants (origin "derived")
WRITTEN = "written"  # every other candidate: template points, generic variants, a user's or an LLM's kernels
Pairs = Sequence[tuple[Candidate, Measurement]]
BandwidthSource = Callable[[HardwareSpec], Bandwidth]


@dataclass
class _TaskData:
    task: Task
    hardware: HardwareSpec
    history: list[tuple[Candidate, Measurement]]  # from the store, before this run
    run: list[tuple[Candidate, Measurement]]  # taught by learn()
    model: TaskModel | None = None

    def rows(self) -> list[tuple[Candidate, Measurement]]:
        fresh = {c.hash for c, _ in self.run}
        return [(c, m) for c, m in self.history if c.hash not in fresh] + list(self.run)


class BlendedForecaster:
    """Prior + forest + in-task correction (see the module docstring)."""

    name = "learned"

    def __init__(self, cross: LearnedForecaster | None = None, data: TrainingSet | None = None,
                 history: Pairs = (), hardware: Mapping[str, HardwareSpec] | None = None,
                 tasks: Callable[[str], Task] | None = None, bandwidth: BandwidthSource | None = None,
                 seeded: bool = False) -> None:
        self.cross = cross if cross is not None and cross.trained else None
        self.data = data or TrainingSet()
        self.hardware = dict(hardware or {})
        self.tasks = tasks
        self.bandwidth_source = bandwidth
        self.seeded = seeded
        self.known: dict[str, Task] = {}
        self._history: dict[tuple[str, str], list[tuple[Candidate, Measurement]]] = {}
        for cand, m in history:
            if m.ok:
                self._history.setdefault((m.task, m.device), []).append((cand, m))
        self._tasks: dict[tuple[str, str, str], _TaskData] = {}
        self._bandwidths: dict[str, Bandwidth] = {}
        self._stack: dict[tuple[str, str], float] = {}
        self._trained_families: Counter[str] | None = None
        self.n_run = 0

    # ---- provenance ------------------------------------------------------------------
    @property
    def model_name(self) -> str:
        parts = ["roofline prior"]
        if self.cross is not None:
            weights = ", ".join(f"{w:.2f}" if fam == WRITTEN else f"{fam} {w:.2f}"
                                for (_, fam), w in self._stack.items()) or "?"
            parts.append(f"forest n={self.cross.n_train} (w={weights}{', incl. seed dataset' if self.seeded else ''})")
        in_task = sum(t.model.n for t in self._tasks.values() if t.model is not None)
        if in_task:
            parts.append(f"in-task n={in_task}")
        name = " + ".join(parts)
        return name + (f", {self.n_run} from this run" if self.n_run else "")

    # ---- layers ----------------------------------------------------------------------
    def bandwidth(self, hw: HardwareSpec) -> Bandwidth:
        if hw.key not in self._bandwidths:
            bw = self.bandwidth_source(hw) if self.bandwidth_source is not None else guessed_bandwidth(hw)
            if not bw.probed:
                bw = self._bandwidth_from_data(hw.key) or bw
            self._bandwidths[hw.key] = bw
        return self._bandwidths[hw.key]

    def _bandwidth_from_data(self, device: str) -> Bandwidth | None:
        """A device only known from data (e.g. the seed dataset's): its saxpy measurements give the triad."""
        best = 0.0
        for (task_name, dev), rows in self._history.items():
            if dev != device or task_name != "saxpy":
                continue
            owners: dict[str | None, Task | None] = {}  # rows share few fingerprints: each resolved once
            for _, m in rows:
                if m.task_fingerprint not in owners:
                    owners[m.task_fingerprint] = self._owner(task_name, m.task_fingerprint)
                task = owners[m.task_fingerprint]
                best = max(best, (bandwidth_from(m, task) or 0.0) if task is not None else 0.0)
        return Bandwidth(best, "probe") if best > 0 else None

    def _task(self, name: str) -> Task | None:
        if name in self.known:
            return self.known[name]
        if self.tasks is None:
            return None
        try:
            return self.tasks(name)
        except TaskError:
            return None

    def _owner(self, name: str, fingerprint: str | None) -> Task | None:
        """The task a stored row of ``name`` was measured on (:func:`measured_task`), None when unknown."""
        task = self._task(name)
        try:
            return measured_task(lambda _: task, name, fingerprint) if task is not None else None
        except TaskError:
            return None

    def prior(self, task: Task, candidates: Sequence[Candidate], hw: HardwareSpec) -> tuple[np.ndarray, np.ndarray]:
        mu, sd = RooflinePrior(self.bandwidth(hw), sigma=PRIOR_SIGMA).log_speedups(task, candidates, hw)
        return PRIOR_SHRINK * mu, sd

    def base(self, task: Task, candidates: Sequence[Candidate], hw: HardwareSpec) -> np.ndarray:
        """Prior mixed with the forest by the stacking weight for this device and each candidate's family: (N, 8)."""
        mu, sd = self.prior(task, candidates, hw)
        probs = lognormal_bins(mu, sd).reshape(len(candidates), -1)
        w = self._stack_weights(hw, candidates)[:, None]
        if w.any() and self.cross is not None:
            ctx = context(task, hw)
            forest = self.cross.predict_proba([candidate_features(ctx, c) for c in candidates])
            probs = (1 - w) * probs + w * forest
        return probs

    def _stack_weights(self, hw: HardwareSpec, candidates: Sequence[Candidate]) -> np.ndarray:
        return np.array([self.stack_weight(hw, family(c)) for c in candidates])

    def stack_weight(self, hw: HardwareSpec, kind: str = WRITTEN) -> float:
        """The forest's share in the mixture for this device and family of candidate (0 without a trained
        forest, or without held-out rows of that family to earn it)."""
        if self.cross is None or self.cross.oof is None:
            return 0.0
        if (hw.key, kind) not in self._stack:
            self._stack[hw.key, kind] = self._fit_stack(hw, kind)
        return self._stack[hw.key, kind]

    def _fit_stack(self, hw: HardwareSpec, kind: str) -> float:
        assert self.cross is not None and self.cross.oof is not None
        data = self.data
        if len(data.candidates) != len(data) or len(self.cross.oof) != len(data):
            return 0.0
        prior = np.zeros((len(data), 8))
        groups: dict[tuple[str, str | None, str], list[int]] = {}
        prints = data.fingerprints if len(data.fingerprints) == len(data) else [None] * len(data)
        for i, (name, key) in enumerate(zip(data.tasks, data.keys, strict=True)):
            if family(data.candidates[i]) == kind:
                groups.setdefault((name, prints[i], key[1]), []).append(i)
        usable = np.zeros(len(data), dtype=bool)
        for (name, fingerprint, device), idx in groups.items():
            task = self._owner(name, fingerprint)
            spec = self.hardware.get(device)
            if task is None or spec is None:
                continue
            mu, sd = self.prior(task, [data.candidates[i] for i in idx], spec)
            prior[idx] = lognormal_bins(mu, sd).reshape(len(idx), -1)
            usable[idx] = True
        if not usable.any():
            return 0.0
        sims = np.array([device_similarity(self.hardware.get(key[1]), hw) for key in data.keys])[usable]
        y = np.asarray(data.bins)[usable] - 1
        p_prior, p_forest = prior[usable], self.cross.oof[usable]
        rows = np.arange(len(y))
        mixed = [(1 - w) * p_prior[rows, y] + w * p_forest[rows, y] for w in STACK_GRID]
        losses = [float(-(sims * np.log(np.clip(m, 1e-12, None))).sum()) for m in mixed]
        best = float(STACK_GRID[int(np.argmin(losses))])
        n_eff = float(sims.sum())
        return best * n_eff / (n_eff + STACK_N0)

    # ---- in-task learning ---------------------------------------------------------------
    def _task_data(self, task: Task, hw: HardwareSpec) -> _TaskData:
        """The in-task data of (task, device, size set): a run at small sizes learns from small-size rows only
        (the store's history is full-size). Kept by the task's fingerprint: two tasks of one name are two."""
        key = (task.fingerprint, hw.key, task.measured_at)
        if key not in self._tasks:
            history = self._history.get((task.name, hw.key), []) if task.measured_at == "full" else []
            own = [(c, m) for c, m in history if task.owns(m.task_fingerprint)]  # not another task of its name
            self._tasks[key] = _TaskData(task, hw, own, [])
        entry = self._tasks[key]
        entry.task, entry.hardware = task, hw
        return entry

    def _fit_task(self, entry: _TaskData) -> None:
        rows = entry.rows()
        if not rows:
            entry.model = None
            return
        cands = [c for c, _ in rows]
        feats, mean, sd = self._task_inputs(entry.task, cands, entry.hardware)
        y = [math.log(m.speedup) for _, m in rows if m.speedup]
        entry.model = TaskModel.fit(feats, mean, sd, y)

    def _task_inputs(self, task: Task, candidates: Sequence[Candidate], hw: HardwareSpec
                     ) -> tuple[list[dict[str, float]], np.ndarray, np.ndarray]:
        base = self.base(task, candidates, hw)
        mu_prior, _ = self.prior(task, candidates, hw)
        ctx = context(task, hw)
        feats = []
        for cand, m in zip(candidates, mu_prior, strict=True):
            f = task_features(candidate_features(ctx, cand), cand.edits)
            f["roof.mu"] = float(m)
            feats.append(f)
        stats = np.array([moments(p) for p in base])
        return feats, stats[:, 0], stats[:, 1]

    def learn(self, pairs: Pairs, hardware: Mapping[str, HardwareSpec]) -> bool:
        """Take a run's measured pairs (all so far); refit the in-task models they touch. Returns whether
        anything changed (the same history again is a no-op, so callers may pass it every time)."""
        grouped: dict[tuple[str, str, str], list[tuple[Candidate, Measurement]]] = {}
        for cand, m in pairs:
            if m.ok and m.device in hardware:
                grouped.setdefault((m.task, m.device, m.sizes), []).append((cand, m))
        changed = False
        for (name, device, sizes), rows in grouped.items():
            task = self._task(name)
            if task is None:
                continue
            entry = self._task_data(task.at_sizes("small" if sizes == "small" else "full"), hardware[device])
            if sorted((c.hash, m.speedup) for c, m in rows) == sorted((c.hash, m.speedup) for c, m in entry.run):
                continue
            entry.run = rows
            self._fit_task(entry)
            changed = True
        self.n_run = sum(len(t.run) for t in self._tasks.values())
        return changed

    # ---- forecasting ------------------------------------------------------------------
    def forecast(self, task: Task, candidate: Candidate, hardware: HardwareSpec) -> Forecast:
        return self.forecast_many(task, [candidate], hardware)[0]

    def forecast_many(self, task: Task, candidates: Sequence[Candidate], hardware: HardwareSpec) -> list[Forecast]:
        if not candidates:
            return []
        self.known[task.name] = task.at_sizes("full")  # a view's measurements find it again through at_sizes
        start = time.perf_counter()
        try:
            probs, mode, beliefs = self._distributions(task, candidates, hardware)
        except Exception as exc:  # noqa: BLE001 - a broken layer must defer, never crash a search
            reason = f"internal: {type(exc).__name__}: {exc}"
            return [Forecast.uninformative(reason, forecaster=self.name, model=self.model_name, mode="blend")
                    .for_candidate(task, c) for c in candidates]
        prov = Provenance(forecaster=self.name, model=self.model_name, mode=mode,
                          latency_s=(time.perf_counter() - start) / len(candidates))
        if beliefs is None:
            return [Forecast.from_probabilities(p, prov, task=task.name, candidate_hash=c.hash)
                    for p, c in zip(probs, candidates, strict=True)]
        mu, sd, dof = beliefs
        return [Forecast.from_probabilities(p, prov.model_copy(update={"log_speedup_mean": float(m),
                                                                       "log_speedup_sd": float(s),
                                                                       "log_speedup_dof": dof}),
                                            task=task.name, candidate_hash=c.hash)
                for p, m, s, c in zip(probs, mu, sd, candidates, strict=True)]

    def _distributions(self, task: Task, candidates: Sequence[Candidate], hw: HardwareSpec
                       ) -> tuple[np.ndarray, str, tuple[np.ndarray, np.ndarray, float | None] | None]:
        """Bin distributions, the layer that made them, and (mean, sd, Student-t dof or None for a normal) of
        ln S where that layer has a continuous belief."""
        entry = self._task_data(task, hw)
        if entry.model is None and entry.rows():
            self._fit_task(entry)
        if entry.model is None or entry.model.n == 0:
            probs = self.base(task, candidates, hw)
            if self._stack_weights(hw, candidates).any():
                return probs, "blend", None
            mu, sd = self.prior(task, candidates, hw)
            sd = np.hypot(sd, self.family_spread(entry, candidates))
            return lognormal_bins(mu, sd).reshape(len(candidates), -1), "prior", (mu, sd, None)
        feats, mean, _ = self._task_inputs(task, candidates, hw)
        mu, sd = entry.model.predict(feats, mean)
        sd = np.hypot(sd, self.family_spread(entry, candidates))
        probs = lognormal_bins(mu, sd, PREDICTIVE_DOF).reshape(len(candidates), -1)
        return probs, "in-task", (mu, sd, PREDICTIVE_DOF)

    def family_spread(self, entry: _TaskData, candidates: Sequence[Candidate]) -> np.ndarray:
        """The epistemic sd of ln S each candidate's family adds (see FAMILY_SPREAD): wide for a family with no
        measurement in this task and none in the training data, shrinking with each one."""
        in_task = Counter(transformation_family(c) for c, _ in entry.rows())
        if self._trained_families is None:
            self._trained_families = Counter(transformation_family(c) for c in self.data.candidates)
        trained = self._trained_families
        families = [transformation_family(c) for c in candidates]
        evidence = np.array([in_task[f] + CROSS_TASK_EVIDENCE * trained[f] for f in families], dtype=float)
        # template points and written kernels are the population the prior and the forest were fitted on (and
        # the shipped seed replay certifies): no extra spread; derived families are what they never saw
        derived = np.array([f not in (TEMPLATE, WRITTEN_FAMILY) for f in families], dtype=float)
        return derived * FAMILY_SPREAD * np.sqrt(FAMILY_N0 / (FAMILY_N0 + evidence))


def family(candidate: Candidate) -> str:
    """Which population a candidate belongs to for the stacking weight: a derived template's points and their
    variants (their origin is "derived"), or the rest. On four kernels without a template (bench/kernels,
    120 random derived points each, this machine) the forest's share fitted on the seed's template points (0.9)
    turned the prior's ranking (Spearman 0.26-0.42 within a kernel) into noise (0.06-0.12)."""
    return DERIVED if candidate.origin == "derived" else WRITTEN


__all__ = ["BlendedForecaster", "PRIOR_SHRINK", "PRIOR_SIGMA"]
