"""The configured store, opened for the front: read-write, read-only, or the caller's own.

The lowest front module (below the views, which read runs through it), so a report and the application layer
open the database named by settings (``KERNELCAST_DB`` / ``KERNELCAST_HOME``) the same way.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kernelcast.tools.core.settings import get_settings
from kernelcast.tools.store.store import RunRecord, Store, StoreError

__all__ = ["RunRecord", "Store", "StoreError", "has_store", "open_store", "reading_store", "store_scope"]


def open_store(path: str | Path | None = None) -> Store:
    """The database named by settings (``KERNELCAST_DB`` / ``KERNELCAST_HOME``) unless a path is given."""
    return Store(path or get_settings().db_path)


def has_store() -> bool:
    """Does the configured database exist yet? (Reading commands treat a missing one as "no runs yet".)"""
    return Path(get_settings().db_path).exists()


@contextmanager
def reading_store(path: str | Path | None = None) -> Iterator[Store]:
    """The store opened read-only, closed afterwards: for operations that only read, so they work on a
    database (and folder) nobody may write to and never change it. A missing or unusable database is a
    :class:`~kernelcast.tools.store.store.StoreError` naming the file."""
    store = Store(path or get_settings().db_path, read_only=True)
    try:
        yield store
    finally:
        store.close()


@contextmanager
def store_scope(store: Store | None) -> Iterator[Store]:
    """The given store, or one opened from settings and closed afterwards."""
    if store is not None:
        yield store
        return
    own = open_store()
    try:
        yield own
    finally:
        own.close()
