"""What goes wrong with a store, as the project's one-line input errors (exit code 2, never a traceback)."""

from __future__ import annotations

from kernelcast.tools.core.errors import InputError


class StoreError(InputError, RuntimeError):
    """The store file is unusable (wrong schema version, not a database)."""


class DamagedRow(StoreError):
    """One row does not parse (bad JSON, an unknown status: written by hand or by another program); listings
    leave it out and say so, a read of that row is this error."""


class ImportConflict(InputError, ValueError):
    """An import whose rows contradict this store's own live measurements: refused whole, nothing written."""


class InvalidRunId(InputError, ValueError):
    """A run id that no run can have (far too long): bad input, not a store problem."""
