"""Measurements say which problem their speedup is over (``Task.fingerprint``), so a task that borrows a
built-in's name, or a task file edited between runs, neither trains the forecaster with another task's source
nor corrects its forecasts with another task's history."""

from __future__ import annotations

import shutil
from pathlib import Path

from kernelcast.agents.factory import measured_on_builtins
from kernelcast.agents.forecast.blend import BlendedForecaster
from kernelcast.agents.forecast.features import candidate_features, context
from kernelcast.agents.forecast.learned import task_lookup, training_set
from kernelcast.tools.core.measurement import HardwareSpec, Measurement, Status, TimingStats
from kernelcast.tools.core.task import Task, builtin_task_paths, load_task, resolve_task
from kernelcast.tools.store.store import Store

POINT = {"TM": 4, "TN": 4, "WGX": 8, "WGY": 4, "KU": 1, "LOCAL": 0, "TK": 8}


def copy_of_builtin(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / name
    shutil.copytree(builtin_task_paths()[name].parent, folder)
    return folder / "task.toml"


def measured(task: Task, fingerprint: str | None, speedup: float, device: str = "dev") -> Measurement:
    stats = TimingStats.from_samples([100.0, 110.0, 105.0])
    point = task.instantiate(POINT)
    return Measurement(task=task.name, task_fingerprint=fingerprint, candidate_hash=point.hash, device=device,
                       sizes="full", status=Status.correct, speedup=speedup, reference=stats, candidate=stats)


def test_the_fingerprint_follows_what_the_speedup_is_over_not_the_file(tmp_path: Path) -> None:
    builtin = resolve_task("gemm")
    toml = copy_of_builtin(tmp_path, "gemm")
    assert load_task(toml).fingerprint == builtin.fingerprint  # another path, same problem
    toml.write_text(toml.read_text().replace('description = """', 'description = """(my copy) ', 1))
    assert load_task(toml).fingerprint == builtin.fingerprint  # prose is not the problem
    kernel = toml.parent / "gemm.cl"
    kernel.write_text(kernel.read_text().replace("C[row * N + col] = acc;", "C[row * N + col] = 2.0f * acc;"))
    edited = load_task(toml)
    assert edited.fingerprint != builtin.fingerprint
    assert edited.at_sizes("small").fingerprint == edited.fingerprint  # a forecasting view is the same task
    assert builtin.owns(builtin.fingerprint) and builtin.owns(None) and not builtin.owns(edited.fingerprint)


def test_training_featurizes_each_measurement_with_the_task_it_was_measured_on(tmp_path: Path) -> None:
    """The store records the user's "gemm" (other sizes) last; the built-in gemm's rows must still be
    featurized with the built-in, the user's with theirs, and rows of a version of the file that no longer
    exists are skipped, not featurized with today's file."""
    builtin = resolve_task("gemm")
    toml = copy_of_builtin(tmp_path, "gemm")
    kernel = toml.parent / "gemm.cl"
    original = kernel.read_text()
    kernel.write_text(original.replace("C[row * N + col] = acc;", "C[row * N + col] = acc + 0.0f;"))
    stale = load_task(toml)  # the version measured first, edited since
    kernel.write_text(original)
    toml.write_text(toml.read_text().replace("M = 384", "M = 768", 1))
    mine = load_task(toml)
    assert mine.name == stale.name == builtin.name
    assert len({mine.fingerprint, stale.fingerprint, builtin.fingerprint}) == 3

    store = Store(tmp_path / "k.db")
    store.tasks.upsert(mine)
    point = builtin.instantiate(POINT)
    pairs = [(point, measured(builtin, builtin.fingerprint, 3.0)), (point, measured(mine, mine.fingerprint, 1.5)),
             (point, measured(stale, stale.fingerprint, 2.0))]
    own_features = [candidate_features(context(t, None), point) for t in (builtin, mine)]
    assert own_features[0] != own_features[1]  # the sizes reach the features: a mix-up would show
    data = training_set(pairs, task_lookup(store))
    assert data.features == own_features
    assert data.speedups == [3.0, 1.5]
    assert data.skipped["another task of the same name"] == 1


def test_the_seed_counts_as_the_builtins_and_a_borrowed_name_gets_no_correction_from_it(tmp_path: Path) -> None:
    builtin = resolve_task("gemm")
    hw = HardwareSpec(name="dev", backend="opencl")
    seed = measured_on_builtins([(builtin.instantiate(POINT), measured(builtin, None, 3.0, device=hw.key))])
    assert seed[0][1].task_fingerprint == builtin.fingerprint
    toml = copy_of_builtin(tmp_path, "gemm")
    kernel = toml.parent / "gemm.cl"
    kernel.write_text(kernel.read_text().replace("C[row * N + col] = acc;", "C[row * N + col] = 2.0f * acc;"))
    mine = load_task(toml)
    forecaster = BlendedForecaster(history=seed)
    assert [m.speedup for _, m in forecaster._task_data(builtin, hw).history] == [3.0]
    assert forecaster._task_data(mine, hw).history == []


def test_a_borrowed_name_does_not_inherit_the_builtins_measurements(tmp_path: Path) -> None:
    """What a run reads back from the store by task name (the points already measured, the best shown to a
    generator, the parent's speedup, a noise floor) is its own task's, or from before fingerprints."""
    from kernelcast.agents.generate.base import GenerationContext

    builtin = resolve_task("gemm")
    toml = copy_of_builtin(tmp_path, "gemm")
    toml.write_text(toml.read_text().replace("M = 384", "M = 768", 1))
    mine = load_task(toml)
    store = Store(tmp_path / "k.db")
    store.tasks.upsert(mine)
    point = builtin.instantiate(POINT)
    store.candidates.add(builtin.reference())
    store.candidates.add(point)
    store.ledger.add(measured(builtin, builtin.fingerprint, 3.0))
    assert store.ledger.find(task="gemm", fingerprint=mine.fingerprint) == []
    assert store.ledger.latest(point.hash, "dev", fingerprint=mine.fingerprint) is None
    assert store.ledger.latest(point.hash, "dev", fingerprint=builtin.fingerprint) is not None
    context_of = {t.fingerprint: GenerationContext.from_store(store, t, "dev", t.reference()) for t in (builtin, mine)}
    assert context_of[builtin.fingerprint].measured_points == [POINT]
    assert [s for _, s in context_of[builtin.fingerprint].best] == [3.0]
    assert context_of[mine.fingerprint].measured_points == [] and context_of[mine.fingerprint].best == []
    legacy = measured(mine, None, 1.5).model_copy(update={"sizes": "small"})  # before fingerprints: the name's
    store.ledger.add(legacy)
    assert [m.speedup for m in store.ledger.find(task="gemm", fingerprint=mine.fingerprint)] == [1.5]
