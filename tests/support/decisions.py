"""Recording routing decisions in a test store, as a run's route step does (the store's ``decisions``)."""

from __future__ import annotations

from typing import Any

from kernelcast.graphs.route.calibration_rows import ForecasterKey
from kernelcast.tools.store.decisions import DecisionRecord
from kernelcast.tools.store.store import Store


def record_route(store: Store, run_id: str, child: str, key: tuple[str, str | None] | ForecasterKey = ("learned", None),
                 device: str = "dev", **verdict: Any) -> DecisionRecord:
    """One decision of ``run_id`` about ``child`` under forecaster ``key`` (a 2-tuple: no model version)."""
    forecaster = ForecasterKey(*key)
    return store.decisions.add(DecisionRecord.model_validate({
        "run_id": run_id, "candidate_hash": child, "device": device, "forecaster": forecaster.forecaster,
        "model": forecaster.model, "model_version": forecaster.version, **verdict}))
