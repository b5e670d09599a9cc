"""Calibration training (issues 47 and 65): one base model trained by each method, scored on held-out tasks next
to the blended forecaster and uniform, side by side in one run.

Rows: base (no training), score-CRPS, score-Brier, GRPO correctness / + Brier / + CRPS (each after the same
supervised warm-start on the answer format), blended (trained on the training tasks' pairs only), uniform. Each
method trains in its own process (its peak memory is its own), on the training split of `kernelcast forecaster
dataset` built here from the store and the seed data. Every model is served as a run serves it (the ``local:``
forecaster, which reads the prompt settings the model recorded): the bench checks that its prompts are the
dataset's, byte for byte. Score models are read by their bin digits' next-token distribution; GRPO models by the
probabilities they write (``--grpo-read stated``, what GRPO trains) or by their digits.

For GRPO it prints the mean reward of each step: the paper's finding to test is that with the correctness reward
alone confidence rises without error falling, and with Brier or CRPS added error falls as confidence rises
(Spearman(confidence, |bin error|) < 0).

    nice -n 10 python bench/calibration_training_bench.py --base ~/.cache/kernelcast/SmolLM2-135M-Instruct.Q4_1.gguf \\
        --score-steps 12 --grpo-steps 12 --warm-start 24 --num-generations 4 --train-rows 64 --eval-rows 32 \\
        --max-source-chars 300

Keep it small on a 2-core CPU: a 135M model reads a ~400-token prompt in about a second there when idle.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernelcast.agents.factory import UninformativeForecaster, learned_forecaster  # noqa: E402
from kernelcast.agents.forecast.learned import task_lookup  # noqa: E402
from kernelcast.agents.forecast.local import LocalModelForecaster  # noqa: E402
from kernelcast.agents.train.data import TrainingRow, read_jsonl  # noqa: E402
from kernelcast.agents.train.prompt import common_settings  # noqa: E402
from kernelcast.dataset import forecaster_dataset  # noqa: E402
from kernelcast.forecaster_eval import EvalReport, evaluate_forecaster  # noqa: E402
from kernelcast.tools.store.store import Store  # noqa: E402

METHODS = {  # name -> train command arguments
    "score-CRPS": ["--method", "score", "--loss", "crps"],
    "score-Brier": ["--method", "score", "--loss", "brier"],
    "GRPO correctness": ["--method", "grpo", "--reward", "correctness"],
    "GRPO + Brier": ["--method", "grpo", "--reward", "brier"],
    "GRPO + CRPS": ["--method", "grpo", "--reward", "crps"],
}


def spread(rows: list, n: int) -> list:
    """n rows spread evenly over the list (the split files are grouped by task)."""
    if n >= len(rows):
        return rows
    return [rows[int(i)] for i in np.linspace(0, len(rows) - 1, n)]


def prompts_match(model: LocalModelForecaster, rows: list[TrainingRow], lookup) -> int:  # noqa: ANN001
    """How many rows the served model asks exactly the dataset's question."""
    return sum(model.build_prompt(lookup(r.task), r.candidate, r.hardware) == r.prompt for r in rows)


