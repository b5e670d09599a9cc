"""The scripts in examples/ run as a user would run them (small sizes, private home)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support.paths import ROOT


def run_example(name: str, *args: str, home: Path, unset: tuple[str, ...] = (),
                extra_env: dict[str, str] | None = None) -> str:
    env = {**{k: v for k, v in os.environ.items() if k not in unset}, "KERNELCAST_HOME": str(home),
           "PYTHONPATH": str(ROOT), **(extra_env or {})}
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


def test_agent_session_example_offline(tmp_path: Path) -> None:
    """The external agent (offline generator: no model configured) drives a session under a budget of 3."""
    out = run_example("agent_session.py", "--budget", "3", "--sizes", "small", "--rounds", "3", home=tmp_path,
                      unset=("KERNELCAST_MODEL", "KERNELCAST_API_BASE"))
    assert "agent: offline" in out and "round 1: parent " in out, out
    assert out.count("  measurement ") <= 3, out
    assert " measured: " in out and "P(better) " in out, out  # the learned forecaster's P(beat the incumbent)
    spent = int(out.split("spent ")[-1].split(" of ")[0])
    assert 1 <= spent <= 3, out
    assert Path(out.split("report: ")[1].strip()).is_file(), out


TWO_PER_ITEM = ("__kernel void saxpy(__global const float *x, __global float *y, const float a, const int n)\n"
                "{\n    int i = 2 * get_global_id(0);\n    if (i + 1 < n) {\n        y[i] = a * x[i] + y[i];\n"
                "        y[i + 1] = a * x[i + 1] + y[i + 1];\n    }\n}\n")
BROKEN = ("__kernel void saxpy(__global const float *x, __global float *y, const float a, const int n)\n"
          "{ y[get_global_id(0)] = a * x[ ; }\n")


def test_agent_session_example_with_the_llm_generator(tmp_path: Path) -> None:
    """The LLM generator behind the session interface, against an OpenAI-compatible server on loopback whose
    replies are fixed (one good kernel, one that does not compile): the session's own validation compiles
    what the generator could not, and the second round, with nothing new and valid, is refused whole."""
    import json

    from support.llm_server import CannedServer

    reply = json.dumps({"candidates": [
        {"source": TWO_PER_ITEM, "global_size": ["N / 2"], "local_size": None, "build_options": [],
         "intent": "two elements per work-item"},
        {"source": BROKEN, "global_size": ["N"], "local_size": None, "build_options": [], "intent": "broken"}]})
    with CannedServer(contents=[reply]) as server:
        out = run_example("agent_session.py", "--budget", "3", "--sizes", "small", "--rounds", "2",
                          "--per-round", "2", "--forecaster", "none", home=tmp_path,
                          extra_env={"KERNELCAST_MODEL": "openai/canned", "KERNELCAST_API_BASE": server.api_base,
                                     "KERNELCAST_API_KEY": "not-needed"})
    assert "agent: llm:openai/canned" in out, out
    assert "rejected (compile_error)" in out, out  # compiled by the session, not by the generator
    assert " measured: measured correct" in out, out
    refused = next(line for line in out.splitlines() if "refused: " in line)  # round 2: the parent is unchanged,
    assert "no valid candidate" in refused and "compile_error" in refused, out  # the broken one still broken
    assert "answer: " in out and Path(out.split("report: ")[1].strip()).is_file(), out

