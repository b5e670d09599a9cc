"""Measurement without hardware: answers from a store's measurements, as Kernel Tuner's simulation mode does.

Two kinds of rows answer: a store's live measurements (a recorded search replayed exactly) and recorded ones
(``kernelcast import kernel-tuner``: a device kernelcast never ran on), whose every repetition is kept, so each
answer is a fresh draw: the medians of a bootstrap resample of the candidate's and the reference's recorded times.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np

from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.measurement import (
    HardwareSpec,
    MeasureConfig,
    Measurement,
    Provenance,
    Status,
    TimingStats,
    speedup_interval,
)
from kernelcast.tools.core.task import Task
from kernelcast.tools.hardware.gpu_specs import RECORDED_PLATFORM
from kernelcast.tools.hardware.measurers.base import MeasurerError, ScheduledMeasurer, Scheduler, Slot

if TYPE_CHECKING:
    from kernelcast.tools.store.store import Store

REPLAY_MISSING_FLAG = "not_in_replay_store"
#: the rows a replay answers from: a store's own measurements, or a device's recording
ANSWERING: tuple[Provenance, ...] = ("live", "recorded")


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


class ReplayMeasurer(ScheduledMeasurer):
    """Answers from a store's measurements of the same device, task and candidate, as Kernel Tuner's
    simulation mode does: searches and benchmarks without hardware. With ``latency=True`` each answer
    waits the stored measurement's wall time, so orchestration timings are realistic."""

    simulated = True

    def __init__(self, store: Store, backend: str, device: str | None = None, parallel: int = 1,
                 latency: bool = False, noise_seed: int = 0) -> None:
        if parallel < 1:
            raise MeasurerError(f"parallel must be at least 1 (got {parallel})")
        self.backend = backend
        self.store = store
        self.spec = resolve_stored_device(store, backend, device)
        self.latency = latency
        self.parallel = parallel
        self.noise_seed = noise_seed
        self._draws: dict[str, int] = {}  # answers given per candidate: each recorded answer is a new draw
        # the answering rows per (task, sizes): they never change under a replay (it writes replayed rows only,
        # which it never reads), and parsing a recorded space's rows took seconds a round
        self._stored: dict[tuple[str, str], dict[str, Measurement]] = {}
        self._scheduler: Scheduler | None = None
        self._round: dict[str, Measurement] | None = None

    def start(self) -> HardwareSpec:
        if self._scheduler is None:
            slots = [ReplaySlot(i, self.spec.key, self.latency, self.lookup) for i in range(self.parallel)]
            self._scheduler = Scheduler(slots)
        return self.spec

    @property
    def parallelism(self) -> int:
        return self.parallel

    def hardware_spec(self) -> HardwareSpec:
        return self.spec

    def stored(self, task: Task, sizes: str) -> dict[str, Measurement]:
        """The latest stored measurement of each candidate of ``task`` on this device at ``sizes`` (one query):
        live rows only (the store's reads outside a run), so a replay never answers with an earlier replay's."""
        key = (task.fingerprint, sizes)
        if key in self._stored:
            return self._stored[key]
        rows = self.store.ledger.find(task=task.name, device=self.spec.key, sizes=sizes, fingerprint=task.fingerprint,
                                      provenance=ANSWERING)
        # a search's answer is its first-phase measurement, never a later confirmation of the same kernel (the
        # confirmation re-measures the winner with more repetitions; replaying it earlier would change decisions)
        answers = {m.candidate_hash: m for m in rows if m.phase not in ("search", "verify")}
        answers.update({m.candidate_hash: m for m in rows if m.phase in ("search", "verify")})
        self._stored[key] = answers
        return answers

    def lookup(self, task: Task, candidate: Candidate, config: MeasureConfig) -> Measurement:
        """The latest stored measurement of this task, candidate, device and sizes, or a failure saying none is;
        either marked ``replayed``: a stored number is not a live measurement, and a store keeps it apart."""
        answers = self._round if self._round is not None else self.stored(task, config.sizes)
        found = answers.get(candidate.hash)
        if found is not None and found.provenance == "recorded":
            return self.draw(found, answers.get(task.reference().hash))
        if found is not None:
            return found.model_copy(update={"provenance": "replayed"})
        return Measurement(task=task.name, task_fingerprint=task.fingerprint, candidate_hash=candidate.hash,
                           device=self.spec.key, sizes=config.sizes, status=Status.invalid, flags=[REPLAY_MISSING_FLAG],
                           seeds=list(config.seeds), wall_ms=0.0, provenance="replayed",
                           reason=f"replay: candidate {candidate.short} of task {task.name} was never measured on "
                                  f"{self.spec.key} at sizes {config.sizes!r}; a replay can only answer stored "
                                  "measurements")

    def draw(self, row: Measurement, reference: Measurement | None) -> Measurement:
        """A recorded row answered with noise: the medians of a bootstrap resample of its recorded times and of the
        reference's (the reference row's own recorded times, else the reference summary the row carries), so a
        kernel measured twice reads differently, by as much as its recorded spread allows."""
        n = self._draws.get(row.candidate_hash, 0)
        self._draws[row.candidate_hash] = n + 1
        answer = row.model_copy(update={"provenance": "replayed"})
        cand = row.candidate.samples_ns if row.candidate is not None else None
        ref_stats = reference.candidate if reference is not None and reference.ok else row.reference
        ref = ref_stats.samples_ns if ref_stats is not None else None
        if not row.ok or not cand or not ref:
            return answer
        key = f"{self.noise_seed}:{self.spec.key}:{row.candidate_hash}:{n}".encode()
        rng = np.random.default_rng(int.from_bytes(hashlib.sha256(key).digest()[:8], "little"))
        cand_draw = rng.choice(np.asarray(cand), size=len(cand)).tolist()
        ref_draw = rng.choice(np.asarray(ref), size=len(ref)).tolist()
        cand_t, ref_t = TimingStats.from_samples(cand_draw), TimingStats.from_samples(ref_draw)
        return answer.model_copy(update={
            "candidate": cand_t, "reference": ref_t, "speedup": ref_t.median_ns / cand_t.median_ns,
            "speedup_ci": speedup_interval(ref_draw, cand_draw, resamples=200, seed=n)})

    def build(self, task: Task, candidate: Candidate, timeout_s: float = 60.0) -> tuple[str, str]:
        """The stored verdict: compile errors as stored, "ok" otherwise.

        A candidate never measured is "ok" too on a live device: the stored search compiled it (or it would not
        have been a candidate), and a replay must propose what the stored search proposed to reproduce its
        decisions; if it is then chosen for measurement, :meth:`lookup` answers that it was never measured. On a
        recorded device (``kernelcast import kernel-tuner``) nothing outside the recording can ever be answered,
        so it does not build: the generator proposes the recorded space only."""
        found = self.store.ledger.find(task=task.name, device=self.spec.key, candidate_hash=candidate.hash,
                                       fingerprint=task.fingerprint, provenance=ANSWERING)
        if not found and self.spec.platform == RECORDED_PLATFORM:
            return Status.compile_error.value, (f"not in the recording of {self.spec.name}: a recorded device "
                                                "answers its recorded configurations only")
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
            yield from super().measure_many(task, candidates, config)
        finally:
            self._round = None

    def close(self) -> None:
        if self._scheduler is not None:
            for slot in self._scheduler.slots:
                slot.close()
        self._scheduler = None


def resolve_stored_device(store: Store, backend: str, device: str | None) -> HardwareSpec:
    """The stored device a replay answers for: an exact key, a unique name fragment, or the only one stored."""
    known = [spec for spec in store.devices.all().values() if spec.backend == backend]
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
