"""A trained (or any local) language model as a forecaster, run in process with transformers.

``--forecaster llm --model local:PATH``: PATH is a folder written by ``kernelcast forecaster train``, its export
(``kernelcast forecaster export``), a GGUF file or a Hugging Face model folder. It reads the compact prompt built
with the settings the model was trained on (:class:`kernelcast.agents.train.prompt.PromptSettings`, recorded in
the trained folder and carried by its export; the defaults for a model that records none), and its distribution
is either the next-token probabilities of the bin digits (``digits``, the default: one forward pass, no
sampling) or the eight probabilities it writes after the digit (``stated``: a greedy answer, parsed; what GRPO
trains). Any failure (a model that cannot load, an answer that does not parse) is an uninformative forecast: the
router defers it to the hardware.

Serving cost (issue 65: a 135M model took 26 minutes for 85 forecasts of one run): the model is loaded once per
process and path (:func:`loaded_model`), the candidates of a call are read in batches, the token prefix they share
(the bin table, the task, the reference kernel) is run once and its key/value cache reused for every candidate
(:func:`_shared_prefix`), and a prompt read once is not read again (a carried child is forecast every round).

Like every forecaster, its routing trust comes from the rows of runs that forecast with it; a local model's runs
are keyed by a digest of its weights (:func:`model_identity`), so a model written over another at the same path
starts a record of its own.
"""

from __future__ import annotations

import copy
import hashlib
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import structlog

from kernelcast.agents.forecast.base import Forecast, Provenance
from kernelcast.agents.train.model import TrainedMeta
from kernelcast.agents.train.prompt import PromptSettings, parse_answer
from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.measurement import HardwareSpec
from kernelcast.tools.core.task import Task

log = structlog.get_logger(__name__)

LOCAL_PREFIX = "local:"
ReadMode = Literal["digits", "stated"]
BATCH = 8  # candidates per forward pass (the shared prefix is not repeated, so the suffixes are short)
STATED_TOKENS = 40
MIN_SHARED_PREFIX = 16  # tokens: below this, a cached prefix saves less than it costs
REMEMBERED = 4096  # prompts whose reading is kept
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt")

_MODELS: dict[tuple[str, str, tuple[tuple[str, int, int], ...]], Any] = {}
_MODELS_LOCK = threading.Lock()
_DIGESTS: dict[tuple[tuple[str, int, int], ...], str] = {}


def _weight_files(path: Path) -> list[Path]:
    """The files whose bytes are the model: a GGUF; a folder's weights; a trained folder's adapter and its base's."""
    from kernelcast.agents.train.model import ADAPTER_DIR, trained_meta

    if path.is_file():
        return [path]
    meta = trained_meta(path)
    if meta is not None:
        adapter = sorted(p for p in (path / ADAPTER_DIR).glob("*") if p.suffix in WEIGHT_SUFFIXES)
        return adapter + _weight_files(Path(meta.base))
    return sorted(p for p in path.glob("*") if p.is_file() and p.suffix in WEIGHT_SUFFIXES)


def _stamp(path: Path) -> tuple[tuple[str, int, int], ...]:
    """What changes when the weights are rewritten: each weight file's path, size and modification time."""
    out = []
    for file in _weight_files(path):
        stat = file.stat()
        out.append((str(file.resolve()), stat.st_size, stat.st_mtime_ns))
    return tuple(out)


def training_of(path: str | Path) -> TrainedMeta | None:
    """How the model at ``path`` was trained, as its trained folder or its export records it (None: a plain
    model or a GGUF, which record nothing)."""
    from kernelcast.agents.train.export import EXPORT_META, ExportMeta
    from kernelcast.agents.train.model import trained_meta

    folder = Path(path).expanduser()
    if not folder.is_dir():
        return None
    meta = trained_meta(folder)
    if meta is None and (folder / EXPORT_META).is_file():
        meta = ExportMeta.model_validate_json((folder / EXPORT_META).read_text()).trained
    return meta


def prompt_settings(path: str | Path) -> PromptSettings | None:
    """The prompt settings a trained folder or its export records (None: a plain model, which records none)."""
    meta = training_of(path)
    return meta.prompt if meta is not None else None


def weights_digest(path: str | Path) -> str:
    """sha256 of the model's weight bytes (a trained folder: its adapter's and its base's) and of the prompt
    settings it is served with; remembered per file stamp, so a run hashes a model once."""
    folder = Path(path).expanduser().resolve()
    stamp = _stamp(folder)
    if not stamp:
        raise FileNotFoundError(f"{path}: no model weights there")
    if stamp not in _DIGESTS:
        digest = hashlib.sha256()
        for name, _, _ in stamp:
            digest.update(Path(name).name.encode())
            with open(name, "rb") as fh:
                while chunk := fh.read(1 << 22):
                    digest.update(chunk)
        settings = prompt_settings(folder)
        digest.update(json.dumps(settings.model_dump() if settings else None, sort_keys=True).encode())
        _DIGESTS[stamp] = digest.hexdigest()
    return _DIGESTS[stamp]


