"""Scoring any forecaster on a held-out set of a forecaster dataset (``kernelcast forecaster eval``).

The forecaster sees each row's candidate with its comments stripped, its task (looked up by name: a built-in or
a task file the store recorded) and its device's spec; the scores are the paper's (through
:func:`kernelcast.calibration_report.evaluate`): accuracy, within one bin, halved Brier, CRPS, ECE, AURC and the
recovered speedup at the top 1 / 10 / 50 % of each (task, device) pool, plus whether error falls as confidence
rises (the Spearman correlation of the confidence with the absolute bin error: negative when it does).

A forecaster that has learned from the evaluation tasks (a trained model whose training rows held them, the
blended forecaster built from a store and seed that hold them) is not being scored on held-out data: the report
names those tasks (:func:`tasks_seen`) and the command warns (issue 65: the blend scored accuracy 0.75 on tasks it
had learned from, 0.17 when it had not).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np
from pydantic import BaseModel
from scipy.stats import spearmanr

from kernelcast.agents.forecast.base import Forecaster
from kernelcast.agents.forecast.local import LocalModelForecaster
from kernelcast.agents.train.data import TrainingRow
from kernelcast.calibration_report import CalibrationData, evaluate
from kernelcast.tools.core.task import Task


class EvalReport(BaseModel):
    forecaster: str
    n: int
    failed_forecasts: int  # scored as the uniform distribution they are
    accuracy: float
    within_one: float
    brier_halved: float
    crps: float
    ece: float
    aurc: float
    recovered_at_1: float
    recovered_at_10: float
    recovered_at_50: float
    spearman_confidence_error: float  # < 0: the error falls as confidence rises
    mean_confidence: float
    wall_s: float
    seen_tasks: list[str] = []  # evaluation tasks the forecaster learned from: its scores are not held-out scores


REPORT_ROWS = (("accuracy (bin exact)", "accuracy"), ("within one bin", "within_one"), ("Brier (halved)", "brier_halved"),
               ("CRPS (ordinal)", "crps"), ("ECE (10 buckets)", "ece"), ("AURC", "aurc"),
               ("recovered @ top 1 %", "recovered_at_1"), ("recovered @ top 10 %", "recovered_at_10"),
               ("recovered @ top 50 %", "recovered_at_50"), ("Spearman(confidence, |bin error|)", "spearman_confidence_error"),
               ("mean confidence", "mean_confidence"))


def forecast_rows(forecaster: Forecaster, rows: Sequence[TrainingRow], lookup: Callable[[str], Task],
                  on_progress: Callable[[int, int], None] | None = None) -> tuple[np.ndarray, int]:
    """(N x 8 forecasts in the rows' order, how many failed), one ``forecast_many`` per task and device."""
    probs = np.zeros((len(rows), 8))
    failed = done = 0
    groups: dict[tuple[str, str], list[int]] = {}
    for i, row in enumerate(rows):
        groups.setdefault((row.task, row.device), []).append(i)
    for (task_name, _), index in groups.items():
        task = lookup(task_name)
        forecasts = forecaster.forecast_many(task, [rows[i].candidate for i in index], rows[index[0]].hardware)
        for i, fc in zip(index, forecasts):
            probs[i] = fc.probabilities
            failed += fc.failed
        done += len(index)
        if on_progress is not None:
            on_progress(done, len(rows))
    return probs, failed


def score_rows(name: str, probs: np.ndarray, rows: Sequence[TrainingRow], failed: int = 0,
               wall_s: float = 0.0) -> EvalReport:
    truth = np.array([r.true_bin for r in rows])
    data = CalibrationData(probs, truth, np.array([r.speedup for r in rows]), [f"{r.task}@{r.device}" for r in rows],
                           0, failed)
    summary, recovered = evaluate(data)
    error = np.abs(probs.argmax(axis=1) + 1 - truth)
    confidence = probs.max(axis=1)
    rho = spearmanr(confidence, error).statistic if np.ptp(confidence) > 0 and np.ptp(error) > 0 else float("nan")
    return EvalReport(forecaster=name, n=summary.n, failed_forecasts=failed, accuracy=summary.accuracy,
                      within_one=summary.within_one, brier_halved=summary.brier_halved, crps=summary.crps,
                      ece=summary.ece, aurc=summary.aurc, recovered_at_1=recovered[1.0], recovered_at_10=recovered[10.0],
                      recovered_at_50=recovered[50.0], spearman_confidence_error=float(rho),
                      mean_confidence=summary.mean_confidence, wall_s=wall_s)


def tasks_seen(forecaster: Forecaster) -> set[str]:
    """The tasks a forecaster learned from, where it records them: a trained model's training rows' tasks, the
    blended forecaster's training set's (empty for the others: the prior and remote models learn nothing of ours)."""
    from kernelcast.agents.forecast.blend import BlendedForecaster  # scikit-learn: loaded only to evaluate

    if isinstance(forecaster, LocalModelForecaster):
        return forecaster.trained_tasks()
    if isinstance(forecaster, BlendedForecaster):
        return set(forecaster.data.tasks)
    return set()


def evaluate_forecaster(name: str, forecaster: Forecaster, rows: Sequence[TrainingRow], lookup: Callable[[str], Task],
                        on_progress: Callable[[int, int], None] | None = None) -> EvalReport:
    started = time.perf_counter()
    probs, failed = forecast_rows(forecaster, rows, lookup, on_progress)
    report = score_rows(name, probs, rows, failed, time.perf_counter() - started)
    report.seen_tasks = sorted(tasks_seen(forecaster) & {r.task for r in rows})
    return report
