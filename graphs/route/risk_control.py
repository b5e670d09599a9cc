"""Thresholds for trusting forecasts, with a finite-sample guarantee on the false-decision rate.

The router prunes a child when p = P(S_child > S_incumbent) is at most a
threshold t, and accepts it unmeasured when p is at least t'. A prune is
false when the child would in fact have beaten the incumbent; an acceptance
is false when it would not have. The user picks the tolerated share of false
decisions among the trusted ones, ``risk``.

Thresholds come from calibration rows (p of a past decision, whether the
child then measured faster than the incumbent of that moment): for a grid of
thresholds, ordered from the safest upwards, the Clopper-Pearson upper bound
of the false share among the rows the rule would have trusted must be at most
``risk``; the search stops at the first threshold that fails (fixed-sequence
testing, so the family-wise error stays at ``delta`` without a Bonferroni
penalty, as in Learn-then-Test).

Each test must also pass on every group of rows (the task of the decision) that the threshold would trust in
numbers enough to certify alone: a run is on one task, and a pooled rate can hide a task whose forecasts are
overconfident (the seed's replay, P(beat) <= 0.1 after 8-15 measurements: 3 % of histogram's children beat the
incumbent, 9 % of reduce_rows'; pooled certificates of 0.15-0.4 let the router bench prune reduce_rows children
at p = 0.075 that then measured 1.34x the incumbent, head to head). Requiring every such test to reject is an
intersection-union test, so it needs no multiplicity correction.

The first threshold tested is the safest one that trusts enough rows to be
certified with one false decision among them: starting where a clean record is just enough (22 rows at risk
0.1, confidence 0.9) let one error among the first rows end the sequence for every looser threshold, although
those had rows enough to absorb it (router_bench, one store over six tasks: after a pruned child with p = 0.145
measured faster, no round of softmax trusted anything again; a replay of the same calibration rows trusts 41 %
of the decisions with this rule against 29 %). With probability at least 1 - delta over the
calibration rows, the chosen rule's false-decision share is at most ``risk``, pooled and on each group with
enough rows at it (for decisions exchangeable with the calibration rows of their group). Too few rows give no
threshold at all: nothing is trusted and everything goes to the hardware.

A run is on one task, so when the calibration rows hold enough of that very task's decisions (``group``), they
alone certify: the guarantee is then on the run's own task, which is the share the user's ``--risk`` is about,
and another task's replayed rows can neither loosen nor block it (the device's own record, pooled or
per task, may still withdraw it) (router_bench, 6 built-ins on a device new to the seed:
with every group required to pass, 34 replayed gemv rows with 3 beats at P(beat) <= 0.02 ended the sequence for
every task at 0.02 in the 8-15 measurement bucket, while softmax's own 480 rows certify 0.3). Which rows certify
depends on their count alone, never on their outcomes. A task with too few rows of its own (a user's task the
seed never saw) keeps the rule above: pooled, and on every group with enough rows.

:func:`certify_stage` chooses the rows for one stage of a run: the device's own once it has enough, until then
the seed's replayed decisions (:mod:`kernelcast.graphs.route.replay_calibration`), whose thresholds the device's own
rows may withdraw but never loosen. A replayed side is first put on :func:`probation` on each task and
device: audited, not trusted, until its first audits there are judged, so one round cannot trust in bulk
on a calibration that does not transfer.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
from scipy.stats import beta

DEFAULT_RISK = 0.10  # at most 10 % of trusted decisions may be wrong ...
DEFAULT_DELTA = 0.10  # ... with 90 % confidence over the calibration data
PRUNE_GRID = (0.001, 0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4)
ACCEPT_GRID = tuple(1.0 - t for t in PRUNE_GRID)
DEVICE_RECORD = "device record"
SEED_REPLAY = "seed replay"
PROBATION_AUDITS = 2  # a replayed side's first audits on a task and device that must all be right before it is trusted
OWN_ROWS_TO_SWITCH = 200  # a stage's own rows from which the device's record alone certifies (a count, never an outcome)


@dataclass(frozen=True)
class CalibrationRow:
    """One past decision with its outcome: the forecast's p and whether the child beat the incumbent; ``group``:
    the task it was taken on (the risk is certified on each group with enough rows as well as pooled)."""

    p_beat: float
    beat: bool
    group: str = ""


@dataclass(frozen=True)
class TrustThresholds:
    """Prune at p <= prune_below, accept at p >= accept_above; None: never (not enough evidence)."""

    prune_below: float | None = None
    accept_above: float | None = None
    risk: float = DEFAULT_RISK
    delta: float = DEFAULT_DELTA
    n_calibration: int = 0
    prune_bound: float | None = None  # the Clopper-Pearson upper bound of false prunes at the chosen threshold
    accept_bound: float | None = None
    source: str = DEVICE_RECORD  # whose rows certified: the device's own decisions, or the seed's replayed ones
    certified_on: str = ""  # the task whose rows alone certified ("" : every task's rows, pooled and per task)
    prune_limited_by: str = ""  # the group whose bound ended the prune sequence ("" : the pooled rows, or none)
    withdrawn: tuple[str, ...] = ()  # replayed certificates the device's own record refuted ("prune", "accept")
    probation: tuple[tuple[str, int], ...] = ()  # replayed sides on trial on the run's task here, with the audits
    # each still needs: audited, not trusted (:func:`probation`)
    failed_probation: tuple[str, ...] = ()  # replayed certificates one of whose first audits here was wrong

    @property
    def trusts_anything(self) -> bool:
        return self.prune_below is not None or self.accept_above is not None

    def verdict(self, p_beat: float | None) -> Literal["prune", "accept"] | None:
        """What a forecast with this P(beat) falls under: prune, accept, or nothing (None). A side on
        :attr:`probation` is audited, not trusted (:meth:`on_probation`)."""
        if p_beat is None:
            return None
        if self.prune_below is not None and p_beat <= self.prune_below:
            return "prune"
        if self.accept_above is not None and p_beat >= self.accept_above:
            return "accept"
        return None

    def on_probation(self, verdict: str | None) -> bool:
        """Whether a verdict's side waits for its first audits on this task before it is trusted."""
        return verdict is not None and verdict in dict(self.probation)

    def trial_audits_needed(self, verdict: str | None) -> int:
        """How many more audits a side on probation needs before it is judged (0: not on probation)."""
        return dict(self.probation).get(verdict or "", 0)

    def describe(self) -> str:
        parts = [f"risk {self.risk:.0%} at {1 - self.delta:.0%} confidence, {self.n_calibration} calibration rows"
                 + (f" of {self.certified_on}" if self.certified_on else "")
                 + (" replayed from the seed" if self.source == SEED_REPLAY else "")]
        parts.append(f"prune p <= {self.prune_below:.3g}" if self.prune_below is not None else "no pruning")
        if self.prune_limited_by:
            parts.append(f"no looser pruning: its bound fails on {self.prune_limited_by}'s decisions")
        parts.append(f"accept p >= {self.accept_above:.3g}" if self.accept_above is not None else "no acceptance")
        parts += [f"the device's record refuted the replayed {kind} threshold" for kind in self.withdrawn]
        parts += [f"the replayed {kind} threshold failed one of its first audits on this task here"
                  for kind in self.failed_probation]
        parts += [f"the replayed {kind} threshold is on probation (audited, not trusted, until "
                  f"{PROBATION_AUDITS} audits on this task here are right; {left} to go)" for kind, left in self.probation]
        return "; ".join(parts)


