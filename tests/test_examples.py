"""The scripts in examples/ run as a user would run them (small sizes, private home)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_example(name: str, *args: str, home: Path) -> str:
    env = {**os.environ, "KERNELCAST_HOME": str(home), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(ROOT / "examples" / name), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode == 0, f"{name} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_optimize_saxpy_example(tmp_path: Path) -> None:
    out = run_example("optimize_saxpy.py", "--budget", "3", "--sizes", "small", home=tmp_path)
    assert out.count("  measurement ") == 3, out
    assert "spent 3 of 3 measurements" in out, out
    folder = Path(out.split("run folder: ")[1].strip())
    assert (folder / "result.json").is_file()


def test_measure_and_forecast_example(tmp_path: Path) -> None:
    out = run_example("measure_and_forecast.py", "--sizes", "small", home=tmp_path)
    assert out.startswith("forecast: "), out
    assert "measured: correct, speedup" in out, out  # the float2 variant is a correct kernel
