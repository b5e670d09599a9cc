"""A language model's distribution over the eight bins, and proper scoring rules on it, differentiable (torch).

The distribution is the model's next-token probabilities of the digits "1".."8" at the answer's first token,
renormalized over the eight (as :func:`kernelcast.agents.forecast.llm.digit_distribution` reads a server's
log-probabilities). The losses are the scoring rules of :mod:`kernelcast.agents.forecast.scoring` written for torch
tensors: the halved Brier score and the ordinal CRPS.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kernelcast.agents.train.prompt import DIGITS, MAX_PROMPT_TOKENS
from kernelcast.tools.core.bins import NUM_BINS

__all__ = ["MAX_PROMPT_TOKENS", "bin_log_probs", "brier_loss", "crps_loss", "digit_token_ids", "encode"]


def digit_token_ids(tokenizer: Any) -> list[int]:
    """The token id of each digit "1".."8" (raises when a digit is not one token)."""
    ids = []
    for digit in DIGITS:
        encoded = tokenizer.encode(digit, add_special_tokens=False)
        if len(encoded) != 1:
            raise ValueError(f"the tokenizer splits the digit {digit!r} into {len(encoded)} tokens")
        ids.append(encoded[0])
    return ids


def encode(tokenizer: Any, texts: Sequence[str], device: Any, max_tokens: int = MAX_PROMPT_TOKENS) -> dict[str, Any]:
    """Right-padded token ids and attention mask of ``texts`` (each kept to its last ``max_tokens`` tokens)."""
    tokenizer.padding_side = "right"
    tokenizer.truncation_side = "left"
    batch = tokenizer(list(texts), return_tensors="pt", padding=True, truncation=True, max_length=max_tokens,
                      add_special_tokens=False)
    return {k: v.to(device) for k, v in batch.items() if k in ("input_ids", "attention_mask")}


def bin_log_probs(model: Any, tokenizer: Any, texts: Sequence[str], digit_ids: Sequence[int],
                  max_tokens: int = MAX_PROMPT_TOKENS) -> Any:
    """(len(texts), 8) log-probabilities of the bins at each text's next token, renormalized over the digits.

    Only the answer positions go through the output head (``logits_to_keep``): the logits of every prompt
    position, (B, T, vocabulary) floats kept for the backward pass, were most of score training's 16 GB peak."""
    import torch

    device = next(model.parameters()).device
    batch = encode(tokenizer, texts, device, max_tokens)
    last = batch["attention_mask"].sum(dim=1) - 1
    keep, where = torch.unique(last, return_inverse=True)  # the distinct answer positions, and each row's
    logits = model(**batch, logits_to_keep=keep).logits  # (B, K, V), K <= B
    at_answer = logits[torch.arange(logits.shape[0], device=device), where]  # (B, V)
    return torch.log_softmax(at_answer[:, list(digit_ids)].float(), dim=-1)


def one_hot(true_bins: Sequence[int], device: Any) -> Any:
    import torch

    y = torch.zeros(len(true_bins), NUM_BINS, device=device)
    y[torch.arange(len(true_bins)), torch.tensor([b - 1 for b in true_bins])] = 1.0
    return y


def brier_loss(log_probs: Any, true_bins: Sequence[int]) -> Any:
    """Mean halved Brier score 0.5 * sum_b (p_b - y_b)^2."""
    p = log_probs.exp()
    return 0.5 * ((p - one_hot(true_bins, p.device)) ** 2).sum(dim=-1).mean()


def crps_loss(log_probs: Any, true_bins: Sequence[int]) -> Any:
    """Mean ordinal CRPS (1/7) * sum_{k=1..7} (F_pred(k) - F_true(k))^2."""
    p = log_probs.exp()
    f_pred = p.cumsum(dim=-1)[:, : NUM_BINS - 1]
    f_true = one_hot(true_bins, p.device).cumsum(dim=-1)[:, : NUM_BINS - 1]
    return ((f_pred - f_true) ** 2).sum(dim=-1).mean() / (NUM_BINS - 1)


LOSSES = {"crps": crps_loss, "brier": brier_loss}
