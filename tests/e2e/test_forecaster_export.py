"""Issue 47 item 3: a trained forecaster exported as a plain model folder (`kernelcast forecaster export`).

The tiny model of the training tests (a 2-layer Llama over character tokens, built from a config) is trained for
a few score steps, exported through the CLI, and the exported folder, loaded as ``local:OUT`` (no peft, no base),
must forecast what the trained adapter on its base forecasts: a merge that lost, doubled or misplaced the LoRA
update moves the distribution by far more than the tolerance (the test first checks that training moved it).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from test_forecaster_training import HAVE_TORCH, _short, _tiny_model, needs_torch  # tests/e2e, on sys.path

from kernelcast.agents.train.data import read_jsonl
from kernelcast.dataset import forecaster_dataset
from kernelcast.tools.core.measurement import HardwareSpec
from kernelcast.tools.core.task import resolve_task

from support.cli import run_cli

PROMPT_TOKENS = 256


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the tiny base model folder, a folder trained from it by 4 score steps at a high learning rate)."""
    if not HAVE_TORCH:
        pytest.skip("needs the [train] extra")
    from kernelcast.agents.train.score import ScoreConfig, train_score

    root = tmp_path_factory.mktemp("export")
    base = _tiny_model(root / "tiny")
    forecaster_dataset(None, root / "data", eval_share=0.2, seed=1)
    rows = _short(read_jsonl(root / "data" / "train.jsonl"), 8)
    train_score(ScoreConfig(base=str(base), out=root / "trained", steps=4, batch_size=4, lr=3e-2, lora_rank=8,
                            max_prompt_tokens=PROMPT_TOKENS), rows)
    return base, root / "trained"


def _distributions(model: str) -> np.ndarray:
    """The bin distributions the `local:` forecaster (as a run builds it) gives two saxpy candidates."""
    from kernelcast.agents.factory import local_forecaster
    from kernelcast.agents.forecast.local import LocalModelForecaster

    forecaster = local_forecaster(model)
    assert isinstance(forecaster, LocalModelForecaster)
    forecaster.prompt = forecaster.prompt.model_copy(update={"max_prompt_tokens": PROMPT_TOKENS})  # the base records none
    forecaster.device = "cpu"
    task = resolve_task("saxpy")
    reference = task.reference()
    swapped = reference.model_copy(update={"source": task.source.replace("a * x[i] + y[i]", "y[i] + a * x[i]"),
                                           "origin": "written"})
    hardware = HardwareSpec(backend="opencl", platform="Test", name="test CPU", device_type="CPU", compute_units=2)
    forecasts = forecaster.forecast_many(task, [reference, swapped], hardware)
    assert all(not f.failed for f in forecasts), [f.provenance for f in forecasts]
    return np.array([f.probabilities for f in forecasts])


@needs_torch
def test_an_exported_model_forecasts_what_its_adapter_forecasts(trained: tuple[Path, Path], tmp_path: Path) -> None:
    base, folder = trained
    out = tmp_path / "exported"
    done = run_cli(tmp_path / "home", "forecaster", "export", str(folder), str(out))
    assert done.returncode == 0, done.stderr
    assert "local:" in done.stdout and "vllm serve" in done.stdout
    # a plain model folder: weights, config, tokenizer, and what it came from; no adapter, no trained-folder meta
    assert (out / "config.json").is_file() and (out / "model.safetensors").is_file()
    assert (out / "tokenizer.json").is_file() and not (out / "adapter").exists()
    assert not (out / "kernelcast_model.json").exists(), "that file would make loaders look for an adapter"
    meta = json.loads((out / "kernelcast_export.json").read_text())
    assert meta["source"] == str(folder.resolve()) and meta["trained"]["method"] == "score"
    assert meta["trained"]["base"] == str(base.resolve()) and meta["merged"] and meta["dtype"] == "float32"
    assert not list(tmp_path.glob("*.partial"))

    from transformers import AutoModelForCausalLM

    plain = AutoModelForCausalLM.from_pretrained(out)  # transformers alone, as vLLM reads it: no LoRA modules
    assert not any("lora" in name for name, _ in plain.named_parameters())

    before = _distributions(f"local:{base}")
    adapter = _distributions(f"local:{folder}")
    exported = _distributions(f"local:{out}")
    moved = float(np.abs(adapter - before).max())
    assert moved > 0.02, f"training barely moved the distribution ({moved:.4f}): the comparison would prove nothing"
    assert np.allclose(exported, adapter, atol=1e-4), f"exported {exported.round(4)} vs adapter {adapter.round(4)}"


@needs_torch
def test_export_refuses_what_is_not_a_finished_trained_folder(trained: tuple[Path, Path], tmp_path: Path) -> None:
    from kernelcast.agents.train.export import export_merged

    base, folder = trained
    done = run_cli(tmp_path / "home", "forecaster", "export", str(base), str(tmp_path / "x"))
    assert done.returncode != 0 and "is not a trained folder" in done.stderr, done.stderr
    assert not (tmp_path / "x").exists()
    unfinished = tmp_path / "unfinished"
    shutil.copytree(folder, unfinished)
    (unfinished / "metrics.json").unlink()
    with pytest.raises(ValueError, match="training has not finished"):
        export_merged(unfinished, tmp_path / "y")
    with pytest.raises(ValueError, match="outside the trained folder"):
        export_merged(folder, folder / "merged")
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "keep.txt").write_text("mine")
    with pytest.raises(ValueError, match="not empty"):
        export_merged(folder, occupied)
    assert (occupied / "keep.txt").read_text() == "mine"
