"""Imported rows are not live rows (issue 60 item 4): `kernelcast dataset import` marks its rows, never rewrites the
device's spec, never makes a later run skip a kernel, stays out of calibration unless asked, and is refused when it
contradicts the device's own live measurements."""

from __future__ import annotations

import gzip
import json
import sqlite3
from pathlib import Path

import pytest

from kernelcast.tools.core.errors import InputError
from kernelcast.tools.core.measurement import HardwareSpec, Measurement, Status, TimingStats
from kernelcast.tools.core.task import Task, resolve_task
from kernelcast.tools.store.store import SCHEMA_VERSION, TRAINING_PROVENANCE, ImportConflict, Store

DEVICE = HardwareSpec(backend="opencl", platform="Intel(R) OpenCL", name="AMD EPYC", device_type="CPU",
                      compute_units=2, clock_mhz=2600)


def row(task: Task, cand_hash: str, speedup: float, created_at: str | None = None) -> Measurement:
    stats = TimingStats.from_samples([100.0, 101.0, 99.0])
    extra = {"created_at": created_at} if created_at else {}
    return Measurement(task=task.name, task_fingerprint=task.fingerprint, candidate_hash=cand_hash, device=DEVICE.key,
                       sizes="full", status=Status.correct, speedup=speedup, reference=stats, candidate=stats, **extra)


def forged_file(tmp_path: Path, speedup: float = 0.02, compute_units: int = 64) -> tuple[Path, list[str]]:
    """A dataset file claiming every saxpy template point was measured at ``speedup`` on this device, with a spec
    of the device that is not its own: what an attacker (or a careless export) hands to `dataset import`."""
    task = resolve_task("saxpy")
    source = Store(tmp_path / "forger.db")
    forged_spec = DEVICE.model_copy(update={"compute_units": compute_units})
    source.devices.upsert(forged_spec)
    hashes = []
    for point in task.param_space():
        cand = task.instantiate(point)
        source.candidates.add(cand)
        source.ledger.add(row(task, cand.hash, speedup))
        hashes.append(cand.hash)
    path = tmp_path / "forged.jsonl.gz"
    assert source.pairs.export_to(path) == len(hashes)
    source.close()
    return path, hashes


def test_a_forged_import_makes_no_later_run_skip_the_points(tmp_path: Path) -> None:
    """Before: 51 saxpy points at 0.02x were stored as live measurements, the generator's "already measured"
    set (measured_params) held them all, and a later run skipped them (1.33x where a clean store finds 10.9x)."""
    path, hashes = forged_file(tmp_path)
    store = Store(tmp_path / "victim.db")
    task = resolve_task("saxpy")
    assert store.pairs.import_from(path) == len(hashes) == len(task.param_space())
    assert store.ledger.measured_params("saxpy", DEVICE.key, fingerprint=task.fingerprint) == []
    assert store.ledger.find(task="saxpy", device=DEVICE.key) == []
    assert all(store.ledger.latest(h, DEVICE.key) is None for h in hashes)
    imported = store.ledger.find(task="saxpy", provenance=("imported",))
    assert len(imported) == len(hashes) and all(m.provenance == "imported" and not m.live for m in imported)
    # training may learn from an imported dataset (its purpose); calibration never reads it unless asked
    assert len(store.ledger.measured_pairs(provenance=TRAINING_PROVENANCE)) == len(hashes)
    assert store.ledger.measured_pairs() == []
    store.forecasts.add("saxpy", hashes[0], DEVICE.key, "learned", "", [0.125] * 8, 1, 0.125, False)
    assert store.forecasts.measured() == []
    assert len(store.forecasts.measured(include_imported=True)) == 1


def test_an_import_never_rewrites_the_devices_own_spec(tmp_path: Path) -> None:
    path, _ = forged_file(tmp_path, compute_units=64)
    store = Store(tmp_path / "victim.db")
    store.devices.upsert(DEVICE)
    store.pairs.import_from(path)
    assert store.devices.all()[DEVICE.key].compute_units == 2
    fresh = Store(tmp_path / "fresh.db")  # a device this store never saw is learned from the file
    fresh.pairs.import_from(path)
    assert fresh.devices.all()[DEVICE.key].compute_units == 64


def test_an_import_contradicting_the_devices_own_measurement_is_refused_whole(tmp_path: Path) -> None:
    path, hashes = forged_file(tmp_path, speedup=0.02)
    store = Store(tmp_path / "victim.db")
    task = resolve_task("saxpy")
    store.ledger.add(row(task, hashes[3], 1.1))  # measured here, live: 1.1x against the file's 0.02x
    with pytest.raises(ImportConflict, match=r"not imported: candidate .* the file says 0.02x, this device "
                                             r"measured 1.1x"):
        store.pairs.import_from(path)
    assert store.ledger.find(provenance=("imported",)) == []
    agreeing, _ = forged_file(tmp_path / "b", speedup=1.3)  # within the noise a busy machine shows: accepted
    assert store.pairs.import_from(agreeing) == len(hashes)


def test_a_damaged_dataset_file_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl.gz"
    bad.write_bytes(gzip.compress(b'{"candidate": {"task": "saxpy"}}\n'))
    store = Store(tmp_path / "k.db")
    with pytest.raises(InputError, match="line 1: not a dataset written by `kernelcast dataset export`"):
        store.pairs.import_from(bad)
    plain = tmp_path / "plain.jsonl"
    plain.write_text(json.dumps({"x": 1}))
    with pytest.raises(InputError, match="not a dataset"):
        store.pairs.import_from(plain)


def test_v5_stores_read_their_replayed_flag_as_provenance(tmp_path: Path) -> None:
    """A store from before provenance: its replayed rows stay replayed, every other row reads live."""
    task = resolve_task("saxpy")
    path = tmp_path / "old.db"
    store = Store(path)
    store.ledger.add(row(task, "a" * 16, 1.5))
    store.ledger.add(row(task, "b" * 16, 2.5).model_copy(update={"provenance": "replayed"}), run_id="r1")
    store.close()
    conn = sqlite3.connect(path)
    conn.execute("drop index idx_measurements_provenance")
    conn.execute("alter table measurements drop column provenance")
    data = [json.loads(d) for (d,) in conn.execute("select data from measurements order by id")]
    for i, payload in enumerate(data, 1):  # rows written then carried a bool, not a provenance
        payload["replayed"] = payload.pop("provenance") == "replayed"
        conn.execute("update measurements set data = ? where id = ?", [json.dumps(payload), i])
    conn.execute("update meta set value = '5' where key = 'schema_version'")
    conn.commit()
    conn.close()
    store = Store(path)
    assert store.schema_version == SCHEMA_VERSION  # upgraded past v6
    assert [m.candidate_hash[0] for m in store.ledger.find()] == ["a"]
    assert [m.provenance for m in store.ledger.find(run_id="r1")] == ["replayed"]
