"""Calibration training (issue 47): one base model trained by each method under the same wall-clock budget,
scored on held-out tasks next to the blended forecaster and uniform, side by side in one run.

Rows: base (no training), GRPO correctness / + Brier / + CRPS, score-CRPS, score-Brier, blended (trained on the
training tasks' pairs only), uniform. Each method trains in its own process (its peak memory is its own), on the
training split of `kernelcast forecaster dataset` built here from the store and the seed data; every model is read
the same way (``--read digits``: the next-token distribution of the bin digits; ``stated``: the probabilities it
writes, slower on a CPU).

    python bench/calibration_training_bench.py --base ~/.cache/kernelcast/SmolLM2-135M-Instruct.Q4_1.gguf \
        --budget-s 120 --train-rows 64 --eval-rows 32 --max-source-chars 300

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
from kernelcast.agents.train.data import read_jsonl  # noqa: E402
from kernelcast.dataset import forecaster_dataset  # noqa: E402
from kernelcast.forecaster_eval import EvalReport, evaluate_forecaster  # noqa: E402
from kernelcast.tools.store.store import Store  # noqa: E402

METHODS = {  # name -> train command arguments
    "GRPO correctness": ["--method", "grpo", "--reward", "correctness"],
    "GRPO + Brier": ["--method", "grpo", "--reward", "brier"],
    "GRPO + CRPS": ["--method", "grpo", "--reward", "crps"],
    "score-CRPS": ["--method", "score", "--loss", "crps"],
    "score-Brier": ["--method", "score", "--loss", "brier"],
}


def spread(rows: list, n: int) -> list:
    """n rows spread evenly over the list (the split files are grouped by task)."""
    if n >= len(rows):
        return rows
    return [rows[int(i)] for i in np.linspace(0, len(rows) - 1, n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, help="a .gguf file or a Hugging Face model folder")
    parser.add_argument("--db", default=None, help="the store (default: none, the seed data only)")
    parser.add_argument("--work", default="/tmp/kernelcast-calibration-bench")
    parser.add_argument("--budget-s", type=float, default=120.0, help="training time of each method")
    parser.add_argument("--train-rows", type=int, default=64)
    parser.add_argument("--eval-rows", type=int, default=32)
    parser.add_argument("--max-source-chars", type=int, default=300)
    parser.add_argument("--methods", default=",".join(METHODS), help="comma-separated subset")
    parser.add_argument("--read", choices=["digits", "stated"], default="digits")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    work = Path(args.work)
    store = Store(args.db) if args.db else None
    manifest = forecaster_dataset(store, work / "data", max_source_chars=args.max_source_chars, seed=args.seed)
    train = spread(read_jsonl(work / "data" / "train.jsonl"), args.train_rows)
    held = spread(read_jsonl(work / "data" / "eval.jsonl"), args.eval_rows)
    (work / "train_small.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in train))
    print(f"held-out tasks: {', '.join(manifest.split.eval_tasks)}; {len(train)} training rows, {len(held)} held out")

    lookup = task_lookup(store)
    reports: list[tuple[EvalReport, float | None, float | None, int | None]] = []  # report, train s, peak MB, steps
    suffix = "#stated" if args.read == "stated" else ""
    reports.append((evaluate_forecaster("base (no training)", LocalModelForecaster(args.base, mode=args.read),
                                        held, lookup), None, None, None))
    print(f"base done ({reports[-1][0].wall_s:.0f} s)", flush=True)
    for name in args.methods.split(","):
        out = work / name.replace(" ", "_").replace("+", "plus")
        cmd = [sys.executable, "-m", "kernelcast.cli", "forecaster", "train", str(work / "train_small.jsonl"),
               "--base", args.base, "--out", str(out), "--steps", "100000", "--max-seconds", str(args.budget_s),
               "--checkpoint-every", "1000", "--seed", str(args.seed), *METHODS[name]]
        started = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        metrics = json.loads((out / "metrics.json").read_text())
        model = LocalModelForecaster(str(out), mode=args.read)
        report = evaluate_forecaster(name, model, held, lookup)
        reports.append((report, metrics["wall_s"], metrics["peak_memory_mb"], metrics["steps"]))
        print(f"{name} done ({time.perf_counter() - started:.0f} s, {metrics['steps']} steps){suffix}", flush=True)

    blend_store = Store(work / "train_pairs.db")  # the blended forecaster learns the training tasks only
    for row in read_jsonl(work / "data" / "train.jsonl"):
        blend_store.upsert_device(row.hardware)
        blend_store.add_candidate(row.candidate)
        blend_store.add_measurement(row.measurement.model_copy(update={"candidate_hash": row.candidate.hash}))
    blended = learned_forecaster(blend_store, held[0].device, seed_path=work / "no-seed.jsonl.gz")
    reports.append((evaluate_forecaster("blended (training tasks)", blended, held, lookup), None, None, None))
    reports.append((evaluate_forecaster("uniform", UninformativeForecaster(), held, lookup), None, None, None))

    cols = ["acc", "w1", "Brier/2", "CRPS", "ECE", "AURC", "rec@1", "rec@10", "rec@50", "rho(conf,err)", "train s",
            "steps", "peak MB"]
    print("\n| forecaster | " + " | ".join(cols) + " |\n|---|" + "---|" * len(cols))
    for r, wall, peak, steps in reports:
        values = [r.accuracy, r.within_one, r.brier_halved, r.crps, r.ece, r.aurc, r.recovered_at_1, r.recovered_at_10,
                  r.recovered_at_50, r.spearman_confidence_error]
        cells = [f"{v:.3f}" for v in values] + [f"{wall:.0f}" if wall else "-", str(steps) if steps else "-",
                                                f"{peak:.0f}" if peak else "-"]
        print(f"| {r.forecaster} | " + " | ".join(cells) + " |")
    print(f"\n{len(held)} held-out rows ({', '.join(manifest.split.eval_tasks)}), read as {args.read}; Brier halved; "
          "rho < 0: error falls as confidence rises")


if __name__ == "__main__":
    main()
