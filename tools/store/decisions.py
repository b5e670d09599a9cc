"""Routing decisions as records: the ``decisions`` table, one row per routing decision, written once.

A row says which candidate of which run was routed how (measure, accept, prune, drop), on what P(beat), against
which incumbent, at which stage of the run, by which forecaster (its name, model and model version: rows of
another version are another forecaster's record), in which round. The ``route`` event a run logs is made from
the row (:class:`RouteVerdict` is its payload), so the log shows a decision and calibration reads it, and a
change of what progress shows never changes the calibration record.

A candidate carried over from round to round is routed (and recorded) each round; its last row is its decision.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import sqlite_utils
from pydantic import BaseModel, ConfigDict, ValidationError

COLUMNS: dict[str, type] = {
    "id": int, "run_id": str, "candidate_hash": str, "device": str, "round": int, "stage": int, "decision": str,
    "reason": str, "p_beat": float, "incumbent": float, "incumbent_hash": str, "audit": int, "trusted_as": str,
    "informative": int, "spare": int, "carried": int, "probation": int, "trust_source": str, "forecaster": str,
    "model": str, "model_version": str, "created_at": str}


class RouteVerdict(BaseModel):
    """What the router decided for one child, and why: the fields a ``route`` event carries."""

    model_config = ConfigDict(extra="ignore", frozen=True)
    decision: str
    reason: str = ""
    p_beat: float | None = None
    incumbent: float | None = None
    incumbent_hash: str | None = None  # the incumbent's candidate (None: the reference, or a run before 2026-12-03)
    audit: bool = False
    trusted_as: str = ""
    informative: bool | None = None
    spare: bool = False  # a pruned child measured because its round had nothing uncertain to measure
    stage: int | None = None  # the run's correct measurements before this decision (older runs: unknown)
    trust_source: str = ""  # whose calibration rows certified the round's thresholds ("" : none certified)
    carried: bool = False  # a child of an earlier round routed again (it had been dropped for want of room)
    probation: bool = False  # an audit of a replayed threshold on probation (not yet tried on this task here)

    @property
    def forecast_alone(self) -> bool:
        """A prune or accept taken on the forecast alone: not an audit, not a spare measurement, not a child
        dropped for want of budget."""
        return bool(self.trusted_as) and self.decision == self.trusted_as and not self.audit

    def verdict(self) -> RouteVerdict:
        """The verdict alone (a ``route`` event's payload)."""
        return RouteVerdict.model_validate(self.model_dump(include=set(RouteVerdict.model_fields)))


class DecisionRecord(RouteVerdict):
    """One routing decision of one run: the verdict, and what it is kept under (run, device, forecaster key)."""

    run_id: str
    candidate_hash: str
    device: str = ""
    round: int | None = None  # the search round (its iteration); None: not known (a row migrated without one)
    forecaster: str = ""  # "" : unknown (the run's config named none): the row belongs to no forecaster
    model: str | None = None  # the forecaster's model (a ``local:`` model: its weights' digest)
    model_version: str = ""  # the data or version the forecaster was built from ("" : none, or not recorded)
    id: int = 0  # assigned when stored: the order of decisions
    created_at: str = ""


def create_table(db: sqlite_utils.Database) -> None:
    db.table("decisions").create(COLUMNS, pk="id", if_not_exists=True)
    db.table("decisions").create_index(["run_id", "id"], if_not_exists=True)
    db.table("decisions").create_index(["device", "forecaster"], if_not_exists=True)


def _row(record: DecisionRecord) -> dict[str, Any]:
    row = record.model_dump(exclude={"id"})
    for flag in ("audit", "spare", "carried", "probation"):
        row[flag] = int(row[flag])
    row["informative"] = None if record.informative is None else int(record.informative)
    return row


class Decisions:
    """The ``decisions`` table over the store's database."""

    def __init__(self, db: sqlite_utils.Database) -> None:
        self.db = db

    def add(self, record: DecisionRecord) -> DecisionRecord:
        """Store one decision (stamped now); returns it with its id and time."""
        stamped = record.model_copy(update={"created_at": record.created_at or datetime.now(UTC).isoformat()})
        with self.db.conn:
            table = self.db.table("decisions")
            table.insert(_row(stamped))
            return stamped.model_copy(update={"id": int(table.last_pk or 0)})

    def of_run(self, run_id: str) -> list[DecisionRecord]:
        """Every decision of a run, in the order taken (a carried child appears once per round it was routed)."""
        return self._read("where run_id = ? order by id", [run_id])

    def last_of_run(self, run_id: str) -> dict[str, DecisionRecord]:
        """Each routed candidate's last decision, in the order of those last decisions: a child carried over is
        routed each round and only its last routing decided it; a route step re-run after a kill decides the
        round again."""
        return last_decisions(self.of_run(run_id))

    def of_runs(self, run_ids: Sequence[str], forecaster: str | None = None, model: str | None = None,
                model_version: str | None = None) -> dict[str, list[DecisionRecord]]:
        """The decisions of these runs by run, each run's in order; with ``forecaster``, only the rows of that
        forecaster key (``model`` and ``model_version`` compared as given, None and "" included)."""
        out: dict[str, list[DecisionRecord]] = {run: [] for run in run_ids}
        if not run_ids:
            return out
        condition = f"where run_id in ({', '.join('?' for _ in run_ids)})"
        args: list[Any] = list(run_ids)
        if forecaster is not None:
            condition += " and forecaster = ? and model is ? and model_version = ?"
            args += [forecaster, model, model_version or ""]
        for record in self._read(f"{condition} order by id", args):
            out[record.run_id].append(record)
        return out

    def _read(self, condition: str, args: list[Any]) -> list[DecisionRecord]:
        return [DecisionRecord.model_validate(r) for r in self.db.query(f"select * from decisions {condition}", args)]


# ---- the v7 migration -----------------------------------------------------------------------------------------
def migrate_v7(db: sqlite_utils.Database) -> None:
    """Create the table and record the decisions older stores kept only as ``route`` events, as those readers
    read them: stage = the run's correct measurements (confirmations aside) logged before the event, round = the
    proposals logged before it, the forecaster key from the run's stored config (its model version is unknown:
    ""), the time the event was logged. A payload that does not parse is left out (no reader could use it)."""
    create_table(db)
    if not db.table("events").exists() or db.execute("select count(*) from decisions").fetchone()[0]:
        return
    runs = {row[0]: (row[1], _key_of(row[2])) for row in db.execute("select id, device, config from runs")}
    rows = db.execute("select run_id, kind, candidate_hash, payload, created_at from events "
                      "where kind in ('route', 'spend', 'generated') order by run_id, seq").fetchall()
    db.table("decisions").insert_all(_migrated(rows, runs), batch_size=500)


def _key_of(config: str | None) -> tuple[str, str | None]:
    """(forecaster, model) of a stored run config: a ``local:`` model by the weights' digest it recorded."""
    try:
        data = json.loads(config or "{}")
    except ValueError:
        return "", None
    if not isinstance(data, dict):
        return "", None
    forecaster, model = data.get("forecaster"), data.get("model_weights") or data.get("model")
    return (forecaster if isinstance(forecaster, str) else ""), (model if isinstance(model, str) else None)


def _migrated(events: Iterable[tuple[str, str, str | None, str, str]],
              runs: dict[str, tuple[str, tuple[str, str | None]]]) -> Iterable[dict[str, Any]]:
    run, stage, round_ = None, 0, 0
    for run_id, kind, candidate, payload, created_at in events:
        if run_id != run:
            run, stage, round_ = run_id, 0, 0
        try:
            data = json.loads(payload or "{}")
        except ValueError:
            continue
        if kind == "spend":
            stage += data.get("status") == "correct" and data.get("phase", "search") != "confirm"
        elif kind == "generated":
            round_ += 1
        elif candidate:
            try:
                verdict = RouteVerdict.model_validate(data)
            except ValidationError:
                continue
            device, (forecaster, model) = runs.get(run_id, ("", ("", None)))
            yield _row(DecisionRecord(**verdict.model_dump(exclude={"stage"}), stage=stage, run_id=run_id,
                                      candidate_hash=candidate, device=device, round=round_, forecaster=forecaster,
                                      model=model, created_at=created_at))


def last_decisions(records: Iterable[DecisionRecord]) -> dict[str, DecisionRecord]:
    """Each candidate's last decision among ``records`` (in the order taken), in the order of those last decisions."""
    last: dict[str, DecisionRecord] = {}
    for record in records:
        last.pop(record.candidate_hash, None)
        last[record.candidate_hash] = record
    return last


__all__ = ["DecisionRecord", "Decisions", "RouteVerdict", "create_table", "last_decisions", "migrate_v7"]

