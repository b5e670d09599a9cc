"""Measurement on this machine: one isolated worker (:class:`LocalMeasurer`) or a pool of them, one device each."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.language import OPENCL
from kernelcast.tools.core.measurement import HardwareSpec, MeasureConfig, Measurement
from kernelcast.tools.core.task import Task
from kernelcast.tools.hardware.measurers.base import (
    Attempt,
    InFlight,
    Measurer,
    MeasurerError,
    ScheduledMeasurer,
    Scheduler,
    Slot,
    check_one_device_model,
    split_devices,
)
from kernelcast.tools.hardware.worker import MeasurementWorker, WorkerError

if TYPE_CHECKING:
    from kernelcast.tools.store.store import Store

T = TypeVar("T")


class LocalMeasurer(Measurer):
    """One :class:`MeasurementWorker`, measuring one candidate after the other in the caller's thread."""

    def __init__(self, backend: str = OPENCL.backend, device: str | None = None, store: Store | None = None) -> None:
        self.backend = backend
        self.device = device
        self.worker = MeasurementWorker(backend, device, store=store)
        self._current: InFlight | None = None
        self._attempts: list[Attempt] = []

    def hardware_spec(self) -> HardwareSpec:
        return self.worker.hardware_spec()

    def build(self, task: Task, candidate: Candidate, timeout_s: float = 60.0) -> tuple[str, str]:
        return self.worker.build(task, candidate, timeout_s)

    def check_reference(self, task: Task, sizes: str = "full", timeout_s: float = 120.0) -> list[str]:
        return self.worker.check_reference(task, sizes, timeout_s)

    def measure_many(self, task: Task, candidates: Iterable[Candidate],
                     config: MeasureConfig | None = None) -> Iterator[tuple[Candidate, Measurement]]:
        self._attempts = []
        label = _worker_label(self.backend, self.device, 0)
        for candidate in candidates:
            self._current = InFlight(label, candidate.hash, time.time())
            try:
                result = self.worker.measure(task, candidate, config)
            finally:
                self._current = None
            self._attempts.append(Attempt(candidate.hash, label, "measured"))
            yield candidate, result

    def outputs(self, task: Task, candidate: Candidate, sizes: str = "small", seed: int = 0,
                timeout_s: float = 120.0) -> tuple[dict[str, Any], list[str]]:
        return self.worker.outputs(task, candidate, sizes, seed, timeout_s)

    def in_flight(self) -> list[InFlight]:
        current = self._current
        return [current] if current is not None else []

    def attempts(self) -> list[Attempt]:
        return list(self._attempts)

    def close(self) -> None:
        self.worker.close()


def _worker_label(backend: str, device: str | None, index: int) -> str:
    return f"{backend}:{device or 'default'}#{index}"


def plan_devices(device: str | Sequence[str | None] | None, parallel: int, share_device: bool) -> list[str | None]:
    """One selector per worker: one device each, or one device repeated ``parallel`` times when asked explicitly."""
    selectors = split_devices(device)
    if parallel < 1:
        raise MeasurerError(f"parallel must be at least 1 (got {parallel})")
    if len(selectors) == 1 and parallel > 1:
        if not share_device:
            raise MeasurerError(f"{parallel} workers need {parallel} devices but one was given "
                                f"({selectors[0] or 'the default device'}); name one device per worker "
                                "(e.g. device='0:0,0:1'), or pass share_device=True to run several workers on "
                                "the same device (they then share its compute units)")
        return selectors * parallel
    if parallel > 1 and len(selectors) != parallel:
        named = ", ".join(map(str, selectors))
        raise MeasurerError(f"parallel={parallel} but {len(selectors)} devices were named ({named})")
    if len(set(selectors)) < len(selectors) and not share_device:
        raise MeasurerError(f"device {next(s for s in selectors if selectors.count(s) > 1)!r} is named twice; "
                            "pass share_device=True to run several workers on the same device")
    return selectors


