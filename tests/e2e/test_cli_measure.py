"""The `kernelcast` command line for tasks, measure and devices (run as a real subprocess)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from kernelcast.tools.store.store import Store

from support.paths import ROOT


def kc(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KERNELCAST_HOME": str(tmp_path / "home"), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "kernelcast.cli", *args], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=300)


def test_measure_json_is_stored(tmp_path: Path) -> None:
    out = kc(tmp_path, "measure", "saxpy", "--params", "VEC=4", "--params", "COARSEN=2", "--params", "WG=64",
             "--sizes", "small", "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["status"] == "correct" and result["speedup"] > 0 and 1 <= result["bin"] <= 8
    store = Store(tmp_path / "home" / "kernelcast.db")
    stored = store.ledger.find(task="saxpy")
    assert [m.candidate_hash for m in stored] == [result["candidate_hash"]]
    assert store.candidates.get(result["candidate_hash"]).params == {"VEC": 4, "COARSEN": 2, "WG": 64}


def test_measure_candidate_file_with_compile_error_exits_1(tmp_path: Path) -> None:
    bad = tmp_path / "bad.cl"
    bad.write_text("__kernel void saxpy(__global const float *x, __global float *y, const float a, const int n)"
                   " { y[get_global_id(0)] = oops; }")
    out = kc(tmp_path, "measure", "saxpy", "--candidate", str(bad), "--sizes", "small")
    assert out.returncode == 1
    assert "compile_error" in out.stdout and "oops" in out.stdout


def test_unknown_task_and_bad_params_exit_2(tmp_path: Path) -> None:
    out = kc(tmp_path, "measure", "nope")
    assert out.returncode == 2 and "unknown task 'nope'" in out.stderr
    out = kc(tmp_path, "measure", "saxpy", "--params", "VEC")
    assert out.returncode == 2 and "NAME=VALUE" in out.stderr
    out = kc(tmp_path, "measure", "saxpy", "--candidate", str(tmp_path / "missing.cl"))
    assert out.returncode == 2 and "not found" in out.stderr


def test_tasks_list_and_show(tmp_path: Path) -> None:
    listing = kc(tmp_path, "tasks")
    assert listing.returncode == 0 and "saxpy" in listing.stdout
    shown = kc(tmp_path, "tasks", "show", "saxpy")
    assert shown.returncode == 0 and "template" in shown.stdout and "y = a*x + y" in shown.stdout


def test_devices_json(tmp_path: Path) -> None:
    out = kc(tmp_path, "devices", "--json")
    assert out.returncode == 0
    devices = json.loads(out.stdout)
    assert devices and devices[0]["backend"] == "opencl" and devices[0]["compute_units"] >= 1


def test_hand_written_gemm_candidate_is_correct_and_faster(tmp_path: Path) -> None:
    example = ROOT / "examples" / "gemm_blocked.cl"
    out = kc(tmp_path, "measure", "gemm", "--candidate", str(example), "--global", "N / 8,M / 4", "--local", "8,4",
             "--sizes", "small", "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["status"] == "correct" and result["seeds"] == [0, 1, 2]
    assert result["speedup"] > 1.0
