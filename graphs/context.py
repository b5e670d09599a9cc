"""What the graph's nodes act with: the task, the store, the worker, the agents.

Kept out of the checkpointed state (it holds processes and connections) and
rebuilt from the stored run config on resume.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelcast.agents.forecast import Forecaster
from kernelcast.agents.generator import Generator
from kernelcast.graphs.config import RunConfig
from kernelcast.graphs.routing import Router, make_router
from kernelcast.tools.measurement import HardwareSpec, MeasureConfig
from kernelcast.tools.store import Store
from kernelcast.tools.task import Task
from kernelcast.tools.worker import MeasurementWorker

ProgressCallback = Callable[[str, dict[str, Any]], None]


@dataclass
class RunContext:
    run_id: str
    config: RunConfig
    task: Task
    store: Store
    worker: MeasurementWorker
    generator: Generator
    forecaster: Forecaster
    hardware: HardwareSpec
    folder: Path
    measure_config: MeasureConfig
    router: Router = field(init=False)
    on_event: ProgressCallback | None = None

    def __post_init__(self) -> None:
        self.router = make_router(self.config.router, self.config.threshold, self.config.measure_per_round)
        if self.config.reserve_fraction is not None:
            self.router.reserve_fraction = self.config.reserve_fraction

    def emit(self, kind: str, payload: dict[str, Any], candidate_hash: str | None = None, store: bool = True) -> None:
        """Record an event in the store (the run's log) and tell whoever is watching."""
        if store:
            self.store.add_event(self.run_id, kind, payload, candidate_hash)
            self.store.heartbeat(self.run_id)
        if self.on_event is not None:
            self.on_event(kind, {"run_id": self.run_id, "candidate": candidate_hash, **payload})
