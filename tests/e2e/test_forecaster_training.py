"""Issue 47: training a forecaster model on the store's own data (dataset, score and GRPO training, resume, a
trained model as the forecaster of a real run).

The training tests use a tiny Llama built from a config (character tokens, 2 layers) so they run in seconds on
2 cores; they need the ``[train]`` extra and are skipped, with that reason, only where torch is absent.
"""

from __future__ import annotations

import json
import os
import signal
import string
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernelcast.agents.train.data import TrainingRow, build_rows, plan_split, read_jsonl, suite_split
from kernelcast.agents.train.prompt import forecast_prompt, parse_answer, strip_comments
from kernelcast.dataset import forecaster_dataset
from kernelcast.tools.core.measurement import HardwareSpec, Measurement, Status
from kernelcast.tools.core.task import resolve_task

try:
    import torch  # noqa: F401

    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False
needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason="needs the [train] extra (torch, transformers, peft, trl): "
                                 "pip install -e '.[train]'")

LEAKY = """// tuned by hand: expect a 3.7x speedup over the reference
__kernel void saxpy(const float a, __global const float *x, __global float *y, const int n)
{
    /* this version is 4x faster
       than the naive one */
    int i = get_global_id(0);  // 2.5x
    if (i < n) y[i] = a * x[i] + y[i];
}
"""


def _hardware() -> HardwareSpec:
    return HardwareSpec(backend="opencl", platform="Test", name="test CPU", device_type="CPU", compute_units=2)


# ---- the label leak -----------------------------------------------------------------------------------
def test_comments_that_state_a_speedup_never_reach_the_prompt_or_the_rows() -> None:
    task = resolve_task("saxpy")
    reference = task.reference()
    candidate = reference.model_copy(update={"source": LEAKY, "origin": "written", "note": "hand-written"})
    stripped = strip_comments(LEAKY)
    assert "3.7x" not in stripped and "4x" not in stripped and "2.5x" not in stripped and "faster" not in stripped
    assert "y[i] = a * x[i] + y[i];" in stripped and "__kernel void saxpy" in stripped  # the code itself is intact
    prompt = forecast_prompt(task, candidate, _hardware())
    assert "3.7x" not in prompt and "4x" not in prompt and "2.5x" not in prompt and "tuned by hand" not in prompt
    assert "y[i] = a * x[i] + y[i];" in prompt

    m = Measurement(task=task.name, candidate_hash=candidate.hash, device=_hardware().key, sizes="full", status=Status.correct,
                    speedup=3.7, task_fingerprint=task.fingerprint)
    rows, dropped = build_rows([(candidate, m, "store")], {_hardware().key: _hardware()}, lambda name: task)
    assert not dropped and len(rows) == 1
    row = rows[0]
    assert row.true_bin == 7 and row.candidate_hash == candidate.hash
    assert "3.7x" not in row.model_dump_json().replace('"speedup":3.7', "")  # only the label itself says 3.7


def test_answers_are_parsed_and_unsound_ones_rejected() -> None:
    answer = parse_answer("6 | 2 3 5 10 20 40 15 5")
    assert answer.parsed and answer.predicted_bin == 6 and abs(sum(answer.probabilities or []) - 1) < 1e-9
    assert not parse_answer("six | 2 3 5 10 20 40 15 5").parsed
    assert not parse_answer("6 | 1e30 3 5 10 20 40 15 5").parsed  # absurd numbers: no distribution
    assert not parse_answer("6 | 2 3 5").parsed


# ---- the dataset ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def dataset_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The seed dataset as training/evaluation sets, 'gemm' held out by a corpus manifest's held-out suite."""
    out = tmp_path_factory.mktemp("forecaster-data")
    manifest = out / "manifest.toml"
    manifest.write_text('[suites.mine]\nsplit = "held-out"\n\n[[kernels]]\ntask = "gemm"\nsuite = "mine"\n')
    forecaster_dataset(None, out / "data", eval_share=0.2, seed=1, corpus_manifest=manifest)
    return out / "data"


