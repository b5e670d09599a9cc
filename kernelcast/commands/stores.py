"""How commands open the store: read-only for commands that only read, problems as one-line errors."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

from kernelcast import api
from kernelcast.console import fail
from kernelcast.settings import get_settings
from kernelcast.tools.store import Store, StoreError


@contextmanager
def readable_store() -> Iterator[Store]:
    """The configured store opened read-only (nothing is written, so a database and folder nobody may write
    to still serve ``runs``, ``show``, ``report``, ``devices``); a missing, damaged or unreadable database
    ends the command with one line naming the file, never a traceback."""
    path = get_settings().db_path
    try:
        with api.reading_store(path) as store:
            yield store
    except StoreError as exc:
        fail(str(exc))
    except sqlite3.Error as exc:
        fail(f"{path}: store problem: {' '.join(str(exc).split())}")


store_exists = api.has_store
