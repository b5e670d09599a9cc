"""What both training methods share: the output folder's layout, LoRA settings, the metrics file, time and
memory accounting.

A trained folder holds ``adapter/`` (the LoRA weights, peft's format, with the tokenizer),
``kernelcast_model.json`` (its base model and how it was trained: :class:`kernelcast.agents.train.model.TrainedMeta`),
``metrics.json`` (:class:`TrainingMetrics`) and ``checkpoints/`` while training runs.
"""

from __future__ import annotations

import json
import resource
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from kernelcast.agents.train.model import ADAPTER_DIR, TRAINED_META, TrainedMeta

METRICS_FILE = "metrics.json"
CHECKPOINTS = "checkpoints"


class StepRecord(BaseModel):
    step: int
    loss: float  # the training objective of the step (score: the scoring rule; grpo: TRL's loss)
    reward: float | None = None  # grpo: the mean reward of the step's completions
    elapsed_s: float
    phase: str = "train"  # grpo: "warm start" for the supervised steps on the answer format before GRPO


class TrainingMetrics(BaseModel):
    """What a training run did and cost."""

    method: str
    objective: str  # crps | brier (score), correctness | brier | crps (grpo)
    base: str
    steps: int
    examples: int
    wall_s: float  # training time, summed over resumed sessions (loading excluded)
    peak_memory_mb: float  # this process's peak resident memory (on a GPU: the peak allocated there, added)
    device: str
    resumed_from: list[int] = Field(default_factory=list)  # the checkpoint steps training resumed from
    history: list[StepRecord] = Field(default_factory=list)
    settings: dict[str, Any] = Field(default_factory=dict)


def lora_config(rank: int, alpha: int | None = None) -> Any:
    """LoRA on every linear layer but the output head, no dropout (so a resumed run repeats the same steps)."""
    from peft import LoraConfig

    return LoraConfig(r=rank, lora_alpha=alpha or 2 * rank, lora_dropout=0.0, target_modules="all-linear",
                      task_type="CAUSAL_LM")


def bounded_memory(model: Any) -> None:
    """Activation checkpointing on a (peft) model: each layer's activations are recomputed in the backward pass
    instead of kept, about a fifth more compute for a peak that no longer grows with layers x prompt tokens."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    base.config.use_cache = False
    (getattr(base, "activation_checkpointing_enable", None) or base.gradient_checkpointing_enable)()
    base.enable_input_require_grads()  # frozen embeddings: a reentrant checkpoint would see no input needing grad


def peak_memory_mb(device: str) -> float:
    """Peak resident memory of this process (ru_maxrss is KiB on Linux, bytes on macOS), plus the GPU's peak."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    mb = rss / 2**20 if sys.platform == "darwin" else rss / 2**10
    if device.startswith("cuda"):
        import torch

        mb += torch.cuda.max_memory_allocated() / 2**20
    return float(mb)


def save_trained(out: Path, model: Any, tokenizer: Any, meta: TrainedMeta, metrics: TrainingMetrics) -> None:
    """The adapter, its tokenizer, the meta and the metrics under ``out`` (the metrics last: their presence says
    the folder is complete)."""
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out / ADAPTER_DIR)
    tokenizer.save_pretrained(out / ADAPTER_DIR)
    (out / TRAINED_META).write_text(meta.model_dump_json(indent=2) + "\n")
    write_metrics(out, metrics)


def write_metrics(out: Path, metrics: TrainingMetrics) -> None:
    (out / METRICS_FILE).write_text(json.dumps(metrics.model_dump(mode="json"), indent=2) + "\n")
