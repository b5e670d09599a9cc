"""Evaluate stored forecasts against measurements: the paper's scoring rules, plus plots.

Reads forecast rows joined with the latest full-size measurement of the same
candidate on the same device; failed measurements (bin 0) are outside the
8-bin distribution and are counted separately, as docs/architecture.md asks.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kernelcast.agents.forecast.scoring import ScoreSummary, bucket_index, recovered_speedup, risk_coverage, summarize
from kernelcast.tools.core.bins import expected_log_speedup
from kernelcast.tools.store.store import Store

RECOVERY_KS = (1.0, 10.0, 50.0)


@dataclass
class CalibrationData:
    probabilities: np.ndarray  # (N, 8)
    true_bins: np.ndarray  # (N,) in 1..8
    speedups: np.ndarray  # (N,)
    tasks: list[str]
    failed_measurements: int
    failed_forecasts: int


def load_pairs(store: Store, forecaster: str | None = None, model: str | None = None, task: str | None = None,
               include_failed_forecasts: bool = False) -> CalibrationData:
    rows = store.forecasts.measured(forecaster=forecaster, model=model, task=task)
    probs, bins, speeds, tasks = [], [], [], []
    failed_meas = failed_fc = 0
    for row in rows:
        if not row.true_bin:
            failed_meas += 1
            continue
        if row.failed and not include_failed_forecasts:
            failed_fc += 1
            continue
        probs.append(row.probabilities)
        bins.append(row.true_bin)
        speeds.append(row.speedup)
        tasks.append(row.task)
    return CalibrationData(np.asarray(probs, dtype=float).reshape(-1, 8), np.asarray(bins, dtype=int),
                           np.asarray(speeds, dtype=float), tasks, failed_meas, failed_fc)


def recovered_by_task(data: CalibrationData, ks: tuple[float, ...] = RECOVERY_KS) -> dict[float, float]:
    """Mean over tasks of best-found / best-in-pool when the top k% by expected log-speedup are measured."""
    out: dict[float, list[float]] = {k: [] for k in ks}
    scores = np.array([expected_log_speedup(p) for p in data.probabilities])
    tasks = np.asarray(data.tasks)
    for name in sorted(set(data.tasks)):
        mask = tasks == name
        if mask.sum() < 2:
            continue
        for k in ks:
            out[k].append(recovered_speedup(scores[mask], data.speedups[mask], k))
    return {k: float(np.mean(v)) if v else float("nan") for k, v in out.items()}


def evaluate(data: CalibrationData) -> tuple[ScoreSummary, dict[float, float]]:
    if len(data.true_bins) == 0:
        raise ValueError("no stored forecast has a matching correct measurement yet")
    return summarize(data.probabilities, data.true_bins), recovered_by_task(data)


def reliability_buckets(confidences: np.ndarray, correct: np.ndarray, n_buckets: int = 10) -> list[dict[str, float]]:
    """Per non-empty confidence bucket (the ECE's buckets): range, mean confidence, accuracy and count."""
    index = bucket_index(np.asarray(confidences, dtype=float), n_buckets)
    hits = np.asarray(correct, dtype=float)
    return [{"low": b / n_buckets, "high": (b + 1) / n_buckets, "confidence": float(confidences[index == b].mean()),
             "accuracy": float(hits[index == b].mean()), "count": int((index == b).sum())}
            for b in range(n_buckets) if (index == b).any()]


def reliability_plot(ax: Any, buckets: list[dict[str, float]], title: str) -> None:
    """Accuracy per confidence bucket against the diagonal of perfect calibration, counts annotated."""
    ax.plot([0, 1], [0, 1], linestyle="--", color="grey", linewidth=1, label="perfect calibration")
    width = buckets[0]["high"] - buckets[0]["low"] if buckets else 0.1
    ax.bar([b["low"] for b in buckets], [b["accuracy"] for b in buckets], width=width, align="edge",
           edgecolor="#1f4e79", color="#6fa8dc", alpha=0.85, label="accuracy")
    ax.plot([b["confidence"] for b in buckets], [b["accuracy"] for b in buckets], "o", color="#1f4e79",
            label="mean confidence")
    for b in buckets:
        ax.text(b["low"] + width / 2, min(b["accuracy"] + 0.03, 0.97), f"n={b['count']}", ha="center", fontsize=7)
    ax.legend(fontsize=8, loc="upper left")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("confidence (max bin probability)")
    ax.set_ylabel("accuracy (predicted bin = measured bin)")
    ax.set_title(title, fontsize=10)


def write_plots(data: CalibrationData, out: Path, label: str) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    conf = data.probabilities.max(axis=1)
    correct = (data.probabilities.argmax(axis=1) + 1 == data.true_bins).astype(float)
    paths = []
    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    reliability_plot(ax, reliability_buckets(conf, correct), f"reliability: {label} (n={len(conf)})")
    fig.tight_layout()
    paths.append(out / "reliability.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    rc = risk_coverage(conf, correct)
    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    ax.step(rc.coverage, rc.risk, where="post", label=f"{label} (AURC {rc.aurc:.3f})")
    ax.axhline(1 - correct.mean(), color="gray", linestyle=":", label="risk at full coverage")
    ax.set_xlabel("coverage (fraction of forecasts trusted)")
    ax.set_ylabel("risk (error rate of trusted forecasts)")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_title("risk-coverage")
    ax.legend(fontsize=8)
    fig.tight_layout()
    paths.append(out / "risk_coverage.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    return paths