def test_dataset_is_split_by_task_and_suite_unique_by_candidate_and_described(dataset_dir: Path) -> None:
    manifest = json.loads((dataset_dir / "manifest.json").read_text())
    train, held = read_jsonl(dataset_dir / "train.jsonl"), read_jsonl(dataset_dir / "eval.jsonl")
    assert manifest["files"] == {"train.jsonl": len(train), "eval.jsonl": len(held)}
    assert "gemm" in manifest["split"]["eval_tasks"] and manifest["split"]["held_out_suites"] == ["mine"]
    assert {r.task for r in held} == set(manifest["split"]["eval_tasks"]) and len(manifest["split"]["eval_tasks"]) >= 2
    assert not {r.task for r in train} & {r.task for r in held}
    keys = [(r.candidate_hash, r.device) for r in train + held]
    assert len(keys) == len(set(keys)) == 780  # the seed's 780 pairs, all correct, each once
    assert all(1 <= r.true_bin <= 8 and r.speedup > 0 and "/*" not in r.prompt.replace("/* ...", "")
               for r in train + held)  # (clip_source marks a cut kernel with "/* ... N more characters */")
    with_ci = [r for r in train if r.speedup_ci is not None]  # the seed's later measurements carry an interval
    assert with_ci and all(r.speedup_ci[0] <= r.speedup <= r.speedup_ci[1] for r in with_ci)  # type: ignore[index]


def test_dataset_says_what_it_dropped_by_sizes_and_device(tmp_path: Path) -> None:
    """Issue 65: after `dataset build --sizes small` the new rows vanished without a word ("dropped" empty)."""
    from kernelcast.tools.store.store import Store

    store = Store(tmp_path / "k.db")
    task = resolve_task("saxpy")
    hardware = _hardware()
    store.devices.upsert(hardware)
    cands = [task.reference().model_copy(update={"build_options": [f"-DPAD={n}"], "origin": "written"}) for n in (1, 2, 3)]
    for cand in cands:
        store.candidates.add(cand)
    for cand, sizes, device in ((cands[0], "small", hardware.key), (cands[1], "full", "ghost-device"),
                                (cands[2], "full", hardware.key)):
        store.ledger.add(Measurement(task=task.name, candidate_hash=cand.hash, device=device, sizes=sizes,
                                     status=Status.correct, speedup=1.3, task_fingerprint=task.fingerprint))
    manifest = forecaster_dataset(store, tmp_path / "data", include_seed=False, eval_share=0.0)
    assert manifest.files == {"train.jsonl": 1, "eval.jsonl": 0}
    assert manifest.dropped == {"measured at sizes 'small' (rows are full-size measurements)": 1,
                                "device ghost-device has no spec in the store": 1}, manifest.dropped
    row = read_jsonl(tmp_path / "data" / "train.jsonl")[0]
    assert row.prompt_settings is not None and row.prompt_settings.max_source_chars == manifest.max_source_chars


def test_split_names_tasks_and_reads_a_corpus_manifest(tmp_path: Path) -> None:
    plan = plan_split(["a", "b", "c", "d"], eval_tasks=["c"])
    assert plan.eval_tasks == ["c"] and plan.train_tasks == ["a", "b", "d"]
    with pytest.raises(ValueError):
        plan_split(["a"], eval_tasks=["zzz"])
    path = tmp_path / "m.toml"
    path.write_text('[suites.x]\nsplit = "training"\n[suites.y]\nsplit = "held-out"\n'
                    '[[kernels]]\ntask = "k1"\nsuite = "x"\n[[kernels]]\ntask = "k2"\nsuite = "y"\n')
    suites, held = suite_split(path)
    assert suites == {"k1": "x", "k2": "y"} and held == {"y"}
    plan = plan_split(["k1", "k2", "free"], suites=suites, held_out_suites=held, eval_share=0.0)
    assert plan.eval_tasks == ["k2"] and set(plan.train_tasks) == {"k1", "free"}


# ---- training ----------------------------------------------------------------------------------------------
def _tiny_model(folder: Path, seed: int = 0) -> Path:
    """A 2-layer Llama over character tokens, saved as a Hugging Face folder (no download)."""
    import torch
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<pad>": 1, "</s>": 2, **{c: i + 3 for i, c in enumerate(sorted(set(string.printable)))}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                         max_position_embeddings=4096, pad_token_id=1, eos_token_id=2, bos_token_id=2))
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>",
                            eos_token="</s>").save_pretrained(folder)
    model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not HAVE_TORCH:
        pytest.skip("needs the [train] extra")
    return _tiny_model(tmp_path_factory.mktemp("tiny"))


