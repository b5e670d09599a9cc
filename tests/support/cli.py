"""The CLI as a user runs it: a fresh process on a private KERNELCAST_HOME."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support.paths import ROOT


def start_cli(home: Path, *args: str) -> subprocess.Popen[str]:
    """A running CLI process whose stdout (e.g. ``--events jsonl``) the test reads as it comes."""
    env = {**os.environ, "KERNELCAST_HOME": str(home), "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "kernelcast.cli", *args], stdout=subprocess.PIPE, text=True,
                            env=env, cwd=home.parent)


def run_cli(home: Path, *args: str, **env_extra: str) -> subprocess.CompletedProcess[str]:
    """A CLI command run to its end, its output captured."""
    env = {**os.environ, "KERNELCAST_HOME": str(home), "COLUMNS": "200", **env_extra}
    return subprocess.run([sys.executable, "-m", "kernelcast.cli", *args], capture_output=True, text=True, env=env,
                          cwd=home.parent, timeout=600)
