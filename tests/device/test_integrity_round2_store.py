"""Issue 49, round two: attacks on what the store remembers, on the real OpenCL device.

Each test is an attack that used to leave a number or a verdict in the store that later runs trusted: params a
session caller claimed for its own kernel, a replay's tampered rows stored as live measurements, damaged probe
rows. Now the claim is refused, the replayed rows are flagged and kept apart, the damaged rows are probed again.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import kernelcast
from kernelcast.agents.forecast.device_probe import PROBE, SCATTER_PROBE, SIMD_PROBE, WORK_GROUP_PROBE, device_bandwidth
from kernelcast.agents.generate.base import GenerationContext
from kernelcast.graphs.config import RunConfig
from kernelcast.graphs.context import RunEnv
from kernelcast.graphs.run import start_run
from kernelcast.graphs.search.session_graph import PARAMS
from kernelcast.tools.core.task import load_task, resolve_task
from kernelcast.tools.hardware import probe as device_probe
from kernelcast.tools.hardware.worker import MeasurementWorker
from kernelcast.tools.store.store import Store

SLOW_SAXPY = """
__kernel void saxpy(__global const float *x, __global float *y, const float a, const int n)
{
    int i = get_global_id(0);
    if (i < n) {
        float acc = 0.0f;
        for (int k = 0; k < 64; ++k) acc += a * x[i];
        y[i] = acc / 64.0f + y[i];
    }
}
"""


# ---- item 3: a session caller forging template points ------------------------------------------------------
def test_a_session_caller_cannot_claim_a_template_point_for_another_kernel(home: Path) -> None:
    """A slow kernel of the caller's own, or the template's source at another geometry, claiming a template
    point is refused with the reason; only the template's own instantiation keeps its params, so no stored
    candidate counts as a point it is not (a later generator skips measured points)."""
    task = resolve_task("saxpy")
    point = {"VEC": 4, "COARSEN": 1, "WG": 64}
    genuine = task.instantiate(point)
    forged = [
        {"source": SLOW_SAXPY, "params": point, "intent": "a slow kernel claiming a point"},
        {"source": genuine.source, "params": point, "intent": "the point's source at the reference's geometry"},
        {"source": SLOW_SAXPY, "params": {"VEC": 3, "COARSEN": 1, "WG": 64}, "intent": "no such point"},
    ]
    session = kernelcast.Session("saxpy", budget=2, sizes="small", forecaster="none", measure_per_round=1)
    try:
        out = session.submit([*forged, genuine])
    finally:
        session.close()
    refused, accepted = out.results[:3], out.results[3]
    assert all(not r.valid and r.rejection == PARAMS for r in refused), [r.text() for r in refused]
    assert "not the template instantiated there" in refused[0].validation
    assert "not the template instantiated there" in refused[1].validation
    assert "not a valid template point" in refused[2].validation
    assert accepted.valid and accepted.hash == genuine.hash
    store = Store(home / "kernelcast.db")
    try:
        claims = [c for c in store.candidates.of_task("saxpy") if c.params is not None]
        assert [c.hash for c in claims] == [genuine.hash]
        assert all(task.instantiate(c.params).hash == c.hash for c in claims if c.params is not None)
    finally:
        store.close()


# ---- item 5: a replay's rows stored as live measurements ----------------------------------------------------
def test_a_tampered_replay_is_flagged_kept_apart_and_never_a_live_significant_speedup(
        tmp_path: Path, tiny_template: Path) -> None:
    """A replay store whose search rows were edited to 25x: the replay run says it replayed (no significant
    live speedup), its rows are flagged, and no live read (measured sets, points, training, latest) sees them."""
    recorded = Store(tmp_path / "recorded.db")
    start_run(RunConfig(task=str(tiny_template), budget=3, router="measure-all", forecaster="none", sizes="small",
                        measure_per_round=3, confirm_top=0), recorded, RunEnv(tmp_path / "recorded", measure_timeout_s=60))
    with recorded.db.conn:
        recorded.db.execute("update measurements set speedup = 25.0, data = json_set(data, '$.speedup', 25.0, "
                            "'$.speedup_ci', json('[24.9, 25.1]')) where status = 'correct' "
                            "and json_extract(data, '$.phase') = 'search'")
    recorded.close()

    store = Store(tmp_path / "k.db")
    config = RunConfig(task=str(tiny_template), budget=4, router="measure-all", forecaster="none", sizes="small",
                       measure_per_round=3, confirm_top=1, replay=str(tmp_path / "recorded.db"))
    result = start_run(config, store, RunEnv(tmp_path / "replayed", measure_timeout_s=60))
    bought = store.ledger.find(run_id=result.run_id)
    assert any(m.speedup == 25.0 for m in bought), "the tampered rows were not replayed: nothing to check"
    assert result.best_speedup == 25.0 and not result.significant, result.verdict
    assert result.verdict.startswith(f"replayed from {config.replay}, nothing measured now"), result.verdict

    task, device = load_task(tiny_template), result.device
    assert store.ledger.find(task=task.name) == [] and store.ledger.measured_pairs(sizes="small") == []
    assert store.ledger.measured_params(task.name, device, "small", fingerprint=task.fingerprint) == []
    assert all(store.ledger.latest(m.candidate_hash, device, "small") is None for m in bought)
    context = GenerationContext.from_store(store, task, device, task.reference(), sizes="small")
    assert context.known_hashes == set() and context.measured_points == [] and context.tried == []
    assert all(m.replayed for m in bought) and result.replayed_from == config.replay
    store.close()


# ---- item 11: damaged probe rows ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def worker() -> Iterator[MeasurementWorker]:
    with MeasurementWorker() as w:
        yield w


def test_a_probe_verdict_without_a_reason_is_probed_again(tmp_path: Path) -> None:
    """A device_probes row whose reason is NULL is no verdict: the device is probed again and the row repaired,
    never listed as "skipped: None"."""
    store = Store(tmp_path / "k.db")
    chosen = device_probe.choose_device(None, store)
    store.devices.record_verdict(chosen.key, chosen.driver, "")
    with store.db.conn:
        store.db.execute("update device_probes set reason = NULL where key = ? and driver = ?",
                         [chosen.key, chosen.driver])
    device_probe._memo.clear()  # the process memo would answer first; the store's row is the one we test
    try:
        status = next(s for s in device_probe.probe_devices(store) if s.key == chosen.key)
    finally:
        device_probe._memo.clear()
    assert status.healthy and status.reason == "", status.reason
    assert store.devices.verdict(chosen.key, chosen.driver) == ""  # repaired


DAMAGED = ["{not json", '{"value": "NaN"}', '{"detail": {}}', "-5"]  # not JSON, no finite value, none, no record


def test_a_damaged_triad_row_is_probed_again_and_repaired(tmp_path: Path, worker: MeasurementWorker) -> None:
    """The triad row of ``meta`` damaged: forecasts no longer fail on it (a guess without a worker), and with a
    worker the device is probed again and the row overwritten with a measured bandwidth."""
    store = Store(tmp_path / "k.db")
    hw = worker.hardware_spec()
    for key, value in ((PROBE, 12.5e9), (WORK_GROUP_PROBE, 1e-7), (SCATTER_PROBE, 1e-9), (SIMD_PROBE, 8)):
        store.devices.set_probe(hw.key, key, value, {"task": "saxpy"})
    for damage in DAMAGED:
        with store.db.conn:
            store.db.execute("update meta set value = ? where key = ?", [damage, f"probe:{PROBE}:{hw.key}"])
        assert store.devices.probe(hw.key, PROBE) is None, damage
        assert not device_bandwidth(store, hw).probed, damage  # no worker: a guess, not an error in every forecast
    repaired = device_bandwidth(store, hw, worker)
    assert repaired.probed and 1e8 < repaired.bytes_per_s < 1e13
    assert store.devices.probe(hw.key, PROBE) == pytest.approx(repaired.bytes_per_s)
