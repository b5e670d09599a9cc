"""The forecaster's data and models from a door: measured datasets, imported timings, training, export and
evaluation. Training, export and evaluating a model import torch and friends (the ``[train]`` extra) only
when called."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from kernelcast.agents.forecast.base import Forecaster
from kernelcast.agents.forecast.device_probe import Bandwidth, store_probes
from kernelcast.agents.registry import make_forecaster
from kernelcast.agents.train.data import CORPUS_MANIFEST, TrainingRow, read_jsonl
from kernelcast.agents.train.prompt import MAX_SOURCE_CHARS
from kernelcast.dataset import build_dataset, forecaster_dataset
from kernelcast.forecaster_eval import REPORT_ROWS, EvalReport, evaluate_forecaster
from kernelcast.tools.core.task import Task, resolve_task
from kernelcast.tools.store.kernel_tuner import RecordedSpace, import_cache
from kernelcast.tools.store.store import Store

__all__ = ["CORPUS_MANIFEST", "MAX_SOURCE_CHARS", "REPORT_ROWS", "ImportedTimings", "TrainingRow", "build_dataset",
           "eval_forecaster", "evaluate_model", "export_model", "forecaster_dataset", "read_jsonl", "read_kernel_tuner",
           "store_kernel_tuner", "train_model"]


def train_model(method: Literal["score", "grpo"], rows: Sequence[TrainingRow], tick: Callable[..., None],
                **settings: Any) -> Any:
    """Fine-tune a model on ``rows``: ``score`` (a proper scoring rule; ``settings`` are ``ScoreConfig``'s) or
    ``grpo`` (calibration rewards; ``GRPOSettings``'s). Returns the training metrics."""
    if method == "score":
        from kernelcast.agents.train.score import ScoreConfig, train_score

        return train_score(ScoreConfig(**settings), rows, tick)
    from kernelcast.agents.train.grpo import GRPOSettings, train_grpo

    return train_grpo(GRPOSettings(**settings), rows, tick)


def export_model(trained: Path, out: Path, dtype: Literal["float32", "bfloat16", "float16"],
                 overwrite: bool) -> Any:
    """Merge a trained folder's adapter into its base and write a plain model folder; returns its metadata."""
    from kernelcast.agents.train.export import export_merged

    return export_merged(trained, out, dtype=dtype, overwrite=overwrite)


def eval_forecaster(forecaster: str, model: str | None, rows: Sequence[TrainingRow], store: Store | None) -> Forecaster:
    """The forecaster to evaluate on ``rows`` (built for their device); a bad name or model is a ``ValueError``
    before anything is forecast."""
    return make_forecaster(forecaster, store=store, device=rows[0].device, model=model)


def evaluate_model(label: str, agent: Forecaster, rows: Sequence[TrainingRow], store: Store | None,
                   on_progress: Callable[[int, int], None] | None = None) -> EvalReport:
    """Score ``agent`` on held-out rows (their tasks looked up in ``store`` and the built-ins)."""
    from kernelcast.agents.forecast.learned import task_lookup  # scikit-learn: loaded only to evaluate

    return evaluate_forecaster(label, agent, rows, task_lookup(store), on_progress)


@dataclass(frozen=True)
class ImportedTimings:
    """What ``kernelcast import kernel-tuner`` stored."""

    task: str
    device: str  # the GPU's key
    stored: int  # recorded rows written
    timed: int
    failed: int
    unrecorded: int  # valid points of the task the cache does not time
    spec_source: Any  # where the device spec came from


def read_kernel_tuner(cache: Path, task: str) -> tuple[Task, RecordedSpace]:
    """A Kernel Tuner cache read and mapped onto ``task`` (nothing stored yet: bad input fails before the
    store is opened)."""
    chosen = resolve_task(task)
    return chosen, import_cache(cache, chosen)


def store_kernel_tuner(store: Store, chosen: Task, space: RecordedSpace) -> ImportedTimings:
    """A read cache stored as recorded measurements of ``chosen`` on the GPU it names (replacing an earlier
    import of the same task and GPU); a data-sheet bandwidth becomes the device's probe."""
    stored = store.ledger.replace_recorded(chosen, space.device, space.rows)
    peak = space.device.extra.get("peak_bandwidth_gbs")
    if isinstance(peak, int | float) and peak > 0:  # the prior's bandwidth: the data sheet's, never probed
        store_probes(store, space.device, Bandwidth(peak * 1e9, "data sheet"), {"source": "vendor data sheet"})
    return ImportedTimings(chosen.name, space.device.key, stored, space.recorded, space.failed, space.unrecorded,
                           space.device.extra.get("spec_source"))
