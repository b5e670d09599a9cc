"""Learning one task's candidates from its first measurement: a Bayesian linear correction.

Inside a run the question is relative: which of this task's candidates is
faster than the others? A model trained on other kernels places a new kernel
badly in absolute terms, but a handful of its own measurements fix the level
and the direction of each edit. This model takes a base belief per candidate
(mean and spread of ln S from the prior or the cross-task model) and learns

    ln S = base_mean + (BASE_SLOPE - 1) (base_mean - its mean over the measured) + w . phi(candidate) + noise

with a Gaussian prior on ``w`` (zero: trust the stretched base until data says
otherwise; the base is calibrated across tasks, so inside one task its
differences are shyer than the candidates'). ``phi`` holds an intercept (the
level), the base mean itself (how far to trust its spread of predictions), the launch geometry and template
parameters (scaled by their spread over the task's measured candidates, at least one doubling) and the generic
edits the candidate carries (work-group, build option, unroll pragma): features of the
edit, so a difference between two candidates is a difference of their
features (the same as learning ln(S_child / S_parent)). One measurement moves
the level, two or three already order the rest.

What the linear law leaves over is not all noise: a point that measured far
above the fit usually has neighbours that do too (a good tile size stays good
one step away). So the residual is a Gaussian process over the template
parameters and the edits (exponential kernel in L1 distance): a share
``NEIGHBOUR_SHARE`` of the residual variance is local and carries over to a
measured point's neighbours, decaying with the size of the edit; the rest is
independent. The linear weights and the local part are one Gaussian model
(covariance Phi S Phi^T + local + noise), solved jointly.

Confidence grows with data, no cliff: the predictive spread is the posterior
uncertainty of the linear weights and of the local part plus the independent
noise (the residual level is estimated from the residuals, shrunk towards the
base's spread with few points), then scaled by a factor fitted on
leave-one-out residuals of the task's own measurements (held-out folds that
include the run's earliest points).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from kernelcast.agents.forecast.features import Features
from kernelcast.tools.core.edit import Edit

# pseudo-observations of the base's spread in the noise estimate: a handful of residuals of a model fitted to
# them understate its error on the task's other candidates (seed dataset, task held out, 5 draws of 4 taught
# measurements per task: ECE 0.065 with 3, 0.051 with 10, ranking unchanged)
NOISE_PRIOR_WEIGHT = 10.0
SCALE_PRIOR_WEIGHT = 4.0  # pseudo-observations of "well calibrated" in the LOO spread factor
MIN_NOISE = 0.15  # ln S: repeated measurements of one kernel spread about this much on a loaded CPU
# the predictive is a Student-t of this many degrees of freedom with the model's sd, not a normal: residuals of
# a fit to a handful of a new kernel's measurements are peaked with heavy tails (most candidates land near the
# corrected level, a few far off). forecaster_bench (seed dataset, 5 draws of 4 taught measurements per task,
# task held out): normal ECE 0.062 / CRPS 0.112 / within-1 61 %, t(3) 0.049 / 0.108 / 70 %; same mean, same ranking
PREDICTIVE_DOF = 3.0
PRIOR_SCALES = {"level": 1.0, "base": 2.0}  # prior sd of the intercept and of the base-mean slope
# prior mean of that slope: how many units of ln S one unit of the base mean is worth between one task's
# candidates. The base is calibrated across tasks, so inside one task its differences are shy: the seed dataset's
# within-task regression of ln S on the leave-task-out base has a median slope of 2.9 (20 task-device groups,
# -2.0 to 19.5), the search bench's brute-forced spaces 3.5-11.4 (the base's spread inside a space: 0.04-0.07
# in ln S, the candidates': 0.5-0.7). With a prior slope of 1 (sd 1) the in-task model could not learn the
# stretch from a handful of points, so the candidates a search had not measured were all forecast near the level
# of the few it had (the best ones): on the search bench's spaces, brute force against forecast, mean z -0.5 to
# -1.2. forecaster_bench, in-task after 4, task / device held out, slope 1 (sd 1) -> 3 (sd 1) -> 3 (sd 2):
# recovered@10 % (search reading) 85.5 / 84.0 -> 89.2 / 86.4 -> 89.6 / 87.0 %, ECE 0.038 / 0.027 -> 0.017 /
# 0.041 -> 0.023 / 0.032, within-1 71.0 / 71.9 -> 70.9 / 67.4 -> 71.1 / 69.6 %. (A residual prior of the seed's
# within-task spread, 0.56, instead of the base's 0.9, made it overconfident: ECE 0.081 / 0.101.)
BASE_SLOPE = 3.0
# prior sd of every other feature's weight per unit of the feature's scale, which is the measured candidates'
# spread but at least one natural unit (UNIT): features are template parameters and sizes on a log2 scale (one
# doubling is 1), counts and 0/1 switches. Until 2026-12-02 the scale was the measured spread alone: a search
# measures neighbours of its best point, whose spread is small, so a point a few doublings away sat many
# "standard deviations" out and its predictive spread exploded (search bench, in-task forecasts with sd > 1 in
# ln S: median |z| 0.42-0.46 where a calibrated t(3) gives 0.77), and the expected gain sent the last
# measurements of a budget-8 search to far random points (gemv: 0.66-1.04x points picked over a 2.64x
# neighbour). A feature constant among the measured is kept: a candidate that differs in it is uncertain by the
# prior, not certain. forecaster_bench, in-task, task / device held out: ECE 0.047 / 0.015 -> 0.038 / 0.027,
# recovered@10 % (search reading) 84.8 / 83.5 -> 85.5 / 84.0 %; natural units alone (no measured spread):
# 0.032 / 0.024, 83.0 / 82.4 %
FEATURE_SCALE = 0.1
UNIT = 1.0
# share of the residual variance that is local (shared by candidates a few edits apart) and the L1 distance over
# template parameters (1 + log2 scale: one doubling is 1) and edit indicators at which that sharing falls by e.
# Seed dataset, 4 linear fits of 4 measurements per task: a held-out point's residual correlates 0.68 with that
# of a taught point one step away and 0.37 with one more than 4 away. forecaster_bench without the local part
# [with], task / device held out: in-task ECE 0.051 / 0.021 [0.047 / 0.015], recovered@10 % 86.9 / 84.8 %
# [84.8 / 83.5 %] (random taught points, no neighbours among them: ranking costs a little; length 2 gave ECE
# 0.036 / 0.024 but 81.5 / 79.5 %). What it is for: P(beat the best of 8 taught) <= 0.1 for that point's one-step
# neighbours on the search bench's brute-forced spaces, 8.6 % of them beat it [6.1 %]; search bench selective at
# 24 measurements, gemv 78.1 [91.6] %, conv2d_tiled 129.2 [142.9] %, the other cells unchanged
NEIGHBOUR_SHARE = 0.8
NEIGHBOUR_LENGTH = 1.0
_LOCAL_PREFIXES = ("param.", "edit:")
_EDIT_LABEL = re.compile(r"[A-Za-z][A-Za-z \-]*[A-Za-z]")


# the indicator each generic edit sets (tools.core.edit): the names the in-task model was fitted and certified with
_EDIT_FEATURES = {"local_size": "work-group", "unroll_pragma": "pragma unroll"}


def edit_features(edits: Sequence[Edit]) -> Features:
    """Indicators of the edits added to a candidate's point or kernel (its generic edits: work-group size, build
    option, unroll pragma). A template's or a derived template's point is described by its params, so the
    point's own edits do not count. A variant made by two generic edits at once sets the first one's indicator
    only, as the in-task model has always read them."""
    added = [e for e in edits if e.generic]
    if not added:
        return {}
    return {f"edit:{_feature(added[0])}": 1.0}


def _feature(edit: Edit) -> str:
    """A build option's indicator is named by the option's leading letters and hyphens
    ("-maxrregcount=64" sets "build option -maxrregcount")."""
    if edit.name == "build_option":
        label = _EDIT_LABEL.match(f"build option {edit.values.get('option', '')}")
        return label.group(0).lower() if label else "build option"
    return _EDIT_FEATURES.get(edit.name, edit.name)


def task_features(features: Features, edits: Sequence[Edit]) -> Features:
    """The part of the full feature dict that varies between one task's candidates, plus edit indicators."""
    keep = {k: v for k, v in features.items()
            if k.startswith(("param.", "cand.log2_work", "cand.vector_width", "opt.", "cand.unroll", "cand.local_mem",
                             "cand.barriers", "roof."))}
    keep.update(edit_features(edits))
    return keep


