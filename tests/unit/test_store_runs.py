"""The store's runs (``store.runs``): ids, ownership and live status, listings that survive damaged rows."""

from __future__ import annotations

import os
import socket
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from kernelcast.tools.store.errors import DamagedRow, InvalidRunId
from kernelcast.tools.store.runs import HEARTBEAT_STALE_S, MAX_RUN_ID_CHARS
from kernelcast.tools.store.store import Store

from support.records import measurement

NO_SUCH_PID = 2**22 + 12345  # above Linux's pid limit: no process on this host has it


def test_a_new_run_is_ours_and_running_with_a_unique_id(tmp_path: Path) -> None:
    store = Store(tmp_path / "k.db")
    first = store.runs.create("saxpy", "dev", {"budget": 3}, budget=3, folder="out")
    second = store.runs.create("saxpy", "dev", {"budget": 3}, budget=3)
    assert first != second and first.startswith("saxpy-")
    run = store.runs.get(first)
    assert run is not None and run.status == "running" and run.owner_pid == os.getpid()
    assert run.owner_host == socket.gethostname() and run.folder == "out" and run.config == {"budget": 3}


def test_get_resolves_exact_ids_and_unambiguous_prefixes_with_literal_wildcards(tmp_path: Path) -> None:
    store = Store(tmp_path / "k.db")
    store.runs.create("saxpy", "dev", {}, 3, run_id="abc")
    store.runs.create("saxpy", "dev", {}, 3, run_id="abcd")
    store.runs.create("saxpy", "dev", {}, 3, run_id="x_1")
    found = store.runs.get("abc")
    assert found is not None and found.id == "abc"  # exact beats the longer id it prefixes
    assert store.runs.get("ab") is None  # ambiguous
    assert store.runs.get("abcd") is not None and store.runs.get("   ") is None
    assert store.runs.get("x%") is None and store.runs.get("_") is None  # wildcards match only themselves
    assert store.runs.get("x_") is not None
    with pytest.raises(InvalidRunId, match="not a valid run id"):
        store.runs.get("a" * (MAX_RUN_ID_CHARS + 1))


def test_an_unfinished_run_reads_its_spending_from_the_ledger_and_a_dead_owner_as_interrupted(tmp_path: Path) -> None:
    store = Store(tmp_path / "k.db")
    run_id = store.runs.create("saxpy", "dev", {}, 5)
    store.ledger.add(measurement("a", 1.5), run_id=run_id)
    store.ledger.add(measurement("b", 1.5), run_id=run_id)
    run = store.runs.get(run_id)
    assert run is not None and run.spent == 2 and run.status == "running"
    store.runs.update(run_id, owner_pid=NO_SUCH_PID)
    run = store.runs.get(run_id)
    assert run is not None and run.status == "interrupted"
    store.runs.claim(run_id)  # a resume: ours again
    run = store.runs.get(run_id)
    assert run is not None and run.status == "running" and run.owner_pid == os.getpid()
    store.runs.update(run_id, status="finished", spent=7, summary={"best": 1.5})
    run = store.runs.get(run_id)
    assert run is not None and run.finished and run.spent == 7 and run.summary == {"best": 1.5}  # its own total


def test_a_run_on_another_host_lives_by_its_heartbeat(tmp_path: Path) -> None:
    store = Store(tmp_path / "k.db")
    run_id = store.runs.create("saxpy", "dev", {}, 5)
    stale = (datetime.now(UTC) - timedelta(seconds=HEARTBEAT_STALE_S + 60)).isoformat()
    store.runs.update(run_id, owner_host="elsewhere", heartbeat=stale)
    run = store.runs.get(run_id)
    assert run is not None and run.status == "interrupted"
    store.runs.heartbeat(run_id)
    run = store.runs.get(run_id)
    assert run is not None and run.status == "running"


def test_listings_are_newest_first_and_name_damaged_rows_instead_of_failing(tmp_path: Path) -> None:
    store = Store(tmp_path / "k.db")
    for name in ("one", "two", "three"):
        store.runs.create("saxpy" if name != "two" else "gemm", "dev", {}, 3, run_id=name)
    with store.db.conn:
        store.db.execute("update runs set created_at = '2026-01-01' where id in ('one', 'two', 'three')")
    assert [r.id for r in store.runs.recent()] == ["three", "two", "one"]  # ties: the later inserted first
    assert [r.id for r in store.runs.recent(task="saxpy")] == ["three", "one"]
    assert [r.id for r in store.runs.recent(limit=1)] == ["three"]
    with store.db.conn:
        store.db.execute("update runs set config = 'not json' where id = 'two'")
    records, damaged = store.runs.listing()
    assert [r.id for r in records] == ["three", "one"]
    assert len(damaged) == 1 and "'two' does not parse" in str(damaged[0])
    with pytest.raises(DamagedRow, match="the row of run 'two' does not parse"):
        store.runs.get("two")
