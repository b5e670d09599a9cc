"""The interface every way of measuring implements, and the scheduler the parallel ones share.

Callers (the graph, the dataset builder, the API, generators) talk to a :class:`Measurer`, never to a
concrete worker, so a search scales from one device to a cluster without changing. Every implementation
(:mod:`~kernelcast.tools.hardware.measurers.local`, :mod:`~kernelcast.tools.hardware.measurers.ray`,
:mod:`~kernelcast.tools.hardware.measurers.replay`; :mod:`~kernelcast.tools.hardware.measurers.factory` builds
them) keeps the protocol of :mod:`kernelcast.tools.hardware.worker`: each measurement runs in an isolated worker
process on one device, and the reference is timed in the same session as the candidate, so each speedup belongs
to the device that measured it.

``measure_many`` runs exactly the candidates it is given (a lost worker's candidate is retried once on
another worker, then recorded as a ``crash`` with the reason) and yields each one exactly once, as soon as
its measurement completes. Budget accounting is the caller's: reserve, then pass only what was reserved.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from typing import Any, Self

from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.measurement import HardwareSpec, MeasureConfig, Measurement, Status
from kernelcast.tools.core.task import Task
from kernelcast.tools.hardware.worker import WorkerError


class MeasurerError(WorkerError):
    """A measurer cannot be built or has no worker left; a :class:`WorkerError` so existing handlers apply."""


@dataclass(frozen=True)
class InFlight:
    """One measurement under way: which worker runs which candidate since when (for live views)."""

    worker: str
    candidate_hash: str
    started: float  # time.time()


@dataclass(frozen=True)
class Attempt:
    """One dispatch of a candidate to a worker and how it ended: "measured", "lost" (the worker died) or "error"."""

    candidate_hash: str
    worker: str
    outcome: str
    reason: str = ""


class Measurer(ABC):
    """Measures candidates of a task on one device model; see the module docstring for the guarantees."""

    backend: str
    #: True when results come from stored data rather than hardware (a replay): its answers carry ``replayed``,
    #: which the store keeps apart from live measurements.
    simulated: bool = False

    @abstractmethod
    def hardware_spec(self) -> HardwareSpec:
        """The device's spec (starting the workers if needed); raises :class:`WorkerError` without a device."""

    def start(self) -> HardwareSpec:
        """Start the workers now (instead of at first use); returns the device's spec."""
        return self.hardware_spec()

    def hardware_specs(self) -> list[HardwareSpec]:
        """The spec of each worker's device (one entry per worker)."""
        return [self.hardware_spec()] * self.parallelism

    @property
    def parallelism(self) -> int:
        """How many measurements can run at the same time."""
        return 1

    @abstractmethod
    def build(self, task: Task, candidate: Candidate, timeout_s: float = 60.0) -> tuple[str, str]:
        """Compile only: ("ok", "") or (status, reason), as :meth:`MeasurementWorker.build`."""

    @abstractmethod
    def measure_many(self, task: Task, candidates: Iterable[Candidate],
                     config: MeasureConfig | None = None) -> Iterator[tuple[Candidate, Measurement]]:
        """Measure every candidate once, yielding (candidate, measurement) in order of completion."""

    def measure(self, task: Task, candidate: Candidate, config: MeasureConfig | None = None) -> Measurement:
        """One candidate: the convenience form of :meth:`measure_many`."""
        for _, measurement in self.measure_many(task, [candidate], config):
            return measurement
        raise MeasurerError(f"no measurement came back for candidate {candidate.short}")  # pragma: no cover

    @abstractmethod
    def outputs(self, task: Task, candidate: Candidate, sizes: str = "small", seed: int = 0,
                timeout_s: float = 120.0) -> tuple[dict[str, Any], list[str]]:
        """One seeded run's outputs, as :meth:`MeasurementWorker.outputs`; raises :class:`WorkerError`."""

    @abstractmethod
    def check_reference(self, task: Task, sizes: str = "full", timeout_s: float = 120.0) -> list[str]:
        """Run the task's reference once on every device, within ``timeout_s``, before anything is spent; returns
        notes for the user (outputs the reference writes only in part); raises
        :class:`~kernelcast.tools.core.task.TaskError` (a task-file problem) or :class:`WorkerError` (the device)."""

    def in_flight(self) -> list[InFlight]:
        """Measurements running right now, one entry per busy worker."""
        return []

    def attempts(self) -> list[Attempt]:
        """Every dispatch of the latest ``measure_many`` call, in order of completion (retries show here)."""
        return []

    @abstractmethod
    def close(self) -> None:
        """Stop every worker; the measurer may be started again afterwards."""

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

