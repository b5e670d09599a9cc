"""The run's forecaster across devices: every device's data, weighted by how close its device is (issue 13,
item 3). The shipped seed dataset stands for "another device's data"; the target devices are specs built
here, so nothing assumes which device this machine has."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelcast.agents.factory import SEED_DATASET, learned_forecaster
from kernelcast.agents.forecast.blend import BlendedForecaster
from kernelcast.agents.forecast.features import device_similarity
from kernelcast.tools.core.measurement import HardwareSpec, Measurement, Status
from kernelcast.tools.core.task import Task, resolve_task
from kernelcast.tools.store.pairs import read_pairs
from kernelcast.tools.store.store import Store

from support.paths import KERNELS

GPU = HardwareSpec(backend="cuda", platform="cuda", name="big gpu", device_type="GPU", compute_units=132,
                   clock_mhz=1980, global_cache_bytes=50 * 2**20, local_mem_bytes=228 * 2**10)


@pytest.fixture(scope="module")
def seed_device() -> HardwareSpec:
    _, devices = read_pairs(SEED_DATASET)
    return next(iter(devices.values()))


@pytest.fixture(scope="module")
def blended(tmp_path_factory: pytest.TempPathFactory, seed_device: HardwareSpec) -> BlendedForecaster:
    store = Store(tmp_path_factory.mktemp("blend") / "k.db")
    model = learned_forecaster(store, seed_device.key)
    assert isinstance(model, BlendedForecaster)
    return model


def test_device_similarity_orders_devices(seed_device: HardwareSpec) -> None:
    near = seed_device.model_copy(update={"platform": "another runtime", "clock_mhz": seed_device.clock_mhz + 200})
    assert device_similarity(seed_device, seed_device) == 1.0
    assert 1.0 > device_similarity(seed_device, near) > device_similarity(seed_device, GPU) > 0.0
    assert device_similarity(None, GPU) == 0.5


def test_other_devices_data_counts_by_closeness(blended: BlendedForecaster, seed_device: HardwareSpec) -> None:
    assert blended.cross is not None and blended.seeded  # the forest trained on the seed device's pairs
    own = blended.stack_weight(seed_device)
    far = blended.stack_weight(GPU)
    assert own >= far and far < 0.1  # a GPU learns little from a CPU's measurements
    task = resolve_task("softmax")
    cands = [task.instantiate(p) for p in task.param_space()[:16]]
    for hw in (seed_device, GPU):
        forecasts = blended.forecast_many(task, cands, hw)
        assert not any(f.failed for f in forecasts)
        assert "roofline prior" in (forecasts[0].provenance.model or "")


def test_without_a_store_the_prior_still_forecasts(seed_device: HardwareSpec, tmp_path: Path) -> None:
    model = learned_forecaster(None, None, seed_path=tmp_path / "absent.jsonl.gz")
    task = resolve_task("gemv")
    forecasts = model.forecast_many(task, [task.reference(), task.instantiate(task.param_space()[5])], seed_device)
    assert not any(f.failed for f in forecasts) and forecasts[0].provenance.mode == "prior"


def test_a_run_at_small_sizes_is_forecast_and_taught_at_small_sizes(seed_device: HardwareSpec, tmp_path: Path) -> None:
    """A search at small sizes measures the small problem: its forecasts are for that problem (the prior reads
    the view's sizes), and its measurements teach the small-size in-task model, never the full-size one."""
    model = learned_forecaster(None, None, seed_path=tmp_path / "absent.jsonl.gz")
    task = resolve_task("gemv")
    small = task.at_sizes("small")
    assert small.sizes("full") == task.sizes("small") != task.sizes("full")
    assert small.at_sizes("full") is task and task.at_sizes("full") is task
    cands = [task.instantiate(p) for p in task.param_space()[:12]]

    def means(view: Task) -> list[float]:
        return [f.provenance.log_speedup_mean or 0.0 for f in model.forecast_many(view, cands, seed_device)]

    full_before, small_before = means(task), means(small)
    assert full_before != small_before  # the prior sees another problem size
    pairs = [(c, Measurement(task="gemv", candidate_hash=c.hash, device=seed_device.key, sizes="small",
                             status=Status.correct, speedup=20.0)) for c in cands[:3]]
    assert model.learn(pairs, {seed_device.key: seed_device})
    small_after = model.forecast_many(small, cands, seed_device)
    assert small_after[5].provenance.mode == "in-task" and small_after[5].provenance.log_speedup_mean > max(small_before)
    assert means(task) == full_before  # the full-size problem learned nothing from small-size measurements


def test_derived_candidates_get_the_prior_until_the_forest_has_shown_skill_on_them(
        blended: BlendedForecaster, seed_device: HardwareSpec) -> None:
    """The forest learned template points; its share fitted on them (0.9 here) turned the prior's ranking of
    a new kernel's derived points into noise. Its share on derived points is earned on derived rows only, and
    the seed has none."""
    from kernelcast.agents.forecast.blend import DERIVED, family
    from kernelcast.agents.generate.derived_space import DerivedSpace
    from kernelcast.tools.core.edit import Edit
    from kernelcast.tools.core.task import load_task

    assert blended.stack_weight(seed_device) > 0.3 and blended.stack_weight(seed_device, DERIVED) == 0.0
    task = load_task(KERNELS / "matvec_cols")
    space = DerivedSpace(task, task.reference(), 256)
    made = space.instantiate({**space.identity(), "coarsen_x": 4, "mapping": "vector"})
    assert made is not None
    derived = made[0].model_copy(update={"origin": "derived", "edits": list(made[1])})
    variant = derived.model_copy(update={"origin": "variant", "edits": [Edit(name="build_option", values={
        "option": "-cl-mad-enable"}, label="build option -cl-mad-enable", generic=True)]})
    assert family(derived) == DERIVED and family(variant) != DERIVED
    [f_derived] = blended.forecast_many(task, [derived], seed_device)
    [f_variant] = blended.forecast_many(task, [variant], seed_device)
    assert f_derived.provenance.mode == "prior" and f_derived.provenance.log_speedup_mean is not None
    assert f_variant.provenance.mode == "blend"  # the same kernel, read as a hand-written one, gets the forest
    assert f_derived.probabilities != f_variant.probabilities
