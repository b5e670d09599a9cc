"""Portable datasets: export/import round trip, and the shipped seed dataset (one per default CPU runtime)."""

from __future__ import annotations

from pathlib import Path

from kernelcast.agents.factory import SEED_DATASET, foreign_seed
from kernelcast.tools.core.measurement import HardwareSpec, Measurement, Status
from kernelcast.tools.core.task import resolve_task
from kernelcast.tools.store.pairs import read_pairs
from kernelcast.tools.store.store import Store

SPEC = HardwareSpec(backend="opencl", platform="p", name="dev", compute_units=2)


def filled_store(path: Path, n: int) -> Store:
    store = Store(path)
    store.devices.upsert(SPEC)
    for i, point in enumerate(resolve_task("saxpy").param_space()[:n]):
        cand = resolve_task("saxpy").instantiate(point)
        store.candidates.add(cand)
        speedup = 0.5 + 0.1 * point["VEC"] * point["COARSEN"] + 0.01 * i
        store.ledger.add(Measurement(task="saxpy", candidate_hash=cand.hash, device=SPEC.key, sizes="full",
                                     status=Status.correct, speedup=speedup))
    return store


def test_export_import_round_trip(tmp_path: Path) -> None:
    src = filled_store(tmp_path / "a.db", 30)
    assert src.pairs.export_to(tmp_path / "pairs.jsonl.gz") == 30
    dst = Store(tmp_path / "b.db")
    assert dst.pairs.import_from(tmp_path / "pairs.jsonl.gz") == 30
    assert dst.pairs.import_from(tmp_path / "pairs.jsonl.gz") == 0  # idempotent
    assert dst.devices.all()[SPEC.key].compute_units == 2
    imported = dst.ledger.find(provenance=("imported",))  # never this store's own (live) measurements
    assert sorted(m.speedup for m in imported) == sorted(m.speedup for m in src.ledger.find())
    assert dst.ledger.find() == []


def test_shipped_seed_dataset_is_readable_and_covers_both_cpu_runtimes() -> None:
    pairs, devices = read_pairs(SEED_DATASET)
    assert len(pairs) >= 100 and devices
    assert all(m.sizes == "full" for _, m in pairs)
    assert all(m.candidate_hash == c.hash for c, m in pairs)  # identities recomputed on read
    platforms = {spec.platform for spec in devices.values()}
    assert {"Intel(R) OpenCL", "Portable Computing Language"} <= platforms


def test_seed_rows_of_other_hardware_under_a_local_device_key_count_as_another_device() -> None:
    """The key names runtime and CPU model only: a local device of that key with another spec (other vector
    width, cache) must not take the seed's rows as its own history, nor its spec the seed's."""
    pairs, specs = read_pairs(SEED_DATASET)
    key, seed_spec = next(iter(specs.items()))
    other = seed_spec.model_copy(update={"native_vector_width_float": seed_spec.native_vector_width_float * 2,
                                         "global_cache_bytes": seed_spec.global_cache_bytes // 2})
    renamed_pairs, renamed_specs = foreign_seed(pairs, specs, {key: other})
    assert key not in renamed_specs and len(renamed_specs) == len(specs)
    new_key = next(k for k in renamed_specs if k not in specs)
    assert renamed_specs[new_key].key == new_key and renamed_specs[new_key].native_vector_width_float == \
        seed_spec.native_vector_width_float  # the seed's own spec, under its own name
    moved = [m for _, m in renamed_pairs if m.device == new_key]
    assert len(moved) == sum(1 for _, m in pairs if m.device == key) > 0
    assert len(renamed_pairs) == len(pairs)
    # the same hardware keeps its key: its rows are this device's history
    same_pairs, same_specs = foreign_seed(pairs, specs, {key: seed_spec.model_copy()})
    assert same_specs == specs and [m.device for _, m in same_pairs] == [m.device for _, m in pairs]
