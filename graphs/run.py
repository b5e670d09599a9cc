"""Start or resume a run: build the context (measurer, agents, store) from a RunConfig and execute the graph.

:func:`create_run` is the one creation of a run (optimize, sessions, the studio and the benches): what a
configuration must hold, the reference check and the agents, all before a run row exists."""

from __future__ import annotations

import structlog

from kernelcast.agents.forecast.base import Forecaster
from kernelcast.agents.generate.base import Generator
from kernelcast.agents.registry import EXTERNAL, make_forecaster, make_generator
from kernelcast.graphs.config import RunConfig
from kernelcast.graphs.context import RunContext, RunEnv
from kernelcast.graphs.errors import RunError
from kernelcast.graphs.route.trust import calibration_group
from kernelcast.graphs.search.budget import confirm_reserve
from kernelcast.graphs.search.graph import check_checkpoint, execute
from kernelcast.graphs.search.result import RunResult
from kernelcast.tools.core.errors import InputError
from kernelcast.tools.core.measurement import MeasureConfig
from kernelcast.tools.core.task import Task, builtin_task_paths, resolve_task
from kernelcast.tools.hardware.measurers.base import Measurer
from kernelcast.tools.hardware.measurers.factory import make_measurer
from kernelcast.tools.store.store import Store

log = structlog.get_logger(__name__)

MAX_BUDGET = 1_000_000  # measurements; a budget is stored as an SQLite integer, and a million takes days


class NotStartable(InputError, ValueError):
    """A configuration that could never run (bad input: exit code 2, a one-line tool error)."""


def check_startable(config: RunConfig) -> None:
    """What the configuration must hold before anything starts (a :class:`NotStartable` naming the option): so
    no run row is left behind by an option that could never run, and no run "finishes" having spent nothing."""
    least = 1 + confirm_reserve({}, config)  # one search measurement, plus the confirmation kept for the best
    if config.budget < least:
        raise NotStartable(f"--budget {config.budget} leaves nothing to search: a run keeps {least - 1} "
                           f"measurement to confirm its best, so the minimum budget is {least}")
    if config.budget > MAX_BUDGET:
        raise NotStartable(f"--budget {config.budget} is more than a run may spend (at most {MAX_BUDGET:,} "
                           "measurements)")
    if config.seed < 0:
        raise NotStartable(f"--seed must be 0 or more, got {config.seed}")
    if config.parallel < 1 and not config.replay:
        raise NotStartable(f"--parallel must be at least 1 (measurements in flight), got {config.parallel}")


def make_agents(config: RunConfig, store: Store, env: RunEnv, measurer: Measurer,
                generator: Generator | None = None) -> tuple[Generator, Forecaster]:
    """The run's generator and forecaster (an unknown name or a missing model raises here); ``generator``: one
    made by the caller (a session's caller is its generator, which no registry builds)."""
    task = resolve_task(config.task)
    generator = generator or make_generator(config.generator, worker=measurer, model=config.model,
                                            api_base=env.api_base)
    training = Store(config.training_db) if config.training_db else store
    forecaster = make_forecaster(config.forecaster, store=training, device=measurer.hardware_spec().key,
                                 model=config.model, api_base=env.api_base,
                                 exclude_task=task.name if config.leave_task_out else None, worker=measurer)
    return generator, forecaster


def open_run(run_id: str, config: RunConfig, store: Store, env: RunEnv, measurer: Measurer,
             agents: tuple[Generator, Forecaster] | None = None, generator: Generator | None = None) -> RunContext:
    """THE opening of a run's context, for start, resume, sessions, the studio and the benches (``agents``: made
    already, see :func:`make_agents`; ``generator``: the caller's own). It records what the run's calibration
    rows are kept under on every start and resume (a run begun before groups were recorded gets one when it is
    resumed)."""
    task = resolve_task(config.task)
    group = calibration_group(task)
    store.runs.update(run_id, calibration_group=group)
    hardware = measurer.hardware_spec()
    generator, forecaster = agents or make_agents(config, store, env, measurer, generator)
    return RunContext(run_id=run_id, config=config, task=task, store=store, measurer=measurer, generator=generator,
                      forecaster=forecaster, hardware=hardware, env=env, calibration_group=group,
                      measure_config=MeasureConfig(sizes=config.sizes, timeout_s=env.measure_timeout_s))


