"""`make run` installs only what `optimize` needs; `make test` everything the tests need (issue 64, item 3).

Read from make's own plan (``make -n``) for a venv that does not exist yet, as on a fresh clone: what each entry
point would install, without installing anything."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from support.paths import ROOT

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def plan(target: str, venv: Path) -> str:
    # CI runs this suite from `make test`: a nested make inherits MAKEFLAGS and MAKELEVEL and would print
    # "Entering directory" lines around the plan, so it is read as a top-level make would print it.
    env = {name: value for name, value in os.environ.items() if name not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    done = subprocess.run(["make", "--no-print-directory", "-n", target, f"VENV={venv}"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_make_run_installs_only_what_optimize_needs(tmp_path: Path) -> None:
    steps = plan("run", tmp_path / "venv")
    assert "-m venv" in steps and "pip install --quiet -e .\n" in steps  # kernelcast and its runtime dependencies
    for heavy in ("llama-cpp-python", "[test", "train", "torch", "local-llm"):
        assert heavy not in steps, f"make run would install {heavy}:\n{steps}"
    assert steps.rstrip().endswith("optimize gemm --budget 24")


def test_make_test_still_installs_everything_the_tests_need(tmp_path: Path) -> None:
    steps = plan("test", tmp_path / "venv")
    assert "-m venv" in steps and 'CMAKE_ARGS="-DGGML_NATIVE=OFF"' in steps and "llama-cpp-python[server]" in steps
    assert '-e ".[test,local-llm,train]"' in steps and "pytest" in steps
    assert steps.index("llama-cpp-python") < steps.index("-m pytest")  # installed before the suite runs