def _short(rows: list[TrainingRow], n: int) -> list[TrainingRow]:
    """n rows with their prompt cut to its last 200 characters (the candidate's end and the question)."""
    return [r.model_copy(update={"prompt": r.prompt[-200:]}) for r in rows[:n]]


def _mean_score(model_dir: Path, rows: list[TrainingRow], rule: str) -> tuple[float, list[float]]:
    """(the mean scoring rule of the model's digit distributions on ``rows``, the mean distribution)."""
    import torch

    from kernelcast.agents.forecast.bin_distribution import LOSSES, bin_log_probs, digit_token_ids
    from kernelcast.agents.train.model import chat_text, load_model

    loaded = load_model(model_dir, "cpu")
    with torch.no_grad():
        log_p = bin_log_probs(loaded.model, loaded.tokenizer, [chat_text(loaded.tokenizer, r.prompt) for r in rows],
                              digit_token_ids(loaded.tokenizer))
        return float(LOSSES[rule](log_p, [r.true_bin for r in rows])), log_p.exp().mean(dim=0).tolist()


@needs_torch
@pytest.mark.parametrize("rule", ["crps", "brier"])
def test_score_training_lowers_its_scoring_rule(tiny: Path, dataset_dir: Path, tmp_path: Path, rule: str) -> None:
    from kernelcast.agents.train.score import ScoreConfig, train_score

    rows = _short(read_jsonl(dataset_dir / "train.jsonl"), 12)
    seen = {r.true_bin for r in rows}
    before, mean_before = _mean_score(tiny, rows, rule)
    metrics = train_score(ScoreConfig(base=str(tiny), out=tmp_path / "m", loss=rule, steps=10, batch_size=6, lr=3e-2,
                                      lora_rank=8, checkpoint_every=4), rows)
    after, mean_after = _mean_score(tmp_path / "m", rows, rule)
    assert metrics.steps == 10 and len(metrics.history) == 10 and metrics.peak_memory_mb > 0
    # the best distribution that ignores the prompt (these rows' bin frequencies) bounds what a tiny model reaches
    assert after < 0.92 * before, f"{rule}: {before:.4f} -> {after:.4f}"
    mass_before, mass_after = (sum(p[b - 1] for b in seen) for p in (mean_before, mean_after))
    assert mass_after > mass_before + 0.1, f"mass on the rows' bins {mass_before:.2f} -> {mass_after:.2f}"
    saved = json.loads((tmp_path / "m" / "metrics.json").read_text())
    assert saved["method"] == "score" and saved["objective"] == rule