# ---- the scheduler shared by every parallel measurer ---------------------------------
class Slot(ABC):
    """One worker that runs one request at a time; parallel measurers are made of slots."""

    label: str
    alive: bool = True

    @abstractmethod
    def submit_measure(self, task: Task, candidate: Candidate, config: MeasureConfig) -> Future[Measurement]:
        """Start measuring; the future fails only if the worker itself is unusable."""

    @abstractmethod
    def is_lost(self, exc: BaseException) -> bool:
        """Whether ``exc`` means the worker is gone (retry elsewhere) rather than a failed request."""

    @abstractmethod
    def device_key(self) -> str:
        """The device key a failure recorded on this slot carries."""

    @abstractmethod
    def close(self) -> None:
        """Release the worker."""


@dataclass
class _Job:
    candidate: Candidate
    lost_on: list[str] = field(default_factory=list)  # labels of slots that died running it


class Scheduler:
    """Dispatches candidates over slots, one request per slot at a time, and yields results as they complete.

    Invariants: each candidate is dispatched at most twice (a second time only after its first worker was
    lost), yielded exactly once while any worker lives, and never more candidates run than were given.
    """

    def __init__(self, slots: Sequence[Slot]) -> None:
        self.slots = list(slots)
        self._in_flight: dict[str, InFlight] = {}
        self._attempts: list[Attempt] = []
        self._lock = threading.Lock()

    def live_slots(self) -> list[Slot]:
        return [s for s in self.slots if s.alive]

    def in_flight(self) -> list[InFlight]:
        with self._lock:
            return list(self._in_flight.values())

    def attempts(self) -> list[Attempt]:
        with self._lock:
            return list(self._attempts)

    def _finish(self, slot: Slot, attempt: Attempt) -> None:
        with self._lock:
            self._in_flight.pop(slot.label, None)
            self._attempts.append(attempt)

    def run(self, task: Task, candidates: Iterable[Candidate],
            config: MeasureConfig) -> Iterator[tuple[Candidate, Measurement]]:
        queue: deque[_Job] = deque(_Job(c) for c in candidates)
        idle: deque[Slot] = deque(self.live_slots())
        running: dict[Future[Measurement], tuple[_Job, Slot, float]] = {}
        with self._lock:
            self._attempts = []

        def dispatch() -> None:
            while queue and idle:
                slot, job = idle.popleft(), queue.popleft()
                running[slot.submit_measure(task, job.candidate, config)] = (job, slot, time.perf_counter())
                with self._lock:
                    self._in_flight[slot.label] = InFlight(slot.label, job.candidate.hash, time.time())

        try:
            while queue or running:
                dispatch()
                if not running:
                    raise MeasurerError(f"every measurement worker is lost ({self._lost_summary()}); "
                                        f"{len(queue)} candidate(s) were not measured")
                done, _ = wait(list(running), return_when=FIRST_COMPLETED)
                ready: list[tuple[Candidate, Measurement]] = []
                for future in done:
                    job, slot, started = running.pop(future)
                    outcome = self._settle(task, config, job, slot, started, future)
                    if outcome is not None:
                        idle.append(slot)
                        ready.append(outcome)
                    elif slot.alive:
                        idle.append(slot)
                    elif len(job.lost_on) == 1 and self.live_slots():
                        queue.appendleft(job)  # retried next, on the first other worker that is idle
                    else:
                        ready.append((job.candidate, self._lost_failure(task, config, job, slot, started)))
                dispatch()  # the workers go on while the caller stores what is ready
                yield from ready
        finally:
            with self._lock:
                self._in_flight.clear()

    def _settle(self, task: Task, config: MeasureConfig, job: _Job, slot: Slot, started: float,
                future: Future[Measurement]) -> tuple[Candidate, Measurement] | None:
        """The result of a finished dispatch, or None when its worker was lost (then ``slot.alive`` is False)."""
        exc = future.exception()
        if exc is None:
            self._finish(slot, Attempt(job.candidate.hash, slot.label, "measured"))
            return job.candidate, future.result()
        lost = slot.is_lost(exc)
        self._finish(slot, Attempt(job.candidate.hash, slot.label, "lost" if lost else "error", _describe(exc)))
        if lost:
            slot.alive = False
            job.lost_on.append(f"{slot.label} ({_describe(exc)})")
            return None
        wall_ms = (time.perf_counter() - started) * 1e3
        return job.candidate, _failure(task, job.candidate, slot.device_key(), config, Status.runtime_error,
                                       f"{slot.label}: {_describe(exc)}", wall_ms)

    @staticmethod
    def _lost_failure(task: Task, config: MeasureConfig, job: _Job, slot: Slot, started: float) -> Measurement:
        """A candidate whose worker was lost and that cannot be retried: a crash that says why."""
        reason = ("lost its measurement worker " + " and then ".join(job.lost_on)
                  + ("" if len(job.lost_on) > 1 else "; no other worker was left to retry on"))
        wall_ms = (time.perf_counter() - started) * 1e3
        return _failure(task, job.candidate, slot.device_key(), config, Status.crash, reason, wall_ms)

    def _lost_summary(self) -> str:
        return ", ".join(s.label for s in self.slots if not s.alive) or "none started"


