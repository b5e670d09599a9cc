"""Kernel Tuner caches as recorded measurements (issue 63): the importer's bad inputs are one line each, recorded
rows are kept apart, and a replay of the recorded device answers recorded points with noise drawn from their
recorded times and refuses unrecorded ones as failed measurements."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from kernelcast.tools.core.measurement import MeasureConfig, Status
from kernelcast.tools.core.task import Task, load_task
from kernelcast.tools.hardware.measurers.replay import REPLAY_MISSING_FLAG, ReplayMeasurer
from kernelcast.tools.store.kernel_tuner import KernelTunerError, import_cache
from kernelcast.tools.store.store import Store

from support.kernel_tuner_cache import BROKEN, DEFAULT, FAST, KEYS, SHARED, TASK, cache, entry, write
from support.paths import ROOT


@pytest.fixture(scope="module")
def task() -> Task:
    return load_task(TASK)


def test_a_cache_becomes_recorded_rows_of_the_template_task(tmp_path: Path, task: Task) -> None:
    space = import_cache(write(tmp_path, cache()), task)
    assert space.device.name == "NVIDIA RTX A4000" and space.device.compute_units == 48
    assert space.device.extra["peak_bandwidth_gbs"] == 448.0 and space.device.key.startswith("cuda:recorded:")
    assert (space.recorded, space.failed) == (2, 1) and space.unrecorded == len(task.param_space()) - 3
    by_params = {json.dumps(c.params, sort_keys=True): m for c, m in space.rows}
    fast = by_params[json.dumps(FAST, sort_keys=True)]
    assert fast.provenance == "recorded" and fast.speedup == pytest.approx(4.0 / 2.0)
    assert fast.candidate is not None and fast.candidate.samples_ns == [2.0e6, 2.05e6, 1.95e6, 2.0e6, 2.1e6]
    broken = by_params[json.dumps(BROKEN, sort_keys=True)]
    assert broken.status is Status.runtime_error and "RuntimeFailedConfig" in broken.reason
    # the reference is the default point itself: one kernel, one identity, speedup 1
    assert by_params[json.dumps(DEFAULT, sort_keys=True)].candidate_hash == task.reference().hash
    store = Store(tmp_path / "k.db")
    assert store.ledger.replace_recorded(task, space.device, space.rows) == 3
    assert store.ledger.replace_recorded(task, space.device, space.rows) == 3  # a second import replaces the first
    assert len(store.ledger.find(provenance=("recorded",))) == 3
    assert store.ledger.find() == [] and store.ledger.measured_params(task.name, space.device.key) == []


@pytest.mark.parametrize(("data", "message"), [
    (cache(tune_params_keys=KEYS[:-1]), "parameters do not match task 'convolution_milo'.* filter_width, which the "
                                        "cache lacks"),
    (cache(objective="GFLOP/s"), "unknown units: the objective is 'GFLOP/s'"),
    (cache(cache={"x": entry({**DEFAULT, "block_size_x": 17}, [1.0])}), "configuration 'x' is not a valid point"),
    (cache(cache={"x": entry(DEFAULT, [1.0, -2.0])}), "no positive number of milliseconds"),
    (cache(cache={"x": entry(DEFAULT, "OutOfMemory")}), "neither a number of milliseconds nor one of Kernel Tuner's"),
    (cache(cache={"x": entry(FAST, [1.0])}), "default point .* has no time in the file"),
    ({"device_name": "x"}, "not a Kernel Tuner cache file"),
])
def test_bad_caches_are_refused_in_one_line(tmp_path: Path, task: Task, data: dict[str, Any], message: str) -> None:
    with pytest.raises(KernelTunerError, match=message) as caught:
        import_cache(write(tmp_path, data), task)
    assert "\n" not in str(caught.value)


def test_a_truncated_cache_is_refused(tmp_path: Path, task: Task) -> None:
    whole = gzip.compress(json.dumps(cache()).encode())
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(KernelTunerError, match="truncated or damaged gzip file"):
        import_cache(cut, task)
    text = tmp_path / "cut.json"
    text.write_text(json.dumps(cache())[:-40])
    with pytest.raises(KernelTunerError, match="not valid JSON"):
        import_cache(text, task)


def replay_store(tmp_path: Path, task: Task) -> tuple[Store, str]:
    space = import_cache(write(tmp_path, cache()), task)
    store = Store(tmp_path / "k.db")
    store.ledger.replace_recorded(task, space.device, space.rows)
    return store, space.device.key


def test_replay_draws_recorded_points_from_their_times(tmp_path: Path, task: Task) -> None:
    store, key = replay_store(tmp_path, task)
    fast = task.instantiate(FAST)
    with ReplayMeasurer(store, task.backend, "A4000") as replay:
        answers = [replay.measure(task, fast, MeasureConfig()) for _ in range(6)]
    assert all(a.provenance == "replayed" and a.status is Status.correct and a.device == key for a in answers)
    speedups = [a.speedup for a in answers]
    assert all(s is not None and 3.9 / 2.1 <= s <= 4.1 / 1.95 for s in speedups)  # within the recorded spread
    assert len(set(speedups)) > 1  # noise: each answer is a new draw
    assert all(a.candidate is not None and a.candidate.samples_ns is None for a in answers)


def test_replay_refuses_an_unrecorded_point_as_a_failed_measurement(tmp_path: Path, task: Task) -> None:
    store, _ = replay_store(tmp_path, task)
    unrecorded = task.instantiate({**DEFAULT, "block_size_x": 64, "use_padding": 0})
    with ReplayMeasurer(store, task.backend, "A4000") as replay:
        answer = replay.measure(task, unrecorded, MeasureConfig())
    assert answer.status is Status.invalid and REPLAY_MISSING_FLAG in answer.flags and not answer.ok
    assert answer.provenance == "replayed" and "never measured" in answer.reason


@pytest.mark.skipif(not (SHARED / "cachefiles").is_dir(), reason="../shared/gpu-landscapes is absent (the recorded "
                    "GPU spaces are read from there, never shipped)")
@pytest.mark.parametrize("name", ["convolution_milo", "dedispersion_milo"])
def test_the_task_files_are_exactly_the_shared_spaces(name: str) -> None:
    """Every configuration of every shared cache is a valid point of its task file, and every valid point of the
    task is in every cache: the task's parameters and constraints are Kernel Tuner's (the import itself hashes
    each point, minutes per file, so it is not run here)."""
    from kernelcast.tools.hardware.gpu_specs import sheet_for
    from kernelcast.tools.store.kernel_tuner import read_cache

    task = load_task(ROOT / "bench" / "tasks" / name / "task.toml")
    space = {json.dumps(p, sort_keys=True) for p in task.param_space()}
    assert task.spec.template is not None and task.spec.template.default is not None
    assert json.dumps(task.spec.template.default, sort_keys=True) in space
    for path in sorted((SHARED / "cachefiles" / name).glob("*.json.gz")):
        cache = read_cache(path)
        points = {json.dumps({k: e[k] for k in cache.tune_params_keys}, sort_keys=True) for e in cache.cache.values()}
        assert points == space, path.name
        assert sheet_for(cache.device_name) is not None, cache.device_name