@dataclass
class TaskModel:
    """Posterior of the correction for one (task, device), refitted from all its measured candidates."""

    names: list[str] = field(default_factory=list)
    mean: np.ndarray = field(default_factory=lambda: np.zeros(0))  # the measured candidates' mean features
    base_center: float = 0.0  # the measured candidates' mean base mean (where the prior slope pivots)
    scale: np.ndarray = field(default_factory=lambda: np.ones(0))  # ... and their spread, at least one unit
    w_mean: np.ndarray = field(default_factory=lambda: np.zeros(0))
    noise: float = 1.0  # sd of the independent part of the residual
    local_sd: float = 0.0  # sd of the local part of the residual (the Gaussian process over edits)
    spread_factor: float = 1.0
    n: int = 0
    train_design: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    train_local: list[Features] = field(default_factory=list)
    cov_inv: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    alpha: np.ndarray = field(default_factory=lambda: np.zeros(0))

    @classmethod
    def fit(cls, feats: Sequence[Features], base_mean: Sequence[float] | np.ndarray, base_sd: Sequence[float] | np.ndarray,
            log_speedups: Sequence[float]) -> "TaskModel":
        model = cls(n=len(log_speedups))
        if not len(log_speedups):
            return model
        model.names = sorted({k for f in feats for k in f})
        X = np.array([[f.get(k, 0.0) for k in model.names] for f in feats], dtype=np.float64)
        model.mean, model.scale = X.mean(axis=0), np.maximum(X.std(axis=0), UNIT)
        raw = np.asarray(base_mean, dtype=np.float64)
        model.base_center = float(raw.mean())
        b = model._offset(raw)
        y = np.asarray(log_speedups, dtype=np.float64)
        Phi = model._design(X, raw)
        prior_var = model._prior_var()
        s0 = float(np.mean(base_sd))
        noise = max(s0, MIN_NOISE)
        for _ in range(3):  # the residual level and the weights depend on each other: a few fixed-point steps
            w, _ = _posterior(Phi, y - b, prior_var, noise)
            resid = y - b - Phi @ w
            noise = math.sqrt((NOISE_PRIOR_WEIGHT * s0 ** 2 + float(resid @ resid)) / (NOISE_PRIOR_WEIGHT + len(y)))
            noise = max(noise, MIN_NOISE)
        model.local_sd = math.sqrt(NEIGHBOUR_SHARE) * noise
        model.noise = max(math.sqrt(1.0 - NEIGHBOUR_SHARE) * noise, MIN_NOISE)
        model.train_design, model.train_local = Phi, [_local_features(f) for f in feats]
        cov = (Phi * prior_var) @ Phi.T + model.local_sd ** 2 * _local_kernel(model.train_local, model.train_local) \
            + model.noise ** 2 * np.eye(len(y))
        model.cov_inv = np.linalg.inv(cov)
        model.alpha = model.cov_inv @ (y - b)
        model.w_mean = prior_var * (Phi.T @ model.alpha)
        model.spread_factor = _loo_spread_factor(model.alpha, model.cov_inv)
        return model

    def _prior_var(self) -> np.ndarray:
        return np.array([PRIOR_SCALES["level"] ** 2, PRIOR_SCALES["base"] ** 2]
                        + [FEATURE_SCALE ** 2] * len(self.names))

    def _offset(self, base_mean: Sequence[float] | np.ndarray) -> np.ndarray:
        """The prior mean of ln S: the base mean, its differences stretched by the prior slope."""
        b = np.asarray(base_mean, dtype=np.float64)
        return b + (BASE_SLOPE - 1.0) * (b - self.base_center)

    def _design(self, X: np.ndarray, base_mean: np.ndarray) -> np.ndarray:
        Z = (X - self.mean) / self.scale if len(self.names) else np.zeros((len(base_mean), 0))
        return np.column_stack([np.ones(len(base_mean)), base_mean, Z])

    def predict(self, feats: Sequence[Features], base_mean: Sequence[float] | np.ndarray,
                ) -> tuple[np.ndarray, np.ndarray]:
        """Mean and spread of ln S for candidates of the task."""
        if self.n == 0:
            raise RuntimeError("task model has no measurements")
        raw = np.asarray(base_mean, dtype=np.float64)
        b = self._offset(raw)
        X = np.array([[f.get(k, 0.0) for k in self.names] for f in feats], dtype=np.float64).reshape(len(b), -1)
        Phi = self._design(X, raw)
        prior_var = self._prior_var()
        cross = (Phi * prior_var) @ self.train_design.T \
            + self.local_sd ** 2 * _local_kernel([_local_features(f) for f in feats], self.train_local)
        mu = b + cross @ self.alpha
        var = self.noise ** 2 + self.local_sd ** 2 + np.einsum("ij,j,ij->i", Phi, prior_var, Phi) \
            - np.sum((cross @ self.cov_inv) * cross, axis=1)
        return mu, np.sqrt(np.maximum(var, MIN_NOISE ** 2)) * self.spread_factor


