"""The SQLite store: round trips, resumable run logs, and crash safety under kill -9."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kernelcast.tools.core.measurement import Measurement, Status, TimingStats
from kernelcast.tools.core.task import resolve_task
from kernelcast.tools.store.store import SCHEMA_VERSION, RunRecord, Store, StoreError

from support.paths import ROOT


def measurement(cand_hash: str, speedup: float | None, status: Status = Status.correct) -> Measurement:
    stats = TimingStats.from_samples([100.0, 110.0, 105.0])
    return Measurement(task="saxpy", candidate_hash=cand_hash, device="dev", sizes="full", status=status,
                       speedup=speedup, reference=stats if speedup else None, candidate=stats if speedup else None)


def test_round_trip(tmp_path: Path) -> None:
    store = Store(tmp_path / "k.db")
    task = resolve_task("saxpy")
    store.tasks.upsert(task)
    ref = task.reference()
    point = task.instantiate({"VEC": 4, "COARSEN": 1, "WG": 64})
    assert store.candidates.add(ref) == ref.hash
    store.candidates.add(point)
    store.candidates.add(point)  # idempotent by content hash
    assert len(store.candidates.of_task("saxpy")) == 2
    assert store.candidates.get(point.hash[:6]) == point
    assert store.candidates.intents("saxpy") == {ref.hash: ref.intent, point.hash: point.intent}
    assert store.candidates.intents("gemm") == {}
    store.ledger.add(measurement(point.hash, 1.5))
    store.ledger.add(measurement(ref.hash, None, Status.compile_error))
    got = store.ledger.find(task="saxpy")
    assert [m.status for m in got] == [Status.correct, Status.compile_error]
    assert got[0].bin() == 6 and got[1].bin() == 0
    assert store.ledger.measured_params("saxpy", "dev") == [{"VEC": 4, "COARSEN": 1, "WG": 64}]
    pairs = store.ledger.measured_pairs(device="dev")
    assert {c.hash for c, _ in pairs} == {point.hash, ref.hash}
    fid = store.forecasts.add("saxpy", point.hash, "dev", "learned", "m", [0.125] * 8, 5, 0.125, False)
    rows = store.forecasts.measured()
    assert rows[0].id == fid and rows[0].true_bin == 6 and rows[0].probabilities == [0.125] * 8
    assert rows[0].status == "correct" and rows[0].speedup == 1.5 and rows[0].failed is False
    store.forecasts.add("saxpy", "unmeasured", "dev", "learned", "m", [0.125] * 8, 5, 0.125, True)
    assert [f.failed for f in store.forecasts.find()] == [False, True]  # every forecast, typed
    assert len(store.forecasts.measured()) == 1  # only the one with a measurement
    # one run's pairs: the latest of each within that run, even if measured again later elsewhere
    store.ledger.add(measurement(point.hash, 2.5), run_id="run-a")
    store.ledger.add(measurement(point.hash, 3.5), run_id="run-b")
    in_a = store.ledger.measured_pairs(device="dev", run_id="run-a")
    assert [(c.hash, m.speedup) for c, m in in_a] == [(point.hash, 2.5)]
    assert [m.speedup for c, m in store.ledger.measured_pairs(device="dev") if c.hash == point.hash] == [3.5]
    # a candidate forecast in several rounds of one run (a carried child) pairs its measurement once, by its last
    for run_id, top in (("run-a", 3), ("run-a", 6), ("run-b", 7)):
        store.forecasts.add("saxpy", point.hash, "dev", "learned", "m", [0.125] * 8, top, 0.125, False, run_id=run_id)
    store.forecasts.add("saxpy", point.hash, "dev", "learned", "m", [0.125] * 8, 4, 0.125, False)  # outside a run
    paired = [(f.run_id, f.predicted_bin) for f in store.forecasts.measured(task="saxpy")]
    assert paired == [(None, 5), ("run-a", 6), ("run-b", 7), (None, 4)]  # outside a run: every forecast
    assert store.schema_version == SCHEMA_VERSION and store.integrity_ok()


def test_run_events_are_sequenced(tmp_path: Path) -> None:
    store = Store(tmp_path / "k.db")
    run = store.runs.create("saxpy", "dev", {"budget": 3}, budget=3)
    assert [store.events.add(run, "spend", {"n": i}) for i in range(3)] == [1, 2, 3]
    store.runs.update(run, spent=3, status="finished", summary={"best": 1.2})
    row = store.runs.get(run[:10])
    assert row is not None and row.spent == 3 and row.summary == {"best": 1.2} and row.status == "finished"
    assert row.config == {"budget": 3}
    assert [e.payload["n"] for e in store.events.find(run)] == [0, 1, 2]
    assert [e.seq for e in store.events.find(run, kind="spend")] == [1, 2, 3]


def test_runs_and_run_parse_the_same_way(tmp_path: Path) -> None:
    """``runs()`` and ``run()`` return the same typed record: config and summary parsed in both, the live
    status applied in both (a "running" run whose owner is gone reads "interrupted")."""
    store = Store(tmp_path / "k.db")
    run = store.runs.create("saxpy", "dev", {"router": "topk", "budget": 4}, budget=4)
    store.runs.update(run, owner_pid=2**22 + 12345)  # no such process on this host
    store.ledger.add(measurement("c1", 1.1), run_id=run)
    listed, single = store.runs.recent()[0], store.runs.get(run)
    assert listed == single
    assert isinstance(listed, RunRecord) and listed.config == {"router": "topk", "budget": 4}
    assert listed.status == "interrupted" and listed.spent == 1 and listed.summary == {}


def test_refuses_a_newer_schema(tmp_path: Path) -> None:
    store = Store(tmp_path / "k.db")
    store.db["meta"].upsert({"key": "schema_version", "value": str(SCHEMA_VERSION + 1)}, pk="key")
    store.close()
    with pytest.raises(StoreError, match="newer"):
        Store(tmp_path / "k.db")


def test_not_a_database(tmp_path: Path) -> None:
    bad = tmp_path / "k.db"
    bad.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match="not a usable kernelcast database"):
        Store(bad)


WRITER = textwrap.dedent("""
    import sys
    from kernelcast.tools.store.store import Store
    from kernelcast.tools.core.measurement import Measurement, Status
    store = Store(sys.argv[1])
    run = store.runs.create("saxpy", "dev", {}, budget=10**9, run_id="crash")
    print("ready", flush=True)
    i = 0
    while True:
        m = Measurement(task="saxpy", candidate_hash=f"c{i}", device="dev", sizes="full",
                        status=Status.correct, speedup=1.0 + i % 7)
        store.ledger.add(m, run_id=run)
        store.events.add(run, "measured", {"i": i}, candidate_hash=f"c{i}")
        i += 1
