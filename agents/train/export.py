"""Exporting a trained forecaster as a plain Hugging Face model folder (``kernelcast forecaster export``).

A trained folder is a LoRA adapter on a named base (:mod:`kernelcast.agents.train.run`); serving it needs peft and
the base at its recorded path. The export merges the adapter into the base's weights (peft's ``merge_and_unload``)
and writes one self-contained folder: the model (safetensors), its tokenizer (with the chat template the model
was trained through) and :data:`EXPORT_META`, saying what it came from. Why merged:

- vLLM serves a merged folder as any other model (``vllm serve OUT``), no ``--enable-lora`` flags, no base to find;
- llama.cpp's ``convert_hf_to_gguf.py`` takes a Hugging Face folder, not an adapter on a GGUF base;
- transformers and ``--model local:OUT`` load it without peft.

The meta file is not :data:`kernelcast.agents.train.model.TRAINED_META`: a folder holding that file is read as an
adapter on a base by :func:`kernelcast.agents.train.model.load_model`, and an export has no adapter.
"""

from __future__ import annotations

import shutil
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from kernelcast.agents.train.model import ADAPTER_DIR, TRAINED_META, TrainedMeta, load_model, trained_meta
from kernelcast.agents.train.run import METRICS_FILE

EXPORT_META = "kernelcast_export.json"
DType = Literal["float32", "bfloat16", "float16"]


class ExportMeta(BaseModel):
    """What an exported folder is: the trained folder it came from, that folder's base and training, and how the
    model reads a forecast (the compact prompt, the next token's bin digits)."""

    source: str  # the trained folder (absolute)
    trained: TrainedMeta
    merged: bool = True
    dtype: str
    prompt: str = "compact (kernelcast.agents.train.prompt.forecast_prompt), through the tokenizer's chat template"
    read: str = "the next token's probabilities of the digits 1-8 (bins), renormalized"
    exported_at: str


def check_trained(folder: str | Path) -> TrainedMeta:
    """The trained folder's meta; ValueError (or FileNotFoundError for its base) saying what is missing."""
    path = Path(folder).expanduser()
    if not path.is_dir():
        raise FileNotFoundError(f"{folder}: no such folder")
    meta = trained_meta(path)
    if meta is None:
        hint = " (it is an export already: serve or load it as it is)" if (path / EXPORT_META).is_file() else ""
        raise ValueError(f"{folder} is not a trained folder: it has no {TRAINED_META}{hint}; "
                         "train one with `kernelcast forecaster train`")
    if not (path / ADAPTER_DIR / "adapter_config.json").is_file() or not (path / METRICS_FILE).is_file():
        raise ValueError(f"{folder}: training has not finished (no {ADAPTER_DIR}/adapter_config.json or "
                         f"{METRICS_FILE}); rerun `kernelcast forecaster train` with the same --out to resume")
    if not Path(meta.base).exists():
        raise FileNotFoundError(f"{folder}: its base model {meta.base} is not there any more")
    return meta


def export_merged(trained: str | Path, out: str | Path, dtype: DType = "float32", overwrite: bool = False) -> ExportMeta:
    """Merge ``trained``'s adapter into its base and write the model folder ``out`` (written beside it in a fresh
    hidden folder and renamed, so a killed export leaves no half folder that loads). ``overwrite`` replaces only
    an earlier export or an empty folder: never the trained folder, a folder holding it, a file, or anything
    beside the target."""
    source = Path(trained).expanduser().resolve()
    target = Path(out).expanduser().resolve()
    meta = check_trained(source)
    if target == source or source in target.parents or target in source.parents:
        raise ValueError(f"{out}: the export must go outside the trained folder, and not into a folder holding it")
    if target.exists() or target.is_symlink():
        if not target.is_dir():
            raise ValueError(f"{out} exists and is not a folder; name a new folder for the export")
        if any(target.iterdir()) and not overwrite:
            raise ValueError(f"{out} exists and is not empty (pass --overwrite to replace an earlier export)")
        if any(target.iterdir()) and not (target / EXPORT_META).is_file():
            raise ValueError(f"{out} is not an earlier export (no {EXPORT_META}); --overwrite replaces only an "
                             "export: name a new folder")
    import torch

    loaded = load_model(source, "cpu")
    merged: Any = loaded.model.merge_and_unload()
    merged = merged.to(getattr(torch, dtype))
    merged.eval()
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=target.parent))
    try:
        merged.save_pretrained(partial)
        loaded.tokenizer.save_pretrained(partial)
        export = ExportMeta(source=str(source), trained=meta, dtype=dtype,
                            exported_at=datetime.now(UTC).isoformat(timespec="seconds"))
        (partial / EXPORT_META).write_text(export.model_dump_json(indent=2) + "\n")
        if target.exists():
            shutil.rmtree(target)  # an earlier export or an empty folder (checked above)
        partial.rename(target)
    finally:
        shutil.rmtree(partial, ignore_errors=True)  # only what this export created
    return export
