"""The roofline verdict's arithmetic and words from given numbers (issue 46 item 5), and the measured
informativeness of forecasts: the spread of predicted ln S within each routed round (issue 46 item 2)."""

from __future__ import annotations

import shutil
import statistics
from pathlib import Path

import pytest

from kernelcast.graphs.route.forecast_spread import FLAT, ForecastSpread, forecast_spread, round_forecasts
from kernelcast.graphs.search.roofline import Peaks, Work, roofline_verdict, task_work
from kernelcast.tools.core.bins import expected_log_speedup
from kernelcast.tools.core.task import builtin_task_paths, load_task
from kernelcast.tools.store.store import Store

from support.decisions import record_route

GIVEN = Work(flops=2e6, bytes=12e6, flops_from="task", bytes_from="task")  # saxpy's 2 FLOP per 12 bytes
DRAM = Peaks(gflops=64.0, gbytes=20.0, level="DRAM", probed=True)  # ridge 3.2 FLOP/byte


def test_bandwidth_bound_reference_near_the_probed_bandwidth_has_little_room() -> None:
    verdict = roofline_verdict(GIVEN, "full", reference_s=12e6 / 18.2e9, best_s=12e6 / 19e9, peaks=DRAM)
    assert verdict.bound == "memory"
    assert verdict.reference_gbs == pytest.approx(18.2) and verdict.best_gbs == pytest.approx(19.0)
    assert verdict.reference_gflops == pytest.approx(18.2 / 6) and verdict.best_gflops == pytest.approx(19.0 / 6)
    assert verdict.reference_fraction == pytest.approx(0.91) and verdict.best_fraction == pytest.approx(0.95)
    assert verdict.intensity == pytest.approx(1 / 6)
    assert "reference at 91 % of the measured DRAM bandwidth" in verdict.text
    assert "little room left" in verdict.text and "work from the task file" in verdict.text


def test_compute_bound_fractions_are_of_peak_compute() -> None:
    heavy = Work(flops=2e9, bytes=12e6, flops_from="task", bytes_from="task")  # 167 FLOP/byte, past the ridge
    verdict = roofline_verdict(heavy, "full", reference_s=2e9 / 10e9, best_s=2e9 / 40e9, peaks=DRAM)
    assert verdict.bound == "compute"
    assert verdict.reference_fraction == pytest.approx(10 / 64) and verdict.best_fraction == pytest.approx(40 / 64)
    assert "compute-bound" in verdict.text and "16 % of the peak compute" in verdict.text
    assert "much room left" in verdict.text and "best at 62 %: some room left" in verdict.text
    assert "modelled" in verdict.text, "the compute roof is a model, not a probe, and says so"


def test_near_the_modelled_compute_roof_is_not_called_little_room() -> None:
    heavy = Work(flops=2e9, bytes=12e6, flops_from="task", bytes_from="task")
    verdict = roofline_verdict(heavy, "full", reference_s=2e9 / 10e9, best_s=2e9 / 74e9, peaks=DRAM)
    assert verdict.best_fraction == pytest.approx(74 / 64)
    assert "little room left" not in verdict.text and "above the roof" not in verdict.text
    assert "room unknown" in verdict.text


def test_a_cache_roof_is_named_a_model_of_the_probed_triad() -> None:
    cache = DRAM.model_copy(update={"level": "cache", "gbytes": 120.0})
    verdict = roofline_verdict(GIVEN, "small", reference_s=12e6 / 6e9, best_s=None, peaks=cache)
    assert verdict.reference_fraction == pytest.approx(0.05) and verdict.best_fraction is None
    assert "modelled from the probed triad" in verdict.text and "no correct candidate" in verdict.text


