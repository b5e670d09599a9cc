"""Issue 49, round two, the fault items (6, 7, 9, 10): hostile inputs and killed processes against the real CLI
and the real OpenCL device.

Each test is a fault that used to end in a traceback, a hang, a worker left spinning, a run row left behind or a
run that "finished" having spent nothing; now it is a one-line error with a stable exit code, a refusal before
anything is spent, or a worker that dies with its parent.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernelcast import console as console_module
from kernelcast.cli import app
from kernelcast.tools.core.settings import get_settings
from kernelcast.tools.core.task import TaskError, load_task, resolve_task

from support.paths import ROOT
from support.read_only import read_only

# an endless kernel with saxpy's signature (bounded so no compiler may assume it finishes; it never does)
HANG = """
__kernel void saxpy(__global const float *x, __global float *y, const float a, const int n)
{
    int i = get_global_id(0);
    volatile long k = 0;
    while (k >= 0 && k < (1L << 62)) k = k + 1;
    if (i < n)
        y[i] = a * x[i] + y[i];
}
"""


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh KERNELCAST_HOME for in-process CLI calls; errors printed on one line however long they are."""
    folder = tmp_path / "home"
    monkeypatch.setenv("KERNELCAST_HOME", str(folder))
    monkeypatch.delenv("KERNELCAST_DB", raising=False)
    monkeypatch.setattr(console_module.err_console, "width", 100_000)
    get_settings.cache_clear()
    yield folder
    get_settings.cache_clear()


def cli(*args: str) -> tuple[int, str]:
    """Run the real CLI in this process: (exit code, stderr); an exception that escaped is a failure."""
    result = CliRunner().invoke(app, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"{args}: escaped {type(result.exception).__name__}: {result.exception}")
    return result.exit_code, result.stderr


def one_line_error(code: int, stderr: str, expected_code: int, *needles: str) -> None:
    assert code == expected_code, (code, stderr)
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), stderr
    assert "Traceback" not in stderr and "validation error" not in stderr, stderr
    for needle in needles:
        assert needle in stderr, (needle, stderr)


def run_rows(home: Path) -> list[str]:
    db = home / "kernelcast.db"
    if not db.exists():
        return []
    with closing(sqlite3.connect(db)) as conn:
        return [row[0] for row in conn.execute("select id from runs")]


def measurement_count(home: Path) -> int:
    db = home / "kernelcast.db"
    if not db.exists():
        return 0
    with closing(sqlite3.connect(db)) as conn:
        return int(conn.execute("select count(*) from measurements").fetchone()[0])


def edit_rows(db: Path, *updates: tuple[str, str]) -> None:
    """Change rows by hand (as another program might), then close: the last connection checkpoints the WAL, so
    the database file alone holds every write."""
    with closing(sqlite3.connect(db)) as conn:
        with conn:
            for sql, run_id in updates:
                conn.execute(sql, [run_id])


# ---- item 6: a worker hung in a kernel never outlives its parent ---------------------------------------------
def children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True, check=False)
    return [int(p) for p in out.stdout.split()]


def cpu_seconds(pid: int) -> float:
    """CPU seconds the process has burnt; 0 for one that is gone (a short-lived child of the CLI, such as a
    device probe, can exit between the listing of children and this read: the full suite once failed on it)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def is_dead(pid: int) -> bool:
    """Gone, or a zombie waiting for init to reap it (it runs nothing any more)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def wait_dead(pid: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if is_dead(pid):
            return True
        time.sleep(0.1)
    return is_dead(pid)


def spinning_worker(parent: subprocess.Popen[str]) -> int:
    """The parent's measurement worker, once it spins in the endless kernel (it has burnt CPU seconds beyond
    its start: the reference check and the compile take far less)."""
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        assert parent.poll() is None, parent.communicate()
        for kid in children(parent.pid):
            if cpu_seconds(kid) > 8.0:
                return kid
        time.sleep(0.5)
    raise AssertionError("the worker never reached the endless kernel")


def hanging_cli(tmp_path: Path, ignore_sigint: bool = False) -> subprocess.Popen[str]:
    (tmp_path / "hang.cl").write_text(HANG)
    env = {**os.environ, "KERNELCAST_HOME": str(tmp_path / "home"), "KERNELCAST_MEASURE_TIMEOUT_S": "600",
           "COLUMNS": "300", "PYTHONPATH": str(ROOT)}
    # a shell that starts a command in the background ignores SIGINT for it; the CLI must still stop on it
    preexec = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if ignore_sigint else None
    return subprocess.Popen([sys.executable, "-m", "kernelcast.cli", "measure", "saxpy", "--sizes", "small",
                             "--candidate", str(tmp_path / "hang.cl")], env=env, cwd=tmp_path, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=preexec)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["kill-9", "sigterm"])
