"""Dataset files (``store.pairs``, ``pairs.read_pairs``): what a file holds comes back as it was written, a store's
own export is no contradiction of itself, and what contradicts the device's own measurement is said in one line.
The import rules themselves (imported rows are not live) are in test_imported_rows.py."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from kernelcast.tools.core.errors import InputError
from kernelcast.tools.core.measurement import HardwareSpec, Status
from kernelcast.tools.core.task import resolve_task
from kernelcast.tools.store.pairs import CONTRADICTION_FACTOR, contradicts, read_pairs
from kernelcast.tools.store.store import Store

from support.records import measurement

SPEC = HardwareSpec(backend="opencl", platform="p", name="dev", compute_units=2)


def test_an_export_reads_back_whole_and_a_store_may_import_its_own_export(tmp_path: Path) -> None:
    store = Store(tmp_path / "k.db")
    store.devices.upsert(SPEC)
    task = resolve_task("saxpy")
    points = [task.instantiate(p) for p in task.param_space()[:3]]
    for i, point in enumerate(points):
        store.candidates.add(point)
        store.ledger.add(measurement(point.hash, 1.0 + i).model_copy(update={"device": SPEC.key}))
    store.ledger.add(measurement(points[0].hash, 1.7).model_copy(update={"device": SPEC.key}))  # the latest counts
    path = tmp_path / "pairs.jsonl.gz"
    assert store.pairs.export_to(path) == 3
    assert store.pairs.export_to(tmp_path / "none.jsonl.gz", device="another") == 0
    pairs, devices = read_pairs(path)
    assert devices == {SPEC.key: SPEC}
    assert sorted((c.hash, m.speedup) for c, m in pairs) == sorted(
        [(points[0].hash, 1.7), (points[1].hash, 2.0), (points[2].hash, 3.0)])
    assert store.pairs.import_from(path) == 0  # every row is already here (same candidate, device and time)


def test_contradiction_is_correct_against_failed_or_speedups_beyond_the_factor() -> None:
    own = measurement("a", 1.0)
    assert contradicts(measurement("a", CONTRADICTION_FACTOR * 0.99), own) == ""
    assert contradicts(measurement("a", CONTRADICTION_FACTOR * 1.01), own) == f"{CONTRADICTION_FACTOR * 1.01:.3g}x"
    assert contradicts(measurement("a", 1 / (CONTRADICTION_FACTOR * 1.01)), own) != ""
    assert contradicts(measurement("a", None, Status.incorrect), own) == "incorrect"
    assert contradicts(own, measurement("a", None, Status.incorrect)) == "1x"


def test_a_file_that_is_no_dataset_is_one_input_error_naming_the_line(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="missing.gz: not a dataset"):
        read_pairs(tmp_path / "missing.gz")
    good = tmp_path / "good.jsonl.gz"
    store = Store(tmp_path / "k.db")
    point = resolve_task("saxpy").reference()
    store.candidates.add(point)
    store.ledger.add(measurement(point.hash, 1.0))
    store.pairs.export_to(good)
    truncated = tmp_path / "truncated.jsonl.gz"
    truncated.write_bytes(gzip.compress(gzip.decompress(good.read_bytes()) + b'{"candidate": '))
    with pytest.raises(InputError, match=r"truncated.jsonl.gz line 2: not a dataset written by"):
        read_pairs(truncated)