def split_model(model: str) -> tuple[str, ReadMode]:
    """``local:PATH[#digits|#stated]`` -> (PATH, mode); ValueError for an unknown mode."""
    path, _, mode = model.removeprefix(LOCAL_PREFIX).partition("#")
    if mode not in ("", "digits", "stated"):
        raise ValueError(f"unknown read mode {mode!r} in {model!r} (digits or stated)")
    return str(Path(path).expanduser()), "stated" if mode == "stated" else "digits"


def model_identity(model: str | None) -> str | None:
    """What a run's trust is keyed by for ``model``: for a ``local:`` model, a digest of its weights and its read
    mode (a model exported over another at the same path is another forecaster); None for any other model
    (its name is the key) or a local path with no weights (the run fails to build its forecaster anyway)."""
    if not model or not model.startswith(LOCAL_PREFIX):
        return None
    path, mode = split_model(model)
    try:
        return f"local-sha256:{weights_digest(path)[:32]}#{mode}"
    except (FileNotFoundError, OSError, ValueError):
        return None


def loaded_model(path: str, device: str | None = None) -> Any:
    """The model at ``path`` on ``device``, loaded (and a GGUF de-quantized) once per process and weights: every
    forecaster of a run, and of later runs in the same process, shares it (read-only: it is in eval mode)."""
    from kernelcast.agents.train.model import load_model, pick_device

    device = pick_device(device)
    key = (str(Path(path).expanduser().resolve()), device, _stamp(Path(path).expanduser().resolve()))
    with _MODELS_LOCK:
        if key not in _MODELS:
            for old in [k for k in _MODELS if k[:2] == key[:2]]:  # the weights at that path were rewritten
                del _MODELS[old]
            loaded = load_model(path, device)
            loaded.model.eval()
            _MODELS[key] = loaded
        return _MODELS[key]


def _cache_argument(model: Any) -> str:
    """The forward pass's name for a key/value cache: ``cache`` from transformers 5.2x (``past_key_values``, its
    older name, is deprecated there and goes in 5.40)."""
    import inspect

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(type(base).forward).parameters else "past_key_values"


