"""Forecasts as they were made (the 8 bin probabilities, who made them, for which run), and the calibration
data: each forecast joined with the measurement that later answered it."""

from __future__ import annotations

import json
from typing import Any

import sqlite_utils

from kernelcast.tools.store.records import ForecastRecord, MeasuredForecast
from kernelcast.tools.store.sql import now, where


class Forecasts:
    """The ``forecasts`` table."""

    def __init__(self, db: sqlite_utils.Database) -> None:
        self.db = db

    def add(self, task: str, candidate_hash: str, device: str, forecaster: str, model: str,
            probabilities: list[float], predicted_bin: int, confidence: float, failed: bool,
            reasoning: str = "", provenance: dict[str, Any] | None = None, run_id: str | None = None) -> int:
        """Store one forecast; returns its row id."""
        with self.db.conn:
            table = self.db.table("forecasts")
            table.insert({"task": task, "candidate_hash": candidate_hash, "device": device, "forecaster": forecaster,
                          "model": model, "probabilities": json.dumps(probabilities), "predicted_bin": predicted_bin,
                          "confidence": confidence, "failed": int(failed), "reasoning": reasoning,
                          "provenance": json.dumps(provenance or {}), "run_id": run_id, "created_at": now()})
            return int(table.last_pk or 0)

    def find(self, forecaster: str | None = None, model: str | None = None, task: str | None = None,
             run_id: str | None = None) -> list[ForecastRecord]:
        """Stored forecasts matching every filter given, oldest first."""
        condition, args = where(forecaster=forecaster, model=model, task=task, run_id=run_id, prefix="f.")
        return [ForecastRecord.model_validate(r)
                for r in self.db.query(f"select f.* from forecasts f {condition} order by f.id", args)]

    def latest(self, run_id: str) -> dict[str, ForecastRecord]:
        """A run's last forecast of each candidate, the one its routing read (a child carried over from round
        to round is forecast again each time)."""
        return {r.candidate_hash: r for r in self.find(run_id=run_id)}

    def measured(self, forecaster: str | None = None, model: str | None = None, task: str | None = None,
                 run_id: str | None = None, include_imported: bool = False) -> list[MeasuredForecast]:
        """Stored forecasts whose candidate has a full-size measurement on the forecast's device, each with
        the latest such measurement's speedup, bin and status (the calibration data): of a run's forecasts
        of one candidate by one model on one device, the last only (a child carried over is forecast again each
        round, and one measurement must not count once per round); forecasts outside a run, every one. Live
        measurements only, unless ``include_imported`` (the user asked: imported rows were measured elsewhere)."""
        condition, args = where(forecaster=forecaster, model=model, task=task, run_id=run_id, prefix="f.")
        kinds = ("live", "imported") if include_imported else ("live",)
        join_cond = ("join measurements m on m.id = (select max(id) from measurements mm where "
                     "mm.candidate_hash = f.candidate_hash and mm.device = f.device and mm.sizes = 'full'"
                     f" and mm.provenance in ({', '.join(repr(k) for k in kinds)}))")
        last = ("(f.run_id is null or f.id in (select max(id) from forecasts where run_id is not null "
                "group by run_id, candidate_hash, device, forecaster, model))")
        condition = f"{condition} and {last}" if condition else f"where {last}"
        rows = self.db.query(f"select f.*, m.speedup as speedup, m.bin as true_bin, m.status as status "
                             f"from forecasts f {join_cond} {condition} order by f.id", args)
        return [MeasuredForecast.model_validate(r) for r in rows]