def _answering_model(base: Path, out: Path, rows: list[TrainingRow]) -> Path:
    """The tiny model taught (plain supervised steps, test setup only) to answer in the "bin | percentages"
    format with every bin equally likely first: GRPO then has parsed answers to reward."""
    import random

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from kernelcast.agents.train.model import chat_text

    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    rng = random.Random(0)
    texts = [chat_text(tokenizer, r.prompt) for r in rows]
    for _ in range(120):
        batch = [rng.choice(texts) + f"{rng.randint(1, 8)} | 12 12 12 12 13 13 13 13</s>" for _ in range(8)]
        enc = tokenizer(batch, return_tensors="pt", padding=True, add_special_tokens=False)
        labels = enc["input_ids"].masked_fill(enc["attention_mask"] == 0, -100)
        loss = model(**enc, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@needs_torch
def test_grpo_with_a_correctness_reward_moves_the_bin_towards_the_truth(tiny: Path, dataset_dir: Path,
                                                                       tmp_path: Path) -> None:
    from kernelcast.agents.train.grpo import GRPOSettings, reward_function, train_grpo

    rows = [r.model_copy(update={"prompt": "Q", "true_bin": 7}) for r in read_jsonl(dataset_dir / "train.jsonl")[:4]]
    reward = reward_function("crps")
    assert reward([], ["7 | 0 0 0 0 0 0 100 0", "1 | 100 0 0 0 0 0 0 0", "junk"], [7, 7, 7]) == pytest.approx([2.0, 1 / 7, 0.0])
    base = _answering_model(tiny, tmp_path / "answering", rows)
    _, before = _mean_score(base, rows, "crps")
    metrics = train_grpo(GRPOSettings(base=str(base), out=tmp_path / "g", reward="correctness", steps=12, lr=1e-1,
                                      prompts_per_step=2, lora_rank=8, max_completion_tokens=32, checkpoint_every=3,
                                      warm_start_steps=0), rows)  # taught by the test's own setup above
    _, after = _mean_score(tmp_path / "g", rows, "crps")
    assert metrics.steps == 12 and metrics.method == "grpo"
    assert any(r.reward is not None and r.reward > 0 for r in metrics.history), "some answers parsed and scored"
    assert after[6] > before[6] + 0.05, f"P(bin 7): {before[6]:.3f} -> {after[6]:.3f}"
    assert (tmp_path / "g" / "adapter" / "adapter_config.json").is_file()


def test_the_warm_start_teaches_answers_that_parse_and_earn_a_reward() -> None:
    """Issue 65: GRPO never learned: the small model never wrote "digit |", every answer scored 0. The taught
    answers are in the format, state the true bin, parse, and earn every reward; their confidences spread."""
    import random

    from kernelcast.agents.forecast.scoring import reward
    from kernelcast.agents.train.warm_start import CONFIDENCE, taught_answer

    rng = random.Random(0)
    confidences = []
    for true_bin in range(1, 9):
        for _ in range(5):
            answer = parse_answer(taught_answer(true_bin, rng))
            assert answer.parsed and answer.predicted_bin == true_bin and answer.probabilities is not None
            assert abs(sum(answer.probabilities) - 1) < 1e-9 and answer.problem in ("", "read as percentages")
            confidences.append(max(answer.probabilities))
            for rule in ("correctness", "correctness+brier", "correctness+crps"):
                assert reward(answer.probabilities, answer.predicted_bin, true_bin, rule) >= 1.0
    assert CONFIDENCE[0] - 0.01 <= min(confidences) and max(confidences) <= CONFIDENCE[1] + 0.01
    assert max(confidences) - min(confidences) > 0.3, "a spread of confidences, not one calibration"


@needs_torch
def test_grpo_warm_starts_on_the_answer_format_and_records_it(tiny: Path, dataset_dir: Path, tmp_path: Path) -> None:
    import torch

    from kernelcast.agents.train.grpo import GRPOSettings, train_grpo
    from kernelcast.agents.train.model import load_base, load_model
    from kernelcast.agents.train.warm_start import answer_ids

    rows = _short(read_jsonl(dataset_dir / "train.jsonl"), 4)
    loaded = load_base(tiny)
    head, tail = answer_ids(loaded.tokenizer, "Q", "7 | 0 0 0 0 0 0 100 0", 64)
    assert loaded.tokenizer.decode(tail) == "7 | 0 0 0 0 0 0 100 0</s>", "the answer, closed so the model stops"
    metrics = train_grpo(GRPOSettings(base=str(tiny), out=tmp_path / "g", reward="crps", steps=1, lr=1e-3,
                                      num_generations=2, lora_rank=4, max_completion_tokens=8, warm_start_steps=3,
                                      warm_start_lr=1e-2), rows)
    phases = [h.phase for h in metrics.history]
    assert phases[:3] == ["warm start"] * 3 and phases[3:] == ["train"], phases
    meta = json.loads((tmp_path / "g" / "kernelcast_model.json").read_text())
    assert meta["warm_start_steps"] == 3 and meta["prompt"] == rows[0].prompt_settings.model_dump()  # type: ignore[union-attr]
    assert meta["tasks"] == sorted({r.task for r in rows})
    trained = load_model(tmp_path / "g", "cpu")
    lora_b = [p for n, p in trained.model.named_parameters() if "lora_B" in n]
    assert lora_b and any(float(torch.abs(p).max()) > 0 for p in lora_b), "the warm start moved the adapter"


@needs_torch
def test_training_resumes_after_a_kill(tiny: Path, dataset_dir: Path, tmp_path: Path) -> None:
    rows = _short(read_jsonl(dataset_dir / "train.jsonl"), 8)
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(r.model_dump_json() + "\n" for r in rows))
    out = tmp_path / "m"

    def command(steps: int) -> list[str]:
        return [sys.executable, "-m", "kernelcast.cli", "forecaster", "train", str(data), "--base", str(tiny),
                "--out", str(out), "--method", "score", "--steps", str(steps), "--checkpoint-every", "2",
                "--batch-size", "2", "--lr", "1e-2", "--lora-rank", "4"]

    proc = subprocess.Popen(command(500), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + 120
    while not (out / "checkpoints" / "step-000004").is_dir():
        assert proc.poll() is None and time.monotonic() < deadline, "training stopped before its 4th step"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "metrics.json").exists(), "killed before it finished"
    subprocess.run(command(12), check=True, capture_output=True, timeout=300)
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["steps"] == 12 and len(metrics["resumed_from"]) == 1 and metrics["resumed_from"][0] >= 4
    assert [h["step"] for h in metrics["history"]] == list(range(1, 13)), "every step once, none repeated or lost"


