"""`kernelcast forecaster dataset|train|export|eval`: train a forecaster model on the store's own measurements.

``train``, ``export`` and ``eval`` of a model need the ``[train]`` extra (torch, transformers, peft, trl).
"""

from __future__ import annotations

import json
import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

import typer
from pydantic import ValidationError
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from kernelcast import api
from kernelcast.api import CORPUS_MANIFEST, FORECASTERS, MAX_SOURCE_CHARS, Store, TrainingRow, read_jsonl
from kernelcast.commands.stores import readable_store
from kernelcast.console import console, err_console, fail


@contextmanager
def _store_or_none() -> Iterator[Store | None]:
    """The configured store, read-only; None where there is none yet (the seed data and built-in tasks suffice)."""
    if not api.has_store():
        yield None
        return
    with readable_store() as store:
        yield store


def _dataset_rows(data: Path, name: str) -> list[TrainingRow]:
    """The rows of a dataset folder's ``name`` or of a .jsonl file: a regular file of training rows, else a
    one-line error (a FIFO or /dev/zero is refused before anything is read)."""
    path = data / name if data.is_dir() else data
    try:
        if not stat.S_ISREG(path.stat().st_mode):
            fail(f"{path} is not a regular file; name a dataset folder or its .jsonl file")
        return read_jsonl(path)
    except FileNotFoundError:
        fail(f"{path} not found; write a dataset with `kernelcast forecaster dataset OUT`")
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        fail(f"{path} is not a dataset of training rows (JSON lines as `kernelcast forecaster dataset` writes): "
             f"{where + ': ' if where else ''}{first['msg']}")
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"{path} cannot be read as a dataset ({getattr(exc, 'strerror', None) or type(exc).__name__})")


def _training_device(device: str | None) -> str | None:
    """``--device`` checked before anything loads: cpu, or cuda[:N] where this machine has that CUDA device."""
    if device is None:
        return None
    if not re.fullmatch(r"cpu|cuda(:\d+)?", device):
        fail(f"--device {device!r}: no such device; use cpu or cuda (cuda:N for the N-th GPU)")
    if device.startswith("cuda"):
        import torch

        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        index = int(device.partition(":")[2] or 0)
        if index >= count:
            fail(f"--device {device}: no CUDA device here" if count == 0 else
                 f"--device {device}: this machine has {count} CUDA device(s) (cuda:0 to cuda:{count - 1})")
    return device


app = typer.Typer(help="Train and evaluate a forecaster model on the store's measured pairs.", no_args_is_help=True)


@app.command("dataset")
def dataset(
    out: Path = typer.Argument(..., help="folder for train.jsonl, eval.jsonl and manifest.json"),
    eval_tasks: str | None = typer.Option(None, "--eval-tasks", help="comma-separated tasks held out (default: a "
                                          "seeded share of the tasks, and every task of a held-out corpus suite)"),
    eval_share: float = typer.Option(0.3, "--eval-share", min=0.0, max=1.0),
    seed: int = typer.Option(0, "--seed"),
    no_seed_data: bool = typer.Option(False, "--no-seed-data", help="only the store's pairs, not the shipped seed's"),
    corpus_manifest: Path = typer.Option(CORPUS_MANIFEST, "--corpus-manifest", help="suites and their split"),
    max_source_chars: int = typer.Option(MAX_SOURCE_CHARS, "--max-source-chars", help="per kernel in the prompt"),
) -> None:
    """Write the training and evaluation sets (comments stripped, split by task and suite, unique by candidate)."""
    if out.exists() and not out.is_dir():
        fail(f"{out} is a file; the dataset is a folder (train.jsonl, eval.jsonl, manifest.json): name a folder")
    with _store_or_none() as store:
        try:
            manifest = api.forecaster_dataset(store, out, include_seed=not no_seed_data,
                                          eval_tasks=[t.strip() for t in eval_tasks.split(",")] if eval_tasks else None,
                                          eval_share=eval_share, seed=seed, corpus_manifest=corpus_manifest,
                                          max_source_chars=max_source_chars)
        except ValueError as exc:
            fail(str(exc))
        except OSError as exc:
            fail(f"cannot write the dataset to {out}: {exc.strerror or exc}")
    console.print(f"wrote {', '.join(f'{n} ({k} rows)' for n, k in manifest.files.items())} and manifest.json to {out}")
    console.print(f"held out: {', '.join(manifest.split.eval_tasks) or 'none'} ({manifest.split.rule})")
    if manifest.dropped:
        console.print("left out: " + ", ".join(f"{k} {v}" for k, v in manifest.dropped.items()))


