"""The events of a run: one model per kind, built by the nodes, read back through :func:`parse`.

A run's log in the store, the live view, ``kernelcast show``, the report, MCP progress and the JSONL
stream all carry these. On the wire and in the store an event is its ``model_dump()`` (plus the run id
and candidate hash); every reader turns that back into the model with :func:`parse`, so no reader
guesses at fields. Old rows without a newer field read with its default.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from kernelcast.tools.store.decisions import RouteVerdict
from kernelcast.tools.store.records import EventRecord


class RunEvent(BaseModel):
    """Base of every event; ``kind`` names it in the store and on the wire."""

    model_config = ConfigDict(extra="ignore", frozen=True)
    kind: ClassVar[str]


class Start(RunEvent):
    kind: ClassVar[str] = "start"
    config: dict[str, Any] = Field(default_factory=dict)
    device: str = ""


class Generated(RunEvent):
    kind: ClassVar[str] = "generated"
    parent: str | None = None
    children: list[str] = Field(default_factory=list)
    report: str = ""


class GeneratorError(RunEvent):
    kind: ClassVar[str] = "generator_error"
    error: str


class Learn(RunEvent):
    kind: ClassVar[str] = "learn"
    pairs: int
    seconds: float | None = None
    model: str = ""
    error: str | None = None


class ForecastRound(RunEvent):
    kind: ClassVar[str] = "forecast"
    n: int
    failed: int = 0
    informative: int | None = None


class Route(RouteVerdict, RunEvent):
    """A routing decision with the forecast's P(beat the incumbent) and the incumbent of that moment: made from the
    decision's record (:class:`~kernelcast.tools.store.decisions.DecisionRecord`), which readers read."""

    kind: ClassVar[str] = "route"


class InFlight(RunEvent):
    kind: ClassVar[str] = "in_flight"
    phase: str
    workers: int = 1
    candidates: list[str] = Field(default_factory=list)


class Spend(RunEvent):
    """A measurement was bought (and stored before this event)."""

    kind: ClassVar[str] = "spend"
    phase: str = "search"
    status: str
    speedup: float | None = None
    over_incumbent: float | None = None  # the child over the incumbent's kernel timed beside it (paired)
    spent: int
    budget: int
    flags: list[str] = Field(default_factory=list)
    in_flight: list[str] = Field(default_factory=list)


class Leftover(RunEvent):
    """The generator ran dry with budget left: of ``untried`` candidates never measured nor trusted, this one had
    the highest expected gain over the incumbent by a forecast made after the run's first ``spent`` measurements
    (and learned from them, when the forecaster learns)."""

    kind: ClassVar[str] = "leftover"
    untried: int
    spent: int
    gain: float
    p_beat: float | None = None
    incumbent: float = 1.0


class Reused(RunEvent):
    kind: ClassVar[str] = "reused"
    phase: str
    reason: str = ""


class Skip(RunEvent):
    kind: ClassVar[str] = "skip"
    reason: str


class Progress(RunEvent):
    kind: ClassVar[str] = "progress"
    spent: int
    budget: int
    considered: int
    counts: dict[str, int] = Field(default_factory=dict)
    best_speedup: float | None = None


class Verify(RunEvent):
    kind: ClassVar[str] = "verify"
    predicted_bin: int | None = None
    measured_bin: int
    forecast_right: bool


class Confirm(RunEvent):
    kind: ClassVar[str] = "confirm"
    first: float | None = None
    confirmed: float | None = None
    interval: list[float] | None = None
    status: str
    before_trust: bool = False  # the incumbent confirmed during the search, before a forecast was trusted against it


class NoiseFloor(RunEvent):
    kind: ClassVar[str] = "noise_floor"
    speedup: float | None = None
    interval: list[float] = Field(default_factory=list)


class Finish(RunEvent):
    kind: ClassVar[str] = "finish"
    best: str | None = None
    speedup: float | None = None
    spent: int


class Error(RunEvent):
    kind: ClassVar[str] = "error"
    error: str


class Unknown(RunEvent):
    """An event of a kind this version does not know (a newer writer): kept, never guessed at."""

    model_config = ConfigDict(extra="allow", frozen=True)
    kind: ClassVar[str] = "unknown"


EVENT_TYPES: dict[str, type[RunEvent]] = {cls.kind: cls for cls in (
    Start, Generated, GeneratorError, Learn, ForecastRound, Route, InFlight, Spend, Leftover, Reused, Skip, Progress,
    Verify, Confirm, NoiseFloor, Finish, Error)}


def parse(kind: str, payload: dict[str, Any]) -> RunEvent:
    """The typed event from its stored or transmitted form (``run_id``/``candidate`` keys are ignored)."""
    return EVENT_TYPES.get(kind, Unknown).model_validate(payload)


class LoggedEvent(BaseModel):
    """One row of a run's log in the store, typed."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)
    seq: int
    candidate: str | None
    event: RunEvent


def logged(records: Iterable[EventRecord]) -> list[LoggedEvent]:
    """The store's event records (``store.events.find``) as typed events, in order."""
    return [LoggedEvent(seq=r.seq, candidate=r.candidate_hash, event=parse(r.kind, r.payload)) for r in records]