def clopper_pearson_upper(errors: int, n: int, delta: float) -> float:
    """One-sided (1 - delta) upper confidence bound on a binomial proportion."""
    if n <= 0:
        return 1.0
    if errors >= n:
        return 1.0
    return float(beta.ppf(1 - delta, errors + 1, n - errors))


def clopper_pearson_interval(errors: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """Two-sided (1 - alpha) interval, for reporting a measured rate."""
    if n <= 0:
        return 0.0, 1.0
    lo = 0.0 if errors == 0 else float(beta.ppf(alpha / 2, errors, n - errors + 1))
    hi = 1.0 if errors == n else float(beta.ppf(1 - alpha / 2, errors + 1, n - errors))
    return lo, hi


def rows_to_certify(risk: float, delta: float, errors: int = 0) -> int:
    """The fewest rows whose bound with ``errors`` wrong among them is within ``risk``."""
    n = max(1, math.ceil(math.log(delta) / math.log(1.0 - risk)))  # the count with no error
    while clopper_pearson_upper(errors, n, delta) > risk:
        n += 1
    return n


def fit_thresholds(rows: Sequence[CalibrationRow], risk: float = DEFAULT_RISK, delta: float = DEFAULT_DELTA
                   ) -> TrustThresholds:
    """The loosest prune and accept thresholds whose false-decision share is certified at most ``risk``."""
    if not 0.0 < risk < 1.0 or not 0.0 < delta < 1.0:
        raise ValueError(f"risk and delta must be in (0, 1), got risk={risk}, delta={delta}")
    p = np.array([r.p_beat for r in rows], dtype=np.float64)
    beat = np.array([r.beat for r in rows], dtype=bool)
    groups = np.array([r.group for r in rows], dtype=object)
    prune, prune_bound, limited_by = _fixed_sequence([p <= t for t in PRUNE_GRID], beat, groups, PRUNE_GRID,
                                                     risk, delta)
    accept, accept_bound, _ = _fixed_sequence([p >= t for t in ACCEPT_GRID], ~beat, groups, ACCEPT_GRID, risk,
                                              delta)
    return TrustThresholds(prune, accept, risk, delta, len(rows), prune_bound, accept_bound,
                           prune_limited_by=limited_by)


def rows_of_group(rows: Sequence[CalibrationRow], group: str, risk: float = DEFAULT_RISK,
                  delta: float = DEFAULT_DELTA) -> tuple[list[CalibrationRow], str]:
    """(the rows that certify a run on ``group``, the group they are limited to): the group's own rows when
    they number enough to certify with one false decision among them, else all rows ("")."""
    own = [r for r in rows if group and r.group == group]
    if own and len(own) >= rows_to_certify(risk, delta, errors=1):
        return own, group
    return list(rows), ""


def fit_for_group(rows: Sequence[CalibrationRow], group: str, risk: float = DEFAULT_RISK,
                  delta: float = DEFAULT_DELTA) -> TrustThresholds:
    """:func:`fit_thresholds` on the rows that certify a run on ``group`` (:func:`rows_of_group`)."""
    chosen, on = rows_of_group(rows, group, risk, delta)
    return replace(fit_thresholds(chosen, risk, delta), certified_on=on)


def certify_stage(own: Sequence[CalibrationRow], replayed: Sequence[CalibrationRow], risk: float = DEFAULT_RISK,
                  delta: float = DEFAULT_DELTA, group: str = "") -> TrustThresholds:
    """Thresholds for one stage bucket of a run on ``group`` (its task; "" : unknown): the device's own rows
    once it has ``OWN_ROWS_TO_SWITCH`` of them, until then the seed's replayed rows, each limited to the
    group's own when it has enough (:func:`rows_of_group`), and each replayed threshold withdrawn if the
    device's own rows refute it.

    Which source certifies depends on a count alone, so each keeps its guarantee (for decisions exchangeable
    with its rows). A refutation: among the device's own rows the threshold would have trusted, the false
    share's lower confidence bound (at 1 - delta) exceeds ``risk``. It can only withdraw trust, never add it.
    """
    if len(own) >= OWN_ROWS_TO_SWITCH or not replayed:
        return fit_for_group(own, group, risk, delta)
    fitted = fit_for_group(replayed, group, risk, delta)
    p = np.array([r.p_beat for r in own], dtype=np.float64)
    beat = np.array([r.beat for r in own], dtype=bool)
    groups = np.array([r.group for r in own], dtype=object)
    prune, accept = fitted.prune_below, fitted.accept_above
    withdrawn: list[str] = []
    if prune is not None and _refuted(beat, groups, p <= prune, risk, delta):
        prune, withdrawn = None, withdrawn + ["prune"]
    if accept is not None and _refuted(~beat, groups, p >= accept, risk, delta):
        accept, withdrawn = None, withdrawn + ["accept"]
    return TrustThresholds(prune, accept, risk, delta, fitted.n_calibration,
                           fitted.prune_bound if prune is not None else None,
                           fitted.accept_bound if accept is not None else None, source=SEED_REPLAY,
                           prune_limited_by=fitted.prune_limited_by, withdrawn=tuple(withdrawn),
                           certified_on=fitted.certified_on)


def probation(thresholds: TrustThresholds, first_audits: Mapping[str, Sequence[bool]]) -> TrustThresholds:
    """Replayed thresholds after their trial on the run's task on this device: ``first_audits`` gives, per
    side ("prune", "accept"), whether each audit of that side under replayed trust on this task and device was
    wrong, oldest first.

    The seed's replayed rows certify for decisions exchangeable with them, and a task whose space differs on
    this device breaks that (router_bench seed 1: 4 of 12 checked gemv prunes on a flat space were wrong by
    5-8 %, under a replayed 0.2 certified for the stage; the two audits that were wrong too came in the round
    that pruned 166 children). So a replayed side is only audited until its first ``PROBATION_AUDITS`` audits
    here are judged; it is trusted if all of them were right, and withdrawn for the task if one was wrong
    (the device's own record certifies it later). Only ever withdraws or delays trust: the guarantee of the
    replayed rows stands for what remains.

    Limits: the trial is per task and side, not per stage bucket (a pass at one stage's threshold admits
    another stage's, certified on the same replayed rows); "first" is among the audits the caller reads
    (the device's latest runs, :data:`kernelcast.graphs.route.trust.MAX_RUNS`), so a trial older than that is
    forgotten and held again.
    """
    if thresholds.source != SEED_REPLAY:
        return thresholds
    sides = {"prune": thresholds.prune_below, "accept": thresholds.accept_above}
    waiting: list[tuple[str, int]] = []
    failed: list[str] = []
    for side, threshold in sides.items():
        if threshold is None:
            continue
        first = list(first_audits.get(side, ()))[:PROBATION_AUDITS]
        if any(first):
            sides[side], failed = None, failed + [side]
        elif len(first) < PROBATION_AUDITS:
            waiting.append((side, PROBATION_AUDITS - len(first)))
    return replace(thresholds, prune_below=sides["prune"], accept_above=sides["accept"],
                   prune_bound=thresholds.prune_bound if sides["prune"] is not None else None,
                   accept_bound=thresholds.accept_bound if sides["accept"] is not None else None,
                   probation=tuple(waiting), failed_probation=tuple(failed))


def clopper_pearson_lower(errors: int, n: int, delta: float) -> float:
    """One-sided (1 - delta) lower confidence bound on a binomial proportion."""
    if n <= 0 or errors <= 0:
        return 0.0
    return float(beta.ppf(delta, errors, n - errors + 1))


def _refuted(wrong: np.ndarray, groups: np.ndarray, trusted: np.ndarray, risk: float, delta: float) -> bool:
    """Whether the rows a threshold would have trusted show its false share above ``risk``, pooled or in one
    group (withdrawing trust is the safe direction, so any refutation counts)."""
    subsets = [trusted] + [alone for _, alone in _by_group(trusted, groups)]
    return any(clopper_pearson_lower(int((wrong & s).sum()), int(s.sum()), delta) > risk for s in subsets)


def _by_group(trusted: np.ndarray, groups: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """(group, its trusted rows) for each group among the trusted rows, in name order."""
    return [(str(g), trusted & (groups == g)) for g in sorted(set(groups[trusted].tolist()))]


def _fixed_sequence(trusted_sets: list[np.ndarray], wrong: np.ndarray, groups: np.ndarray, grid: Sequence[float],
                    risk: float, delta: float) -> tuple[float | None, float | None, str]:
    """Test thresholds safest first, stop at the first one whose bound exceeds the risk, pooled or in a group
    with enough trusted rows to be tested alone: (threshold, its pooled bound, the group that ended the sequence).

    Thresholds, and groups, that trust fewer rows than could certify the risk with one error among them are
    skipped, not failed: which ones those are depends on the forecasts only, never on the outcomes, so the
    order of the tests stays fixed given the forecasts and the guarantee holds.
    """
    needed = rows_to_certify(risk, delta, errors=1)
    chosen, chosen_bound = None, None
    for t, trusted in zip(grid, trusted_sets, strict=True):
        n = int(trusted.sum())
        if n < needed:
            continue
        bound = clopper_pearson_upper(int((wrong & trusted).sum()), n, delta)
        if bound > risk:
            return chosen, chosen_bound, ""
        for group, alone in _by_group(trusted, groups):
            k = int(alone.sum())
            if k >= needed and clopper_pearson_upper(int((wrong & alone).sum()), k, delta) > risk:
                return chosen, chosen_bound, group
        chosen, chosen_bound = t, bound
    return chosen, chosen_bound, ""


__all__ = ["ACCEPT_GRID", "CalibrationRow", "DEFAULT_DELTA", "DEFAULT_RISK", "DEVICE_RECORD", "OWN_ROWS_TO_SWITCH",
           "PROBATION_AUDITS", "PRUNE_GRID", "SEED_REPLAY", "TrustThresholds", "certify_stage", "clopper_pearson_interval",
           "clopper_pearson_lower", "clopper_pearson_upper", "fit_for_group", "fit_thresholds", "probation", "rows_of_group",
           "rows_to_certify"]
