"""A trained (or any local) language model as a forecaster, run in process with transformers.

``--forecaster llm --model local:PATH``: PATH is a folder written by ``kernelcast forecaster train``, a GGUF
file or a Hugging Face model folder. It reads the compact prompt (:func:`kernelcast.agents.train.prompt.forecast_prompt`,
both kernels without comments), and its distribution is either the next-token probabilities of the bin digits
(``digits``, the default: one forward pass, no sampling) or the eight probabilities it writes after the digit
(``stated``: a greedy answer, parsed; what GRPO trains). Any failure (a model that cannot load, an answer that
does not parse) is an uninformative forecast: the router defers it to the hardware.

Like every forecaster, its routing trust comes from the rows of runs that forecast with it (this very model).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import structlog

from kernelcast.agents.forecast.base import Forecast, Provenance
from kernelcast.agents.train.prompt import forecast_prompt, parse_answer
from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.measurement import HardwareSpec
from kernelcast.tools.core.task import Task

log = structlog.get_logger(__name__)

LOCAL_PREFIX = "local:"
ReadMode = Literal["digits", "stated"]
BATCH = 4
STATED_TOKENS = 40


class LocalModelForecaster:
    """A :class:`kernelcast.agents.forecast.base.Forecaster` over a model loaded in this process."""

    def __init__(self, path: str, mode: ReadMode = "digits", name: str = "llm", device: str | None = None,
                 max_prompt_tokens: int | None = None) -> None:
        self.path = path
        self.mode: ReadMode = mode
        self.name = name
        self.model_name = LOCAL_PREFIX + path
        self.device = device
        self.max_prompt_tokens = max_prompt_tokens
        self._loaded: Any = None
        self._digits: list[int] | None = None
        self._lock = threading.Lock()

    def forecast(self, task: Task, candidate: Candidate, hardware: HardwareSpec) -> Forecast:
        return self.forecast_many(task, [candidate], hardware)[0]

    def forecast_many(self, task: Task, candidates: Sequence[Candidate], hardware: HardwareSpec) -> list[Forecast]:
        try:
            prompts = [forecast_prompt(task, c, hardware) for c in candidates]
            with self._lock:
                started = time.perf_counter()
                dists = self._read(prompts)
                latency = (time.perf_counter() - started) / max(1, len(prompts))
        except Exception as exc:  # noqa: BLE001 - a broken model costs budget, never the run
            log.exception("local_forecast_failed", model=self.model_name)
            return [self._failed(f"{type(exc).__name__}: {exc}", task, c) for c in candidates]
        out = []
        for cand, (probs, stated, problem) in zip(candidates, dists):
            if probs is None:
                out.append(self._failed(f"parse: {problem}", task, cand))
                continue
            prov = Provenance(forecaster=self.name, model=self.model_name, mode=f"local-{self.mode}",
                              latency_s=latency, repaired=bool(problem), repair_notes=[problem] if problem else [])
            out.append(Forecast.from_probabilities(probs, prov, stated_bin=stated).for_candidate(task, cand))
        return out

    # ---- internals ----------------------------------------------------------------
    def _model(self) -> Any:
        if self._loaded is None:
            from kernelcast.agents.forecast.bin_distribution import digit_token_ids
            from kernelcast.agents.train.model import load_model

            self._loaded = load_model(self.path, self.device)
            self._loaded.model.eval()
            self._digits = digit_token_ids(self._loaded.tokenizer)
        return self._loaded

    def _read(self, prompts: list[str]) -> list[tuple[np.ndarray | None, int | None, str]]:
        """(distribution or None, the stated bin, a note or why it failed) per prompt."""
        import torch

        from kernelcast.agents.forecast.bin_distribution import MAX_PROMPT_TOKENS, bin_log_probs, encode
        from kernelcast.agents.train.model import chat_text

        loaded = self._model()
        texts = [chat_text(loaded.tokenizer, p) for p in prompts]
        limit = self.max_prompt_tokens or MAX_PROMPT_TOKENS
        out: list[tuple[np.ndarray | None, int | None, str]] = []
        with torch.no_grad():
            for start in range(0, len(texts), BATCH):
                chunk = texts[start:start + BATCH]
                if self.mode == "digits":
                    assert self._digits is not None
                    log_p = bin_log_probs(loaded.model, loaded.tokenizer, chunk, self._digits, limit)
                    out += [(row, None, "") for row in log_p.exp().double().cpu().numpy()]
                    continue
                for text in chunk:  # one at a time: no padding inside generate
                    batch = encode(loaded.tokenizer, [text], next(loaded.model.parameters()).device, limit)
                    generated = loaded.model.generate(**batch, max_new_tokens=STATED_TOKENS, do_sample=False,
                                                      pad_token_id=loaded.tokenizer.pad_token_id)
                    answer = parse_answer(loaded.tokenizer.decode(generated[0, batch["input_ids"].shape[1]:],
                                                                  skip_special_tokens=True))
                    probs = np.asarray(answer.probabilities) if answer.parsed else None
                    out.append((probs, answer.predicted_bin, answer.problem))
        return out

    def _failed(self, reason: str, task: Task, candidate: Candidate) -> Forecast:
        return Forecast.uninformative(reason, forecaster=self.name, model=self.model_name,
                                      mode=f"local-{self.mode}").for_candidate(task, candidate)
