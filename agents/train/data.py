"""Training and evaluation sets for a forecaster model, from measured pairs (the store's, the shipped seed's).

A row is one measured candidate on one device: the reference and the candidate (comments stripped, see
:mod:`kernelcast.agents.train.prompt`), the device's spec, the true bin, the measured speedup and its
interval, and the prompt a trained model reads. Failed measurements are left out (the bins cover correct
kernels only) and counted. Rows are unique by candidate identity on a device (the store's latest measurement
first, then the seed's); the split is by task, so no candidate of an evaluation task is trained on, and by
suite where a corpus manifest names suites held out (:func:`suite_split`).
"""

from __future__ import annotations

import hashlib
import json
import math
import tomllib
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from kernelcast.agents.train.prompt import MAX_SOURCE_CHARS, PromptSettings, strip_comments
from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.measurement import HardwareSpec, Measurement
from kernelcast.tools.core.task import Task, TaskError

CORPUS_MANIFEST = Path("bench/corpus/manifest.toml")
Split = Literal["train", "eval"]
HELD_OUT = ("held_out", "held-out", "heldout", "eval", "test")


class TrainingRow(BaseModel):
    """One measured (reference, candidate, device) example with its label."""

    task: str
    task_fingerprint: str | None = None
    suite: str | None = None
    device: str
    candidate_hash: str  # the identity of the candidate as measured (before its comments were stripped)
    candidate: Candidate  # comments stripped
    reference_source: str  # comments stripped
    hardware: HardwareSpec
    true_bin: int = Field(ge=1, le=8)
    speedup: float
    speedup_ci: tuple[float, float] | None = None
    measurement: Measurement
    prompt: str
    prompt_settings: PromptSettings | None = None  # how ``prompt`` was built (None: a row from before it was recorded)
    origin: Literal["store", "seed"] = "store"

    def pair(self) -> tuple[Candidate, Measurement]:
        return self.candidate, self.measurement


class SplitPlan(BaseModel):
    """Which tasks (and suites) are held out for evaluation, and why."""

    eval_tasks: list[str]
    train_tasks: list[str]
    held_out_suites: list[str] = Field(default_factory=list)
    rule: str


class DatasetManifest(BaseModel):
    """What was written, from what, and how it was split."""

    files: dict[str, int]  # file name -> rows
    sha256: dict[str, str]
    split: SplitPlan
    sources: dict[str, int]  # rows by origin
    dropped: dict[str, int]  # failed measurements, duplicates, tasks that could not be loaded
    devices: list[str]
    max_source_chars: int
    comments_stripped: bool = True


def suite_split(path: Path = CORPUS_MANIFEST) -> tuple[dict[str, str], set[str]]:
    """(suite of each task, held-out suites) from a corpus manifest; empty when there is none.

    Read tolerantly, since the corpus defines it: any table with ``suite`` and ``task`` or ``name`` names a
    task's suite; a suite is held out when a top-level ``held_out_suites`` lists it, when its table under
    ``suites`` says ``split = "held_out"`` (or eval/test), or when a task's table says so.
    """
    if not path.is_file():
        return {}, set()
    data = tomllib.loads(path.read_text())
    suites: dict[str, str] = {}
    held = set(data.get("held_out_suites", []))
    for name, spec in (data.get("suites") or {}).items():
        if isinstance(spec, dict) and str(spec.get("split", "")).lower() in HELD_OUT:
            held.add(name)

    def visit(node: object) -> None:
        if isinstance(node, dict):
            task = node.get("task") or node.get("name")
            if isinstance(task, str) and isinstance(node.get("suite"), str):
                suites[Path(task).stem if task.endswith(".toml") else task] = node["suite"]
                if str(node.get("split", "")).lower() in HELD_OUT:
                    held.add(node["suite"])
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit(data)
    return suites, held


def plan_split(tasks: Iterable[str], eval_tasks: Sequence[str] | None = None, eval_share: float = 0.3, seed: int = 0,
               suites: dict[str, str] | None = None, held_out_suites: set[str] | None = None) -> SplitPlan:
    """Held-out tasks: those of held-out suites, those named, or else a seeded ``eval_share`` of the rest (by a
    hash of seed and name, so adding a task moves no other task across the split)."""
    names = sorted(set(tasks))
    suites, held = suites or {}, held_out_suites or set()
    by_suite = {t for t in names if suites.get(t) in held}
    in_train_suite = {t for t in names if t in suites and suites[t] not in held}
    if eval_tasks:
        unknown = set(eval_tasks) - set(names)
        if unknown:
            raise ValueError(f"evaluation tasks with no measured pair: {', '.join(sorted(unknown))}")
        chosen, rule = set(eval_tasks), "named tasks"
    else:
        free = [t for t in names if t not in by_suite and t not in in_train_suite]
        ranked = sorted(free, key=lambda t: hashlib.sha256(f"{seed}:{t}".encode()).hexdigest())
        chosen = set(ranked[: math.ceil(eval_share * len(free))]) if len(free) > 1 else set()
        rule = f"{eval_share:.0%} of the tasks by a seeded hash (seed {seed})"
    if held:
        rule += f"; suites held out: {', '.join(sorted(held))}"
    evaluated = sorted(chosen | by_suite)
    return SplitPlan(eval_tasks=evaluated, train_tasks=[t for t in names if t not in evaluated],
                     held_out_suites=sorted(held), rule=rule)