@app.command("train")
def train(
    data: Path = typer.Argument(..., help="a dataset folder (its train.jsonl) or a .jsonl file"),
    base: str = typer.Option(..., "--base", help="a .gguf file or a Hugging Face model folder"),
    out: Path = typer.Option(..., "--out", help="the trained folder (rerun to resume from its checkpoints)"),
    method: Literal["score", "grpo"] = typer.Option("score", "--method"),
    loss: Literal["crps", "brier"] = typer.Option("crps", "--loss", help="score: the scoring rule minimized"),
    reward: Literal["correctness", "brier", "crps"] = typer.Option("crps", "--reward", help="grpo: correctness, "
                                                                    "or correctness + (1 - Brier / CRPS)"),
    steps: int = typer.Option(50, "--steps", min=1),
    max_seconds: float | None = typer.Option(None, "--max-seconds", help="stop after this much training time"),
    batch_size: int = typer.Option(4, "--batch-size", min=1, help="score: examples per step"),
    prompts_per_step: int = typer.Option(1, "--prompts-per-step", min=1, help="grpo: prompts per step"),
    num_generations: int = typer.Option(8, "--num-generations", min=2, help="grpo: sampled answers per prompt"),
    warm_start: int = typer.Option(24, "--warm-start", min=0, help="grpo: supervised steps on the answer format "
                                   "before GRPO (without them a small model never writes a parseable answer)"),
    lr: float | None = typer.Option(None, "--lr", help="default: 2e-4 (score), 4e-5 (grpo)"),
    lora_rank: int | None = typer.Option(None, "--lora-rank", help="default: 16 (score), 32 (grpo)"),
    checkpoint_every: int = typer.Option(10, "--checkpoint-every", min=1),
    max_prompt_tokens: int = typer.Option(1024, "--max-prompt-tokens", min=16, help="score: longer prompts keep their end"),
    limit: int | None = typer.Option(None, "--limit", help="train on the first N rows only"),
    seed: int = typer.Option(0, "--seed"),
    device: str | None = typer.Option(None, "--device", help="cpu or cuda (default: cuda when present)"),
) -> None:
    """Fine-tune a model's bin distribution on a proper scoring rule (score) or with calibration rewards (grpo)."""
    device = _training_device(device)
    rows = _dataset_rows(data, "train.jsonl")[:limit]
    if not rows:
        fail(f"{data} holds no training rows")
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console) as progress:
        bar = progress.add_task(f"{method} training: loading {base}", total=steps)

        def tick(record, total) -> None:  # noqa: ANN001
            text = f"{method} step {record.step}: loss {record.loss:.4f}"
            text += f", reward {record.reward:.3f}" if record.reward is not None else ""
            progress.update(bar, completed=record.step, total=total, description=text)
            if not console.is_terminal:
                console.print(text)

        try:
            if method == "score":
                metrics = api.train_model(
                    "score", rows, tick, base=base, out=out, loss=loss, steps=steps, max_seconds=max_seconds,
                    batch_size=batch_size, lr=lr or 2e-4, lora_rank=lora_rank or 16, seed=seed,
                    checkpoint_every=checkpoint_every, max_prompt_tokens=max_prompt_tokens, device=device)
            else:
                metrics = api.train_model(
                    "grpo", rows, tick, base=base, out=out, reward=reward, steps=steps, max_seconds=max_seconds,
                    prompts_per_step=prompts_per_step, num_generations=num_generations, lr=lr or 4e-5,
                    lora_rank=lora_rank or 32, seed=seed, checkpoint_every=checkpoint_every,
                    warm_start_steps=warm_start, device=device)
        except (FileNotFoundError, ValueError) as exc:
            fail(str(exc))
    resumed = f", resumed from step {', '.join(map(str, metrics.resumed_from))}" if metrics.resumed_from else ""
    console.print(f"trained {metrics.steps} steps in {metrics.wall_s:.1f} s (peak memory {metrics.peak_memory_mb:.0f} "
                  f"MB{resumed}); use it with --forecaster llm --model local:{out}")


