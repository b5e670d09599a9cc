"""A real short run carries its roofline verdict and its forecasts' measured spread (issue 46 items 5 and 2):
saxpy at small sizes, budget 3, on the default OpenCL device, in a private store, driven through the CLI as a
user would. The verdict is in the stored result, the end-of-run table, ``kernelcast show`` (also for a run
stored before verdicts were kept) and the report; the spread is computed from the run's routed rounds, and a
round whose forecasts are all the same has spread 0. The result also keeps the rank skill of the run's forecasts
on the children it measured."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from kernelcast import api
from kernelcast.agents.forecast.device_probe import stored_bandwidth
from kernelcast.graphs.route.forecast_spread import forecast_spread, round_forecasts
from kernelcast.graphs.search.result import RunResult, run_skill
from kernelcast.report import write_report
from kernelcast.tools.store.store import Store

from support.cli import run_cli

WIDE = "400"  # no table cell wraps the verdict


@dataclass
class Run:
    home: Path
    run_id: str
    printed: str  # the end-of-run table `optimize` printed


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    home = tmp_path_factory.mktemp("roofline-home") / "home"
    done = run_cli(home, "optimize", "saxpy", "--sizes", "small", "--budget", "3", COLUMNS=WIDE)
    assert done.returncode == 0, done.stderr[-2000:]
    with api.reading_store(home / "kernelcast.db") as store:
        runs = store.runs.recent(task="saxpy")
    assert len(runs) == 1 and runs[0].finished
    yield Run(home=home, run_id=runs[0].id, printed=done.stdout)


def _store(run: Run) -> Store:
    return api.open_store(run.home / "kernelcast.db")


def test_the_result_carries_a_verdict_against_the_probed_peaks(run: Run) -> None:
    store = _store(run)
    try:
        record = store.runs.get(run.run_id)
        assert record is not None
        result = RunResult.of_run(record)
        hw = store.devices.all()[record.device]
        probed = stored_bandwidth(store, hw) is not None
    finally:
        store.close()
    assert result is not None and result.roofline is not None
    verdict = result.roofline
    assert verdict.sizes == "small" and verdict.work.flops_from == "task" and "work from the task file" in verdict.text
    assert verdict.reference_gbs > 0 and verdict.reference_gflops == pytest.approx(verdict.reference_gbs / 6)
    if result.best_hash:
        assert verdict.best_gbs is not None and verdict.best_gbs > 0
        # the verdict's times are the best's shown measurement's: its speedup is their ratio
        assert verdict.best_gbs / verdict.reference_gbs == pytest.approx(result.best_speedup, rel=1e-6)
    if probed:  # the run's forecaster probed the device: fractions against the probed roof
        assert verdict.peaks is not None and verdict.bound == "memory" and verdict.reference_fraction is not None
        assert verdict.reference_fraction == pytest.approx(verdict.reference_gbs / verdict.peaks.gbytes)
        assert "reference at" in verdict.text and " % of the " in verdict.text
    else:
        assert verdict.peaks is None and "no bandwidth probe" in verdict.text
    assert "roofline" in run.printed and verdict.text in run.printed, "the end-of-run table shows it"


def test_show_prints_the_verdict_also_for_a_run_stored_before_verdicts(run: Run) -> None:
    shown = run_cli(run.home, "show", run.run_id, COLUMNS=WIDE)
    assert shown.returncode == 0, shown.stderr
    store = _store(run)
    try:
        record = store.runs.get(run.run_id)
        assert record is not None and record.summary
        verdict = RunResult.model_validate(record.summary).roofline
        assert verdict is not None
        assert "roofline" in shown.stdout and verdict.text in shown.stdout
        old = {k: v for k, v in record.summary.items() if k not in ("roofline", "forecast_spread")}
        store.runs.update(run.run_id, summary=old)  # as a run finished before these fields were kept
    finally:
        store.close()
    again = run_cli(run.home, "show", run.run_id, COLUMNS=WIDE)
    assert again.returncode == 0, again.stderr
    assert verdict.text in again.stdout, "computed from the ledger when the summary has none"
    store = _store(run)
    try:
        store.runs.update(run.run_id, summary=record.summary)
    finally:
        store.close()


def test_the_report_shows_the_verdict_and_the_spread(run: Run, tmp_path: Path) -> None:
    with api.reading_store(run.home / "kernelcast.db") as store:
        page = write_report(run.run_id, out=tmp_path / "report", store=store).read_text()
        spread = forecast_spread(store, run.run_id)
    assert "<th>roofline</th>" in page and "<th>forecast spread</th>" in page
    assert spread.text() in page


def test_the_spread_is_measured_from_the_rounds_and_a_flat_round_has_none(run: Run, tmp_path: Path) -> None:
    copy = tmp_path / "copy.db"
    shutil.copy(run.home / "kernelcast.db", copy)  # the run's store is left as the run wrote it
    store = api.open_store(copy)
    try:
        record = store.runs.get(run.run_id)
        assert record is not None
        result = RunResult.of_run(record)
        assert result is not None and result.forecast_spread is not None
        rounds = round_forecasts(store, run.run_id)
        assert rounds, "the run routed at least one round"
        assert result.forecast_spread.rounds == pytest.approx(forecast_spread(store, run.run_id).rounds)
        assert len(result.forecast_spread.rounds) == sum(1 for r in rounds if sum(not f.failed for f in r.values()) > 1)
        assert "forecasts given (not failed)" in result.trust and result.forecast_spread.text() in result.trust
        # the rank skill of the run's forecasts, kept in the result and its trust line, read from the store
        assert result.forecast_skill == run_skill(store, run.run_id)
        assert 1 <= result.forecast_skill.pairs <= 3 and result.forecast_skill.text() in result.trust
        # every forecast of the run made the same: each round's spread is 0, and the summary says uninformative
        flat = [0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]
        with store.db.conn:
            store.db.execute("update forecasts set probabilities = ?, provenance = '{}', failed = 0 where run_id = ?",
                             [json.dumps(flat), run.run_id])
        spread = forecast_spread(store, run.run_id)
    finally:
        store.close()
    assert spread.rounds and all(s == 0.0 for s in spread.rounds)
    assert spread.flat == len(spread.rounds) and "median 0.00 ln-units" in spread.text()
