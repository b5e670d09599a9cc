"""What ``optimize``/``resume`` print around a run (issue 64, item 7): the interrupt message names a run only when
one exists, the terminal panel shows the real budget from the start, a piped run ends with one parsable line."""

from __future__ import annotations

import shlex
from pathlib import Path

from kernelcast.commands.drive import LiveView, interrupt_message, own_run, report_interrupted, result_line
from kernelcast.graphs.search.result import RunResult, ShownSpeedup
from kernelcast.tools.store.store import Store


def test_an_interrupt_before_the_run_exists_names_no_run() -> None:
    before = interrupt_message(None)
    assert "nothing to resume" in before and "kernelcast resume" not in before and "`" not in before
    during = interrupt_message("saxpy-20261207-abc")
    assert "kernelcast resume saxpy-20261207-abc" in during and "`" not in during
    assert "kernelcast report saxpy-20261207-abc" in report_interrupted("saxpy-20261207-abc")


def test_the_interrupt_finds_the_run_this_process_created(tmp_path: Path) -> None:
    store = Store(tmp_path / "kernelcast.db")
    try:
        assert own_run(store) is None
        run_id = store.runs.create("saxpy", "dev", {}, 4)
        assert own_run(store) == run_id
        store.runs.update(run_id, status="finished")
        assert own_run(store) is None, "a finished run is nothing to resume"
    finally:
        store.close()


def test_the_panel_shows_the_budget_before_the_first_event() -> None:
    panel = LiveView("optimizing saxpy", None, budget=8).render()
    cells = [str(cell) for column in panel.columns for cell in column._cells]
    assert "0 / 8" in cells and "0 / ?" not in cells


def test_a_piped_run_ends_with_one_parsable_line() -> None:
    best = ShownSpeedup(candidate_hash="ab" * 32, speedup=1.5, interval=(1.4, 1.6), confirmed=True, first=1.6,
                        found_at=2)
    result = RunResult(run_id="saxpy-1", task="saxpy", device="dev", router="selective", budget=8, spent=8,
                       status="finished", best_hash=best.candidate_hash, best_speedup=1.5, best=best, confirmed=True,
                       best_interval=(1.4, 1.6), significant=True, folder="/tmp/run folder")
    line = result_line(result, "/tmp/run folder/report.html")
    assert "\n" not in line and line.startswith("result ")
    fields = dict(item.split("=", 1) for item in shlex.split(line)[1:])
    assert fields["run"] == "saxpy-1" and fields["spent"] == "8" and fields["budget"] == "8"
    assert fields["report"] == "/tmp/run folder/report.html" and fields["best"] == best.candidate_hash
    assert fields["answer"] in ("candidate", "reference") and float(fields["speedup"]) >= 1.0
