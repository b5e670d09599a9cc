"""`kernelcast import kernel-tuner` as a user runs it: the rows land in the store, bad input is one line, exit 2."""

from __future__ import annotations

from pathlib import Path

from kernelcast.tools.store.store import Store

from support.cli import run_cli
from support.kernel_tuner_cache import TASK, cache, write


def test_the_command_imports_and_says_what_it_did(tmp_path: Path) -> None:
    path = write(tmp_path, cache())
    done = run_cli(tmp_path / "home", "import", "kernel-tuner", str(path), "--task", str(TASK))
    assert done.returncode == 0, done.stderr
    assert "imported 3 recorded rows of convolution_milo" in " ".join(done.stdout.split())
    store = Store(tmp_path / "home" / "kernelcast.db", read_only=True)
    assert len(store.ledger.find(provenance=("recorded",))) == 3 and store.ledger.find() == []
    bad = write(tmp_path, cache(objective="GFLOP/s"), "bad.json.gz")
    refused = run_cli(tmp_path / "home", "import", "kernel-tuner", str(bad), "--task", str(TASK))
    assert refused.returncode == 2 and "unknown units" in refused.stderr and "Traceback" not in refused.stderr
