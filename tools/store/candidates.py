"""Candidates by content hash: the kernel source, launch sizes, build options, parameters, and how it came to
be (parent, origin, edits, note)."""

from __future__ import annotations

import json
from typing import Any

import sqlite_utils

from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.edit import Edit
from kernelcast.tools.store.sql import now


def candidate_row(candidate: Candidate, at: str) -> dict[str, Any]:
    return {"hash": candidate.hash, "task": candidate.task, "source": candidate.source,
            "global_size": json.dumps(candidate.global_size), "local_size": json.dumps(candidate.local_size),
            "build_options": json.dumps(candidate.build_options), "params": json.dumps(candidate.params),
            "parent": candidate.parent, "intent": candidate.intent, "generator": candidate.generator,
            "origin": candidate.origin, "edits": edits_json(candidate.edits), "note": candidate.note,
            "created_at": at}


def row_to_candidate(row: dict[str, Any]) -> Candidate:
    return Candidate(task=row["task"], source=row["source"], global_size=json.loads(row["global_size"]),
                     local_size=json.loads(row["local_size"]), build_options=json.loads(row["build_options"]),
                     params=json.loads(row["params"]), parent=row["parent"], origin=row["origin"] or "written",
                     edits=json.loads(row["edits"] or "[]"), note=row["note"] or "", generator=row["generator"] or "")


def edits_json(edits: list[Edit]) -> str:
    return json.dumps([e.model_dump(mode="json") for e in edits])


class Candidates:
    """The ``candidates`` table."""

    def __init__(self, db: sqlite_utils.Database) -> None:
        self.db = db

    def add(self, candidate: Candidate) -> str:
        """Insert once by content hash (first parent/edits win); returns the hash. The rendered intent is kept
        beside the edits, for listings that show it without rebuilding candidates."""
        with self.db.conn:
            self.db.table("candidates").insert(candidate_row(candidate, now()), pk="hash", ignore=True)
        return candidate.hash

    def get(self, hash_or_prefix: str) -> Candidate | None:
        """The candidate with this hash, or the only one whose hash starts with it; None otherwise."""
        rows = list(self.db.query("select * from candidates where hash like ? limit 2", [hash_or_prefix + "%"]))
        if len(rows) != 1:
            return None
        return row_to_candidate(rows[0])

    def of_task(self, task: str) -> list[Candidate]:
        """Every stored candidate of ``task``, in the order they were added."""
        return [row_to_candidate(r) for r in self.db.query("select * from candidates where task = ? order by rowid", [task])]

    def intents(self, task: str) -> dict[str, str]:
        """Each stored candidate of ``task``'s intent by its stored hash (no candidate is rebuilt: recomputing
        a hash preprocesses the source, which took a generation step 20 s on a store of 800 coarsened kernels)."""
        rows = self.db.query("select hash, intent from candidates where task = ?", [task])
        return {r["hash"]: r["intent"] or "" for r in rows}
