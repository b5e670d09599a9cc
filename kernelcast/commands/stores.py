"""How commands open the store: read-only for commands that only read, checked writable for commands that
record, problems as one-line errors."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kernelcast import api
from kernelcast.console import fail
from kernelcast.tools.core.settings import get_settings


@contextmanager
def store_problems(path: str | Path) -> Iterator[None]:
    """Store problems inside the block end the command with one line naming the file (exit 2), never a
    traceback: a missing, damaged, unreadable or unwritable database, a row that does not parse, an id no run
    can have."""
    try:
        yield
    except sqlite3.Error as exc:
        fail(f"{path}: store problem: {' '.join(str(exc).split())}")


@contextmanager
def readable_store() -> Iterator[api.Store]:
    """The configured store opened read-only (nothing is written, so a database and folder nobody may write
    to still serve ``runs``, ``show``, ``report``, ``devices``); problems as :func:`store_problems`."""
    path = get_settings().db_path
    with store_problems(path), api.reading_store(path) as store:
        yield store


@contextmanager
def writable_store() -> Iterator[api.Store]:
    """The configured store for commands that record (``measure``, ``optimize``, ``resume``, ``dataset``),
    checked writable before anything is spent, closed afterwards; problems as :func:`store_problems`."""
    path = get_settings().db_path
    with store_problems(path):
        store = api.open_store(path)
        try:
            store.check_writable()
            yield store
        finally:
            store.close()


store_exists = api.has_store