def build_rows(pairs: Iterable[tuple[Candidate, Measurement, Literal["store", "seed"]]],
               devices: dict[str, HardwareSpec], lookup: Callable[[str], Task], suites: dict[str, str] | None = None,
               max_source_chars: int = MAX_SOURCE_CHARS) -> tuple[list[TrainingRow], Counter[str]]:
    """Rows of the correct full-size pairs, first of each (candidate, device) kept; what was dropped, by reason
    (each reason names the sizes or the device it concerns, so a user sees where measurements went)."""
    settings = PromptSettings(max_source_chars=max_source_chars)
    rows: list[TrainingRow] = []
    dropped: Counter[str] = Counter()
    seen: set[tuple[str, str]] = set()
    tasks: dict[str, Task | None] = {}
    for cand, m, origin in pairs:
        if m.sizes != "full":  # the prompt states the full sizes, and the bins were labelled there
            dropped[f"measured at sizes {m.sizes!r} (rows are full-size measurements)"] += 1
            continue
        key = (m.candidate_hash, m.device)
        if key in seen:
            dropped["duplicate"] += 1
            continue
        seen.add(key)
        if not m.ok or m.speedup is None or not 1 <= m.bin() <= 8:
            dropped["failed measurement"] += 1
            continue
        if m.device not in devices:
            dropped[f"device {m.device} has no spec in the store"] += 1
            continue
        if m.task not in tasks:
            try:
                tasks[m.task] = lookup(m.task)
            except TaskError:
                tasks[m.task] = None
        task = tasks[m.task]
        if task is None or not task.owns(m.task_fingerprint):
            dropped["task not found (or another task of that name)"] += 1
            continue
        stripped = cand.model_copy(update={"source": strip_comments(cand.source)})
        hardware = devices[m.device]
        rows.append(TrainingRow(
            task=m.task, task_fingerprint=m.task_fingerprint or task.fingerprint, suite=(suites or {}).get(m.task),
            device=m.device, candidate_hash=m.candidate_hash, candidate=stripped,
            reference_source=strip_comments(task.source), hardware=hardware, true_bin=m.bin(), speedup=m.speedup,
            speedup_ci=m.speedup_ci, measurement=m, origin=origin, prompt_settings=settings,
            prompt=settings.prompt(task, stripped, hardware)))
    return rows, dropped


def write_jsonl(rows: Iterable[TrainingRow], path: Path) -> tuple[int, str]:
    """(rows written, sha256 of the file)."""
    digest = hashlib.sha256()
    n = 0
    with path.open("w") as fh:
        for row in rows:
            line = row.model_dump_json() + "\n"
            fh.write(line)
            digest.update(line.encode())
            n += 1
    return n, digest.hexdigest()


def read_jsonl(path: str | Path) -> list[TrainingRow]:
    with Path(path).open() as fh:
        return [TrainingRow.model_validate_json(line) for line in fh if line.strip()]


def write_dataset(rows: list[TrainingRow], plan: SplitPlan, out: Path, dropped: Counter[str],
                  max_source_chars: int = MAX_SOURCE_CHARS) -> DatasetManifest:
    """``train.jsonl``, ``eval.jsonl`` and ``manifest.json`` under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    held = set(plan.eval_tasks)
    files, sums = {}, {}
    for name, part in (("train.jsonl", [r for r in rows if r.task not in held]),
                       ("eval.jsonl", [r for r in rows if r.task in held])):
        files[name], sums[name] = write_jsonl(part, out / name)
    manifest = DatasetManifest(files=files, sha256=sums, split=plan, sources=dict(Counter(r.origin for r in rows)),
                               dropped=dict(dropped), devices=sorted({r.device for r in rows}),
                               max_source_chars=max_source_chars)
    (out / "manifest.json").write_text(json.dumps(manifest.model_dump(mode="json"), indent=2) + "\n")
    return manifest
