"""Fine-tuning on a proper scoring rule of the model's own bin distribution (``--method score``).

The loss is the CRPS or the halved Brier score of the next-token distribution over the digits "1".."8"
(:mod:`kernelcast.agents.forecast.bin_distribution`): differentiable, no sampling, so each step teaches every bin's
probability at once, where GRPO learns from eight sampled answers. LoRA on every linear layer.

Memory is bounded (issue 65: 16.4 GB for the 135M model): only the answer position goes through the output head,
the batch is taken ``micro_batch`` examples at a time (gradients accumulated) and each layer's activations are
recomputed in the backward pass (:func:`kernelcast.agents.train.run.bounded_memory`).

Checkpoints (adapter, optimizer, step, elapsed time) are written every ``checkpoint_every`` steps, atomically;
a rerun with the same output folder resumes from the latest one. The order of the examples is a function of
the seed and the step alone, and there is no dropout, so a resumed run takes the steps an uninterrupted one would.
"""

from __future__ import annotations

import random
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

import structlog
from pydantic import BaseModel, Field

from kernelcast.agents.forecast.bin_distribution import LOSSES, MAX_PROMPT_TOKENS, bin_log_probs, digit_token_ids
from kernelcast.agents.train.data import TrainingRow
from kernelcast.agents.train.model import TrainedMeta, chat_text, load_base, pick_device
from kernelcast.agents.train.prompt import common_settings
from kernelcast.agents.train.run import (
    CHECKPOINTS,
    StepRecord,
    TrainingMetrics,
    bounded_memory,
    lora_config,
    peak_memory_mb,
    save_trained,
)

log = structlog.get_logger(__name__)

Progress = Callable[[StepRecord, int], None]  # (the step just taken, the steps asked for)


class ScoreConfig(BaseModel):
    base: str
    out: Path
    loss: Literal["crps", "brier"] = "crps"
    steps: int = Field(50, ge=1)
    max_seconds: float | None = Field(None, gt=0, description="stop at this much training time (summed over resumes)")
    batch_size: int = Field(4, ge=1)
    lr: float = Field(2e-4, gt=0)
    lora_rank: int = Field(16, ge=1)
    seed: int = 0
    checkpoint_every: int = Field(10, ge=1)
    max_prompt_tokens: int = Field(MAX_PROMPT_TOKENS, ge=16)
    micro_batch: int = Field(1, ge=1, description="examples per forward pass (gradients accumulated over the batch)")
    checkpoint_activations: bool = Field(True, description="recompute each layer's activations in the backward "
                                         "pass instead of keeping them")
    device: str | None = None


class _State(BaseModel):
    step: int = 0
    elapsed_s: float = 0.0
    resumed_from: list[int] = Field(default_factory=list)
    history: list[StepRecord] = Field(default_factory=list)


def batch_at(step: int, n: int, batch_size: int, seed: int) -> list[int]:
    """The example indices of a step (1-based): epochs of seeded permutations, so any step can be recomputed."""
    start = (step - 1) * batch_size
    out = []
    for i in range(start, start + batch_size):
        epoch, at = divmod(i, n)
        order = list(range(n))
        random.Random(f"{seed}:{epoch}").shuffle(order)
        out.append(order[at])
    return out


def latest_checkpoint(out: Path) -> Path | None:
    folder = out / CHECKPOINTS
    done = sorted(p for p in folder.glob("step-*") if p.is_dir() and not p.name.endswith(".partial")) if folder.is_dir() else []
    return done[-1] if done else None


def train_score(config: ScoreConfig, rows: Sequence[TrainingRow], on_step: Progress | None = None) -> TrainingMetrics:
    """Train (or resume) and write the trained folder; returns its metrics."""
    import torch
    from peft import PeftModel, get_peft_model

    if not rows:
        raise ValueError("no training rows")
    prompt = common_settings([r.prompt_settings for r in rows]).model_copy(
        update={"max_prompt_tokens": config.max_prompt_tokens})
    device = pick_device(config.device)
    torch.manual_seed(config.seed)
    loaded = load_base(config.base, device)
    tokenizer = loaded.tokenizer
    digits = digit_token_ids(tokenizer)
    texts = [chat_text(tokenizer, r.prompt) for r in rows]
    bins = [r.true_bin for r in rows]
    resume = latest_checkpoint(config.out)
    if resume is not None:
        model = PeftModel.from_pretrained(loaded.model, resume / "adapter", is_trainable=True).to(device)
        state = _State.model_validate_json((resume / "state.json").read_text())
        state.resumed_from.append(state.step)
        log.info("training_resumed", checkpoint=str(resume), step=state.step)
    else:
        model = get_peft_model(loaded.model, lora_config(config.lora_rank))
        state = _State()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=config.lr)
    if resume is not None:
        optimizer.load_state_dict(torch.load(resume / "optimizer.pt", weights_only=True))
    loss_fn = LOSSES[config.loss]
    if config.checkpoint_activations:
        bounded_memory(model)
    model.train()
    while state.step < config.steps and (config.max_seconds is None or state.elapsed_s < config.max_seconds):
        started = time.perf_counter()
        step = state.step + 1
        index = batch_at(step, len(rows), config.batch_size, config.seed)
        optimizer.zero_grad()
        loss_sum = 0.0
        for start in range(0, len(index), config.micro_batch):  # the mean over the batch, a part at a time
            part = index[start:start + config.micro_batch]
            log_p = bin_log_probs(model, tokenizer, [texts[i] for i in part], digits, config.max_prompt_tokens)
            loss = loss_fn(log_p, [bins[i] for i in part]) * len(part) / len(index)
            loss.backward()
            loss_sum += float(loss.detach())
        optimizer.step()
        state.step = step
        state.elapsed_s += time.perf_counter() - started
        record = StepRecord(step=step, loss=loss_sum, elapsed_s=state.elapsed_s)
        state.history.append(record)
        if on_step is not None:
            on_step(record, config.steps)
        if step % config.checkpoint_every == 0 or step == config.steps:
            _checkpoint(config.out, model, optimizer, state)
    metrics = TrainingMetrics(method="score", objective=config.loss, base=loaded.name, steps=state.step,
                              examples=len(rows), wall_s=state.elapsed_s, peak_memory_mb=peak_memory_mb(device),
                              device=device, resumed_from=state.resumed_from, history=state.history,
                              settings=config.model_dump(mode="json", exclude={"out", "base"}))
    save_trained(config.out, model, tokenizer, TrainedMeta(base=loaded.name, method="score", objective=config.loss,
                                                           steps=state.step, prompt=prompt,
                                                           tasks=sorted({r.task for r in rows})), metrics)
    return metrics


def _checkpoint(out: Path, model: object, optimizer: object, state: _State) -> None:
    """Write step-NNNNNN.partial, then rename it: a kill leaves no half checkpoint to resume from."""
    import torch

    final = out / CHECKPOINTS / f"step-{state.step:06d}"
    partial = final.with_name(final.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    model.save_pretrained(partial / "adapter")  # type: ignore[attr-defined]
    torch.save(optimizer.state_dict(), partial / "optimizer.pt")  # type: ignore[attr-defined]
    (partial / "state.json").write_text(state.model_dump_json())
    partial.rename(final)
    for old in sorted((out / CHECKPOINTS).glob("step-*"))[:-2]:  # keep the last two
        if not old.name.endswith(".partial"):
            shutil.rmtree(old, ignore_errors=True)
