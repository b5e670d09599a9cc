"""Start or resume a run: build the context (worker, agents, store) from a RunConfig and execute the graph."""

from __future__ import annotations

from pathlib import Path

from kernelcast.agents.factory import make_forecaster, make_generator
from kernelcast.graphs.config import RunConfig
from kernelcast.graphs.context import ProgressCallback, RunContext
from kernelcast.graphs.errors import RunError
from kernelcast.graphs.graph import execute
from kernelcast.graphs.result import RunResult
from kernelcast.tools.measurement import MeasureConfig
from kernelcast.tools.store import Store
from kernelcast.tools.task import resolve_task
from kernelcast.tools.worker import MeasurementWorker


def build_context(run_id: str, config: RunConfig, store: Store, home: Path, worker: MeasurementWorker,
             on_event: ProgressCallback | None, measure_timeout_s: float, api_base: str | None) -> RunContext:
    task = resolve_task(config.task)
    hardware = worker.hardware_spec()
    generator = make_generator(config.generator, worker=worker, model=config.model, api_base=api_base)
    training = Store(config.training_db) if config.training_db else store
    forecaster = make_forecaster(config.forecaster, store=training, device=hardware.key, model=config.model,
                                 api_base=api_base, exclude_task=task.name if config.leave_task_out else None)
    return RunContext(run_id=run_id, config=config, task=task, store=store, worker=worker, generator=generator,
                      forecaster=forecaster, hardware=hardware, folder=home / "runs" / run_id,
                      measure_config=MeasureConfig(sizes=config.sizes, timeout_s=measure_timeout_s), on_event=on_event)


def start_run(config: RunConfig, store: Store, home: Path, *, on_event: ProgressCallback | None = None,
              measure_timeout_s: float = 120.0, api_base: str | None = None, run_id: str | None = None,
              ) -> RunResult:
    task = resolve_task(config.task)  # fail fast on an unknown task, before a run row exists
    config = config.model_copy(update={"task": str(task.path) if not _is_builtin(config.task) else config.task})
    with MeasurementWorker(task.backend, config.device, store=store) as worker:
        hardware = worker.hardware_spec()
        worker.check_reference(task, config.sizes)  # a broken task or device stops here, before a run exists
        run_id = store.create_run(task.name, hardware.key, config.model_dump(), config.budget, run_id=run_id)
        store.update_run(run_id, folder=str(home / "runs" / run_id))
        ctx = build_context(run_id, config, store, home, worker, on_event, measure_timeout_s, api_base)
        return execute(ctx, home / "checkpoints.db")


def resume_run(run_id: str, store: Store, home: Path, *, on_event: ProgressCallback | None = None,
               measure_timeout_s: float = 120.0, api_base: str | None = None) -> RunResult:
    row = store.run(run_id)
    if row is None:
        raise RunError(f"no run with id {run_id!r} (see `kernelcast runs`)")
    if row["status"] == "finished":
        raise RunError(f"run {row['id']} is finished already ({row['spent']} of {row['budget']} spent); "
                       "nothing to resume (`kernelcast show` prints its result)")
    if row["status"] == "running":
        raise RunError(f"run {row['id']} is still running in process {row.get('owner_pid')}; not resuming it twice")
    config = RunConfig.model_validate(row["config"])
    with MeasurementWorker(task_backend(config.task), config.device, store=store) as worker:
        ctx = build_context(row["id"], config, store, home, worker, on_event, measure_timeout_s, api_base)
        store.claim_run(row["id"])
        return execute(ctx, home / "checkpoints.db", resume=True)


def task_backend(task: str) -> str:
    """The backend that measures a task is its language's (never a stored or configured choice)."""
    return resolve_task(task).backend


def _is_builtin(name: str) -> bool:
    from kernelcast.tools.task import builtin_task_paths

    return name in builtin_task_paths()
