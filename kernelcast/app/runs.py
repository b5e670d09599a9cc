"""Runs from a door: the environment a run is told about, and starting or resuming one."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernelcast.graphs.config import default
from kernelcast.graphs.errors import RunError
from kernelcast.stores import store_scope
from kernelcast.tools.core.settings import get_settings
from kernelcast.tools.store.store import Store

if TYPE_CHECKING:
    from kernelcast.graphs.context import RunEnv
    from kernelcast.graphs.search.result import RunResult

__all__ = ["RunError", "optimize", "resume", "run_env"]


def run_env(on_event: Any = None) -> "RunEnv":
    """The run environment from the settings: the one place runs learn where they live and whom to tell."""
    from kernelcast.graphs.context import RunEnv

    settings = get_settings()
    return RunEnv(home=settings.home, measure_timeout_s=settings.measure_timeout_s, api_base=settings.api_base,
                  on_event=on_event)


def optimize(task: str | Path, *, budget: int = default("budget"), router: str = default("router"),
             generator: str = default("generator"),
             forecaster: str = default("forecaster"), model: str | None = None, device: str | None = None,
             seed: int = 0, sizes: str = "full", measure_per_round: int = default("measure_per_round"),
             store: Store | None = None, on_event: Any = None, **extra: Any) -> "RunResult":
    """Optimize a task under a hardware budget; returns the run's result (best kernel is always measured)."""
    from kernelcast.graphs.config import RunConfig
    from kernelcast.graphs.run import start_run

    settings = get_settings()
    config = RunConfig(task=str(task), budget=budget, router=router, generator=generator,
                       forecaster=forecaster, model=model or settings.model,
                       device=device or settings.device, seed=seed, sizes=sizes,
                       measure_per_round=measure_per_round, **extra)
    with store_scope(store) as db:
        return start_run(config, db, run_env(on_event))


def resume(run_id: str, *, store: Store | None = None, on_event: Any = None) -> "RunResult":
    """Continue a stopped run where it left off (nothing measured is bought twice)."""
    from kernelcast.graphs.run import resume_run

    with store_scope(store) as db:
        return resume_run(run_id, db, run_env(on_event))