def test_the_worker_dies_with_a_killed_cli(tmp_path: Path, sig: signal.Signals) -> None:
    cli_process = hanging_cli(tmp_path)
    worker = spinning_worker(cli_process)
    try:
        cli_process.send_signal(sig)
        cli_process.communicate(timeout=30)
        assert wait_dead(worker, 5.0), f"worker {worker} outlived its parent (killed by {sig.name})"
    finally:
        if not is_dead(worker):
            os.kill(worker, signal.SIGKILL)


def test_sigint_to_the_cli_alone_stops_it_and_its_worker_promptly(tmp_path: Path) -> None:
    cli_process = hanging_cli(tmp_path, ignore_sigint=True)
    worker = spinning_worker(cli_process)
    try:
        started = time.monotonic()
        cli_process.send_signal(signal.SIGINT)  # to the CLI only, not its process group
        _, stderr = cli_process.communicate(timeout=30)
        assert time.monotonic() - started < 10, "the CLI took its time to stop on SIGINT"
        assert cli_process.returncode == 130, stderr
        assert wait_dead(worker, 3.0), "the CLI stopped but left its worker in the kernel"
    finally:
        if cli_process.poll() is None:
            cli_process.kill()
        if not is_dead(worker):
            os.kill(worker, signal.SIGKILL)


WATCHED = """
import sys, threading, time
from kernelcast.tools.core.candidate import candidate_from_source
from kernelcast.tools.core.measurement import MeasureConfig
from kernelcast.tools.core.task import resolve_task
from kernelcast.tools.hardware.worker import MeasurementWorker

task = resolve_task("saxpy")
worker = MeasurementWorker()

def measure():  # started from a thread that is not the main one: no parent-death signal, the watchdog alone
    worker.start()
    print(worker.pid, flush=True)
    worker.measure(task, candidate_from_source(task, sys.argv[1]), MeasureConfig(sizes="small", timeout_s=600))

threading.Thread(target=measure, daemon=True).start()
time.sleep(600)
"""


