"""``optimize`` piped and interrupted, as a user runs it (issue 64, item 7): a start line at once and one parsable
result line last; an interrupt says what exists to resume, never a placeholder in nested backticks; a finished run
whose report was never written gets it from ``resume``. Real CLI processes on the real device, small sizes."""

from __future__ import annotations

import os
import shlex
import signal
from pathlib import Path

from kernelcast.tools.store.store import Store

from support.cli import run_cli, start_cli

QUICK = ("optimize", "saxpy", "--budget", "2", "--sizes", "small", "--forecaster", "none")


def parsed(line: str) -> dict[str, str]:
    assert line.startswith("result "), line
    return dict(item.split("=", 1) for item in shlex.split(line)[1:])


def test_a_piped_run_starts_with_a_line_and_ends_with_a_parsable_one_and_resume_writes_a_lost_report(
        tmp_path: Path) -> None:
    home = tmp_path / "home"
    done = run_cli(home, *QUICK)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[0].startswith("optimizing saxpy") and "checking the reference" in lines[0]
    result = parsed(lines[-1])
    assert result["status"] == "finished" and result["budget"] == "2" and int(result["spent"]) <= 2
    report = Path(result["report"])
    assert report.name == "report.html" and report.is_file()
    store = Store(home / "kernelcast.db", read_only=True)
    try:
        row = store.runs.get(result["run"])
    finally:
        store.close()
    assert row is not None and row.status == "finished"

    report.unlink()  # as an interrupt while the report was written leaves it
    resumed = run_cli(home, "resume", result["run"])
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert report.is_file() and parsed(resumed.stdout.strip().splitlines()[-1])["run"] == result["run"]
    again = run_cli(home, "resume", result["run"])
    assert again.returncode == 2 and "finished already" in again.stderr, "with its report, nothing to resume"


def test_an_early_interrupt_says_what_there_is_to_resume(tmp_path: Path) -> None:
    home = tmp_path / "home"
    process = start_cli(home, *QUICK)
    assert process.stdout is not None
    first = process.stdout.readline()
    assert first.startswith("optimizing saxpy"), "the start line comes at once"
    os.kill(process.pid, signal.SIGINT)
    rest = process.stdout.read()
    assert process.wait(timeout=120) == 130, rest
    assert "`" not in rest and "RUN (see" not in rest
    runs = []
    if (home / "kernelcast.db").exists():
        store = Store(home / "kernelcast.db", read_only=True)
        try:
            runs = store.runs.recent()
        finally:
            store.close()
    if runs:  # the run was created before the interrupt: it is named, and resumable
        assert len(runs) == 1 and f"kernelcast resume {runs[0].id}" in rest and runs[0].status == "interrupted"
    else:
        assert "nothing to resume" in rest and "kernelcast resume" not in rest
