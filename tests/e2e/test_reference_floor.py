"""The reference is the floor of every answer (issue 64 item 2), on real runs in a private store: a session whose
only candidate is a deliberately slow saxpy delivers the reference at 1.0x in ``best.cl``, its result, ``runs``,
``show`` and its finish text, and names the slow candidate as the best measured one. Around it, the outputs issue
64 items 4 and 9 asked to fix: ``show`` on one screen with nothing cut, ``runs`` marking a replayed run, ``measure``
with its interval and throughput, no "1 measurements"."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import kernelcast
from kernelcast import api
from kernelcast.graphs import events as ev
from kernelcast.graphs.events import logged
from kernelcast.session_views import SessionResult
from kernelcast.tools.core.settings import get_settings
from kernelcast.tools.core.task import resolve_task

from support.paths import ROOT

# correct (t is +0: 0.0f times a finite number), and 32 sines per element slower than the reference
SLOW = """__kernel void saxpy(__global const float *x, __global float *y, const float a, const int n)
{
    int i = get_global_id(0);
    if (i < n) {
        float t = 0.0f;
        for (int k = 0; k < 32; ++k)
            t += sin(x[i] + (float)k) * 0.0f;
        y[i] = a * x[i] + y[i] + (t > 0.0f ? t : 0.0f);
    }
}
"""


@dataclass
class Floor:
    home: Path
    finished: SessionResult


def _env(home: Path, columns: int = 80) -> dict[str, str]:
    return {**os.environ, "KERNELCAST_HOME": str(home), "PYTHONPATH": str(ROOT), "COLUMNS": str(columns)}


def kc(home: Path, *args: str, columns: int = 80) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kernelcast.cli", *args], cwd=ROOT, env=_env(home, columns),
                          capture_output=True, text=True, check=False, timeout=300)


@pytest.fixture(scope="module")
def floor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Floor]:
    home = tmp_path_factory.mktemp("floor-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KERNELCAST_HOME", str(home))
        get_settings.cache_clear()
        with kernelcast.Session("saxpy", budget=2, sizes="small", forecaster="none", measure_per_round=1) as session:
            out = session.submit([SLOW])
            assert [r.decision for r in out.results] == ["measured"], out.text()
            slow = out.results[0].measurement
            assert slow is not None and slow.status == "correct" and slow.speedup is not None and slow.speedup < 1.0
            assert out.answer is not None and out.answer.is_reference and out.best_speedup == 1.0, out.text()
            named = out.answer.candidate
            assert named is not None and named.speedup < 1.0, "the slow candidate is named, not delivered"
        assert session.result is not None
        yield Floor(home=home, finished=session.result)
    get_settings.cache_clear()


def test_a_session_whose_only_candidate_is_slower_delivers_the_reference(floor: Floor) -> None:
    reference = resolve_task("saxpy").reference()
    result = floor.finished.result
    assert result.best_hash is not None and result.best_speedup is not None and result.best_speedup < 1.0
    assert result.answer.is_reference and result.answer.speedup == 1.0
    assert result.answer.candidate_hash == reference.hash
    assert floor.finished.best_source == reference.source, "MCP and the Python API hand back the reference"
    assert floor.finished.model_dump()["result"]["answer"]["kernel"] == "reference"
    text = floor.finished.text()
    assert "answer the reference (1.000x): no significant speedup" in text and "best measured candidate" in text
    folder = Path(result.folder)
    assert (folder / "best.cl").read_text() == reference.source
    assert (folder / "best_measured.cl").read_text() == SLOW
    readme = (folder / "README.md").read_text()
    assert "answer: **the reference (1.000x)**" in readme and "1 measurements" not in readme


def test_runs_and_show_say_the_reference_at_one(floor: Floor) -> None:
    run_id = floor.finished.session
    listed = kc(floor.home, "runs", columns=250)
    assert listed.returncode == 0, listed.stderr
    row = next(line for line in listed.stdout.splitlines() if run_id in line)
    assert "1.000x (reference: no significant speedup)" in row
    assert f"{floor.finished.result.best_speedup:.3f}x" not in row, "the slower candidate is not listed as the best"
    shown = kc(floor.home, "show", run_id, columns=250)
    assert shown.returncode == 0, shown.stderr
    answer = next(line for line in shown.stdout.splitlines() if "answer" in line)
    assert "the reference (1.000x)" in answer and "no significant speedup" in answer
    assert "best measured candidate" in shown.stdout and "1 measurements" not in shown.stdout


def test_show_is_one_screen_with_nothing_cut_and_the_decisions_on_request(floor: Floor) -> None:
    run_id = floor.finished.session
    narrow = kc(floor.home, "show", run_id)
    assert narrow.returncode == 0, narrow.stderr
    lines = narrow.stdout.splitlines()
    assert len(lines) <= 50 and max(len(line) for line in lines) <= 80
    assert "decisions" not in [line.strip() for line in lines], "the decision table waits for --decisions"
    assert not any(re.fullmatch(r"[\s┃│┏┓━┡┩╇┳]*[┃│][\s┃│]*", line) for line in lines), "no empty header row"
    assert "top 1" in narrow.stdout or "measured correct" in narrow.stdout
    wide = kc(floor.home, "show", run_id, "--decisions", columns=1000)
    assert wide.returncode == 0, wide.stderr
    assert "decisions" in wide.stdout and "spend:search" in wide.stdout
    words = set(wide.stdout.split())
    with api.reading_store(floor.home / "kernelcast.db") as store:
        events = store.events.find(run_id)
    reasons = [item.event.reason for item in logged(events) if isinstance(item.event, ev.Route)]
    assert reasons
    for reason in reasons:  # every word of every decision is printed whole
        missing = [w for w in reason.split() if w not in words]
        assert not missing, f"cut from the decisions: {missing}"


def test_runs_marks_a_replayed_run(floor: Floor, tmp_path: Path) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KERNELCAST_HOME", str(floor.home))
        get_settings.cache_clear()
        store = api.open_store()
        try:
            device = store.runs.get(floor.finished.session).device  # type: ignore[union-attr]
            replay = store.runs.create("saxpy", device, {"task": "saxpy", "replay": str(tmp_path / "old.db")}, budget=4)
        finally:
            store.close()
    get_settings.cache_clear()
    listed = kc(floor.home, "runs", columns=250)
    assert listed.returncode == 0, listed.stderr
    row = next(line for line in listed.stdout.splitlines() if replay in line)
    assert "replayed" in row
    live = next(line for line in listed.stdout.splitlines() if floor.finished.session in line)
    assert "replayed" not in live


def test_measure_shows_its_interval_and_throughput(tmp_path: Path) -> None:
    done = kc(tmp_path, "measure", "saxpy", "--sizes", "small", "--params", "VEC=4", "--params", "COARSEN=1",
              "--params", "WG=64", columns=250)
    assert done.returncode == 0, done.stderr
    assert "95 % interval" in done.stdout and re.search(r"\d\.\d+x-\d\.\d+x", done.stdout), done.stdout
    assert "throughput:" in done.stdout and "GB/s" in done.stdout and "work from the task file" in done.stdout
