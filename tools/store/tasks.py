"""The tasks a store has seen: name -> the task file, its spec and a digest of its source."""

from __future__ import annotations

import hashlib
from typing import Any

import sqlite_utils

from kernelcast.tools.core.task import Task
from kernelcast.tools.store.sql import now


def task_row(task: Task, at: str) -> dict[str, Any]:
    return {"name": task.name, "path": str(task.path), "language": task.language,
            "spec": task.spec.model_dump_json(by_alias=True),
            "source_hash": hashlib.sha256(task.source.encode()).hexdigest()[:16], "updated_at": at}


class Tasks:
    """The ``tasks`` table."""

    def __init__(self, db: sqlite_utils.Database) -> None:
        self.db = db

    def upsert(self, task: Task) -> None:
        with self.db.conn:
            self.db.table("tasks").upsert(task_row(task, now()), pk="name")

    def paths(self) -> dict[str, str]:
        """Task name -> the task file it was loaded from (so data of tasks loaded from a path can be featurized)."""
        return {r["name"]: r["path"] for r in self.db.query("select name, path from tasks")}
