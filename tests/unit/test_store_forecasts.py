"""The store's forecasts (``store.forecasts``): filtered reads, a run's last forecast per candidate, and the
calibration pairs (each forecast with the measurement that answered it, counted once)."""

from __future__ import annotations

from pathlib import Path

from kernelcast.tools.store.store import Store

from support.records import measurement

FLAT = [0.125] * 8


def test_forecasts_are_typed_filtered_and_a_runs_latest_is_its_last_per_candidate(tmp_path: Path) -> None:
    store = Store(tmp_path / "k.db")
    first = store.forecasts.add("saxpy", "a", "dev", "learned", "m1", FLAT, 3, 0.125, False, run_id="r",
                                provenance={"seeded": True})
    store.forecasts.add("saxpy", "a", "dev", "learned", "m1", FLAT, 5, 0.125, False, run_id="r")
    store.forecasts.add("saxpy", "b", "dev", "prior", "", FLAT, 1, 0.125, True, reasoning="no roof", run_id="r")
    store.forecasts.add("gemm", "c", "dev", "learned", "m2", FLAT, 2, 0.125, False)
    rows = store.forecasts.find()
    assert [r.id for r in rows][0] == first and rows[0].provenance == {"seeded": True} and rows[0].probabilities == FLAT
    assert [r.candidate_hash for r in store.forecasts.find(forecaster="learned", task="saxpy")] == ["a", "a"]
    assert [r.candidate_hash for r in store.forecasts.find(model="m2")] == ["c"]
    latest = store.forecasts.latest("r")
    assert {h: r.predicted_bin for h, r in latest.items()} == {"a": 5, "b": 1}
    assert latest["b"].failed is True and latest["b"].reasoning == "no roof"


def test_measured_pairs_each_forecast_with_the_latest_live_full_size_measurement(tmp_path: Path) -> None:
    store = Store(tmp_path / "k.db")
    store.forecasts.add("saxpy", "a", "dev", "learned", "m", FLAT, 3, 0.125, False, run_id="r")
    store.forecasts.add("saxpy", "a", "dev", "learned", "m", FLAT, 6, 0.125, False, run_id="r")  # carried over
    store.forecasts.add("saxpy", "a", "dev", "learned", "m", FLAT, 4, 0.125, False)  # outside a run: each counts
    store.forecasts.add("saxpy", "a", "dev", "learned", "m", FLAT, 2, 0.125, False)
    store.forecasts.add("saxpy", "b", "dev", "learned", "m", FLAT, 1, 0.125, False, run_id="r")  # never measured
    store.forecasts.add("saxpy", "i", "dev", "learned", "m", FLAT, 1, 0.125, False, run_id="r")
    assert store.forecasts.measured() == []
    store.ledger.add(measurement("a", 1.5))
    store.ledger.add(measurement("a", 9.0).model_copy(update={"sizes": "small"}))  # not the full problem
    store.ledger.add(measurement("i", 1.5).model_copy(update={"provenance": "imported"}))
    rows = store.forecasts.measured()
    assert [(r.run_id, r.predicted_bin) for r in rows] == [("r", 6), (None, 4), (None, 2)]
    assert all(r.speedup == 1.5 and r.status == "correct" and r.true_bin == 6 for r in rows)
    with_imported = store.forecasts.measured(include_imported=True)
    assert [r.candidate_hash for r in with_imported] == ["a", "a", "a", "i"]
    assert store.forecasts.measured(run_id="r")[0].predicted_bin == 6 and store.forecasts.measured(model="x") == []
