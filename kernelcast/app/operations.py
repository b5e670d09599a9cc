"""The single operations: a candidate from what a user names, measured, forecast, or extended by a generator.

Each records what it learns in the store first (a measurement, a forecast, the device seen) and takes the
caller's store or opens the configured one.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from kernelcast.agents.generate.base import ProposalReport
from kernelcast.agents.registry import DEFAULT_FORECASTER, DEFAULT_GENERATOR
from kernelcast.stores import store_scope
from kernelcast.tools.core.candidate import Candidate, candidate_from_file, candidate_from_source
from kernelcast.tools.core.measurement import HardwareSpec, MeasureConfig, Measurement
from kernelcast.tools.core.settings import get_settings
from kernelcast.tools.core.task import Task, read_kernel_file, resolve_task
from kernelcast.tools.hardware.measurers.base import Measurer
from kernelcast.tools.hardware.measurers.factory import make_measurer
from kernelcast.tools.store.store import Store

if TYPE_CHECKING:
    from kernelcast.agents.forecast.base import Forecast
    from kernelcast.agents.generate.base import Proposals

__all__ = ["ProposalReport", "as_task", "candidate_file", "forecast", "hardware", "make_candidate", "measure",
           "propose"]


def as_task(task: str | Path | Task) -> Task:
    return task if isinstance(task, Task) else resolve_task(task)


def make_candidate(task: Task, candidate: Candidate | str | Path | None = None,
                   params: dict[str, Any] | None = None) -> Candidate:
    """Reference (nothing given), a template point (``params``), a file path, or source text."""
    if isinstance(candidate, Candidate):
        return candidate
    if params:
        return task.instantiate(params, generator="user")
    if candidate is None:
        return task.reference()
    text = str(candidate)
    if "\n" not in text and Path(text).exists():
        return candidate_file(text, task)
    return candidate_from_source(task, text)


def candidate_file(path: str | Path, task: Task, global_size: list[str] | None = None,
                   local_size: list[str] | None = None, build_options: list[str] | None = None) -> Candidate:
    """A candidate from a file a user names (a kernel source or a candidate .json): checked first to be a
    regular file under the source size limit, so a directory, a FIFO or ``/dev/zero`` is a one-line
    ``ValueError``, never a traceback, a hang or a read until memory runs out."""
    read_kernel_file(path, f"candidate file {path}")
    return candidate_from_file(str(path), task, global_size, local_size, build_options)


def measure(task: str | Path | Task, candidate: Candidate | str | Path | None = None,
            params: dict[str, Any] | None = None, *, device: str | None = None, backend: str | None = None,
            sizes: str = "full", config: MeasureConfig | None = None, store: Store | None = None,
            worker: Measurer | None = None) -> Measurement:
    """Measure a candidate (default: the reference against itself) and record it in the store first."""
    settings = get_settings()
    task_obj = as_task(task)
    cand = make_candidate(task_obj, candidate, params)
    cfg = config or MeasureConfig(sizes=sizes, timeout_s=settings.measure_timeout_s)
    cfg = cfg.model_copy(update={"sizes": task_obj.size_label(cfg.sizes)})  # the label of the problem measured
    own_worker = worker is None
    try:
        with store_scope(store) as db:
            worker = worker or make_measurer(backend or task_obj.backend, device or settings.device, store=db)
            # a broken task or device is an error, not a measurement
            for note in worker.check_reference(task_obj, cfg.sizes, cfg.timeout_s):
                structlog.get_logger(__name__).warning(note, task=task_obj.name)
            result = worker.measure(task_obj, cand, cfg)
            db.tasks.upsert(task_obj)
            db.devices.upsert(worker.hardware_spec())
            db.candidates.add(cand)
            db.ledger.add(result)
            return result
    finally:
        if own_worker and worker is not None:
            worker.close()


def hardware(backend: str = "opencl", device: str | None = None) -> HardwareSpec:
    with make_measurer(backend, device) as worker:
        return worker.hardware_spec()


def forecast(task: str | Path | Task, candidate: Candidate | str | Path | None = None,
             params: dict[str, Any] | None = None, *, forecaster: str = DEFAULT_FORECASTER, model: str | None = None,
             device: str | None = None, store: Store | None = None, hardware_spec: HardwareSpec | None = None,
             record: bool = True) -> "Forecast":
    """Forecast a candidate's speedup distribution without measuring it (and record the forecast)."""
    from kernelcast.agents.forecast.base import record_forecast
    from kernelcast.agents.registry import make_forecaster

    settings = get_settings()
    task_obj = as_task(task)
    cand = make_candidate(task_obj, candidate, params)
    with store_scope(store) as db:
        spec = hardware_spec or _known_hardware(db, task_obj.backend, device or settings.device)
        agent = make_forecaster(forecaster, store=db, device=spec.key, model=model or settings.model,
                                api_base=settings.api_base)
        result = agent.forecast(task_obj, cand, spec)
        if record:
            db.tasks.upsert(task_obj)
            db.candidates.add(cand)
            record_forecast(db, result, task_obj.name, cand.hash, spec.key)
        return result


def propose(task: str | Path | Task, parent: Candidate | str | Path | None = None, *,
            generator: str = DEFAULT_GENERATOR, n: int = 4, model: str | None = None, seed: int = 0,
            device: str | None = None, compile_check: bool = True, store: Store | None = None) -> "Proposals":
    """New children of ``parent`` (default: the reference), validated by the generators' shared checks and
    compiled on the device unless ``compile_check`` is off; nothing is measured or stored. The store tells
    the generator what this device has measured already (so nothing known comes back)."""
    from kernelcast.agents.generate.base import GenerationContext
    from kernelcast.agents.registry import make_generator

    settings = get_settings()
    task_obj = as_task(task)
    parent_cand = make_candidate(task_obj, parent)
    worker = make_measurer(task_obj.backend, device or settings.device)
    try:
        gen = make_generator(generator, worker if compile_check else None, model or settings.model,
                             settings.api_base)  # an unknown name or a missing model fails before any start
        hardware = worker.start()  # the device's spec and key, also when not compiling
        with store_scope(store) as db:
            context = GenerationContext.from_store(db, task_obj, hardware.key, parent_cand, hardware=hardware,
                                                   seed=seed)
            return gen.propose(task_obj, parent_cand, context, n)
    finally:
        worker.close()


def _known_hardware(store: Store, backend: str, device: str | None) -> HardwareSpec:
    """The device's spec, from the store when it was seen before (no worker start needed)."""
    known = [s for s in store.devices.all().values() if s.backend == backend]
    if device is None and len(known) == 1:
        return known[0]
    spec = hardware(backend, device)
    store.devices.upsert(spec)
    return spec