def test_without_a_probe_the_verdict_says_so_and_names_no_fraction() -> None:
    guessed = DRAM.model_copy(update={"probed": False})
    for peaks in (guessed, None):
        verdict = roofline_verdict(GIVEN, "full", reference_s=12e6 / 18.2e9, best_s=12e6 / 19e9, peaks=peaks)
        assert verdict.peaks is None and verdict.bound is None
        assert verdict.reference_fraction is None and verdict.best_fraction is None
        assert "no bandwidth probe" in verdict.text and "%" not in verdict.text
        assert verdict.reference_gbs == pytest.approx(18.2), "what was achieved is still reported"


def test_work_the_task_file_gives_is_used_and_said_so() -> None:
    task = load_task(builtin_task_paths()["saxpy"])
    work = task_work(task, "small")
    n = task.sizes("small")["N"]
    assert (work.flops, work.bytes, work.flops_from, work.bytes_from) == (2 * n, 12 * n, "task", "task")
    assert work.text() == "work from the task file"


def test_work_a_task_file_does_not_give_is_estimated_from_the_source_and_said_so(tmp_path: Path) -> None:
    folder = tmp_path / "saxpy_plain"
    shutil.copytree(builtin_task_paths()["saxpy"].parent, folder)
    toml = folder / "task.toml"
    lines = [line for line in toml.read_text().splitlines() if not line.startswith(("flops", "bytes"))]
    toml.write_text("\n".join(lines).replace('name = "saxpy"', 'name = "saxpy_plain"', 1) + "\n")
    task = load_task(toml)
    work = task_work(task, "small")
    n = task.sizes("small")["N"]
    assert (work.flops_from, work.bytes_from) == ("static estimate", "buffer sizes")
    assert work.bytes == 12 * n, "x read once, y read and written"
    assert work.flops is not None and work.flops >= n, "at least one operation per element counted"
    verdict = roofline_verdict(work, "small", reference_s=1e-5, best_s=5e-6, peaks=DRAM)
    assert "flops estimated from the source" in verdict.text and "bytes from the buffer sizes" in verdict.text


def _probs(expected_bin: int) -> list[float]:
    out = [0.02] * 8
    out[expected_bin - 1] = 1.0 - 0.02 * 7
    return out


def test_spread_is_computed_per_routed_round_and_is_zero_for_a_flat_round(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    run = store.runs.create("t", "dev", {}, budget=4)

    def forecast(key: str, probabilities: list[float], failed: bool = False) -> None:
        store.forecasts.add("t", key, "dev", "prior", "", probabilities, 1, 0.5, failed, run_id=run)

    for key in ("a", "b", "c"):
        forecast(key, _probs(4))  # the same distribution for every child
    forecast("x", [1 / 8] * 8, failed=True)  # a failed forecast tells nothing: left out
    for key in ("a", "b", "c", "x"):
        record_route(store, run, key, decision="drop", round=1)
    forecast("d", _probs(7))
    forecast("a", _probs(2))  # a carried-over child, forecast again: this round reads its new forecast
    for key in ("d", "a"):
        record_route(store, run, key, decision="measure", round=2)

    rounds = round_forecasts(store, run)
    assert [sorted(r) for r in rounds] == [["a", "b", "c", "x"], ["a", "d"]]
    assert rounds[0]["a"].predicted_bin == rounds[1]["a"].predicted_bin == 1
    assert rounds[1]["a"].probabilities == pytest.approx(_probs(2))
    spread = forecast_spread(store, run)
    expected = statistics.pstdev([expected_log_speedup(_probs(7)), expected_log_speedup(_probs(2))])
    assert spread.rounds == pytest.approx([0.0, expected]) and expected > FLAT
    assert spread.flat == 1 and spread.median == pytest.approx(expected / 2)
    assert "uninformative below 0.05; 1 below" in spread.text()


def test_spread_text_without_rounds_to_compare() -> None:
    assert "no round had two forecasts" in ForecastSpread().text()
    assert ForecastSpread(rounds=[0.0, 0.2, 0.4]).median == pytest.approx(0.2)
    assert ForecastSpread(rounds=[0.01]).flat == 1