@app.command("export")
def export(
    trained: Path = typer.Argument(..., help="a folder written by `kernelcast forecaster train`"),
    out: Path = typer.Argument(..., help="the model folder to write (model, tokenizer, kernelcast_export.json)"),
    dtype: Literal["float32", "bfloat16", "float16"] = typer.Option("float32", "--dtype",
                                                                   help="the saved weights' type"),
    overwrite: bool = typer.Option(False, "--overwrite", help="replace OUT if it exists"),
) -> None:
    """Merge a trained model's LoRA adapter into its base and write a plain Hugging Face model folder, which vLLM,
    transformers, llama.cpp's convert_hf_to_gguf.py and `--model local:OUT` load as it is."""
    with console.status(f"merging {trained}'s adapter into its base"):
        try:
            meta = api.export_model(trained, out, dtype=dtype, overwrite=overwrite)
        except (FileNotFoundError, ValueError) as exc:
            fail(str(exc))
        except OSError as exc:
            fail(f"cannot export to {out}: {exc.strerror or exc}")
    console.print(f"exported {trained} ({meta.trained.method} {meta.trained.objective}, {meta.trained.steps} steps, "
                  f"base {meta.trained.base}) merged as {dtype} to {out}")
    console.print(f"use it with --forecaster llm --model local:{out}, or serve it: vllm serve {out} "
                  "--served-model-name kc-forecaster (docs/gpu.md)")


@app.command("eval")
def eval_(
    data: Path = typer.Argument(..., help="a dataset folder (its eval.jsonl) or a .jsonl file"),
    forecaster: str = typer.Option("llm", "--forecaster", "-f", help=" | ".join(FORECASTERS)),
    model: str | None = typer.Option(None, "--model", help="local:PATH for a trained model, or a litellm model string"),
    limit: int | None = typer.Option(None, "--limit", help="the first N rows only"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Score a forecaster on held-out rows: accuracy, within-1, Brier, CRPS, ECE, AURC, recovered speedup, and
    whether its error falls as its confidence rises."""
    rows = _dataset_rows(data, "eval.jsonl")[:limit]
    if not rows:
        fail(f"{data} holds no evaluation rows")
    with _store_or_none() as store:
        try:
            agent = api.eval_forecaster(forecaster, model, rows, store)
        except ValueError as exc:
            fail(str(exc))
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console, transient=True) as progress:
            bar = progress.add_task(f"forecasting with {forecaster}", total=len(rows))
            report = api.evaluate_model(f"{forecaster}{' / ' + model if model else ''}", agent, rows, store,
                                        lambda done, total: progress.update(bar, completed=done))
    if report.seen_tasks:
        err_console.print(f"[yellow]warning:[/] {forecaster} has learned from the evaluation tasks "
                      f"{', '.join(report.seen_tasks)}: these are not held-out scores", highlight=False)
    if as_json:
        print(json.dumps(report.model_dump(), indent=2))
        return
    table = Table(title=f"{report.forecaster} on {report.n} held-out rows ({report.failed_forecasts} failed forecasts, "
                  f"scored as uniform)")
    table.add_column("metric")
    table.add_column("value")
    for label, key in api.REPORT_ROWS:
        table.add_row(label, f"{getattr(report, key):.3f}")
    console.print(table)