def _posterior(Phi: np.ndarray, target: np.ndarray, prior_var: np.ndarray, noise: float
               ) -> tuple[np.ndarray, np.ndarray]:
    precision = Phi.T @ Phi / noise ** 2 + np.diag(1.0 / prior_var)
    cov = np.linalg.inv(precision)
    return cov @ Phi.T @ target / noise ** 2, cov


def _loo_spread_factor(alpha: np.ndarray, cov_inv: np.ndarray) -> float:
    """sqrt of the mean squared leave-one-out z-score, shrunk towards 1 (calibration on held-out points). For a
    Gaussian model the leave-one-out residual of point i is alpha_i / K^-1_ii with variance 1 / K^-1_ii."""
    n = len(alpha)
    if n < 2:
        return 1.0
    z2 = alpha ** 2 / np.diag(cov_inv)
    return math.sqrt((SCALE_PRIOR_WEIGHT + float(np.sum(z2))) / (SCALE_PRIOR_WEIGHT + n))


def _local_features(f: Features) -> Features:
    return {k: v for k, v in f.items() if k.startswith(_LOCAL_PREFIXES)}


def _local_kernel(a: Sequence[Features], b: Sequence[Features]) -> np.ndarray:
    """exp(-L1 distance / NEIGHBOUR_LENGTH) over template parameters and edit indicators (a key one side lacks
    counts as 0 there: an edit the other candidate has not had)."""
    names = sorted({k for f in (*a, *b) for k in f})
    if not names:
        return np.ones((len(a), len(b)))
    A = np.array([[f.get(k, 0.0) for k in names] for f in a], dtype=np.float64).reshape(len(a), -1)
    B = np.array([[f.get(k, 0.0) for k in names] for f in b], dtype=np.float64).reshape(len(b), -1)
    distance = np.zeros((len(a), len(b)))
    for j in range(len(names)):  # one column at a time: a batch of forecasts against a long history stays small
        distance += np.abs(A[:, j, None] - B[None, :, j])
    return np.exp(-distance / NEIGHBOUR_LENGTH)


__all__ = ["PREDICTIVE_DOF", "TaskModel", "edit_features", "task_features"]