class LocalModelForecaster:
    """A :class:`kernelcast.agents.forecast.base.Forecaster` over a model loaded in this process."""

    def __init__(self, path: str, mode: ReadMode = "digits", name: str = "llm", device: str | None = None,
                 prompt: PromptSettings | None = None, share_prefix: bool = True) -> None:
        """``prompt``: the settings to build prompts with (default: those the model records, else the defaults)."""
        self.path = path
        self.mode: ReadMode = mode
        self.name = name
        self.model_name = LOCAL_PREFIX + path
        self.device = device
        self.prompt = prompt or prompt_settings(path) or PromptSettings()
        self.share_prefix = share_prefix
        self._digits: list[int] | None = None
        self._read_before: OrderedDict[str, tuple[np.ndarray | None, int | None, str]] = OrderedDict()
        self._prefix: tuple[tuple[int, ...], Any] | None = None  # the last shared prefix and its key/value cache
        self._lock = threading.Lock()
        self.forward_passes = 0  # model calls (a prefix, a batch of suffixes, a generation): what a test can count

    def trained_tasks(self) -> set[str]:
        """The tasks of the rows the model was trained on (none recorded: a base model, or one trained before
        they were recorded)."""
        meta = training_of(self.path)
        return set(meta.tasks) if meta is not None else set()

    def build_prompt(self, task: Task, candidate: Candidate, hardware: HardwareSpec) -> str:
        """The prompt this model reads for ``candidate``: the one it was trained on, for a trained model."""
        return self.prompt.prompt(task, candidate, hardware)

    def forecast(self, task: Task, candidate: Candidate, hardware: HardwareSpec) -> Forecast:
        return self.forecast_many(task, [candidate], hardware)[0]

    def forecast_many(self, task: Task, candidates: Sequence[Candidate], hardware: HardwareSpec) -> list[Forecast]:
        try:
            prompts = [self.build_prompt(task, c, hardware) for c in candidates]
            with self._lock:
                started = time.perf_counter()
                dists = self.read(prompts)
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

    def read(self, prompts: list[str]) -> list[tuple[np.ndarray | None, int | None, str]]:
        """(distribution or None, the stated bin, a note or why it failed) per prompt; a prompt read before in
        this forecaster's life is not read again (the model is deterministic here)."""
        todo = list(dict.fromkeys(p for p in prompts if p not in self._read_before))
        if todo:
            for prompt, result in zip(todo, self._read(todo)):
                self._read_before[prompt] = result
                if len(self._read_before) > REMEMBERED:
                    self._read_before.popitem(last=False)
        return [self._read_before[p] if p in self._read_before else self._read([p])[0] for p in prompts]

    # ---- internals ----------------------------------------------------------------
    def _model(self) -> Any:
        loaded = loaded_model(self.path, self.device)
        if self._digits is None:
            from kernelcast.agents.forecast.bin_distribution import digit_token_ids

            self._digits = digit_token_ids(loaded.tokenizer)
        return loaded

    def _read(self, prompts: list[str]) -> list[tuple[np.ndarray | None, int | None, str]]:
        from kernelcast.agents.train.model import chat_text

        loaded = self._model()
        texts = [chat_text(loaded.tokenizer, p) for p in prompts]
        if self.mode == "digits":
            return [(row, None, "") for row in self._digit_distributions(loaded, texts)]
        return [self._stated(loaded, text) for text in texts]

    def _digit_distributions(self, loaded: Any, texts: list[str]) -> list[np.ndarray]:
        import torch

        from kernelcast.agents.forecast.bin_distribution import bin_log_probs

        assert self._digits is not None
        limit = self.prompt.max_prompt_tokens
        tokenizer = loaded.tokenizer
        ids = [tokenizer(t, add_special_tokens=False)["input_ids"][-limit:] for t in texts]
        out: list[np.ndarray] = []
        with torch.no_grad():
            prefix = self._shared_prefix(loaded, ids) if self.share_prefix else None
            for start in range(0, len(texts), BATCH):
                if prefix is None:
                    self.forward_passes += 1
                    log_p = bin_log_probs(loaded.model, tokenizer, texts[start:start + BATCH], self._digits, limit)
                else:
                    log_p = self._after_prefix(loaded, prefix, ids[start:start + BATCH])
                out += list(log_p.exp().double().cpu().numpy())
        return out

    def _shared_prefix(self, loaded: Any, ids: list[list[int]]) -> tuple[int, Any] | None:
        """(length, key/value cache) of the token prefix every prompt of the call shares (at least one token of
        each left after it), computed once and kept for the next call that shares it; None when too short."""
        import torch

        if not ids:
            return None
        n = min(len(x) for x in ids) - 1
        first = ids[0]
        for other in ids[1:]:
            n = next((i for i in range(n) if other[i] != first[i]), n)
        if self._prefix is not None:  # one prompt alone shares its task's prefix with the last call's
            kept = self._prefix[0]
            if len(kept) <= min(len(x) for x in ids) - 1 and all(tuple(x[:len(kept)]) == kept for x in ids):
                return len(kept), self._prefix[1]
        if n < MIN_SHARED_PREFIX or len(ids) == 1:
            return None
        prefix = tuple(first[:n])
        device = next(loaded.model.parameters()).device
        self.forward_passes += 1
        out = loaded.model(input_ids=torch.tensor([prefix], device=device), use_cache=True)
        cache = out.cache if getattr(out, "cache", None) is not None else out.past_key_values
        self._prefix = (prefix, cache)
        return n, cache

    def _after_prefix(self, loaded: Any, prefix: tuple[int, Any], suffixes: list[list[int]]) -> Any:
        """(B, 8) bin log-probabilities of prompts whose first ``prefix[0]`` tokens are in the cache."""
        import torch

        n, cache = prefix
        device = next(loaded.model.parameters()).device
        rest = [x[n:] for x in suffixes]
        width = max(len(r) for r in rest)
        pad = loaded.tokenizer.pad_token_id or 0
        input_ids = torch.tensor([r + [pad] * (width - len(r)) for r in rest], device=device)
        mask = torch.tensor([[1] * (n + len(r)) + [0] * (width - len(r)) for r in rest], device=device)
        last = torch.tensor([len(r) - 1 for r in rest], device=device)
        keep, where = torch.unique(last, return_inverse=True)
        past = copy.deepcopy(cache)  # the forward pass appends the suffix to the cache it is given
        past.batch_repeat_interleave(len(rest))
        self.forward_passes += 1
        logits = loaded.model(input_ids=input_ids, attention_mask=mask, use_cache=True, logits_to_keep=keep,
                              **{_cache_argument(loaded.model): past}).logits
        at_answer = logits[torch.arange(len(rest), device=device), where]
        return torch.log_softmax(at_answer[:, list(self._digits or [])].float(), dim=-1)

    def _stated(self, loaded: Any, text: str) -> tuple[np.ndarray | None, int | None, str]:
        """A greedy answer, parsed (one prompt at a time: no padding inside generate)."""
        import torch

        from kernelcast.agents.forecast.bin_distribution import encode

        with torch.no_grad():
            batch = encode(loaded.tokenizer, [text], next(loaded.model.parameters()).device,
                           self.prompt.max_prompt_tokens)
            self.forward_passes += 1
            generated = loaded.model.generate(**batch, max_new_tokens=STATED_TOKENS, do_sample=False,
                                              pad_token_id=loaded.tokenizer.pad_token_id)
        answer = parse_answer(loaded.tokenizer.decode(generated[0, batch["input_ids"].shape[1]:],
                                                      skip_special_tokens=True))
        probs = np.asarray(answer.probabilities) if answer.parsed else None
        return probs, answer.predicted_bin, answer.problem

    def _failed(self, reason: str, task: Task, candidate: Candidate) -> Forecast:
        return Forecast.uninformative(reason, forecaster=self.name, model=self.model_name,
                                      mode=f"local-{self.mode}").for_candidate(task, candidate)
