"""The store's rows as typed records: runs, events and forecasts, parsed once, the same way for every reader.

Candidates and measurements come back as their own models (:class:`~kernelcast.tools.core.candidate.Candidate`,
:class:`~kernelcast.tools.core.measurement.Measurement`); these are the other three tables. JSON columns arrive
parsed (a run's config and summary, an event's payload, a forecast's probabilities and provenance), so no
reader decodes a column itself. What the JSON means belongs to the layers above: a run's config is a
``kernelcast.graphs.config.RunConfig``, an event's payload one of the models in ``kernelcast.graphs.events``
(read with ``kernelcast.graphs.events.parse``), and the tools layer imports neither.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

RunStatus = Literal["running", "waiting", "interrupted", "finished", "failed"]


def _json_object(value: Any) -> Any:
    """A JSON text column as its value (``None`` and "" read as an empty object)."""
    if isinstance(value, str | bytes):
        return json.loads(value) if value else {}
    return {} if value is None else value


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class RunRecord(_Record):
    """One run (or session) with its live status: a "running" run whose owner is gone reads "interrupted",
    and ``spent`` of an unfinished run is counted from its measurements (the budget ledger)."""

    id: str
    task: str
    device: str
    status: RunStatus
    config: dict[str, Any] = Field(description="the run's configuration (a RunConfig dump)")
    budget: int
    spent: int
    best_candidate: str | None = None
    best_speedup: float | None = None
    summary: dict[str, Any] = Field(default_factory=dict, description="the run's result (a RunResult dump; "
                                    "empty until it finishes)")
    folder: str = ""
    created_at: str = ""
    updated_at: str = ""
    owner_pid: int | None = None
    owner_host: str | None = None
    heartbeat: str | None = None
    calibration_group: str | None = Field(default=None, description="what the run's calibration rows are kept "
                                          "under (None: a run before 2026-12-04, read as its task's name)")

    _parse_json = field_validator("config", "summary", mode="before")(_json_object)

    @property
    def finished(self) -> bool:
        return self.status == "finished"


class EventRecord(_Record):
    """One entry of a run's log; ``payload`` is the event model's dump (``kernelcast.graphs.events.parse``
    turns kind and payload back into the model)."""

    id: int
    run_id: str
    seq: int
    kind: str
    candidate_hash: str | None = None
    payload: dict[str, Any] = Field(default_factory=dict)
    created_at: str = ""

    _parse_json = field_validator("payload", mode="before")(_json_object)


class ForecastRecord(_Record):
    """A stored forecast: the 8 bin probabilities, the predicted bin and who made it."""

    id: int
    task: str
    candidate_hash: str
    device: str
    forecaster: str
    model: str = ""
    probabilities: list[float]
    predicted_bin: int
    confidence: float
    failed: bool
    reasoning: str = ""
    provenance: dict[str, Any] = Field(default_factory=dict)
    run_id: str | None = None
    created_at: str = ""

    _parse_json = field_validator("probabilities", "provenance", mode="before")(_json_object)

    @field_validator("model", "reasoning", mode="before")
    @classmethod
    def _text(cls, value: Any) -> Any:
        return "" if value is None else value


class MeasuredForecast(ForecastRecord):
    """A forecast joined with the latest full-size measurement of its candidate on its device."""

    speedup: float | None = None
    true_bin: int = Field(description="the measured bin (0: a failed or incorrect candidate)")
    status: str = Field(description="the measurement's status")


class ProbeVerdictRecord(_Record):
    """A device's cached probe verdict (``device_probes``): "" healthy, else why the device is skipped. Strict:
    a row whose reason is not text (NULL, a number) is no verdict at all, so it is probed again, never shown as
    "skipped: None"."""

    model_config = ConfigDict(frozen=True, extra="ignore", strict=True)

    key: str
    driver: str
    reason: str
    checked_at: str | None = None


class DeviceProbeRecord(_Record):
    """A once-per-device measurement kept in ``meta`` under ``probe:NAME:DEVICE`` (the triad bandwidth, launch
    costs, SIMD lanes): its finite value, where it came from and when."""

    value: float = Field(allow_inf_nan=False)
    detail: dict[str, Any] = Field(default_factory=dict)
    measured_at: str = ""