def test_a_worker_started_from_another_thread_dies_with_its_parent_too(tmp_path: Path) -> None:
    """Pool slots and server threads start workers off the main thread, where the kernel's parent-death
    signal would fire when that thread ends: the worker's own watchdog sees its parent go, mid-kernel."""
    parent = subprocess.Popen([sys.executable, "-c", WATCHED, HANG], env={**os.environ, "PYTHONPATH": str(ROOT)},
                              stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    worker = int(parent.stdout.readline())
    try:
        deadline = time.monotonic() + 240
        while cpu_seconds(worker) < 8.0:
            assert time.monotonic() < deadline, "the worker never reached the endless kernel"
            time.sleep(0.5)
        parent.kill()
        parent.wait(timeout=30)
        assert wait_dead(worker, 5.0), "the worker outlived its parent"
    finally:
        if not is_dead(worker):
            os.kill(worker, signal.SIGKILL)


# ---- item 7: a damaged, read-only or unwritable store -------------------------------------------------------
def test_write_commands_on_a_damaged_store_are_one_line_errors(home: Path) -> None:
    home.mkdir()
    (home / "kernelcast.db").write_bytes(b"not a database at all " * 400)
    for args in (("measure", "saxpy", "--sizes", "small"),
                 ("optimize", "saxpy", "--budget", "2", "--sizes", "small", "--forecaster", "none"),
                 ("resume", "saxpy-20260101-000000-0123456789abcdef"),
                 ("dataset", "build", "--tasks", "saxpy", "--sizes", "small", "-n", "1")):
        one_line_error(*cli(*args), 2, "not a usable kernelcast database")


@pytest.fixture
def home_with_runs(home: Path) -> tuple[Path, list[str]]:
    for _ in range(2):
        code, stderr = cli("optimize", "saxpy", "--budget", "2", "--sizes", "small", "--router", "measure-all",
                           "--forecaster", "none")
        assert code == 0, stderr
    return home, sorted(run_rows(home))


def test_write_commands_on_a_read_only_store_refuse_before_measuring(home_with_runs: tuple[Path, list[str]]) -> None:
    home, ids = home_with_runs
    db = home / "kernelcast.db"
    edit_rows(db, ("update runs set status = 'interrupted', owner_pid = null where id = ?", ids[0]))
    spent = measurement_count(home)
    with read_only(home, db):
        for args in (("measure", "saxpy", "--sizes", "small"),
                     ("optimize", "saxpy", "--budget", "2", "--sizes", "small", "--forecaster", "none"),
                     ("resume", ids[0])):
            one_line_error(*cli(*args), 2, "cannot be written")
    assert measurement_count(home) == spent  # refused before the device was used


def test_a_store_whose_folder_cannot_be_made_is_a_one_line_error(tmp_path: Path, home: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    monkeypatch.setenv("KERNELCAST_HOME", str(locked / "home"))
    get_settings.cache_clear()
    with read_only(locked):
        one_line_error(*cli("measure", "saxpy", "--sizes", "small"), 2, "cannot be created")


def test_a_damaged_run_row_is_left_out_of_runs_and_named_by_show(home_with_runs: tuple[Path, list[str]]) -> None:
    home, (bad_json, bad_status) = home_with_runs
    edit_rows(home / "kernelcast.db", ("update runs set config = '{not json' where id = ?", bad_json),
              ("update runs set status = 'bogus', summary = '[' where id = ?", bad_status))
    result = CliRunner().invoke(app, ["runs"])
    assert result.exit_code == 0 and result.exception is None, result.output
    warning = result.stderr.strip().splitlines()
    assert len(warning) == 1 and "left out 2 run row(s)" in warning[0], result.stderr
    for run_id in (bad_json, bad_status):
        one_line_error(*cli("show", run_id), 2, run_id, "does not parse")


# ---- item 9: candidate files ----------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["dev-zero", "directory", "fifo", "too-large"])
def test_a_candidate_that_is_no_regular_file_or_too_large_is_refused(home: Path, tmp_path: Path, kind: str) -> None:
    path = {"dev-zero": Path("/dev/zero"), "directory": tmp_path, "fifo": tmp_path / "fifo",
            "too-large": tmp_path / "big.cl"}[kind]
    if kind == "fifo":
        os.mkfifo(path)  # nobody ever writes to it: opening it for reading would wait forever
    if kind == "too-large":
        path.write_text("// " + "x" * 300_000 + "\n" + resolve_task("saxpy").source)
    needle = {"dev-zero": "not a regular file", "directory": "is a directory", "fifo": "not a regular file",
              "too-large": "the limit is 262144 bytes"}[kind]
    for args in (("measure", "saxpy", "--sizes", "small", "--candidate", str(path)),
                 ("propose", "saxpy", "--parent", str(path), "--no-compile")):
        one_line_error(*cli(*args), 2, needle, str(path))
    assert measurement_count(home) == 0


# ---- item 10: input checks ------------------------------------------------------------------------------------
def test_dataset_build_refuses_a_negative_pool(home: Path) -> None:
    for args in (("--per-task", "-1"), ("--per-task", "0"), ("--limit", "0"), ("--parallel", "0")):
        one_line_error(*cli("dataset", "build", "--tasks", "saxpy", "--sizes", "small", *args), 2, args[0])
    assert measurement_count(home) == 0


def test_a_boolean_size_is_refused(tmp_path: Path) -> None:
    builtin = resolve_task("saxpy").path.parent
    for source in builtin.glob("*.cl"):
        (tmp_path / source.name).write_text(source.read_text())
    toml = (builtin / "task.toml").read_text()
    (tmp_path / "task.toml").write_text(toml.replace("N = 8388608", "N = true", 1))
    with pytest.raises(TaskError, match=r"\[sizes\]: N must be an integer"):
        load_task(tmp_path / "task.toml")


BIG = """name = "bigcopy"
language = "opencl"
source = "copy.cl"
entry = "copy"

[sizes]
N = 1924145348608

[small_sizes]
N = 1024

[[args]]
name = "a"
dtype = "float32"
shape = ["N"]
intent = "in"

[[args]]
name = "c"
dtype = "float32"
shape = ["N"]
intent = "out"

[launch]
global = ["1024"]
"""


def test_buffers_larger_than_the_device_memory_are_a_task_error(home: Path, tmp_path: Path) -> None:
    """7 TiB of buffers passed task validation; at measure time they are held against the device's memory."""
    (tmp_path / "copy.cl").write_text("__kernel void copy(__global const float *a, __global float *c)\n"
                                      "{ int i = get_global_id(0); c[i] = a[i]; }\n")
    (tmp_path / "task.toml").write_text(BIG)
    load_task(tmp_path / "task.toml")  # the file itself is valid: the device decides
    one_line_error(*cli("measure", str(tmp_path / "task.toml")), 2, "GiB of global memory", "14,336.0 GiB")
    one_line_error(*cli("optimize", str(tmp_path / "task.toml"), "--budget", "4", "--forecaster", "none"), 2,
                   "GiB of global memory")
    assert measurement_count(home) == 0 and run_rows(home) == []


@pytest.mark.parametrize(("args", "needle"), [
    (("--budget", "1"), "the minimum budget is 2"),
    (("--budget", "0"), "budget"),
    (("--budget", str(10**20)), "at most 1,000,000"),
    (("--parallel", "0"), "--parallel must be at least 1"),
    (("--seed", "-1"), "--seed must be 0 or more"),
    (("--generator", "llm"), "needs a model"),
])
def test_run_options_that_cannot_run_are_refused_before_a_run_exists(home: Path, args: tuple[str, ...],
                                                                      needle: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KERNELCAST_MODEL", raising=False)
    get_settings.cache_clear()
    one_line_error(*cli("optimize", "saxpy", "--sizes", "small", "--forecaster", "none", *args), 2, needle)
    assert run_rows(home) == [] and measurement_count(home) == 0


def test_a_budget_of_two_measures(home: Path) -> None:
    """The minimum the refusal names is a budget that buys a measurement, not one more "0 of N spent"."""
    code, stderr = cli("optimize", "saxpy", "--budget", "2", "--sizes", "small", "--router", "measure-all",
                       "--forecaster", "none")
    assert code == 0, stderr
    assert measurement_count(home) >= 1


def test_an_mcp_port_out_of_range_is_refused() -> None:
    one_line_error(*cli("mcp", "--transport", "http", "--port", "70000"), 2, "65535")


def test_a_100_kb_run_id_is_not_valid_not_a_damaged_database(home_with_runs: tuple[Path, list[str]]) -> None:
    huge = "a" * 100_000
    for command in ("show", "resume"):
        code, stderr = cli(command, huge)
        one_line_error(code, stderr, 2, "not a valid run id")
        assert "damaged" not in stderr and len(stderr) < 500, stderr[:300]
