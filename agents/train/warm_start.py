"""A short supervised warm-start on the answer format, before GRPO (issue 65).

GRPO learns from the spread of rewards inside a group of sampled answers. The shipped SmolLM2-135M never opens
its answer with "digit |" (:func:`kernelcast.agents.train.prompt.parse_answer`), so every sample of every group
scored 0, the advantages were all 0 and no step moved the model. A few supervised steps on answers in the
format fix that: the model then writes parseable answers, and the rewards differ.

The taught answers state the row's true bin with a confidence drawn per example (uniformly between
:data:`CONFIDENCE` bounds) and the rest of the mass falling off with the distance from that bin: they teach the
format and a spread of confidences, not one calibration, which is left to the GRPO rewards to shape. The loss is
the cross-entropy of the answer's tokens only (the prompt is context), and only the answer positions go through
the output head.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from kernelcast.agents.train.data import TrainingRow
from kernelcast.agents.train.model import chat_text
from kernelcast.tools.core.bins import NUM_BINS

CONFIDENCE = (0.25, 0.85)  # the stated bin's share of a taught answer
DECAY = 0.5  # each bin further from the stated one gets this share of its neighbour's weight


def taught_answer(true_bin: int, rng: random.Random) -> str:
    """"b | p1 ... p8" in whole percentages summing to 100, the stated bin ``true_bin``."""
    confidence = rng.uniform(*CONFIDENCE)
    weights = [DECAY ** abs(b - true_bin) if b != true_bin else 0.0 for b in range(1, NUM_BINS + 1)]
    total = sum(weights)
    percents = [round(100 * (1 - confidence) * w / total) for w in weights]
    percents[true_bin - 1] = 100 - sum(percents)
    return f"{true_bin} | " + " ".join(str(p) for p in percents)


def answer_ids(tokenizer: Any, prompt: str, answer: str, max_prompt_tokens: int) -> tuple[list[int], list[int]]:
    """(prompt token ids, answer token ids): the answer as the assistant's turn, closed as the chat template
    closes it (so the model learns to stop), tokenized apart from the prompt as generation sees it."""
    opened = chat_text(tokenizer, prompt)
    if getattr(tokenizer, "chat_template", None):
        full = tokenizer.apply_chat_template([{"role": "user", "content": prompt},
                                              {"role": "assistant", "content": answer}], tokenize=False)
        tail = full[len(opened):] if full.startswith(opened) else answer + (tokenizer.eos_token or "")
    else:
        tail = answer + (tokenizer.eos_token or "")
    head = tokenizer(opened, add_special_tokens=False)["input_ids"][-max_prompt_tokens:]
    return head, tokenizer(tail, add_special_tokens=False)["input_ids"]


def warm_start(model: Any, tokenizer: Any, rows: Sequence[TrainingRow], steps: int, lr: float = 2e-4,
               batch_size: int = 4, seed: int = 0, max_prompt_tokens: int = 1024) -> list[float]:
    """``steps`` AdamW steps on the trainable parameters of ``model`` (a peft model); the loss of each step."""
    import torch

    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=lr)
    rng = random.Random(f"warm:{seed}")
    device = next(model.parameters()).device
    losses: list[float] = []
    model.train()
    for _ in range(steps):
        optimizer.zero_grad()
        total = 0.0
        for row in rng.sample(list(rows), min(batch_size, len(rows))):
            head, tail = answer_ids(tokenizer, row.prompt, taught_answer(row.true_bin, rng), max_prompt_tokens)
            ids = torch.tensor([head + tail], device=device)
            logits = model(input_ids=ids, logits_to_keep=len(tail) + 1).logits[0, :-1]  # predicts each answer token
            loss = torch.nn.functional.cross_entropy(logits.float(), ids[0, -len(tail):]) / batch_size
            loss.backward()
            total += float(loss.detach())
        optimizer.step()
        losses.append(total)
    optimizer.zero_grad(set_to_none=True)
    return losses
