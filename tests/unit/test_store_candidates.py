"""The store's candidates and tasks (``store.candidates``, ``store.tasks``): stored once by content hash, found by
an unambiguous prefix, listed per task in the order they came."""

from __future__ import annotations

from pathlib import Path

from kernelcast.tools.core.task import resolve_task
from kernelcast.tools.store.store import Store


def test_a_candidate_is_stored_once_with_its_first_parent_and_read_back_whole(tmp_path: Path) -> None:
    store = Store(tmp_path / "k.db")
    task = resolve_task("saxpy")
    ref = task.reference()
    point = task.instantiate({"VEC": 4, "COARSEN": 1, "WG": 64}).model_copy(update={"parent": ref.hash})
    assert store.candidates.add(point) == point.hash
    store.candidates.add(point.model_copy(update={"parent": "someone-else"}))
    store.candidates.add(ref)
    assert store.candidates.of_task("saxpy") == [point, ref]  # in the order they were added, once each
    got = store.candidates.get(point.hash)
    assert got == point and got is not None and got.parent == ref.hash and got.edits == point.edits
    assert store.candidates.of_task("gemm") == [] and store.candidates.intents("gemm") == {}
    assert store.candidates.intents("saxpy") == {point.hash: point.intent, ref.hash: ref.intent}


def test_get_takes_an_unambiguous_prefix_only(tmp_path: Path) -> None:
    store = Store(tmp_path / "k.db")
    task = resolve_task("saxpy")
    points = [task.instantiate(p) for p in task.param_space()[:20]]
    for point in points:
        store.candidates.add(point)
    assert store.candidates.get("") is None  # every candidate matches
    first = points[0].hash
    shared = next(i for i in range(1, len(first)) if sum(p.hash.startswith(first[:i]) for p in points) == 1)
    assert store.candidates.get(first[:shared]) == points[0]
    assert store.candidates.get("zz-not-a-hash") is None


def test_tasks_remember_the_file_each_name_was_loaded_from(tmp_path: Path) -> None:
    store = Store(tmp_path / "k.db")
    saxpy, gemm = resolve_task("saxpy"), resolve_task("gemm")
    store.tasks.upsert(saxpy)
    store.tasks.upsert(gemm)
    store.tasks.upsert(saxpy)  # again: one row
    assert store.tasks.paths() == {"saxpy": str(saxpy.path), "gemm": str(gemm.path)}
