"""The decisions table (tools/store/decisions.py): written once per routing decision, read back in order, keyed by
forecaster; and the v7 migration that records an older store's route events as decisions."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import sqlite_utils

from kernelcast.graphs.events import Route
from kernelcast.tools.store.decisions import DecisionRecord
from kernelcast.tools.store.migrations import MIGRATIONS, SCHEMA_VERSION
from kernelcast.tools.store.store import Store


def _decision(run: str, child: str, decision: str = "measure", **fields: object) -> DecisionRecord:
    return DecisionRecord.model_validate({"run_id": run, "candidate_hash": child, "decision": decision,
                                         "device": "dev", "forecaster": "learned", **fields})


def test_a_decision_is_stored_once_and_read_back_in_order(tmp_path: Path) -> None:
    store = Store(tmp_path / "k.db")
    first = store.decisions.add(_decision("r1", "a", "drop", round=1, stage=0, p_beat=0.4, incumbent=1.0))
    store.decisions.add(_decision("r1", "b", "prune", round=1, trusted_as="prune", p_beat=0.01, informative=False))
    store.decisions.add(_decision("r2", "a", "measure"))
    carried = store.decisions.add(_decision("r1", "a", "measure", round=2, carried=True, incumbent_hash="h"))
    assert first.id and carried.id > first.id and first.created_at
    rows = store.decisions.of_run("r1")
    assert [(r.candidate_hash, r.decision, r.round) for r in rows] == [("a", "drop", 1), ("b", "prune", 1),
                                                                       ("a", "measure", 2)]
    assert rows[1].informative is False and rows[0].informative is None and rows[2].carried is True
    last = store.decisions.last_of_run("r1")
    assert list(last) == ["b", "a"], "a carried child's last decision counts, in the order of last decisions"
    assert last["a"].decision == "measure" and last["a"].incumbent_hash == "h"
    assert last["b"].forecast_alone and not last["a"].forecast_alone


def test_decisions_are_read_by_forecaster_key(tmp_path: Path) -> None:
    """Rows of another model or another model version (a refit on other data) are another forecaster's."""
    store = Store(tmp_path / "k.db")
    store.decisions.add(_decision("r1", "a", model_version="seed-1"))
    store.decisions.add(_decision("r1", "b", model_version="seed-2"))
    store.decisions.add(_decision("r1", "c", model="local-sha256:x"))
    store.decisions.add(_decision("r2", "d", forecaster="prior"))
    assert [r.candidate_hash for r in store.decisions.of_runs(["r1"], "learned", None, "seed-1")["r1"]] == ["a"]
    assert [r.candidate_hash for r in store.decisions.of_runs(["r1"], "learned", "local-sha256:x")["r1"]] == ["c"]
    every = store.decisions.of_runs(["r1", "r2", "r3"])
    assert [len(every[r]) for r in ("r1", "r2", "r3")] == [3, 1, 0]
    assert store.decisions.of_runs(["r1", "r2"], "prior", None)["r2"][0].candidate_hash == "d"


def test_the_route_event_is_made_from_the_record() -> None:
    record = _decision("r", "a", "prune", trusted_as="prune", p_beat=0.02, incumbent=1.3, stage=4,
                       trust_source="device record", model_version="seed-1")
    event = Route(**record.verdict().model_dump())
    assert event.model_dump() == Route.model_validate(record.model_dump()).model_dump()
    assert set(event.model_dump()) == set(Route.model_fields), "the event carries the verdict, not the keys"
    assert "run_id" not in event.model_dump() and event.p_beat == 0.02 and event.stage == 4 and event.forecast_alone


def _v6_store(path: Path) -> None:
    """A store as schema 6 left it: a run and its log of route, spend and generated events."""
    db = sqlite_utils.Database(sqlite3.connect(path))
    db.table("meta").create({"key": str, "value": str}, pk="key")
    for step in MIGRATIONS[:6]:
        step(db)
    db.table("meta").insert({"key": "schema_version", "value": "6"})
    config = {"task": "saxpy", "forecaster": "llm", "model": "local:/m", "model_weights": "local-sha256:w"}
    db.table("runs").insert({"id": "run1", "task": "saxpy", "device": "dev", "status": "finished",
                             "config": json.dumps(config), "budget": 8, "spent": 2, "summary": "{}"})
    log = [("generated", None, {"children": ["a", "b"]}),
           ("route", "a", {"decision": "measure", "p_beat": 0.4, "incumbent": 1.0, "stage": 9}),
           ("route", "b", {"decision": "drop", "p_beat": 0.2, "incumbent": 1.0}),
           ("spend", "a", {"phase": "search", "status": "correct", "spent": 1, "budget": 8}),
           ("spend", "a", {"phase": "confirm", "status": "correct", "spent": 2, "budget": 8}),
           ("generated", None, {"children": ["c"]}),
           ("route", "b", {"decision": "prune", "trusted_as": "prune", "carried": True, "p_beat": 0.01}),
           ("route", "c", {"reason": "a payload without a decision does not parse"})]
    for seq, (kind, child, payload) in enumerate(log, 1):
        db.table("events").insert({"run_id": "run1", "seq": seq, "kind": kind, "candidate_hash": child,
                                   "payload": json.dumps(payload), "created_at": f"2026-12-01T00:00:{seq:02d}"})
    db.conn.commit()
    db.conn.close()


def test_an_old_stores_route_events_become_decisions(tmp_path: Path) -> None:
    _v6_store(tmp_path / "old.db")
    store = Store(tmp_path / "old.db")
    assert store.schema_version == SCHEMA_VERSION == 7
    rows = store.decisions.of_run("run1")
    assert [(r.candidate_hash, r.decision, r.round, r.stage) for r in rows] == [
        ("a", "measure", 1, 0), ("b", "drop", 1, 0), ("b", "prune", 2, 1)], \
        "stage: correct measurements logged before, confirmations aside; round: proposals logged before"
    assert all(r.forecaster == "llm" and r.model == "local-sha256:w" and r.model_version == "" for r in rows)
    assert rows[2].carried and rows[2].forecast_alone and rows[0].created_at == "2026-12-01T00:00:02"
    store.close()
    again = Store(tmp_path / "old.db")
    assert len(again.decisions.of_run("run1")) == 3, "opening a migrated store records nothing twice"


def test_a_new_store_has_an_empty_decisions_table(tmp_path: Path) -> None:
    store = Store(tmp_path / "new.db")
    assert store.decisions.of_run("any") == [] and store.decisions.last_of_run("any") == {}
