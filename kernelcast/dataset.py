"""Build the measured dataset the learned forecaster and the calibration report learn from, and the training and
evaluation sets of a forecaster model (:func:`forecaster_dataset`).

Per task: a seeded pool of template points plus generic variants of the
reference (work-group shapes, build options, unrolling) from the offline
generator; every candidate is measured into the store. Deterministic given a
seed and resumable: candidates already measured on this device are skipped.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Literal

from kernelcast.agents.factory import SEED_DATASET, foreign_seed, measured_on_builtins
from kernelcast.agents.generate.base import GenerationContext
from kernelcast.agents.generate.offline import OfflineGenerator
from kernelcast.agents.train.data import CORPUS_MANIFEST, DatasetManifest, build_rows, plan_split, suite_split, write_dataset
from kernelcast.agents.train.prompt import MAX_SOURCE_CHARS
from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.measurement import HardwareSpec, MeasureConfig, Measurement
from kernelcast.tools.core.task import Task
from kernelcast.tools.hardware.measurers.base import Measurer
from kernelcast.tools.store.pairs import read_pairs
from kernelcast.tools.store.store import Store

TEMPLATE_SHARE = 0.75


def candidate_pool(task: Task, per_task: int, seed: int, worker: Measurer | None = None) -> list[Candidate]:
    """Template points (most of the pool) and generic variants of the reference, deduplicated."""
    rng = random.Random(f"{seed}:{task.name}")
    pool: dict[str, Candidate] = {}
    points = task.param_space()
    rng.shuffle(points)
    n_template = min(len(points), int(round(per_task * TEMPLATE_SHARE)) if points else 0)
    for point in points[:n_template]:
        cand = task.instantiate(point, intent="dataset template point", generator="dataset")
        pool[cand.hash] = cand
    wanted = per_task - len(pool)
    if wanted > 0:
        generator = OfflineGenerator(worker=worker)
        ref = task.reference()
        context = GenerationContext(seed=seed, known_hashes=set(pool) | {ref.hash})
        for cand in generator.propose(task, ref, context, wanted).candidates:
            pool.setdefault(cand.hash, cand)
    return list(pool.values())[:per_task]


def build_dataset(tasks: Iterable[Task], store: Store, worker: Measurer, per_task: int = 40, seed: int = 0,
                  config: MeasureConfig | None = None, limit: int | None = None,
                  on_progress: Callable[[Task, Candidate, Measurement | None, int, int], None] | None = None) -> int:
    """Measure the pools into the store; returns how many new measurements were made."""
    config = config or MeasureConfig()
    device = worker.hardware_spec().key
    plan: list[tuple[Task, Candidate]] = []
    for task in tasks:
        store.tasks.upsert(task)
        store.devices.upsert(worker.hardware_spec())
        done = {m.candidate_hash for m in store.ledger.find(task=task.name, device=device, sizes=config.sizes,
                                                            fingerprint=task.fingerprint)}
        plan += [(task, c) for c in candidate_pool(task, per_task, seed, worker) if c.hash not in done]
    if limit is not None:
        plan = plan[:limit]
    done_count = 0
    for task in dict.fromkeys(t for t, _ in plan):  # one measure_many per task: all workers busy
        cands = [c for t, c in plan if t is task]
        for cand in cands:
            store.candidates.add(cand)
        for cand, result in worker.measure_many(task, cands, config):
            store.ledger.add(result)  # stored as it arrives: an interrupted build resumes from here
            done_count += 1
            if on_progress is not None:
                on_progress(task, cand, result, done_count, len(plan))
    return len(plan)


# ---- training and evaluation sets for a forecaster model (kernelcast forecaster dataset) ----------------------
def forecaster_dataset(store: Store | None, out: Path, include_seed: bool = True, eval_tasks: list[str] | None = None,
                       eval_share: float = 0.3, seed: int = 0, corpus_manifest: Path = CORPUS_MANIFEST,
                       max_source_chars: int = MAX_SOURCE_CHARS) -> DatasetManifest:
    """Write ``train.jsonl``, ``eval.jsonl`` and ``manifest.json`` from the store's measured pairs (full sizes:
    the others are counted as dropped, by sizes) and, with ``include_seed``, the shipped seed dataset's; see
    :mod:`kernelcast.agents.train.data`."""
    pairs: list[tuple[Candidate, Measurement, Literal["store", "seed"]]] = []
    devices: dict[str, HardwareSpec] = {}
    if store is not None:
        # every size: build_rows keeps the full-size pairs and counts the others as dropped, by sizes
        pairs += [(c, m, "store") for c, m in store.ledger.measured_pairs(sizes=None)]  # type: ignore[arg-type]
        devices.update(store.devices.all())
    if include_seed and SEED_DATASET.exists():
        seed_pairs, seed_devices = foreign_seed(*read_pairs(SEED_DATASET), devices)
        pairs += [(c, m, "seed") for c, m in measured_on_builtins(seed_pairs)]
        devices = {**seed_devices, **devices}
    suites, held = suite_split(corpus_manifest)
    from kernelcast.agents.forecast.learned import task_lookup  # scikit-learn: loaded when a dataset is written

    rows, dropped = build_rows(pairs, devices, task_lookup(store), suites, max_source_chars)
    if not rows:
        raise ValueError("no correct measured pair to build a dataset from (measure some with `kernelcast dataset "
                         "build` or an `optimize` run)")
    plan = plan_split((r.task for r in rows), eval_tasks, eval_share, seed, suites, held)
    return write_dataset(rows, plan, out, dropped, max_source_chars)
