"""Calibration training by reinforcement learning (``--method grpo``): the GPU Forecasters paper's recipe through
TRL's ``GRPOTrainer``, with LoRA through peft.

The model answers the compact prompt with "bin | eight percentages" (:mod:`kernelcast.agents.train.prompt`);
each answer is scored by :func:`kernelcast.agents.forecast.scoring.reward`: correctness, correctness + (1 - Brier) or
correctness + (1 - CRPS), an unparsed answer 0. The advantage is the reward minus its group's mean
(``scale_rewards="none"``), with no KL term (``beta=0``), the "grpo" loss, 8 samples per prompt at temperature 1.
Checkpoints are TRL's (every ``checkpoint_every`` steps, the last two kept); a rerun resumes from the latest.

Before the first GRPO step, ``warm_start_steps`` supervised steps teach the answer format
(:mod:`kernelcast.agents.train.warm_start`) on the same LoRA adapter: without them the shipped small model never
wrote a parseable answer, every reward was 0 and GRPO never moved (issue 65). A resumed run skips them (its
checkpoint holds the warm-started adapter).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import structlog
from pydantic import BaseModel, Field

from kernelcast.agents.forecast.scoring import reward
from kernelcast.agents.train.data import TrainingRow
from kernelcast.agents.train.model import TrainedMeta, chat_text, load_base, pick_device
from kernelcast.agents.train.prompt import common_settings, parse_answer
from kernelcast.agents.train.run import CHECKPOINTS, StepRecord, TrainingMetrics, lora_config, peak_memory_mb, save_trained
from kernelcast.agents.train.warm_start import warm_start

log = structlog.get_logger(__name__)

Reward = Literal["correctness", "brier", "crps"]
REWARD_KINDS = {"correctness": "correctness", "brier": "correctness+brier", "crps": "correctness+crps"}
Progress = Callable[[StepRecord, int], None]


class GRPOSettings(BaseModel):
    base: str
    out: Path
    reward: Reward = "crps"
    steps: int = Field(20, ge=1)
    max_seconds: float | None = Field(None, gt=0, description="stop at this much training time (this session's)")
    prompts_per_step: int = Field(1, ge=1, description="the paper: 8")
    num_generations: int = Field(8, ge=2)
    lr: float = Field(4e-5, gt=0)
    lora_rank: int = Field(32, ge=1)
    temperature: float = 1.0
    max_completion_tokens: int = Field(48, ge=4, description="an answer in the format takes about 30 tokens")
    warm_start_steps: int = Field(24, ge=0, description="supervised steps on the answer format first")
    warm_start_lr: float = Field(2e-4, gt=0)
    seed: int = 0
    checkpoint_every: int = Field(5, ge=1)
    device: str | None = None


def reward_function(kind: Reward) -> Callable[..., list[float | None]]:
    """TRL's reward callable: each completion's paper reward against its row's true bin."""
    rule = REWARD_KINDS[kind]

    def calibration_reward(prompts: list[Any], completions: list[Any], true_bin: list[int],
                           **_: Any) -> list[float | None]:
        out: list[float | None] = []
        for completion, truth in zip(completions, true_bin):
            text = completion if isinstance(completion, str) else completion[-1]["content"]
            answer = parse_answer(text)
            out.append(reward(answer.probabilities, answer.predicted_bin, truth, rule) if answer.parsed else 0.0)
        return out

    calibration_reward.__name__ = f"reward_{kind}"
    return calibration_reward


def train_grpo(settings: GRPOSettings, rows: Sequence[TrainingRow], on_step: Progress | None = None) -> TrainingMetrics:
    """Train (or resume) with GRPO and write the trained folder; returns its metrics."""
    import torch
    from datasets import Dataset
    from peft import get_peft_model
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    if not rows:
        raise ValueError("no training rows")
    prompt = common_settings([r.prompt_settings for r in rows])
    device = pick_device(settings.device)
    loaded = load_base(settings.base, device)
    data = Dataset.from_list([{"prompt": chat_text(loaded.tokenizer, r.prompt), "true_bin": r.true_bin} for r in rows])
    checkpoints = settings.out / CHECKPOINTS
    resume = any(checkpoints.glob("checkpoint-*")) if checkpoints.is_dir() else False
    torch.manual_seed(settings.seed)
    model = get_peft_model(loaded.model, lora_config(settings.lora_rank))
    started = time.perf_counter()
    history: list[StepRecord] = []
    if not resume and settings.warm_start_steps:
        losses = warm_start(model, loaded.tokenizer, rows, settings.warm_start_steps, settings.warm_start_lr,
                            seed=settings.seed, max_prompt_tokens=prompt.max_prompt_tokens)
        log.info("warm_start_done", steps=len(losses), first_loss=losses[0], last_loss=losses[-1],
                 seconds=round(time.perf_counter() - started, 1))
        history += [StepRecord(step=0, loss=loss, elapsed_s=time.perf_counter() - started, phase="warm start")
                    for loss in losses]
    config = GRPOConfig(
        output_dir=str(checkpoints), max_steps=settings.steps, learning_rate=settings.lr, seed=settings.seed,
        per_device_train_batch_size=settings.prompts_per_step * settings.num_generations,
        num_generations=settings.num_generations, scale_rewards="none", beta=0.0, loss_type="grpo",
        temperature=settings.temperature, max_completion_length=settings.max_completion_tokens,
        save_steps=settings.checkpoint_every, save_total_limit=2, logging_steps=1, report_to="none",
        use_cpu=device == "cpu", bf16=False, fp16=False, dataloader_num_workers=0)

    class Budget(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, float] | None = None, **_: Any) -> None:
            if logs and "loss" in logs:
                record = StepRecord(step=state.global_step, loss=float(logs["loss"]), reward=logs.get("reward"),
                                    elapsed_s=time.perf_counter() - started)
                history.append(record)
                if on_step is not None:
                    on_step(record, settings.steps)

        def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> None:
            if settings.max_seconds is not None and time.perf_counter() - started >= settings.max_seconds:
                control.should_training_stop = True
                control.should_save = True

    trainer = GRPOTrainer(model=model, reward_funcs=[reward_function(settings.reward)], args=config,
                          train_dataset=data, processing_class=loaded.tokenizer, callbacks=[Budget()])
    trainer.train(resume_from_checkpoint=True if resume else None)
    steps = int(trainer.state.global_step)
    metrics = TrainingMetrics(method="grpo", objective=settings.reward, base=loaded.name, steps=steps,
                              examples=len(rows), wall_s=time.perf_counter() - started,
                              peak_memory_mb=peak_memory_mb(device), device=device, history=history,
                              settings=settings.model_dump(mode="json", exclude={"out", "base"}))
    save_trained(settings.out, trainer.model, loaded.tokenizer,
                 TrainedMeta(base=loaded.name, method="grpo", objective=settings.reward, steps=steps, prompt=prompt,
                             tasks=sorted({r.task for r in rows}),
                             warm_start_steps=0 if resume else settings.warm_start_steps), metrics)
    return metrics