class WorkerSlot(Slot):
    """A :class:`MeasurementWorker` with its own thread, so its blocking requests never interleave."""

    def __init__(self, backend: str, device: str | None, index: int) -> None:
        self.label = _worker_label(backend, device, index)
        self.worker = MeasurementWorker(backend, device)
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"measure-{index}")

    def start(self) -> Future[HardwareSpec]:
        return self._thread.submit(self.worker.start)

    def submit_measure(self, task: Task, candidate: Candidate, config: MeasureConfig) -> Future[Measurement]:
        return self._thread.submit(self.worker.measure, task, candidate, config)

    def submit_call(self, fn: Callable[[MeasurementWorker], T]) -> Future[T]:
        """Run another request (build, outputs) on this worker, after what it is doing now."""
        return self._thread.submit(fn, self.worker)

    def is_lost(self, exc: BaseException) -> bool:
        return isinstance(exc, WorkerError)  # the worker process could not be (re)started

    def device_key(self) -> str:
        return self.worker._device_key()

    def close(self) -> None:
        self._thread.submit(self.worker.close).result()
        self._thread.shutdown(wait=True)


class PoolMeasurer(ScheduledMeasurer):
    """N :class:`MeasurementWorker` processes, one device each, measuring concurrently."""

    def __init__(self, backend: str, devices: Sequence[str | None], allow_mixed: bool = False) -> None:
        if not devices:
            raise MeasurerError("a pool needs at least one device")
        self.backend = backend
        self.devices = list(devices)
        self.allow_mixed = allow_mixed
        self._slots: list[WorkerSlot] = []
        self._scheduler: Scheduler | None = None
        self._specs: list[HardwareSpec] = []

    @property
    def parallelism(self) -> int:
        return len(self.devices)

    @property
    def slots(self) -> list[WorkerSlot]:
        """The workers (started), each with its label, device and liveness."""
        self.start()
        return list(self._slots)

    def start(self) -> HardwareSpec:
        if self._scheduler is None:
            slots = [WorkerSlot(self.backend, device, i) for i, device in enumerate(self.devices)]
            starting = [slot.start() for slot in slots]  # workers start in parallel
            errors = [f.exception() for f in starting]
            if any(errors):
                for slot in slots:
                    slot.close()
                first = next(e for e in errors if e is not None)
                raise MeasurerError(f"a pool worker could not start: {first}") from None
            specs = [f.result() for f in starting]
            try:
                check_one_device_model(specs, [s.label for s in slots], self.allow_mixed)
            except MeasurerError:
                for slot in slots:
                    slot.close()
                raise
            self._slots, self._specs, self._scheduler = slots, specs, Scheduler(slots)
        return self._specs[0]

    def hardware_spec(self) -> HardwareSpec:
        return self.start()

    def hardware_specs(self) -> list[HardwareSpec]:
        self.start()
        return list(self._specs)

    def _any_slot(self) -> WorkerSlot:
        self.start()
        live = [s for s in self._slots if s.alive]
        if not live:
            raise MeasurerError("every worker of the pool is lost")
        return live[0]

    def build(self, task: Task, candidate: Candidate, timeout_s: float = 60.0) -> tuple[str, str]:
        return self._any_slot().submit_call(lambda w: w.build(task, candidate, timeout_s)).result()

    def outputs(self, task: Task, candidate: Candidate, sizes: str = "small", seed: int = 0,
                timeout_s: float = 120.0) -> tuple[dict[str, Any], list[str]]:
        return self._any_slot().submit_call(lambda w: w.outputs(task, candidate, sizes, seed, timeout_s)).result()

    def check_reference(self, task: Task, sizes: str = "full", timeout_s: float = 120.0) -> list[str]:
        self.start()
        notes: list[str] = []
        for future in [slot.submit_call(lambda w: w.check_reference(task, sizes, timeout_s))
                       for slot in self._slots if slot.alive]:
            # every device runs the reference: each candidate is timed against its own device's
            notes += [note for note in future.result() if note not in notes]
        return notes

    def close(self) -> None:
        for slot in self._slots:
            slot.close()
        self._slots, self._specs, self._scheduler = [], [], None
