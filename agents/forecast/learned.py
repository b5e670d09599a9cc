"""The offline default forecaster: a scikit-learn classifier over bins, trained on measured pairs.

It needs no network and no API key. Trained on the store's (candidate,
measurement) pairs, with static features from :mod:`kernelcast.agents.forecast.features`, it is
calibrated post hoc by temperature fitted on out-of-fold predictions. Below
``min_samples`` correct measurements it answers uninformative forecasts; the
forecaster a run uses (:mod:`kernelcast.agents.forecast.blend`) starts from
the roofline prior instead and weighs this model in by its held-out skill, so
there is no cliff. Rows may carry weights (how similar their device is to the
one forecast for). Save/load use joblib (a pickle: load only files you trust).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import joblib
import numpy as np
from sklearn.ensemble import RandomForestClassifier
from sklearn.feature_extraction import DictVectorizer
from sklearn.model_selection import GroupKFold, KFold, StratifiedKFold

from kernelcast.agents.forecast.base import Forecast, Provenance
from kernelcast.agents.forecast.calibration import Calibrator
from kernelcast.agents.forecast.features import Context, Features, candidate_features, context
from kernelcast.agents.forecast.scoring import ScoreSummary, recovered_speedup, summarize
from kernelcast.tools.core.bins import LOG_BIN_CENTERS, NUM_BINS
from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.measurement import HardwareSpec, Measurement
from kernelcast.tools.core.task import Task, TaskError, builtin_task_paths, load_task, resolve_task

MIN_SAMPLES = 30  # below this the forest is not trained; the blend then rests on the prior
SMOOTHING = 0.01  # mixed-in uniform mass: a bin never seen in training is unlikely, not impossible
SAVE_FORMAT = 1
TaskLookup = Callable[[str], Task] | Mapping[str, Task]


class _Pairs(Protocol):
    def measured_pairs(self, device: str | None = None, sizes: str = "full") -> list[tuple[Candidate, Measurement]]: ...


class MeasuredPairs(Protocol):
    """The part of ``kernelcast.tools.store.store.Store`` training needs (agents only reads data through it)."""

    @property
    def ledger(self) -> _Pairs: ...


# ---- training data --------------------------------------------------------------------
@dataclass
class TrainingSet:
    """Feature dicts with their measured bins (1..8), task names and speedups."""

    features: list[Features] = field(default_factory=list)
    bins: list[int] = field(default_factory=list)
    tasks: list[str] = field(default_factory=list)
    speedups: list[float] = field(default_factory=list)
    keys: list[tuple[str, str]] = field(default_factory=list)  # (candidate hash, device) of each row
    skipped: Counter[str] = field(default_factory=Counter)
    candidates: list[Candidate] = field(default_factory=list)  # the featurized candidates (for the prior)
    fingerprints: list[str | None] = field(default_factory=list)  # each row's Measurement.task_fingerprint

    @property
    def devices(self) -> list[str]:
        return [device for _, device in self.keys]

    def __len__(self) -> int:
        return len(self.bins)

    def merged(self, newer: "TrainingSet") -> "TrainingSet":
        """These rows plus ``newer``'s; a (candidate, device) in both keeps ``newer``'s row (re-measured)."""
        fresh = set(newer.keys)
        keep = self.subset([key not in fresh for key in self.keys]) if self.keys else self
        keys = keep.keys + newer.keys if keep.keys or not len(keep) else []  # hand-built sets may lack keys
        cands = keep.candidates + newer.candidates if len(keep.candidates) == len(keep) and \
            len(newer.candidates) == len(newer) else []
        prints = keep.fingerprints + newer.fingerprints if len(keep.fingerprints) == len(keep) and \
            len(newer.fingerprints) == len(newer) else []
        return TrainingSet(keep.features + newer.features, keep.bins + newer.bins, keep.tasks + newer.tasks,
                           keep.speedups + newer.speedups, keys, candidates=cands, fingerprints=prints)

    def subset(self, mask: Sequence[bool] | np.ndarray) -> "TrainingSet":
        keep = [i for i, m in enumerate(mask) if m]
        return TrainingSet([self.features[i] for i in keep], [self.bins[i] for i in keep],
                           [self.tasks[i] for i in keep], [self.speedups[i] for i in keep],
                           [self.keys[i] for i in keep] if self.keys else [],
                           candidates=[self.candidates[i] for i in keep] if self.candidates else [],
                           fingerprints=[self.fingerprints[i] for i in keep] if self.fingerprints else [])


def training_set(pairs: Iterable[tuple[Candidate, Measurement]], tasks: TaskLookup = resolve_task,
                 hardware: Mapping[str, HardwareSpec] | None = None) -> TrainingSet:
    """Featurize measured pairs; failed measurements (bin 0), unknown tasks and measurements of another task
    of the same name (:func:`measured_task`) are counted and skipped.

    ``hardware`` maps a measurement's device key to its spec; without it the
    device features are absent (read as 0) for that device.
    """
    lookup = tasks.__getitem__ if isinstance(tasks, Mapping) else tasks
    data = TrainingSet()
    contexts: dict[tuple[str, str | None, str], Context | str] = {}
    for candidate, m in pairs:
        true_bin = m.bin()
        if true_bin == 0:
            data.skipped["failed measurement"] += 1
            continue
        key = (m.task, m.task_fingerprint, m.device)
        if key not in contexts:
            try:
                task = measured_task(lookup, m.task, m.task_fingerprint)
            except (TaskError, KeyError):
                contexts[key] = "unknown task"
            else:
                contexts[key] = (context(task, (hardware or {}).get(m.device)) if task is not None
                                 else "another task of the same name")
        ctx = contexts[key]
        if isinstance(ctx, str):
            data.skipped[ctx] += 1
            continue
        data.features.append(candidate_features(ctx, candidate))
        data.bins.append(true_bin)
        data.tasks.append(m.task)
        data.speedups.append(float(m.speedup or 0.0))
        data.keys.append((m.candidate_hash, m.device))
        data.candidates.append(candidate)
        data.fingerprints.append(m.task_fingerprint)
    return data


def measured_task(lookup: Callable[[str], Task], name: str, fingerprint: str | None) -> Task | None:
    """The task a measurement of ``name`` was measured on: the lookup's task of that name, else the built-in of
    that name, whichever owns the measurement's fingerprint; None when neither does (a task file edited since,
    or another file of the same name). Raises TaskError or KeyError for a name the lookup does not know."""
    task = lookup(name)
    if task.owns(fingerprint):
        return task
    path = builtin_task_paths().get(name)
    builtin = load_task(path) if path is not None else None
    return builtin if builtin is not None and builtin.owns(fingerprint) else None


class _Paths(Protocol):
    def paths(self) -> dict[str, str]: ...


class TaskPaths(Protocol):
    """The part of ``kernelcast.tools.store.store.Store`` a task lookup needs: where its tasks were loaded from."""

    @property
    def tasks(self) -> _Paths: ...


def task_lookup(store: TaskPaths | None = None, known: Mapping[str, Task] | None = None) -> Callable[[str], Task]:
    """Tasks by name: ones already loaded (``known``), else the file the store recorded for the name (tasks
    loaded from a path), else a built-in. Raises TaskError for a name none of them knows."""
    paths = store.tasks.paths() if store is not None else {}
    cache: dict[str, Task] = dict(known or {})

    def lookup(name: str) -> Task:
        if name in cache:
            return cache[name]
        path = paths.get(name)
        task: Task | None = None
        if path:
            try:
                task = load_task(path)
            except TaskError:
                task = None
            if task is not None and task.name != name:
                task = None
        cache[name] = task if task is not None else resolve_task(name)
        return cache[name]

    return lookup


# ---- the forecaster ----------------------------------------------------------------------
class LearnedForecaster:
    """A random forest over static features, temperature-calibrated, uninformative until trained."""

    name = "learned"

    def __init__(self, min_samples: int = MIN_SAMPLES, calibrate: bool = True, n_folds: int = 5,
                 random_state: int = 0, n_estimators: int = 200, seeded: bool = False) -> None:
        self.min_samples = min_samples
        self.calibrate = calibrate
        self.n_folds = n_folds
        self.random_state = random_state
        self.n_estimators = n_estimators
        self.vectorizer: DictVectorizer | None = None
        self.model: RandomForestClassifier | None = None
        self.calibrator: Calibrator | None = None
        self.n_train = 0
        self.seeded = seeded  # trained partly on the shipped seed dataset
        self.base = TrainingSet()  # what fit() was given
        self.online = TrainingSet()  # the current search's own measured pairs (see learn())
        self.weights: np.ndarray | None = None  # per-row training weights (device similarity)
        self.oof: np.ndarray | None = None  # calibrated held-out predictions of the training rows (for stacking)
        self.known_tasks: dict[str, Task] = {}  # tasks forecast so far: learn() can featurize tasks loaded from a path

    @property
    def trained(self) -> bool:
        return self.model is not None

    @property
    def model_name(self) -> str:
        cal = f", {self.calibrator.description}" if self.calibrator else ""
        cal += ", incl. seed dataset" if self.seeded else ""
        cal += f", {len(self.online)} from this run" if len(self.online) else ""
        return f"random-forest (n={self.n_train}{cal})"

    # ---- training ---------------------------------------------------------------------
    @classmethod
    def from_store(cls, store: MeasuredPairs, device: str | None = None, tasks: TaskLookup = resolve_task,
                   hardware: Mapping[str, HardwareSpec] | None = None, **kwargs: Any) -> "LearnedForecaster":
        """Train on every latest full-size measurement in the store (optionally one device).

        Device specs come from ``hardware`` or else the store's own device table.
        """
        if hardware is None and hasattr(store, "devices"):
            hardware = store.devices.all()
        return cls(**kwargs).fit(training_set(store.ledger.measured_pairs(device=device, sizes="full"), tasks, hardware))

    def fit(self, data: TrainingSet, weights: Sequence[float] | np.ndarray | None = None) -> "LearnedForecaster":
        """Train (or stay untrained below ``min_samples``); calibration uses out-of-fold predictions.

        ``weights`` (one per row) make rows count more or less, e.g. by how similar their device is.
        """
        self.base, self.online = data, TrainingSet()
        self.weights = None if weights is None else np.asarray(weights, dtype=np.float64)
        return self._fit(data)

    def learn(self, pairs: Sequence[tuple[Candidate, Measurement]], hardware: Mapping[str, HardwareSpec]) -> bool:
        """Retrain on the fit() data plus a search's own measured pairs (all of them so far, not a delta).

        A kernel the model has never seen is hard to place in absolute bins;
        a handful of its own measurements makes it a seen task (leave-task-out
        within-one rises from ~47 % to ~70 % with four). Returns whether the
        model changed; the same pairs again are a no-op, so callers may pass
        the run's whole history each time (resume-safe).
        """
        online = training_set(pairs, task_lookup(known=self.known_tasks), hardware=hardware)
        if sorted(zip(online.keys, online.bins)) == sorted(zip(self.online.keys, self.online.bins)):
            return False
        self.online = online
        self._fit(self.base.merged(online))
        return True

    def _fit(self, data: TrainingSet) -> "LearnedForecaster":
        self.n_train = len(data)
        self.vectorizer = self.model = self.calibrator = None
        self.oof = None
        if len(data) < self.min_samples:
            return self
        y = np.asarray(data.bins)
        w = self.weights if self.weights is not None and len(self.weights) == len(y) else None
        if self.calibrate:
            oof = self._out_of_fold(data.features, y, data.tasks, w)
            self.calibrator = Calibrator.fit(oof, y)
            self.oof = self.calibrator.transform(oof)
        self.vectorizer, self.model = self._train(data.features, y, w)
        return self

    def _train(self, feats: Sequence[Features], y: np.ndarray, weights: np.ndarray | None = None
               ) -> tuple[DictVectorizer, RandomForestClassifier]:
        vectorizer = DictVectorizer(sparse=False)
        X = vectorizer.fit_transform(feats)
        # one thread on purpose: OpenMP/joblib pools oversubscribe small shared machines badly
        model = RandomForestClassifier(n_estimators=self.n_estimators, min_samples_leaf=2, max_features="sqrt",
                                       n_jobs=1, random_state=self.random_state)
        model.fit(X, y, sample_weight=weights)
        return vectorizer, model

    def _out_of_fold(self, feats: Sequence[Features], y: np.ndarray, tasks: Sequence[str] = (),
                     weights: np.ndarray | None = None) -> np.ndarray:
        """Held-out predictions for calibration. With several tasks the folds hold out whole tasks, so the
        temperature reflects the uncertainty of forecasting a kernel the model has not seen."""
        groups = np.asarray(tasks)
        oof = np.zeros((len(y), NUM_BINS))
        if len(set(tasks)) >= 3:
            splits = GroupKFold(n_splits=min(self.n_folds, len(set(tasks)))).split(np.zeros(len(y)), y, groups)
        else:
            counts = Counter(y.tolist())
            splits = (StratifiedKFold if min(counts.values()) >= self.n_folds else KFold)(
                n_splits=self.n_folds, shuffle=True, random_state=self.random_state).split(np.zeros(len(y)), y)
        for train, test in splits:
            vectorizer, model = self._train([feats[i] for i in train], y[train],
                                            None if weights is None else weights[train])
            oof[test] = _raw_proba(model, _vectorize(vectorizer, [feats[i] for i in test]))
        return oof

    # ---- forecasting -----------------------------------------------------------------
    def predict_proba(self, feats: Sequence[Features]) -> np.ndarray:
        """Calibrated (N, 8) distributions for feature dicts (requires a trained model)."""
        if self.model is None or self.vectorizer is None:
            raise RuntimeError(f"learned forecaster is untrained ({self.n_train} < {self.min_samples} pairs)")
        probs = _raw_proba(self.model, _vectorize(self.vectorizer, feats))
        return self.calibrator.transform(probs) if self.calibrator else probs

    def forecast(self, task: Task, candidate: Candidate, hardware: HardwareSpec) -> Forecast:
        return self.forecast_many(task, [candidate], hardware)[0]

    def forecast_many(self, task: Task, candidates: Sequence[Candidate], hardware: HardwareSpec) -> list[Forecast]:
        """Batch forecasts (one feature context, one model call); never raises."""
        if not candidates:
            return []
        self.known_tasks[task.name] = task
        if not self.trained:
            reason = f"untrained: {self.n_train} measured pairs, needs {self.min_samples}"
            return [Forecast.uninformative(reason, forecaster=self.name, mode="learned").for_candidate(task, c)
                    for c in candidates]
        start = time.perf_counter()
        try:
            ctx = context(task, hardware)
            probs = self.predict_proba([candidate_features(ctx, c) for c in candidates])
        except Exception as exc:  # noqa: BLE001 - a broken feature or model must defer, not crash a search
            reason = f"internal: {type(exc).__name__}: {exc}"
            return [Forecast.uninformative(reason, forecaster=self.name, model=self.model_name, mode="learned")
                    .for_candidate(task, c) for c in candidates]
        per_item = (time.perf_counter() - start) / len(candidates)
        prov = Provenance(forecaster=self.name, model=self.model_name, mode="learned", latency_s=per_item,
                          calibration=self.calibrator.description if self.calibrator else None)
        return [Forecast.from_probabilities(p, prov, task=task.name, candidate_hash=c.hash)
                for p, c in zip(probs, candidates)]

    # ---- persistence -----------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        joblib.dump({"format": SAVE_FORMAT, "params": self._params(), "n_train": self.n_train,
                     "vectorizer": self.vectorizer, "model": self.model, "calibrator": self.calibrator,
                     "base": self.base}, path)
        return path

    @classmethod
    def load(cls, path: str | Path) -> "LearnedForecaster":
        state = joblib.load(Path(path))
        if not isinstance(state, dict) or state.get("format") != SAVE_FORMAT:
            raise ValueError(f"{path}: not a kernelcast learned-forecaster file (format {SAVE_FORMAT})")
        out = cls(**state["params"])
        out.n_train, out.vectorizer, out.model, out.calibrator = (state["n_train"], state["vectorizer"],
                                                                  state["model"], state["calibrator"])
        out.base = state.get("base") or TrainingSet()  # the data learn() retrains on
        if not hasattr(out.base, "fingerprints"):  # saved before rows kept their task fingerprint
            out.base.fingerprints = []
        return out

    def _params(self) -> dict[str, Any]:
        return {"min_samples": self.min_samples, "calibrate": self.calibrate, "n_folds": self.n_folds,
                "random_state": self.random_state, "n_estimators": self.n_estimators, "seeded": self.seeded}


def _vectorize(vectorizer: DictVectorizer, feats: Sequence[Features]) -> np.ndarray:
    """DictVectorizer.transform, fast for batches: rows with the same keys share one column lookup.

    Candidates of one task have identical feature names, so the per-key
    Python loop of DictVectorizer runs once per key set instead of per row.
    """
    vocab: dict[str, int] = vectorizer.vocabulary_
    X = np.zeros((len(feats), len(vocab)))
    layouts: dict[tuple[str, ...], tuple[np.ndarray, np.ndarray]] = {}
    for i, f in enumerate(feats):
        keys = tuple(f)
        if keys not in layouts:
            known = [(k, vocab[name]) for k, name in enumerate(keys) if name in vocab]
            layouts[keys] = (np.array([k for k, _ in known], dtype=int), np.array([c for _, c in known], dtype=int))
        src, dst = layouts[keys]
        X[i, dst] = np.fromiter(f.values(), dtype=np.float64, count=len(keys))[src]
    return X


def _raw_proba(model: RandomForestClassifier, X: np.ndarray) -> np.ndarray:
    """Model probabilities spread onto all 8 bins (unseen classes get 0), then smoothed."""
    out = np.zeros((X.shape[0], NUM_BINS))
    out[:, np.asarray(model.classes_, dtype=int) - 1] = model.predict_proba(X)
    return (1 - SMOOTHING) * out + SMOOTHING / NUM_BINS


# ---- evaluation ------------------------------------------------------------------------------
@dataclass(frozen=True)
class LeaveTaskOutReport:
    """Scores of forecasts for each task by a model trained on the other tasks."""

    per_task: dict[str, ScoreSummary]
    overall: ScoreSummary
    recovered: dict[float, float]  # k% -> mean over tasks of best-found / best-in-pool
    uninformative_tasks: list[str]  # tasks whose training folds were below min_samples


def leave_task_out(data: TrainingSet, ks: Sequence[float] = (10.0, 50.0), **params: Any) -> LeaveTaskOutReport:
    """Train on all tasks but one, forecast that one; repeat for each task.

    This measures what matters for a new kernel: generalization across tasks.
    Folds with too little training data forecast uniformly (as deployed).
    """
    names = sorted(set(data.tasks))
    if len(names) < 2:
        raise ValueError("leave-task-out evaluation needs measured pairs from at least two tasks")
    tasks = np.asarray(data.tasks)
    probs = np.zeros((len(data), NUM_BINS))
    per_task: dict[str, Any] = {}
    uninformative: list[Any] = []
    recovered: dict[Any, list[float]] = {k: [] for k in ks}
    for name in names:
        held = tasks == name
        model = LearnedForecaster(**params).fit(data.subset(~held))
        held_feats = [f for f, h in zip(data.features, held) if h]
        if model.trained:
            probs[held] = model.predict_proba(held_feats)
        else:
            probs[held] = 1.0 / NUM_BINS
            uninformative.append(name)
        y = np.asarray(data.bins)[held]
        per_task[name] = summarize(probs[held], y)
        speeds = np.asarray(data.speedups)[held]
        for k in ks:
            recovered[k].append(recovered_speedup(probs[held] @ LOG_BIN_CENTERS, speeds, k))
    overall = summarize(probs, data.bins)
    return LeaveTaskOutReport(per_task, overall, {k: float(np.mean(v)) for k, v in recovered.items()}, uninformative)


def forecasts_per_second(forecaster: LearnedForecaster, task: Task, candidates: Sequence[Candidate],
                         hardware: HardwareSpec) -> float:
    """Batch throughput, for benchmarks and the >= 2000/s requirement."""
    start = time.perf_counter()
    forecaster.forecast_many(task, candidates, hardware)
    return len(candidates) / max(time.perf_counter() - start, 1e-9)


__all__ = ["LearnedForecaster", "LeaveTaskOutReport", "MeasuredPairs", "TrainingSet", "forecasts_per_second",
           "leave_task_out", "measured_task", "task_lookup", "training_set", "MIN_SAMPLES"]
