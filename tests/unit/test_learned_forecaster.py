"""The learned forecaster end to end: store -> features -> trees -> calibration -> forecasts.

The measurements are synthetic (a known speedup law of vector width and
work-group size, with noise) but travel through the real Store, Task and
Candidate code, so the test checks the pipeline learns a real signal.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from kernelcast.agents.forecast.learned import LearnedForecaster, forecasts_per_second, leave_task_out, training_set
from kernelcast.tools.core.bins import speedup_bin
from kernelcast.tools.core.measurement import HardwareSpec, Measurement, Status
from kernelcast.tools.core.task import resolve_task
from kernelcast.tools.store.store import Store

DEVICE = "opencl:pocl:cpu"
HW = HardwareSpec(backend="opencl", platform="pocl", name="cpu", device_type="CPU", compute_units=2,
                  clock_mhz=2600, preferred_vector_width_float=16)
TASKS = ("saxpy", "gemv", "softmax", "reduce_rows")


def law(params: dict, rng: np.random.Generator) -> float:
    """Wider vectors help, work-groups far from 64 hurt; log-normal noise."""
    vec = math.log2(params.get("VEC", 1))
    wg = math.log2(params.get("WG", 64))
    return float(2 ** (0.6 * vec - 0.25 * abs(wg - 6)) * math.exp(rng.normal(0, 0.1)))


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    store = Store(tmp_path_factory.mktemp("learned") / "k.db")
    store.devices.upsert(HW)
    assert HW.key == DEVICE
    rng = np.random.default_rng(0)
    for name in TASKS:
        task = resolve_task(name)
        store.tasks.upsert(task)
        for i, params in enumerate(task.param_space()[:120]):
            cand = task.instantiate(params)
            store.candidates.add(cand)
            failed = i % 10 == 9
            store.ledger.add(Measurement(
                task=name, candidate_hash=cand.hash, device=DEVICE, sizes="full",
                status=Status.compile_error if failed else Status.correct,
                speedup=None if failed else law(params, rng)))
    return store


@pytest.fixture(scope="module")
def trained(store: Store) -> LearnedForecaster:
    return LearnedForecaster.from_store(store)  # device specs from the store's device table


def test_untrained_forecaster_defers_everything() -> None:
    task = resolve_task("saxpy")
    f = LearnedForecaster().forecast(task, task.reference(), HW)
    assert f.failed and "untrained" in f.provenance.failure_reason
    assert f.probabilities == pytest.approx([1 / 8] * 8)


def test_below_min_samples_stays_untrained(store: Store) -> None:
    data = training_set(store.ledger.measured_pairs(device=DEVICE)[:90], hardware={DEVICE: HW})
    model = LearnedForecaster(min_samples=100).fit(data)
    assert not model.trained and model.n_train == len(data) < 100


def test_training_skips_failures_and_unknown_tasks(store: Store) -> None:
    pairs = store.ledger.measured_pairs(device=DEVICE)
    data = training_set(pairs, tasks={n: resolve_task(n) for n in TASKS[:3]}, hardware={DEVICE: HW})
    failed = sum(1 for _, m in pairs if m.status is not Status.correct)
    unknown = sum(1 for _, m in pairs if m.task == TASKS[3] and m.status is Status.correct)
    assert data.skipped["failed measurement"] == failed > 0
    assert data.skipped["unknown task"] == unknown > 0
    assert len(data) == len(pairs) - failed - unknown
    assert set(data.bins) <= set(range(1, 9))


def test_trained_forecasts_follow_the_law(store: Store, trained: LearnedForecaster) -> None:
    assert trained.trained and trained.calibrator is not None
    assert any(name.startswith("hw.") for name in trained.vectorizer.vocabulary_)  # the store's device spec was used
    task = resolve_task("gemv")
    rng = np.random.default_rng(1)
    points = task.param_space()[120:220]  # not in the store
    forecasts = trained.forecast_many(task, [task.instantiate(p) for p in points], HW)
    truth = [speedup_bin(law(p, rng)) for p in points]
    assert all(not f.failed and f.provenance.calibration for f in forecasts)
    assert sum(f.predicted_bin == t for f, t in zip(forecasts, truth)) / len(points) > 0.4  # uniform: 0.125
    scores = [f.expected_log_speedup for f in forecasts]
    assert np.corrcoef(scores, [math.log(law(p, rng)) for p in points])[0, 1] > 0.7


def test_leave_task_out_beats_uniform(store: Store) -> None:
    data = training_set(store.ledger.measured_pairs(device=DEVICE), hardware={DEVICE: HW})
    report = leave_task_out(data, ks=(10.0, 50.0))
    assert set(report.per_task) == set(TASKS) and not report.uninformative_tasks
    assert report.overall.nll < math.log(8)  # better than the uniform forecast
    assert report.overall.accuracy > 0.25
    assert report.recovered[50.0] >= report.recovered[10.0] > 0.5


def test_save_and_load_round_trip(tmp_path: Path, trained: LearnedForecaster) -> None:
    task = resolve_task("saxpy")
    cands = [task.instantiate(p) for p in task.param_space()[:5]]
    path = trained.save(tmp_path / "m" / "learned.joblib")
    again = LearnedForecaster.load(path)
    assert again.n_train == trained.n_train and again.model_name == trained.model_name
    a = trained.forecast_many(task, cands, HW)
    b = again.forecast_many(task, cands, HW)
    assert [f.probabilities for f in a] == [f.probabilities for f in b]
    import joblib

    joblib.dump({"format": 999}, tmp_path / "bad.joblib")
    with pytest.raises(ValueError, match="not a kernelcast"):
        LearnedForecaster.load(tmp_path / "bad.joblib")


def test_batch_throughput_at_least_2000_per_second(trained: LearnedForecaster) -> None:
    task = resolve_task("gemm")
    cands = [task.instantiate(p) for p in task.param_space()[:2000]]
    hashes = [c.hash for c in cands]  # a search hashes candidates to deduplicate them first
    assert hashes[:3] == [c.hash for c in cands[:3]]
    rate = max(forecasts_per_second(trained, task, cands, HW) for _ in range(3))
    assert rate >= 2000, f"{rate:.0f} forecasts/s"


def test_fast_vectorizer_matches_sklearn(trained: LearnedForecaster) -> None:
    from kernelcast.agents.forecast.features import features
    from kernelcast.agents.forecast.learned import _vectorize

    task = resolve_task("softmax")
    feats = [features(task, task.instantiate(p), HW) for p in task.param_space()[:20]]
    feats[3] = {**feats[3], "param.UNSEEN": 5.0}  # unknown names are ignored, as in DictVectorizer
    del feats[4]["cand.loops"]  # missing names read as 0
    assert trained.vectorizer is not None
    assert np.array_equal(_vectorize(trained.vectorizer, feats), trained.vectorizer.transform(feats))


def test_learning_a_runs_measurements_moves_forecasts_towards_the_new_task(store: Store) -> None:
    """A task that runs 4x faster than the law says: unseen, the model places it by the law;
    after learning 30 of its measurements it forecasts the other points of that task higher and better."""
    others = [(c, m) for c, m in store.ledger.measured_pairs(device=DEVICE) if m.task != "gemv"]
    model = LearnedForecaster().fit(training_set(others, hardware={DEVICE: HW}))
    task = resolve_task("gemv")
    rng = np.random.default_rng(2)
    points = task.param_space()[:90]
    speed = [4 * law(p, rng) for p in points]
    run_pairs = [(task.instantiate(p), Measurement(task="gemv", candidate_hash=task.instantiate(p).hash,
                                                   device=DEVICE, sizes="full", status=Status.correct, speedup=s))
                 for p, s in zip(points[:30], speed[:30])]
    held = [task.instantiate(p) for p in points[30:]]
    truth = np.array([speedup_bin(s) for s in speed[30:]])

    def score() -> tuple[float, float]:
        fs = model.forecast_many(task, held, HW)
        return (float(np.mean([f.expected_log_speedup for f in fs])),
                float(np.mean(np.abs(np.array([f.predicted_bin for f in fs]) - truth) <= 1)))

    level_before, within_before = score()
    assert model.learn(run_pairs, {DEVICE: HW})
    level_after, within_after = score()
    assert level_after > level_before + math.log(1.5)
    assert within_after > within_before
    assert "30 from this run" in model.model_name and model.n_train == len(model.base) + 30
    assert not model.learn(run_pairs, {DEVICE: HW})  # the same history again changes nothing
    assert model.learn(run_pairs[:10], {DEVICE: HW}) and len(model.online) == 10  # history replaces, not appends


def test_learn_after_load_keeps_the_training_data(tmp_path: Path, trained: LearnedForecaster) -> None:
    again = LearnedForecaster.load(trained.save(tmp_path / "learned.joblib"))
    task = resolve_task("saxpy")
    cand = task.instantiate(task.param_space()[0])
    pair = (cand, Measurement(task="saxpy", candidate_hash=cand.hash, device=DEVICE, sizes="full",
                              status=Status.correct, speedup=3.0))
    assert again.learn([pair], {DEVICE: HW})
    assert again.trained and again.n_train == trained.n_train  # a re-measured stored candidate replaces its row