class ScheduledMeasurer(Measurer):
    """A measurer whose workers are slots of a :class:`Scheduler` (a pool, Ray actors, a replay): ``start`` builds it."""

    _scheduler: Scheduler | None = None

    def measure_many(self, task: Task, candidates: Iterable[Candidate],
                     config: MeasureConfig | None = None) -> Iterator[tuple[Candidate, Measurement]]:
        self.start()
        assert self._scheduler is not None
        yield from self._scheduler.run(task, candidates, config or MeasureConfig())

    def in_flight(self) -> list[InFlight]:
        return self._scheduler.in_flight() if self._scheduler is not None else []

    def attempts(self) -> list[Attempt]:
        return self._scheduler.attempts() if self._scheduler is not None else []


def _failure(task: Task, candidate: Candidate, device: str, config: MeasureConfig, status: Status, reason: str,
             wall_ms: float) -> Measurement:
    return Measurement(task=task.name, task_fingerprint=task.fingerprint, candidate_hash=candidate.hash, device=device,
                       sizes=config.sizes, status=status, reason=reason[:4000], seeds=list(config.seeds), wall_ms=wall_ms)


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:500]


# ---- the devices of the measurers on hardware (a pool, Ray actors) ------------------
def check_one_device_model(specs: Sequence[HardwareSpec], labels: Sequence[str], allow_mixed: bool) -> None:
    """A speedup belongs to one device model: refuse workers on different models unless asked."""
    keys = {spec.key for spec in specs}
    if len(keys) > 1 and not allow_mixed:
        found = "; ".join(f"{label}: {spec.key}" for label, spec in zip(labels, specs, strict=True))
        raise MeasurerError(f"the workers are on different device models ({found}); a speedup belongs to one "
                            "device, so a search uses one model (pass allow_mixed=True to measure on all anyway)")


def split_devices(device: str | Sequence[str | None] | None) -> list[str | None]:
    """Device selectors from ``None``, one selector, a comma-separated list, or a list."""
    if device is None:
        return [None]
    if isinstance(device, str):
        parts = [p.strip() for p in device.split(",")]
        if any(not p for p in parts):
            raise MeasurerError(f"device list {device!r} has an empty entry")
        return list(parts)
    selectors = list(device)
    if not selectors:
        raise MeasurerError("the device list is empty")
    return selectors
