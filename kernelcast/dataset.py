"""Build the measured dataset the learned forecaster and the calibration report learn from.

Per task: a seeded pool of template points plus generic variants of the
reference (work-group shapes, build options, unrolling) from the offline
generator; every candidate is measured into the store. Deterministic given a
seed and resumable: candidates already measured on this device are skipped.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable

from kernelcast.agents.generator import GenerationContext
from kernelcast.agents.offline_generator import OfflineGenerator
from kernelcast.tools.candidate import Candidate
from kernelcast.tools.measurement import MeasureConfig, Measurement
from kernelcast.tools.store import Store
from kernelcast.tools.task import Task
from kernelcast.tools.measurer import Measurer

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
        store.upsert_task(task)
        store.upsert_device(worker.hardware_spec())
        done = {m.candidate_hash for m in store.measurements(task=task.name, device=device, sizes=config.sizes,
                                                             fingerprint=task.fingerprint)}
        plan += [(task, c) for c in candidate_pool(task, per_task, seed, worker) if c.hash not in done]
    if limit is not None:
        plan = plan[:limit]
    done_count = 0
    for task in dict.fromkeys(t for t, _ in plan):  # one measure_many per task: all workers busy
        cands = [c for t, c in plan if t is task]
        for cand in cands:
            store.add_candidate(cand)
        for cand, result in worker.measure_many(task, cands, config):
            store.add_measurement(result)  # stored as it arrives: an interrupted build resumes from here
            done_count += 1
            if on_progress is not None:
                on_progress(task, cand, result, done_count, len(plan))
    return len(plan)
