"""Issue 65: a trained forecaster served as it was trained, in bounded memory, at a usable speed.

- the served prompt is the trained prompt (the dataset's prompt settings travel through training and export);
- the output head sees the answer positions only (score training kept the logits of every prompt position);
- the ``local:`` forecaster loads a model once per process, reads a shared prompt prefix once, and a prompt it
  has read once is not read again; the cached reading equals the plain one.

The tiny model of the training tests (a 2-layer Llama over character tokens) stands in for a real one.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_forecaster_training import HAVE_TORCH, _tiny_model, needs_torch  # tests/e2e, on sys.path

from kernelcast.agents.train.data import TrainingRow, read_jsonl
from kernelcast.dataset import forecaster_dataset
from kernelcast.tools.core.task import resolve_task

SOURCE_CHARS = 200  # not the default (1200): a served prompt built with the default differs
PROMPT_TOKENS = 3000  # the tiny model reads characters: whole prompts, nothing cut


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path, list[TrainingRow]]:
    """(tiny base, trained folder, its export, evaluation rows), the dataset built at 200 source characters."""
    if not HAVE_TORCH:
        pytest.skip("needs the [train] extra")
    from kernelcast.agents.train.export import export_merged
    from kernelcast.agents.train.score import ScoreConfig, train_score

    root = tmp_path_factory.mktemp("serving")
    base = _tiny_model(root / "tiny")
    forecaster_dataset(None, root / "data", eval_share=0.2, seed=1, max_source_chars=SOURCE_CHARS)
    train = read_jsonl(root / "data" / "train.jsonl")
    rows = [train[i] for i in range(0, len(train), len(train) // 6)][:6]
    train_score(ScoreConfig(base=str(base), out=root / "trained", steps=3, batch_size=2, lr=3e-2, lora_rank=8,
                            max_prompt_tokens=PROMPT_TOKENS), rows)
    export_merged(root / "trained", root / "exported")
    held = read_jsonl(root / "data" / "eval.jsonl")
    return base, root / "trained", root / "exported", [held[i] for i in range(0, len(held), len(held) // 4)][:4]


@needs_torch
def test_a_served_model_asks_the_trained_question_and_forecasts_what_it_does_in_process(served) -> None:  # noqa: ANN001
    import torch

    from kernelcast.agents.factory import local_forecaster
    from kernelcast.agents.forecast.bin_distribution import bin_log_probs, digit_token_ids
    from kernelcast.agents.train.model import chat_text, load_model

    _, trained, exported, rows = served
    in_process = load_model(trained, "cpu")
    for spec in (f"local:{trained}", f"local:{exported}"):
        model = local_forecaster(spec)
        assert model.prompt.max_source_chars == SOURCE_CHARS and model.prompt.max_prompt_tokens == PROMPT_TOKENS
        for row in rows:
            task = resolve_task(row.task)
            assert model.build_prompt(task, row.candidate, row.hardware) == row.prompt, spec  # type: ignore[attr-defined]
            with torch.no_grad():
                expected = bin_log_probs(in_process.model, in_process.tokenizer,
                                         [chat_text(in_process.tokenizer, row.prompt)],
                                         digit_token_ids(in_process.tokenizer), PROMPT_TOKENS).exp()[0].numpy()
            forecast = model.forecast(task, row.candidate, row.hardware)
            assert not forecast.failed
            assert np.allclose(forecast.probabilities, expected, atol=1e-4), (spec, forecast.probabilities, expected)


@needs_torch
def test_the_output_head_reads_the_answer_positions_only(served) -> None:  # noqa: ANN001
    import torch

    from kernelcast.agents.forecast.bin_distribution import bin_log_probs, digit_token_ids, encode
    from kernelcast.agents.train.model import load_model

    base, _, _, _ = served
    loaded = load_model(base, "cpu")
    texts = ["a short prompt: ", "a much longer prompt than the first one, padded to its length: ", "mid length: "]
    shapes: list[tuple[int, ...]] = []
    head = loaded.model.get_output_embeddings()
    hook = head.register_forward_hook(lambda module, inputs, output: shapes.append(tuple(output.shape)))
    try:
        with torch.no_grad():
            got = bin_log_probs(loaded.model, loaded.tokenizer, texts, digit_token_ids(loaded.tokenizer))
    finally:
        hook.remove()
    assert shapes and all(shape[1] <= len(texts) for shape in shapes), f"the head saw {shapes}: every position"
    batch = encode(loaded.tokenizer, texts, "cpu")
    with torch.no_grad():
        full = loaded.model(**batch).logits
    last = batch["attention_mask"].sum(dim=1) - 1
    expected = torch.log_softmax(full[torch.arange(3), last][:, digit_token_ids(loaded.tokenizer)], dim=-1)
    assert torch.allclose(got, expected, atol=1e-5)


@needs_torch
def test_the_local_forecaster_loads_once_shares_the_prefix_and_remembers_what_it_read(served) -> None:  # noqa: ANN001
    from kernelcast.agents.forecast.local import LocalModelForecaster, loaded_model

    _, trained, _, rows = served
    task = resolve_task(rows[0].task)
    same_task = [r for r in rows if r.task == rows[0].task] or rows[:1]
    cands = [r.candidate for r in same_task] + [task.reference()]
    hardware = rows[0].hardware
    shared = LocalModelForecaster(str(trained), device="cpu")
    plain = LocalModelForecaster(str(trained), device="cpu", share_prefix=False)
    assert loaded_model(str(trained), "cpu") is loaded_model(str(trained), "cpu"), "one load per process"
    cached = np.array([f.probabilities for f in shared.forecast_many(task, cands, hardware)])
    assert shared._prefix is not None and len(shared._prefix[0]) > 100, "the task's shared prefix is cached"
    uncached = np.array([f.probabilities for f in plain.forecast_many(task, cands, hardware)])
    assert np.allclose(cached, uncached, atol=1e-5), np.abs(cached - uncached).max()
    assert len({tuple(np.round(p, 6)) for p in cached}) > 1, "forecasts depend on the candidate"
    passes = shared.forward_passes
    again = np.array([f.probabilities for f in shared.forecast_many(task, cands, hardware)])
    assert shared.forward_passes == passes and np.array_equal(again, cached), "a prompt read once is not read again"
    alone = shared.forecast(task, task.reference().model_copy(update={"build_options": ["-cl-mad-enable"]}), hardware)
    assert not alone.failed and shared.forward_passes == passes + 1, "one candidate alone reuses the cached prefix"


@needs_torch
def test_eval_names_the_evaluation_tasks_a_model_has_learned_from(served) -> None:  # noqa: ANN001
    """Issue 65: `forecaster eval` scored a forecaster on tasks it had learned from without a word (the command
    prints a warning naming ``report.seen_tasks``)."""
    from kernelcast.agents.forecast.learned import task_lookup
    from kernelcast.agents.forecast.local import LocalModelForecaster
    from kernelcast.forecaster_eval import evaluate_forecaster

    _, trained, _, held = served
    model = LocalModelForecaster(str(trained), device="cpu")
    seen = read_jsonl(trained.parent / "data" / "train.jsonl")[:1]
    assert seen[0].task in model.trained_tasks() and not {r.task for r in held} & model.trained_tasks()
    leaky = evaluate_forecaster("trained", model, seen + held[:1], task_lookup(None))
    assert leaky.seen_tasks == [seen[0].task]
    assert evaluate_forecaster("trained", model, held[:1], task_lookup(None)).seen_tasks == []