def reward_trace(metrics: dict) -> str:
    rewards = [h["reward"] for h in metrics["history"] if h.get("phase", "train") == "train" and h["reward"] is not None]
    if not rewards:
        return "-"
    k = max(1, min(3, len(rewards) // 3))
    return f"{np.mean(rewards[:k]):.2f} -> {np.mean(rewards[-k:]):.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, help="a .gguf file or a Hugging Face model folder")
    parser.add_argument("--db", default=None, help="the store (default: none, the seed data only)")
    parser.add_argument("--work", default="/tmp/kernelcast-calibration-bench")
    parser.add_argument("--budget-s", type=float, default=None, help="stop each method's training at this many s")
    parser.add_argument("--score-steps", type=int, default=12)
    parser.add_argument("--grpo-steps", type=int, default=12)
    parser.add_argument("--warm-start", type=int, default=24, help="GRPO: supervised steps on the answer format")
    parser.add_argument("--num-generations", type=int, default=4, help="GRPO: sampled answers per prompt")
    parser.add_argument("--train-rows", type=int, default=64)
    parser.add_argument("--eval-rows", type=int, default=32)
    parser.add_argument("--max-source-chars", type=int, default=300)
    parser.add_argument("--methods", default=",".join(METHODS), help="comma-separated subset")
    parser.add_argument("--read", choices=["digits", "stated"], default="digits", help="base and score models")
    parser.add_argument("--grpo-read", choices=["digits", "stated"], default="stated")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    work = Path(args.work)
    store = Store(args.db) if args.db else None
    manifest = forecaster_dataset(store, work / "data", max_source_chars=args.max_source_chars, seed=args.seed)
    train = spread(read_jsonl(work / "data" / "train.jsonl"), args.train_rows)
    held = spread(read_jsonl(work / "data" / "eval.jsonl"), args.eval_rows)
    settings = common_settings([r.prompt_settings for r in train])
    (work / "train_small.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in train))
    print(f"held-out tasks: {', '.join(manifest.split.eval_tasks)}; {len(train)} training rows, {len(held)} held out; "
          f"prompts: {settings.max_source_chars} source characters per kernel", flush=True)

    lookup = task_lookup(store)
    rows: list[tuple[EvalReport, str, dict | None]] = []  # report, read mode, training metrics
    base = LocalModelForecaster(args.base, mode=args.read, prompt=settings)
    rows.append((evaluate_forecaster("base (no training)", base, held, lookup), args.read, None))
    print(f"base done ({rows[-1][0].wall_s:.0f} s)", flush=True)
    for name in args.methods.split(","):
        out = work / name.replace(" ", "_").replace("+", "plus")
        grpo = METHODS[name][1] == "grpo"
        cmd = [sys.executable, "-m", "kernelcast.cli", "forecaster", "train", str(work / "train_small.jsonl"),
               "--base", args.base, "--out", str(out), "--steps", str(args.grpo_steps if grpo else args.score_steps),
               "--checkpoint-every", "1000", "--seed", str(args.seed), *METHODS[name]]
        cmd += ["--max-seconds", str(args.budget_s)] if args.budget_s else []
        cmd += ["--warm-start", str(args.warm_start), "--num-generations", str(args.num_generations)] if grpo else []
        started = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        metrics = json.loads((out / "metrics.json").read_text())
        read = args.grpo_read if grpo else args.read
        model = LocalModelForecaster(str(out), mode=read)
        same = prompts_match(model, held, lookup)
        assert same == len(held), f"{name}: {len(held) - same} served prompts differ from the dataset's"
        rows.append((evaluate_forecaster(name, model, held, lookup), read, metrics))
        print(f"{name} done ({time.perf_counter() - started:.0f} s, {metrics['steps']} steps, rewards "
              f"{[round(h['reward'], 2) for h in metrics['history'] if h.get('reward') is not None]}; served prompts "
              f"equal to the dataset's: {same}/{len(held)})", flush=True)

    blend_store = Store(work / "train_pairs.db")  # the blended forecaster learns the training tasks only
    for row in read_jsonl(work / "data" / "train.jsonl"):
        blend_store.devices.upsert(row.hardware)
        blend_store.candidates.add(row.candidate)
        blend_store.ledger.add(row.measurement.model_copy(update={"candidate_hash": row.candidate.hash}))
    blended = learned_forecaster(blend_store, held[0].device, seed_path=work / "no-seed.jsonl.gz")
    rows.append((evaluate_forecaster("blended (training tasks)", blended, held, lookup), "-", None))
    rows.append((evaluate_forecaster("uniform", UninformativeForecaster(), held, lookup), "-", None))

    cols = ["read", "acc", "w1", "Brier/2", "CRPS", "ECE", "mean conf", "rho(conf,err)", "rec@10", "train s", "steps",
            "reward first -> last", "peak MB", "seen"]
    print("\n| forecaster | " + " | ".join(cols) + " |\n|---|" + "---|" * len(cols))
    for r, read, m in rows:
        values = [r.accuracy, r.within_one, r.brier_halved, r.crps, r.ece, r.mean_confidence,
                  r.spearman_confidence_error, r.recovered_at_10]
        cells = [read] + [f"{v:.3f}" for v in values]
        cells += [f"{m['wall_s']:.0f}", str(m["steps"]), reward_trace(m), f"{m['peak_memory_mb']:.0f}"] if m else \
            ["-", "-", "-", "-"]
        cells.append(", ".join(r.seen_tasks) or "no")
        print(f"| {r.forecaster} | " + " | ".join(cells) + " |")
    print(f"\n{len(held)} held-out rows ({', '.join(manifest.split.eval_tasks)}); Brier halved; rho < 0: error falls "
          "as confidence rises; train s includes GRPO's warm start; peak MB: the training process's peak RSS")


if __name__ == "__main__":
    main()
