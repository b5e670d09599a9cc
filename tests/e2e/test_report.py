"""Reports from real small runs: files, valid images, the page's contents, and the data behind each plot."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from kernelcast import api
from kernelcast.agents.forecast.scoring import ece
from kernelcast.report import (
    PLOTS,
    ReportError,
    confusion_counts,
    load_run,
    progress_figure,
    reliability,
    write_report,
)
from kernelcast.tools.core.bins import NUM_BINS
from kernelcast.tools.core.settings import get_settings

from support.paths import ROOT

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """One measure-all and one topk run of saxpy (small sizes, budget 5) in a private home."""
    home = tmp_path_factory.mktemp("report-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KERNELCAST_HOME", str(home))
        get_settings.cache_clear()
        made = {router: api.optimize("saxpy", budget=5, router=router, sizes="small", measure_per_round=2,
                                     forecaster="none").run_id
                for router in ("measure-all", "topk")}
        yield made
    get_settings.cache_clear()


def test_report_writes_html_and_readable_pngs_into_the_run_folder(runs: dict[str, str]) -> None:
    from matplotlib.image import imread

    run_id = runs["measure-all"]
    page = write_report(run_id)
    store = api.open_store()
    try:
        assert page.parent == Path(store.runs.get(run_id).folder)
    finally:
        store.close()
    assert page.name == "report.html"
    for name in PLOTS:
        png = page.parent / f"{name}.png"
        data = png.read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 8_000, f"{name}.png looks empty"
        height, width = imread(png).shape[:2]
        assert height >= 300 and width >= 400
    text = page.read_text()
    assert run_id in text
    for name in PLOTS:
        assert f'href="{name}.png"' in text
    assert text.count("data:image/png;base64,") == len(PLOTS), "the page carries its plots (self-contained)"
    assert "<th>vs reference</th>" in text and "<details>" in text
    assert "--- reference" in text or "same source as the reference" in text


def test_tree_rebuilt_from_the_event_log_matches_the_run_folder(runs: dict[str, str]) -> None:
    store = api.open_store()
    try:
        for run_id in runs.values():
            data = load_run(store, run_id)
            recorded = json.loads((Path(data.run.folder) / "tree.json").read_text())
            assert set(data.tree) == set(recorded)
            assert {k: n.outcome for k, n in data.tree.items()} == {k: n["outcome"] for k, n in recorded.items()}
            assert {k: n.parent for k, n in data.tree.items()} == {k: n["parent"] for k, n in recorded.items()}
    finally:
        store.close()


def test_progress_curve_is_the_best_so_far_per_measurement(runs: dict[str, str]) -> None:
    store = api.open_store()
    try:
        data = load_run(store, runs["topk"])
        summary = data.run.summary
    finally:
        store.close()
    assert [x for x, _ in data.curve] == list(range(1, summary["spent"] + 1))
    for (_, before), (_, after) in zip(data.curve, data.curve[1:]):
        if before is not None:  # each node valued as shown at the end: finding more only raises the best
            assert after is not None and after.rank >= before.rank
    if summary["best_hash"]:  # the curve ends on the reported best: the confirmation where there is one
        last = data.curve[-1][1]
        assert last is not None and last.candidate_hash == summary["best_hash"]
        assert last.speedup == pytest.approx(summary["best_speedup"])


def test_compare_mode_draws_one_line_per_run(runs: dict[str, str], tmp_path: Path) -> None:
    store = api.open_store()
    try:
        figure = progress_figure([load_run(store, r) for r in runs.values()])
    finally:
        store.close()
    labels = [line.get_label() for line in figure.axes[0].get_lines() if not line.get_label().startswith("_")]
    assert len(labels) == 2
    assert all(any(label.startswith(r) for label in labels) for r in runs.values())

    page = write_report(runs["measure-all"], compare=[runs["topk"]], out=tmp_path / "cmp")
    assert page == tmp_path / "cmp" / "report.html"
    assert "compared with" in page.read_text() and runs["topk"] in page.read_text()


def test_report_command_and_unknown_runs(runs: dict[str, str], tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="no run with id 'nope'"):
        write_report("nope")
    env = {**os.environ, "KERNELCAST_HOME": os.environ["KERNELCAST_HOME"], "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    bad = subprocess.run([sys.executable, "-m", "kernelcast.cli", "report", "nope"], cwd=ROOT, env=env,
                         capture_output=True, text=True, check=False, timeout=120)
    assert bad.returncode == 2 and "no run with id 'nope'" in bad.stderr
    good = subprocess.run([sys.executable, "-m", "kernelcast.cli", "report", runs["topk"], "--out",
                           str(tmp_path / "out"), "--compare", runs["measure-all"]], cwd=ROOT, env=env,
                          capture_output=True, text=True, check=False, timeout=120)
    assert good.returncode == 0, good.stderr
    assert f"report: {tmp_path / 'out' / 'report.html'}" in good.stdout
    assert (tmp_path / "out" / "tree.png").exists()


def test_optimize_prints_where_its_report_is(tmp_path: Path) -> None:
    env = {**os.environ, "KERNELCAST_HOME": str(tmp_path / "home"), "PYTHONPATH": str(ROOT), "COLUMNS": "300"}
    done = subprocess.run([sys.executable, "-m", "kernelcast.cli", "optimize", "saxpy", "--budget", "2", "--sizes",
                           "small", "--router", "measure-all", "--k", "2"], cwd=ROOT, env=env, capture_output=True,
                          text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("report: "))
    assert Path(line.removeprefix("report: ").strip()).is_file()


def test_confusion_and_reliability_come_from_this_runs_forecasts(runs: dict[str, str]) -> None:
    """Forecasts joined with the run's own measurements; uninformative ones get their own row."""
    run_id = runs["topk"]
    store = api.open_store()
    try:
        before = load_run(store, run_id)
        # the bin each forecast is paired with: its candidate's search measurement (a confirmation is no second
        # pair, and its bin may differ from the first's when the speedup sits near a bin edge)
        measured = {m.candidate_hash: m.bin() for m in before.measurements if m.phase != "confirm"}
        assert before.pairs, "topk forecasts every child, so its measured children have forecasts"
        assert all(p.failed for p in before.pairs), "the 'none' forecaster is uninformative"
        counts = confusion_counts(before.pairs)
        assert counts[NUM_BINS].sum() == len(before.pairs) and counts[:NUM_BINS].sum() == 0
        assert reliability(before.pairs) == ([], None)

        device = before.run.device
        expected = np.zeros_like(counts)
        for i, (key, true_bin) in enumerate(sorted(measured.items())):
            guess = true_bin if i % 2 == 0 else (true_bin % NUM_BINS) + 1  # every other forecast is wrong
            guess = max(guess, 1)
            probs = np.full(NUM_BINS, 0.2 / (NUM_BINS - 1))
            probs[guess - 1] = 0.8
            store.forecasts.add("saxpy", key, device, "test", "", probs.tolist(), guess, 0.8, False, run_id=run_id)
            expected[guess - 1, true_bin] += 1
        after = load_run(store, run_id)
    finally:
        store.close()
    informative = [p for p in after.pairs if not p.failed]
    assert len(informative) == len(measured)
    assert (confusion_counts(informative) == expected).all()
    buckets, ece_value = reliability(after.pairs)
    usable = [p for p in informative if p.measured_bin > 0]
    assert [b["count"] for b in buckets] == [len(usable)]  # all at confidence 0.8: one bucket
    hits = [float(p.predicted_bin == p.measured_bin) for p in usable]
    assert buckets[0]["accuracy"] == pytest.approx(np.mean(hits))
    assert ece_value == pytest.approx(ece([0.8] * len(usable), hits))


def test_the_verdict_names_why_a_best_is_not_significant() -> None:
    from kernelcast.graphs.search.result import RunResult, judge

    def verdict(speed: float, low: float, high: float, floor: float = 0.02) -> tuple[bool, str]:
        return judge(RunResult(run_id="r", task="t", device="d", router="measure-all", budget=4, spent=4,
                               status="finished", best_speedup=speed, confirmed=True, best_interval=(low, high),
                               noise_floor=floor))

    slower = verdict(0.9, 0.836, 0.939)
    assert slower[0] is False and "slower than the reference" in slower[1] and "contains 1.0" not in slower[1]
    assert verdict(1.01, 0.98, 1.04)[1].endswith("contains 1.0")
    assert "noise floor" in verdict(1.01, 1.005, 1.02, floor=0.05)[1]
    assert verdict(2.0, 1.9, 2.1) == (True, "significant speedup: 2.000x (95 % interval 1.90x-2.10x)")
