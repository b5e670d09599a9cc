"""One interface for every way of measuring: a local worker, a pool of workers, Ray actors, or a replay.

Callers (the graph, the dataset builder, the API, generators) talk to a :class:`Measurer`, never to a
concrete worker, so a search scales from one device to a cluster without changing. Every implementation
keeps the protocol of :mod:`kernelcast.tools.hardware.worker`: each measurement runs in an isolated worker process
on one device, and the reference is timed in the same session as the candidate, so each speedup belongs to
the device that measured it.

``measure_many`` runs exactly the candidates it is given (a lost worker's candidate is retried once on
another worker, then recorded as a ``crash`` with the reason) and yields each one exactly once, as soon as
its measurement completes. Budget accounting is the caller's: reserve, then pass only what was reserved.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Self, TypeVar

from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.measurement import HardwareSpec, Measurement, MeasureConfig, Status
from kernelcast.tools.core.task import Task
from kernelcast.tools.hardware.worker import MeasurementWorker, WorkerError

if TYPE_CHECKING:
    from kernelcast.tools.store.store import Store

T = TypeVar("T")


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


# ---- local: today's single isolated worker -------------------------------------------
class LocalMeasurer(Measurer):
    """One :class:`MeasurementWorker`, measuring one candidate after the other in the caller's thread."""

    def __init__(self, backend: str = "opencl", device: str | None = None, store: Store | None = None) -> None:
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


def _failure(task: Task, candidate: Candidate, device: str, config: MeasureConfig, status: Status, reason: str,
             wall_ms: float) -> Measurement:
    return Measurement(task=task.name, task_fingerprint=task.fingerprint, candidate_hash=candidate.hash, device=device,
                       sizes=config.sizes, status=status, reason=reason[:4000], seeds=list(config.seeds), wall_ms=wall_ms)


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:500]


def _worker_label(backend: str, device: str | None, index: int) -> str:
    return f"{backend}:{device or 'default'}#{index}"


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


# ---- pool: N isolated workers on this machine ----------------------------------------
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


class ScheduledMeasurer(Measurer):
    """A measurer whose workers are slots of a :class:`Scheduler` (a pool, Ray actors): ``start`` builds it."""

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


# ---- replay: answers from the store, no hardware -------------------------------------
REPLAY_MISSING_FLAG = "not_in_replay_store"


class ReplaySlot(Slot):
    """A simulated worker: it waits the stored measurement's device time (if asked), then answers it."""

    def __init__(self, index: int, device: str, latency: bool,
                 lookup: Callable[[Task, Candidate, MeasureConfig], Measurement]) -> None:
        self.label = f"replay:{index}"
        self._device = device
        self._latency = latency
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"replay-{index}")
        self.lookup = lookup

    def submit_measure(self, task: Task, candidate: Candidate, config: MeasureConfig) -> Future[Measurement]:
        answer = self.lookup(task, candidate, config)  # in the caller's thread: one store connection
        delay_s = (answer.wall_ms or 0.0) / 1e3 if self._latency and REPLAY_MISSING_FLAG not in answer.flags else 0.0
        return self._thread.submit(_answer_after, answer, delay_s)

    def is_lost(self, exc: BaseException) -> bool:
        return False

    def device_key(self) -> str:
        return self._device

    def close(self) -> None:
        self._thread.shutdown(wait=True)


def _answer_after(answer: Measurement, delay_s: float) -> Measurement:
    if delay_s > 0:
        time.sleep(delay_s)
    return answer


