"""What every finished run must satisfy, and killing a CLI run mid-way then resuming it to its end."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from kernelcast.graphs.route.trust import RouteRecord
from kernelcast.graphs.search.tree import CONSIDERED_CLASSES
from kernelcast.tools.core.measurement import Measurement
from kernelcast.tools.store.store import Store

from support.cli import start_cli


def check_pairing(store: Store, run_id: str) -> int:
    """Every child measured after a decision against a kernel (not the reference) was timed beside that kernel,
    so its calibration row reads the pair; returns how many were."""
    judged = {e.candidate_hash: RouteRecord.model_validate(e.payload).incumbent_hash
              for e in store.events.find(run_id, kind="route")}
    paired = 0
    for m in store.ledger.find(run_id=run_id):
        if m.phase != "confirm" and m.ok and judged.get(m.candidate_hash):
            assert m.rival is not None and m.rival.candidate_hash == judged[m.candidate_hash], m.flags
            paired += 1
    return paired


def check_invariants(store: Store, run_id: str, budget: int) -> dict:
    row = store.runs.get(run_id)
    assert row is not None and row.status == "finished"
    tree = json.loads((Path(row.folder) / "tree.json").read_text())
    bought = store.ledger.find(run_id=run_id)
    assert len(bought) <= budget
    measured = [m for m in bought if m.phase != "confirm"]
    confirmations = [m for m in bought if m.phase == "confirm"]
    assert len({m.candidate_hash for m in measured}) == len(measured), "a candidate was bought twice"
    assert len({m.candidate_hash for m in confirmations}) == len(confirmations), "a candidate was confirmed twice"
    assert {m.candidate_hash for m in confirmations} <= {m.candidate_hash for m in measured if m.ok}
    check_pairing(store, run_id)
    for key, node in tree.items():
        if node["outcome"] == "root":
            continue
        assert node["outcome"] in CONSIDERED_CLASSES, f"{key} ended as {node['outcome']}"
    summary = row.summary
    if summary["best_hash"]:
        best = [m for m in measured if m.candidate_hash == summary["best_hash"]]
        assert best and best[0].ok, "the reported best must be a measured, correct kernel"
        assert summary["first_speedup"] == pytest.approx(best[0].speedup)
        confirmed = [m for m in confirmations if m.candidate_hash == summary["best_hash"]]
        if summary["confirmed"]:  # the reported number is the confirmation's, with its interval
            assert confirmed and confirmed[0].ok and summary["best_speedup"] == pytest.approx(confirmed[0].speedup)
            low, high = summary["best_interval"]
            assert low <= summary["best_speedup"] <= high
            assert summary["significant"] == (low > 1.0 and summary["best_speedup"] > 1 + (summary["noise_floor"] or 0))
        else:
            assert not summary["significant"]
        assert tree[summary["best_hash"]]["outcome"] in ("measured", "verified")
    return summary


def kill_after_spends(proc: subprocess.Popen[str], spends_wanted: int, phase: str | None = None,
                      after: str | None = None) -> tuple[str | None, int]:
    """Read a run's JSONL events and SIGKILL it right after its n-th measurement (of ``phase``, if given;
    counted from the first event of kind ``after``, if given): (run id, spends counted)."""
    run_id, spends = None, 0
    counting = after is None
    assert proc.stdout is not None
    deadline = time.time() + 240
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        event = json.loads(line)
        run_id = event.get("run_id", run_id)
        counting = counting or event["event"] == after
        if counting and event["event"] == "spend" and phase in (None, event["phase"]):
            spends += 1
            if spends == spends_wanted:
                os.kill(proc.pid, signal.SIGKILL)
                break
    proc.wait()
    return run_id, spends


def resume_to_the_end(home: Path, store: Store, run_id: str, budget: int, before: dict[str, str]) -> list[Measurement]:
    """Resume a killed run through the CLI until it finishes with its budget spent; nothing measured before the
    kill (``before``: candidate -> when) was lost or bought again. The run's measurements afterwards."""
    resumed = start_cli(home, "resume", run_id, "--events", "jsonl")
    out, _ = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, out
    result = json.loads(out.strip().splitlines()[-1])
    assert result["event"] == "result" and result["spent"] == budget
    after = store.ledger.find(run_id=run_id)
    for key, created in before.items():
        assert [m.created_at for m in after if m.candidate_hash == key and m.phase != "confirm"] == [created]
    return after