@needs_torch
def test_a_trained_model_forecasts_inside_a_real_optimize_run(tiny: Path, dataset_dir: Path, tmp_path: Path) -> None:
    from kernelcast.agents.train.score import ScoreConfig, train_score
    from kernelcast.graphs.config import RunConfig
    from kernelcast.graphs.context import RunEnv
    from kernelcast.graphs.run import start_run
    from kernelcast.tools.store.store import Store

    trained = tmp_path / "trained"
    train_score(ScoreConfig(base=str(tiny), out=trained, steps=2, batch_size=2, lr=1e-2, lora_rank=4,
                            max_prompt_tokens=256), _short(read_jsonl(dataset_dir / "train.jsonl"), 4))
    model = f"local:{trained}"
    store = Store(tmp_path / "k.db")
    config = RunConfig(task="saxpy", budget=2, router="selective", forecaster="llm", model=model, sizes="small",
                       measure_per_round=2, confirm_top=0)
    result = start_run(config, store, RunEnv(tmp_path, measure_timeout_s=60))
    assert result.spent <= 2
    forecasts = store.forecasts.find(run_id=result.run_id)
    assert forecasts and all(f.model == model and not f.failed for f in forecasts), [f.provenance for f in forecasts]
    assert len({tuple(f.probabilities) for f in forecasts}) > 1, "forecasts depend on the candidate"


def test_a_trained_model_is_certified_on_its_own_runs_rows_only(tmp_path: Path) -> None:
    """Another forecaster's calibration rows (and the seed's replay, made with the blended forecaster) never
    certify a trained model's routing: only the rows of runs that forecast with that very model do."""
    from kernelcast.graphs.route.risk_control import SEED_REPLAY
    from kernelcast.graphs.route.trust import trust_for
    from kernelcast.tools.store.store import Store

    from support.decisions import record_route
    from support.records import measurement

    store = Store(tmp_path / "k.db")
    mine = ("llm", "local:/models/mine")
    runs = {"learned": store.runs.create("saxpy", "dev", {"task": "saxpy", "forecaster": "learned", "model": None}, 4),
            "mine": store.runs.create("saxpy", "dev", {"task": "saxpy", "forecaster": mine[0], "model": mine[1]}, 4)}
    for n, (who, run_id) in enumerate(sorted(runs.items())):
        for i in range(3 if who == "mine" else 40):
            child = f"{n}{i:063d}"
            record_route(store, run_id, child, ("learned", None) if who == "learned" else mine, decision="measure",
                         p_beat=0.05, incumbent=1.0)
            store.ledger.add(measurement(child, 0.5), run_id=run_id)
    learned = trust_for(store, "dev", 0, 0.1, ("learned", None))
    own = trust_for(store, "dev", 0, 0.1, mine, replayed=True)
    assert learned.n_calibration == 40 and own.n_calibration == 3
    assert own.source != SEED_REPLAY and own.prune_below is None  # three rows certify nothing
