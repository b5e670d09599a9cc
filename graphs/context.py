"""What the graph's nodes act with: the task, the store, the measurer, the agents, the run environment.

Kept out of the checkpointed state (it holds processes and connections) and
rebuilt from the stored run config on resume.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelcast.agents.forecast.base import CertifiedSkill, CertifiesRankSkill, Forecaster
from kernelcast.agents.generate.base import Generator
from kernelcast.graphs.config import RunConfig
from kernelcast.graphs.events import RunEvent, parse
from kernelcast.graphs.route.routers import make_router
from kernelcast.graphs.route.routers.base import Router
from kernelcast.graphs.route.routers.selective import follows_skill
from kernelcast.tools.core.measurement import HardwareSpec, MeasureConfig
from kernelcast.tools.core.task import Task
from kernelcast.tools.hardware.measurers.base import Measurer
from kernelcast.tools.store.store import Store

ProgressCallback = Callable[[str, dict[str, Any]], None]


@dataclass(frozen=True)
class RunEnv:
    """Where and how runs execute (built by the front doors from the settings): one object instead of the
    home, timeouts, model endpoint and event sink threaded through every layer."""

    home: Path
    measure_timeout_s: float = MeasureConfig.model_fields["timeout_s"].default
    api_base: str | None = None
    on_event: ProgressCallback | None = None

    def folder(self, run_id: str) -> Path:
        return self.home / "runs" / run_id

    @property
    def checkpoints(self) -> Path:
        return self.home / "checkpoints.db"


@dataclass
class RunContext:
    run_id: str
    config: RunConfig
    task: Task
    store: Store
    measurer: Measurer
    generator: Generator
    forecaster: Forecaster
    hardware: HardwareSpec
    env: RunEnv
    measure_config: MeasureConfig
    calibration_group: str  # what the run's calibration rows are kept under (trust.calibration_group)
    router: Router = field(init=False)

    def __post_init__(self) -> None:
        self.router = follows_skill(make_router(self.config.router, self.config.measure_per_round, self.config.seed,
                                                self.config.budget), self.config.follow_skill, self.certified_skill)

    def certified_skill(self) -> CertifiedSkill | None:
        """The forecaster's certified rank skill on this task and device (None: it certifies none)."""
        if isinstance(self.forecaster, CertifiesRankSkill):
            return self.forecaster.certified_skill(self.task, self.hardware)
        return None

    @property
    def folder(self) -> Path:
        return self.env.folder(self.run_id)

    def emit(self, event: RunEvent | str, payload: dict[str, Any] | None = None, candidate_hash: str | None = None,
             store: bool = True) -> None:
        """Record an event in the store (the run's log) and tell whoever is watching.

        ``event`` is a :mod:`kernelcast.graphs.events` model; the (kind, payload) form is parsed into one, so
        every event that leaves a node has the fields its model names."""
        typed = parse(event, payload or {}) if isinstance(event, str) else event
        data = typed.model_dump()
        if store:
            self.store.events.add(self.run_id, typed.kind, data, candidate_hash)
            self.store.runs.heartbeat(self.run_id)
        if self.env.on_event is not None:
            self.env.on_event(typed.kind, {"run_id": self.run_id, "candidate": candidate_hash, **data})
