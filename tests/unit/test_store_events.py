"""The store's event log (``store.events``): numbered per run, in order, filtered by kind."""

from __future__ import annotations

from datetime import date
from pathlib import Path

from kernelcast.tools.store.store import Store


def test_each_run_numbers_its_own_events_from_one(tmp_path: Path) -> None:
    store = Store(tmp_path / "k.db")
    assert [store.events.add("a", "spend", {"n": i}) for i in range(3)] == [1, 2, 3]
    assert store.events.add("b", "route", candidate_hash="c1") == 1
    assert store.events.add("a", "route", {"when": date(2026, 12, 7)}) == 4  # payloads that are not JSON as text
    events = store.events.find("a")
    assert [e.seq for e in events] == [1, 2, 3, 4] and events[3].payload == {"when": "2026-12-07"}
    assert [e.payload.get("n") for e in store.events.find("a", kind="spend")] == [0, 1, 2]
    only = store.events.find("b")
    assert len(only) == 1 and only[0].candidate_hash == "c1" and only[0].payload == {}
    assert store.events.find("no such run") == []