""")


def test_kill_9_mid_write_leaves_a_consistent_store(tmp_path: Path) -> None:
    db = tmp_path / "k.db"
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, str(script), str(db)], stdout=subprocess.PIPE, env=env)
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
    time.sleep(1.0)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    store = Store(db)
    assert store.integrity_ok()
    measured = store.ledger.find(run_id="crash")
    events = store.events.find("crash")
    assert len(measured) > 10
    # every event refers to a stored measurement; at most the last measurement lacks its event
    assert len(measured) - len(events) in (0, 1)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    store.ledger.add(measurement("after", 2.0))  # still writable
    assert store.ledger.find(candidate_hash="after")[0].speedup == 2.0


def test_migrations_bring_an_old_store_up_to_date_and_read_only_stores_open(tmp_path: Path) -> None:
    import sqlite3

    from kernelcast.tools.store.store import MIGRATIONS, SCHEMA_VERSION, StoreError

    path = tmp_path / "old.db"
    old = Store(path)
    run_id = old.runs.create("saxpy", "dev", {"task": "saxpy"}, 3)
    old.db.execute("drop table device_probes")
    old.db.execute("update meta set value = '1' where key = 'schema_version'")
    old.db.conn.commit()
    old.close()
    with pytest.raises(StoreError, match="needs an upgrade"):
        Store(path, read_only=True)
    upgraded = Store(path)  # v1 -> v2: the probe table comes back, the run survives
    assert upgraded.schema_version == SCHEMA_VERSION == len(MIGRATIONS)
    assert upgraded.db["device_probes"].exists() and upgraded.runs.get(run_id) is not None
    upgraded.close()
    reader = Store(path, read_only=True)
    assert [r.id for r in reader.runs.recent()] == [run_id]
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        reader.devices.record_verdict("k", "d", "")


def test_a_read_only_folder_is_read_without_writing_and_unflushed_writes_are_refused(tmp_path: Path) -> None:
    """WAL reading needs a ``-shm`` beside the file; in a folder nobody may write the store still opens (and
    creates nothing), unless a leftover ``-wal`` holds writes it would miss: then it says so."""
    import shutil

    from support.read_only import read_only

    folder = tmp_path / "ro"
    store = Store(folder / "k.db")
    run_id = store.runs.create("saxpy", "dev", {"task": "saxpy"}, 3)
    store.close()
    assert sorted(p.name for p in folder.iterdir()) == ["k.db"]
    with read_only(folder, folder / "k.db"):
        reader = Store(folder / "k.db", read_only=True)
        assert [r.id for r in reader.runs.recent()] == [run_id] and reader.runs.get(run_id) is not None
        reader.close()
    assert sorted(p.name for p in folder.iterdir()) == ["k.db"]

    writer = Store(tmp_path / "live" / "k.db")
    writer.db.execute("pragma wal_autocheckpoint = 0")
    writer.runs.create("saxpy", "dev", {}, 3, run_id="only-in-the-wal")
    stale = tmp_path / "stale"
    stale.mkdir()
    for name in ("k.db", "k.db-wal"):  # a copy taken while the writer had not checkpointed
        shutil.copy(tmp_path / "live" / name, stale / name)
    writer.close()
    assert (stale / "k.db-wal").stat().st_size > 0
    with read_only(stale, stale / "k.db", stale / "k.db-wal"), pytest.raises(StoreError, match="never checkpointed"):
        Store(stale / "k.db", read_only=True)


def test_check_writable_refuses_before_anything_is_spent(tmp_path: Path) -> None:
    store = Store(tmp_path / "k.db")
    store.check_writable()  # writable: no error, and nothing written
    run_id = store.runs.create("saxpy", "dev", {}, 3)
    store.close()
    reader = Store(tmp_path / "k.db", read_only=True)
    with pytest.raises(StoreError, match="cannot be written"):
        reader.check_writable()
    assert [r.id for r in reader.runs.recent()] == [run_id]


def test_the_store_is_split_by_concept_with_no_class_over_20_methods() -> None:
    """Issue 61: one small class per concept behind the facade, which opens the database and holds them."""
    import importlib
    import inspect

    from support.paths import ROOT

    store = Store(":memory:")
    concepts = {"tasks", "devices", "candidates", "ledger", "forecasts", "runs", "events", "pairs", "decisions"}
    assert concepts <= set(vars(store))
    sizes = {}
    for module_path in sorted((ROOT / "tools" / "store").glob("*.py")):
        module = importlib.import_module(f"kernelcast.tools.store.{module_path.stem}")
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__:
                sizes[f"{module_path.stem}.{name}"] = sum(
                    inspect.isfunction(v) or isinstance(v, property | classmethod | staticmethod)
                    for v in vars(cls).values())
    assert {"store.Store", "ledger.Ledger", "runs.Runs"} <= set(sizes)
    assert {name: n for name, n in sizes.items() if n > 20} == {}
