"""Read-only commands on a read-only store: `runs`, `show`, `report`, `devices`, `tasks show` work when the
database and its folder cannot be written, change nothing, and store problems come back as one line."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernelcast import api
from kernelcast.tools.core.settings import get_settings

from support.paths import ROOT
from support.read_only import read_only


def kc(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KERNELCAST_HOME": str(home), "PYTHONPATH": str(ROOT), "COLUMNS": "300"}
    env.pop("KERNELCAST_DB", None)
    return subprocess.run([sys.executable, "-m", "kernelcast.cli", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, check=False, timeout=300)


@pytest.fixture(scope="module")
def home_with_a_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    home = tmp_path_factory.mktemp("ro-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KERNELCAST_HOME", str(home))
        mp.delenv("KERNELCAST_DB", raising=False)
        get_settings.cache_clear()
        run_id = api.optimize("saxpy", budget=2, router="measure-all", sizes="small", measure_per_round=2,
                              forecaster="none").run_id
    get_settings.cache_clear()
    yield home, run_id


def test_read_only_commands_work_on_a_read_only_store_and_change_nothing(
        home_with_a_run: tuple[Path, str], tmp_path: Path) -> None:
    home, run_id = home_with_a_run
    db = home / "kernelcast.db"
    run_folder = home / "runs" / run_id
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    names = sorted(p.name for p in home.iterdir())
    with read_only(home, db, home / "runs", run_folder):
        listed = kc(home, "runs")
        assert listed.returncode == 0, listed.stderr
        assert run_id in listed.stdout and "measure-all" in listed.stdout and "finished" in listed.stdout

        shown = kc(home, "show", run_id[:20], "--decisions")
        assert shown.returncode == 0, shown.stderr
        assert "decisions" in shown.stdout and "spend:search" in shown.stdout

        as_json = kc(home, "show", run_id, "--json")
        assert as_json.returncode == 0, as_json.stderr
        data = json.loads(as_json.stdout)
        assert data["id"] == run_id and data["config"]["router"] == "measure-all" and data["status"] == "finished"
        assert [e["seq"] for e in data["events"]] == list(range(1, len(data["events"]) + 1))
        assert sum(e["kind"] == "spend" for e in data["events"]) >= 2

        report = kc(home, "report", run_id, "--out", str(tmp_path / "report"))
        assert report.returncode == 0, report.stderr
        assert (tmp_path / "report" / "report.html").is_file() and (tmp_path / "report" / "tree.png").is_file()

        into_run_folder = kc(home, "report", run_id)  # the default folder is the (read-only) run folder
        assert into_run_folder.returncode == 2 and "Traceback" not in into_run_folder.stderr
        assert "cannot write the report" in into_run_folder.stderr and "--out" in into_run_folder.stderr

        devices = kc(home, "devices", "--json")
        assert devices.returncode == 0, devices.stderr
        assert any(d["healthy"] for d in json.loads(devices.stdout))

        task = kc(home, "tasks", "show", "saxpy")
        assert task.returncode == 0 and "saxpy" in task.stdout

        unknown = kc(home, "show", "no-such-run")
        assert unknown.returncode == 2 and "no run with id 'no-such-run'" in unknown.stderr
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before  # nothing was written
    assert sorted(p.name for p in home.iterdir()) == names  # no journal, no new file


def test_store_problems_are_one_line_errors(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    none_yet = kc(empty, "runs")
    assert none_yet.returncode == 0 and "no runs yet" in none_yet.stdout
    for args in (("show", "abc"), ("report", "abc")):
        missing = kc(empty, *args)
        assert missing.returncode == 2 and "no run with id 'abc': nothing has run yet" in missing.stderr, args
    assert not (empty / "kernelcast.db").exists()  # reading created nothing

    damaged = tmp_path / "damaged"
    damaged.mkdir()
    (damaged / "kernelcast.db").write_bytes(b"not a database at all " * 200)
    for args in (("runs",), ("show", "abc"), ("report", "abc")):
        out = kc(damaged, *args)
        assert out.returncode == 2, (args, out.stdout, out.stderr)
        assert "not a usable kernelcast database" in out.stderr and "Traceback" not in out.stderr
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr
