"""The SQL fragments every concept of the store builds its reads from: filters, the task-fingerprint and
provenance conditions, and the lenient parse of cached rows. One definition each, so the ledger, the forecasts
and the runs filter rows the same way."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from kernelcast.tools.core.measurement import Provenance

RecordT = TypeVar("RecordT", bound=BaseModel)


def now() -> str:
    return datetime.now(UTC).isoformat()


def where(prefix: str = "", **filters: Any) -> tuple[str, list[Any]]:
    """("where a = ? and b = ?", arguments) for the filters that are not None ("" when none is)."""
    parts, args = [], []
    for key, value in filters.items():
        if value is not None:
            parts.append(f"{prefix}{key} = ?")
            args.append(value)
    return ("where " + " and ".join(parts)) if parts else "", args


def on_task(fingerprint: str | None, prefix: str = "") -> tuple[str, list[Any]]:
    """An SQL condition (" and ...", to append) keeping measurements measured on the task with ``fingerprint``
    (``Task.fingerprint``), or before measurements carried one (read as the task of their name); none for
    None. Two task files of one name measure speedups over different problems. The SQL twin of
    ``Task.owns`` (rows already in memory)."""
    if fingerprint is None:
        return "", []
    field = f"json_extract({prefix}data, '$.task_fingerprint')"
    return f" and ({field} is null or {field} = ?)", [fingerprint]


def parsed(model: type[RecordT], row: Any) -> RecordT | None:
    """A cached row as its record, or None when it does not parse (a JSON text or a row): a cache is repaired by
    doing the work again, never trusted damaged."""
    try:
        return model.model_validate_json(row) if isinstance(row, str | bytes) else model.model_validate(row)
    except ValidationError:
        return None


def live(run_id: str | None, prefix: str = "") -> str:
    """An SQL condition (" and ...", to append) keeping live measurements (``Measurement.provenance``), unless the
    read is one run's own (``run_id`` given): a replay run reads back what it replayed; the "already measured"
    sets, noise floor, calibration, measured points and datasets never see replayed, imported or recorded rows."""
    return "" if run_id is not None else f" and {prefix}provenance = 'live'"


def visible(visible_to: str | None, prefix: str = "") -> tuple[str, list[str]]:
    """(SQL condition, its arguments): live measurements, plus the replayed ones of run ``visible_to``: a replay
    run's generator knows what its own replay measured, as the recorded run's generator knew it was measured."""
    if visible_to is None:
        return live(None, prefix), []
    return f" and ({prefix}provenance = 'live' or {prefix}run_id = ?)", [visible_to]


def of_provenance(kinds: Sequence[Provenance], prefix: str = "") -> tuple[str, list[str]]:
    """(SQL condition, its arguments) keeping the rows of these provenances, whatever run they belong to."""
    if not kinds:
        raise ValueError("name at least one provenance")
    return f" and {prefix}provenance in ({', '.join('?' for _ in kinds)})", list(kinds)