def open_measurer(config: RunConfig, backend: str, store: Store) -> Measurer:
    """The measurer a run's config asks for (one local worker, a pool, or Ray actors)."""
    if config.replay:
        return make_measurer(backend, config.device, parallel=max(1, config.parallel),
                             replay_store=Store(config.replay, read_only=True))
    return make_measurer(backend, config.device, parallel=config.parallel, ray=config.ray, store=store,
                         share_device=config.share_device)


def prepare_run(config: RunConfig) -> tuple[RunConfig, Task]:
    """The configuration as a run of its task stores it, and the task: refused first when it could never run
    (:func:`check_startable`) or names no task, before any measurer starts or run row exists."""
    check_startable(config)
    task = resolve_task(config.task)
    return config.for_task(task, config.task if _is_builtin(config.task) else str(task.path)), task


def create_run(config: RunConfig, store: Store, env: RunEnv, measurer: Measurer, *, run_id: str | None = None,
               generator: Generator | None = None) -> RunContext:
    """THE creation of a run, for optimize, sessions, the studio and the benches (``config`` as
    :func:`prepare_run` returns it): a configuration that could never run is refused, the reference is checked
    on ``measurer`` (a broken task or device stops here) and the agents are built (a missing model stops here),
    all before the run row is written; then its context is opened. ``generator``: the caller's own (a session)."""
    check_startable(config)
    task = resolve_task(config.task)
    for note in measurer.check_reference(task, config.sizes, env.measure_timeout_s):
        log.warning(note, task=task.name)
    agents = make_agents(config, store, env, measurer, generator)
    run_id = store.runs.create(task.name, measurer.hardware_spec().key, config.model_dump(), config.budget,
                               run_id=run_id)
    store.runs.update(run_id, folder=str(env.folder(run_id)))
    return open_run(run_id, config, store, env, measurer, agents)


def start_run(config: RunConfig, store: Store, env: RunEnv, run_id: str | None = None) -> RunResult:
    config, task = prepare_run(config)
    with open_measurer(config, task.backend, store) as measurer:
        return execute(create_run(config, store, env, measurer, run_id=run_id), env.checkpoints)


def resume_run(run_id: str, store: Store, env: RunEnv) -> RunResult:
    row = store.runs.get(run_id)
    if row is None:
        raise RunError(f"no run with id {run_id!r} (see `kernelcast runs`)")
    if row.status == "finished":
        raise RunError(f"run {row.id} is finished already ({row.spent} of {row.budget} spent); "
                       "nothing to resume (`kernelcast show` prints its result)")
    if row.status == "running":
        raise RunError(f"run {row.id} is still running in process {row.owner_pid}; not resuming it twice")
    config = RunConfig.of_run(row)
    if config.generator == EXTERNAL:
        raise RunError(f"run {row.id} is a session: its candidates come from its caller; reopen it with "
                       "session_status or kernelcast.Session(session=ID)")
    check_checkpoint(env.checkpoints, row.id)  # before anything starts or the run is claimed
    with open_measurer(config, task_backend(config.task), store) as measurer:
        ctx = open_run(row.id, config, store, env, measurer)
        store.runs.claim(row.id)
        return execute(ctx, env.checkpoints, resume=True)


def task_backend(task: str) -> str:
    """The backend that measures a task is its language's (never a stored or configured choice)."""
    return resolve_task(task).backend


def _is_builtin(name: str) -> bool:
    return name in builtin_task_paths()
