"""Every schema change of the store, one step per version, in order: the only place the schema is defined.

A step must be safe on a database that already has what it adds (``if_not_exists``, a column check): databases
that predate versioning carry some tables already. To change the schema, append a step and nothing else;
``SCHEMA_VERSION`` follows.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import sqlite_utils

from kernelcast.tools.core.legacy_intent import parse_legacy_intent
from kernelcast.tools.store.candidates import edits_json
from kernelcast.tools.store.decisions import migrate_v7
from kernelcast.tools.store.errors import StoreError


def _v1_base(db: sqlite_utils.Database) -> None:
    """The original tables (``if_not_exists``: databases that predate versioning already have them)."""
    db.table("tasks").create({"name": str, "path": str, "language": str, "spec": str, "source_hash": str,
                        "updated_at": str}, pk="name", if_not_exists=True)
    db.table("devices").create({"key": str, "spec": str, "updated_at": str}, pk="key", if_not_exists=True)
    db.table("candidates").create({"hash": str, "task": str, "source": str, "global_size": str, "local_size": str,
                             "build_options": str, "params": str, "parent": str, "intent": str,
                             "generator": str, "created_at": str}, pk="hash", if_not_exists=True)
    db.table("measurements").create({"id": int, "task": str, "candidate_hash": str, "device": str, "sizes": str,
                               "status": str, "reason": str, "speedup": float, "bin": int,
                               "ref_median_ns": float, "cand_median_ns": float, "cand_cv": float,
                               "flags": str, "run_id": str, "data": str, "created_at": str},
                              pk="id", if_not_exists=True)
    db.table("forecasts").create({"id": int, "task": str, "candidate_hash": str, "device": str, "forecaster": str,
                            "model": str, "probabilities": str, "predicted_bin": int, "confidence": float,
                            "failed": int, "reasoning": str, "provenance": str, "run_id": str,
                            "created_at": str}, pk="id", if_not_exists=True)
    db.table("runs").create({"id": str, "task": str, "device": str, "status": str, "config": str, "budget": int,
                       "spent": int, "best_candidate": str, "best_speedup": float, "summary": str,
                       "folder": str, "created_at": str, "updated_at": str}, pk="id", if_not_exists=True)
    db.table("events").create({"id": int, "run_id": str, "seq": int, "kind": str, "candidate_hash": str,
                         "payload": str, "created_at": str}, pk="id", if_not_exists=True)
    for table, cols in [("measurements", ["task", "device"]), ("measurements", ["candidate_hash"]),
                        ("forecasts", ["candidate_hash"]), ("forecasts", ["forecaster", "model"]),
                        ("events", ["run_id", "seq"]), ("candidates", ["task"])]:
        db.table(table).create_index(cols, if_not_exists=True)


def _v2_probes_and_run_owners(db: sqlite_utils.Database) -> None:
    """Device probe verdicts, and who drives a run (so a dead owner reads as "interrupted")."""
    db.table("device_probes").create({"key": str, "driver": str, "reason": str, "checked_at": str},
                               pk=("key", "driver"), if_not_exists=True)
    for column, kind in (("owner_pid", int), ("owner_host", str), ("heartbeat", str)):
        if column not in db.table("runs").columns_dict:
            db.table("runs").add_column(column, kind)


def _v3_run_calibration_group(db: sqlite_utils.Database) -> None:
    """The group a run's calibration rows are kept under (a task name is not enough: a task loaded from a path
    may borrow a built-in's name with another kernel); older runs have none and read as their task's name."""
    if "calibration_group" not in db.table("runs").columns_dict:
        db.table("runs").add_column("calibration_group", str)


def _v4_replayed_measurements(db: sqlite_utils.Database) -> None:
    """Whether a measurement was replayed from a store rather than measured (``Measurement.replayed``): reads
    outside its run skip such rows. Older rows read as live (a replay stored them as such before)."""
    if "replayed" not in db.table("measurements").columns_dict:
        db.table("measurements").add_column("replayed", int, not_null_default=0)


def _v5_candidate_edits(db: sqlite_utils.Database) -> None:
    """A candidate's origin, edits and note as data (``tools.core.edit``): older rows carry only their intent
    text, read here once into edits that render back to the same text."""
    table = db.table("candidates")
    for column in ("origin", "edits", "note"):
        if column not in table.columns_dict:
            table.add_column(column, str)
    rows = db.execute("select hash, intent, params, generator from candidates where origin is null").fetchall()
    for key, intent, params, generator in rows:
        old = parse_legacy_intent(intent or "", json.loads(params or "null"), generator)
        db.execute("update candidates set origin = ?, edits = ?, note = ? where hash = ?",
                   [old["origin"], edits_json(old["edits"]), old["note"], key])


def _v6_measurement_provenance(db: sqlite_utils.Database) -> None:
    """Where each measurement's numbers come from (``Measurement.provenance``: live, replayed, imported, recorded),
    one concept in place of the v4 ``replayed`` flag (kept, written in step, for older readers). Older rows read
    from that flag: replayed ones as such, every other as live (rows imported before this version were stored as
    live and cannot be told apart)."""
    table = db.table("measurements")
    if "provenance" not in table.columns_dict:
        table.add_column("provenance", str, not_null_default="live")
    db.execute("update measurements set provenance = 'replayed' where replayed = 1")
    table.create_index(["provenance"], if_not_exists=True)


MIGRATIONS: list[Callable[[sqlite_utils.Database], None]] = [_v1_base, _v2_probes_and_run_owners,
                                                             _v3_run_calibration_group, _v4_replayed_measurements,
                                                             _v5_candidate_edits, _v6_measurement_provenance,
                                                             migrate_v7]  # v7: decisions (tools/store/decisions.py)

SCHEMA_VERSION = len(MIGRATIONS)


def schema_version(db: sqlite_utils.Database) -> int:
    """The version this database is at (0: never versioned)."""
    if not db.table("meta").exists():
        return 0
    row = db.execute("select value from meta where key = 'schema_version'").fetchone()
    return int(row[0]) if row is not None else 0


def migrate(db: sqlite_utils.Database, path: Path, read_only: bool) -> None:
    """Apply the migrations this database has not had yet, each once, in order, in one transaction.

    A database already at the current version is not written to, so read-only stores open."""
    current = schema_version(db)
    if current > SCHEMA_VERSION:
        raise StoreError(f"database schema version {current} is newer than this kernelcast ({SCHEMA_VERSION})")
    if current == SCHEMA_VERSION:
        return
    if read_only:
        raise StoreError(f"{path}: schema version {current} needs an upgrade to {SCHEMA_VERSION}; "
                         "open it writable once")
    with db.conn:
        db.table("meta").create({"key": str, "value": str}, pk="key", if_not_exists=True)
        for step in MIGRATIONS[current:]:
            step(db)
        db.table("meta").upsert({"key": "schema_version", "value": str(SCHEMA_VERSION)}, pk="key")