class ReplayMeasurer(Measurer):
    """Answers from a store's measurements of the same device, task and candidate, as Kernel Tuner's
    simulation mode does: searches and benchmarks without hardware. With ``latency=True`` each answer
    waits the stored measurement's wall time, so orchestration timings are realistic."""

    simulated = True

    def __init__(self, store: Store, backend: str, device: str | None = None, parallel: int = 1,
                 latency: bool = False) -> None:
        if parallel < 1:
            raise MeasurerError(f"parallel must be at least 1 (got {parallel})")
        self.backend = backend
        self.store = store
        self.spec = resolve_stored_device(store, backend, device)
        self.latency = latency
        self.parallel = parallel
        self._scheduler: Scheduler | None = None
        self._round: dict[str, Measurement] | None = None

    def _ensure_scheduler(self) -> Scheduler:
        if self._scheduler is None:
            slots = [ReplaySlot(i, self.spec.key, self.latency, self.lookup) for i in range(self.parallel)]
            self._scheduler = Scheduler(slots)
        return self._scheduler

    @property
    def parallelism(self) -> int:
        return self.parallel

    def hardware_spec(self) -> HardwareSpec:
        return self.spec

    def stored(self, task: Task, sizes: str) -> dict[str, Measurement]:
        """The latest stored measurement of each candidate of ``task`` on this device at ``sizes`` (one query):
        live rows only (the store's reads outside a run), so a replay never answers with an earlier replay's."""
        rows = self.store.measurements(task=task.name, device=self.spec.key, sizes=sizes, fingerprint=task.fingerprint)
        # a search's answer is its first-phase measurement, never a later confirmation of the same kernel (the
        # confirmation re-measures the winner with more repetitions; replaying it earlier would change decisions)
        answers = {m.candidate_hash: m for m in rows if m.phase not in ("search", "verify")}
        answers.update({m.candidate_hash: m for m in rows if m.phase in ("search", "verify")})
        return answers

    def lookup(self, task: Task, candidate: Candidate, config: MeasureConfig) -> Measurement:
        """The latest stored measurement of this task, candidate, device and sizes, or a failure saying none is;
        either marked ``replayed``: a stored number is not a live measurement, and a store keeps it apart."""
        answers = self._round if self._round is not None else self.stored(task, config.sizes)
        found = answers.get(candidate.hash)
        if found is not None:
            return found.model_copy(update={"replayed": True})
        return Measurement(task=task.name, task_fingerprint=task.fingerprint, candidate_hash=candidate.hash,
                           device=self.spec.key, sizes=config.sizes, status=Status.invalid, flags=[REPLAY_MISSING_FLAG],
                           seeds=list(config.seeds), wall_ms=0.0, replayed=True,
                           reason=f"replay: candidate {candidate.short} of task {task.name} was never measured on "
                                  f"{self.spec.key} at sizes {config.sizes!r}; a replay can only answer stored "
                                  "measurements")

    def build(self, task: Task, candidate: Candidate, timeout_s: float = 60.0) -> tuple[str, str]:
        """The stored verdict: compile errors as stored, "ok" otherwise.

        A candidate never measured is "ok" too: the stored search compiled it (or it would not have been a
        candidate), and a replay must propose what the stored search proposed to reproduce its decisions; if it
        is then chosen for measurement, :meth:`lookup` answers that it was never measured."""
        found = self.store.measurements(task=task.name, device=self.spec.key, candidate_hash=candidate.hash,
                                        fingerprint=task.fingerprint)
        if not found:
            return "ok", ""
        last = found[-1]
        return (last.status.value, last.reason) if last.status is Status.compile_error else ("ok", "")

    def check_reference(self, task: Task, sizes: str = "full", timeout_s: float = 120.0) -> list[str]:
        """Nothing runs in a replay: the stored measurements were checked when they were made."""
        return []

    def outputs(self, task: Task, candidate: Candidate, sizes: str = "small", seed: int = 0,
                timeout_s: float = 120.0) -> tuple[dict[str, Any], list[str]]:
        raise MeasurerError("the replay measurer has no device: kernel outputs cannot be replayed")

    def measure_many(self, task: Task, candidates: Iterable[Candidate],
                     config: MeasureConfig | None = None) -> Iterator[tuple[Candidate, Measurement]]:
        config = config or MeasureConfig()
        self._round = self.stored(task, config.sizes)  # one query per round, not one per candidate
        try:
            yield from self._ensure_scheduler().run(task, candidates, config)
        finally:
            self._round = None

    def in_flight(self) -> list[InFlight]:
        return self._scheduler.in_flight() if self._scheduler is not None else []

    def attempts(self) -> list[Attempt]:
        return self._scheduler.attempts() if self._scheduler is not None else []

    def close(self) -> None:
        if self._scheduler is not None:
            for slot in self._scheduler.slots:
                slot.close()
        self._scheduler = None


def resolve_stored_device(store: Store, backend: str, device: str | None) -> HardwareSpec:
    """The stored device a replay answers for: an exact key, a unique name fragment, or the only one stored."""
    known = [spec for spec in store.devices().values() if spec.backend == backend]
    if not known:
        raise MeasurerError(f"the store {store.path} has no {backend} device to replay (measure something first)")
    if device is not None:
        exact = [s for s in known if s.key == device]
        matches = exact or [s for s in known if device.lower() in s.key.lower()]
    else:
        matches = known
    if len(matches) == 1:
        return matches[0]
    listed = "; ".join(s.key for s in known)
    if not matches:
        raise MeasurerError(f"no stored {backend} device matches {device!r}; the store has: {listed}")
    raise MeasurerError(f"{len(matches)} stored {backend} devices match {device or 'any'!r}; name one of: {listed}")


# ---- the one place that builds measurers --------------------------------------------
def make_measurer(backend: str = "opencl", device: str | Sequence[str | None] | None = None, parallel: int = 1,
                  ray: str | None = None, replay_store: Store | None = None, *, allow_mixed: bool = False,
                  share_device: bool = False, replay_latency: bool = False, store: Store | None = None) -> Measurer:
    """Build the measurer a caller asked for.

    * ``replay_store``: a :class:`ReplayMeasurer` over that store (``device`` picks the stored device);
    * ``ray`` ("auto" or a cluster address): a :class:`~kernelcast.tools.hardware.measurers.ray.RayMeasurer` with
      ``parallel`` actors (0: one per GPU of the cluster, CUDA only);
    * otherwise ``parallel`` 1 with one device: a :class:`LocalMeasurer` (``store`` caches its device probe),
      and more: a :class:`PoolMeasurer`
      with one device per worker (``device="0:0,0:1"``); one device for several workers only with
      ``share_device=True``.
    """
    if backend not in ("opencl", "cuda"):
        raise MeasurerError(f"unknown backend {backend!r} (expected opencl or cuda)")
    if replay_store is not None:
        if ray is not None:
            raise MeasurerError("a replay needs no Ray cluster: pass either replay_store or ray, not both")
        selectors = split_devices(device)
        if len(selectors) != 1:
            raise MeasurerError("a replay answers for one stored device; name one")
        return ReplayMeasurer(replay_store, backend, selectors[0], parallel=parallel, latency=replay_latency)
    if ray is not None:
        try:
            from kernelcast.tools.hardware.measurers.ray import RayMeasurer
        except ImportError as exc:
            raise MeasurerError(str(exc)) from None

        return RayMeasurer(backend, device, parallel=parallel, address=ray, allow_mixed=allow_mixed,
                           share_device=share_device)
    selectors = split_devices(device)
    if parallel == 1 and len(selectors) > 1:
        parallel = len(selectors)
    selectors = plan_devices(selectors, parallel, share_device)
    if len(selectors) == 1:
        return LocalMeasurer(backend, selectors[0], store=store)
    return PoolMeasurer(backend, selectors, allow_mixed=allow_mixed)
