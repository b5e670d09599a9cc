"""The store's ledger (``store.ledger``): which measurements each read sees, a run's totals, and recorded imports."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelcast.tools.core.measurement import HardwareSpec, Measurement, Status
from kernelcast.tools.core.task import resolve_task
from kernelcast.tools.store.store import Store

from support.records import measurement


def test_find_filters_and_sees_live_rows_unless_a_read_asks(tmp_path: Path) -> None:
    store = Store(tmp_path / "k.db")
    store.ledger.add(measurement("live", 1.5), run_id="r1")
    store.ledger.add(measurement("replayed", 2.0).model_copy(update={"provenance": "replayed"}), run_id="r1")
    store.ledger.add(measurement("imported", 3.0).model_copy(update={"provenance": "imported"}))
    store.ledger.add(measurement("other", 1.1).model_copy(update={"device": "dev2"}), run_id="r2")
    assert [m.candidate_hash for m in store.ledger.find()] == ["live", "other"]
    assert [m.candidate_hash for m in store.ledger.find(device="dev")] == ["live"]
    # a run's own reads see what it replayed; visible_to adds those rows to the live ones
    assert [m.candidate_hash for m in store.ledger.find(run_id="r1")] == ["live", "replayed"]
    assert [m.candidate_hash for m in store.ledger.find(visible_to="r1")] == ["live", "replayed", "other"]
    assert [m.candidate_hash for m in store.ledger.find(provenance=("imported",))] == ["imported"]
    with pytest.raises(ValueError, match="at least one provenance"):
        store.ledger.find(provenance=())


def test_fingerprint_keeps_rows_of_that_task_file_and_rows_from_before_fingerprints(tmp_path: Path) -> None:
    store = Store(tmp_path / "k.db")
    for name, fingerprint in (("mine", "f1"), ("theirs", "f2"), ("old", None)):
        store.ledger.add(measurement(name, 1.2).model_copy(update={"task_fingerprint": fingerprint}))
    assert [m.candidate_hash for m in store.ledger.find(task="saxpy", fingerprint="f1")] == ["mine", "old"]
    assert store.ledger.latest("theirs", "dev", fingerprint="f1") is None
    assert store.ledger.latest("theirs", "dev", fingerprint="f2") is not None


def test_totals_count_a_runs_own_rows_and_their_wall_time_but_not_reused_ones(tmp_path: Path) -> None:
    store = Store(tmp_path / "k.db")
    assert store.ledger.totals("r1") == (0, 0.0)
    store.ledger.add(measurement("a", 1.5).model_copy(update={"wall_ms": 1500.0}), run_id="r1")
    store.ledger.add(measurement("b", None, Status.compile_error).model_copy(update={"wall_ms": 250.0}), run_id="r1")
    store.ledger.add(measurement("c", 1.5).model_copy(update={"provenance": "reused", "wall_ms": 9e6}), run_id="r1")
    store.ledger.add(measurement("d", 1.5).model_copy(update={"wall_ms": 7e6}), run_id="r2")
    assert store.ledger.totals("r1") == (2, pytest.approx(1.75))


def test_latest_is_the_newest_row_of_that_candidate_device_and_sizes(tmp_path: Path) -> None:
    store = Store(tmp_path / "k.db")
    store.ledger.add(measurement("a", 1.5))
    store.ledger.add(measurement("a", 2.5))
    store.ledger.add(measurement("a", 9.0).model_copy(update={"sizes": "small"}))
    store.ledger.add(measurement("a", 7.0).model_copy(update={"provenance": "replayed"}), run_id="r")
    latest = store.ledger.latest("a", "dev")
    assert latest is not None and latest.speedup == 2.5
    replayed = store.ledger.latest("a", "dev", visible_to="r")
    assert replayed is not None and replayed.speedup == 7.0
    small = store.ledger.latest("a", "dev", sizes="small")
    assert small is not None and small.speedup == 9.0
    assert store.ledger.latest("a", "other-device") is None


def test_correct_speedups_are_first_phase_correct_rows_of_the_provenances_asked(tmp_path: Path) -> None:
    store = Store(tmp_path / "k.db")
    store.ledger.add(measurement("a", 1.5).model_copy(update={"task_fingerprint": "f"}))
    store.ledger.add(measurement("b", 2.5).model_copy(update={"task_fingerprint": "f", "phase": "confirm"}))
    store.ledger.add(measurement("c", None, Status.incorrect).model_copy(update={"task_fingerprint": "f"}))
    store.ledger.add(measurement("d", 3.0).model_copy(update={"task_fingerprint": "f", "provenance": "recorded"}))
    assert store.ledger.correct_speedups("saxpy", "f", ("live",)) == [("dev", "a", 1.5)]
    assert store.ledger.correct_speedups("saxpy", "f", ("live", "recorded")) == [("dev", "a", 1.5), ("dev", "d", 3.0)]
    assert store.ledger.correct_speedups("saxpy", "other", ("live",)) == []


def test_measured_params_are_the_template_points_measured_on_that_device(tmp_path: Path) -> None:
    store = Store(tmp_path / "k.db")
    task = resolve_task("saxpy")
    ref, point = task.reference(), task.instantiate({"VEC": 2, "COARSEN": 1, "WG": 64})
    replayed = task.instantiate({"VEC": 4, "COARSEN": 1, "WG": 64})
    for cand in (ref, point, replayed):
        store.candidates.add(cand)
    store.ledger.add(measurement(ref.hash, 1.0))
    store.ledger.add(measurement(point.hash, 1.5))
    store.ledger.add(measurement(replayed.hash, 1.5).model_copy(update={"provenance": "replayed"}), run_id="r")
    assert store.ledger.measured_params("saxpy", "dev") == [{"VEC": 2, "COARSEN": 1, "WG": 64}]  # no reference
    assert len(store.ledger.measured_params("saxpy", "dev", visible_to="r")) == 2
    assert store.ledger.measured_params("saxpy", "other") == []


def test_replace_recorded_replaces_an_earlier_recording_and_refuses_live_rows(tmp_path: Path) -> None:
    store = Store(tmp_path / "k.db")
    task = resolve_task("saxpy")
    gpu = HardwareSpec(backend="cuda", name="A100", platform="recorded")
    point = task.instantiate({"VEC": 2, "COARSEN": 1, "WG": 64})

    def recorded(speedup: float) -> Measurement:
        return Measurement(task=task.name, task_fingerprint=task.fingerprint, candidate_hash=point.hash,
                           device=gpu.key, sizes="full", status=Status.correct, speedup=speedup, provenance="recorded")

    assert store.ledger.replace_recorded(task, gpu, [(point, recorded(1.5)), (point, recorded(1.6))]) == 2
    assert store.ledger.replace_recorded(task, gpu, [(point, recorded(2.0))]) == 1
    assert [m.speedup for m in store.ledger.find(provenance=("recorded",))] == [2.0]
    assert store.devices.all()[gpu.key] == gpu and store.candidates.get(point.hash) == point
    assert store.tasks.paths() == {"saxpy": str(task.path)}
    with pytest.raises(ValueError, match="recorded rows of its device only"):
        store.ledger.replace_recorded(task, gpu, [(point, recorded(1.0).model_copy(update={"provenance": "live"}))])
    assert [m.speedup for m in store.ledger.find(provenance=("recorded",))] == [2.0]  # the refused call wrote nothing
