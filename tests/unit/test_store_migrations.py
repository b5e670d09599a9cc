"""The store's migrations (``migrations.py``): every step once, in order, on any database that predates it."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import sqlite_utils

from kernelcast.tools.store.migrations import MIGRATIONS, SCHEMA_VERSION, migrate, schema_version
from kernelcast.tools.store.store import Store

TABLES = {"meta", "tasks", "devices", "candidates", "measurements", "forecasts", "runs", "events", "device_probes"}


def test_a_new_database_gets_every_step_and_a_current_one_is_not_written(tmp_path: Path) -> None:
    path = tmp_path / "k.db"
    db = sqlite_utils.Database(path)
    assert schema_version(db) == 0
    migrate(db, path, read_only=False)
    assert schema_version(db) == SCHEMA_VERSION == len(MIGRATIONS)
    assert TABLES <= set(db.table_names())
    before = db.conn.total_changes
    migrate(db, path, read_only=False)
    assert db.conn.total_changes == before  # nothing to do: nothing written


def test_a_database_from_before_versioning_keeps_its_rows(tmp_path: Path) -> None:
    """A database with the original tables and no ``meta``: every step runs over what is there."""
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.execute("create table candidates (hash text primary key, task text, source text, global_size text, "
                 "local_size text, build_options text, params text, parent text, intent text, generator text, "
                 "created_at text)")
    conn.execute("create table measurements (id integer primary key, task text, candidate_hash text, device text, "
                 "sizes text, status text, reason text, speedup float, bin integer, ref_median_ns float, "
                 "cand_median_ns float, cand_cv float, flags text, run_id text, data text, created_at text)")
    conn.execute("insert into candidates values ('h1', 'saxpy', 'src', '[1]', 'null', '[]', '{\"VEC\": 2}', null, "
                 "'template point VEC=2', 'offline', '2026-01-01')")
    conn.execute("insert into measurements (id, task, candidate_hash, device, sizes, status, data) values "
                 "(1, 'saxpy', 'h1', 'dev', 'full', 'correct', ?)",
                 [json.dumps({"task": "saxpy", "candidate_hash": "h1", "device": "dev", "sizes": "full",
                              "status": "correct", "speedup": 1.5})])
    conn.commit()
    conn.close()
    store = Store(path)
    assert store.schema_version == SCHEMA_VERSION and TABLES <= set(store.db.table_names())
    assert [(m.candidate_hash, m.speedup, m.provenance) for m in store.ledger.find()] == [("h1", 1.5, "live")]
    origin, edits = store.db.execute("select origin, edits from candidates where hash = 'h1'").fetchone()
    assert origin == "template"  # v5 read the intent text into edits that render back to it
    assert json.loads(edits) == [{"name": "template_point", "values": {"VEC": 2}, "label": "template point VEC=2",
                                  "generic": False}]
