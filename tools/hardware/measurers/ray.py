"""Measurement on a Ray cluster: one actor per device, each running the same isolated worker.

An actor holds a :class:`~kernelcast.tools.hardware.worker.MeasurementWorker`, so a crashing kernel still kills only
that worker's child process and comes back as a ``crash`` measurement. Losing the actor itself (its node
went away, it was killed) is a lost worker: the :class:`~kernelcast.tools.hardware.measurers.base.Scheduler` retries the
candidate once on another actor, then records a ``crash`` with the reason. CUDA actors ask Ray for one GPU
each (``num_gpus=1``), so Ray's ``CUDA_VISIBLE_DEVICES`` gives every actor its own GPU.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

try:
    import ray
    from ray.exceptions import GetTimeoutError, RayActorError
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("Ray is not installed: pip install 'kernelcast[ray]' (or pip install ray)") from exc

from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.language import OPENCL
from kernelcast.tools.core.measurement import HardwareSpec, MeasureConfig, Measurement
from kernelcast.tools.core.task import Task
from kernelcast.tools.hardware.backends import get_backend
from kernelcast.tools.hardware.measurers.base import (
    MeasurerError,
    ScheduledMeasurer,
    Scheduler,
    Slot,
    check_one_device_model,
    split_devices,
)
from kernelcast.tools.hardware.worker import MeasurementWorker, WorkerError

START_TIMEOUT_S = 180.0


@dataclass(frozen=True)
class ActorInfo:
    """Where an actor landed and what device it opened (also what ``kernelcast devices --ray`` lists)."""

    label: str
    node_id: str
    host: str
    gpu_ids: tuple[str, ...]
    selector: str | None
    spec: HardwareSpec


class MeasureActor:
    """The actor's body: a MeasurementWorker on this node's device (Ray serializes calls to it)."""

    def __init__(self, backend: str, device: str | None) -> None:
        self.backend, self.device = backend, device
        self.worker = MeasurementWorker(backend, device)

    def start(self) -> tuple[HardwareSpec, str, str, tuple[str, ...]]:
        context = ray.get_runtime_context()
        gpus = tuple(str(g) for g in context.get_accelerator_ids().get("GPU", []))
        return self.worker.start(), context.get_node_id(), socket.gethostname(), gpus

    def measure(self, task: Task, candidate: Candidate, config: MeasureConfig) -> Measurement:
        return self.worker.measure(task, candidate, config)

    def build(self, task: Task, candidate: Candidate, timeout_s: float) -> tuple[str, str]:
        return self.worker.build(task, candidate, timeout_s)

    def outputs(self, task: Task, candidate: Candidate, sizes: str, seed: int,
                timeout_s: float) -> tuple[dict[str, Any], list[str]]:
        return self.worker.outputs(task, candidate, sizes, seed, timeout_s)

    def check_reference(self, task: Task, sizes: str, timeout_s: float) -> list[str]:
        return self.worker.check_reference(task, sizes, timeout_s)

    def close(self) -> None:
        self.worker.close()


class RaySlot(Slot):
    """One actor as a scheduler slot."""

    def __init__(self, actor: Any, info: ActorInfo) -> None:
        self.actor, self.info, self.label = actor, info, info.label

    def submit_measure(self, task: Task, candidate: Candidate, config: MeasureConfig) -> Future[Measurement]:
        return self.actor.measure.remote(task, candidate, config).future()

    def is_lost(self, exc: BaseException) -> bool:
        # the actor died, or its worker process can no longer start (Ray re-raises the cause's type)
        return isinstance(exc, (RayActorError, WorkerError))

    def device_key(self) -> str:
        return self.info.spec.key

    def close(self) -> None:
        if not ray.is_initialized():
            return  # the instance (and with it the actor) is already gone
        try:
            ray.get(self.actor.close.remote(), timeout=15)
        except Exception:  # noqa: BLE001 - a dead or stuck actor is killed below either way
            pass
        ray.kill(self.actor, no_restart=True)


def connect(address: str, num_cpus: int = 2) -> bool:
    """Join Ray at ``address``; "auto" joins a running local instance or starts one. True if we started it."""
    if ray.is_initialized():
        return False
    if address != "auto":
        try:
            ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
        except (ConnectionError, ValueError, RuntimeError) as exc:
            raise MeasurerError(f"cannot join the Ray cluster at {address!r}: {exc}") from None
        return False
    try:  # an instance started with `ray start --head` on this machine, or RAY_ADDRESS
        ray.init(address="auto", logging_level=logging.WARNING, log_to_driver=False)
        return False
    except (ConnectionError, ValueError, RuntimeError):
        pass
    ray.init(num_cpus=num_cpus, include_dashboard=False, logging_level=logging.WARNING, log_to_driver=False)
    return True


class RayMeasurer(ScheduledMeasurer):
    """``parallel`` actors (0: one per GPU for a GPU backend such as CUDA, one per node for OpenCL), measuring
    concurrently."""

    def __init__(self, backend: str, device: str | Sequence[str | None] | None = None, parallel: int = 1,
                 address: str = "auto", allow_mixed: bool = False, share_device: bool = False,
                 actor_options: dict[str, Any] | None = None, start_timeout_s: float = START_TIMEOUT_S) -> None:
        if parallel < 0:
            raise MeasurerError(f"parallel must be at least 0 (0: fill the cluster), got {parallel}")
        self.backend = backend
        self.selectors = split_devices(device)
        self.parallel = parallel
        self.address = address
        self.allow_mixed = allow_mixed
        self.share_device = share_device
        self.actor_options = actor_options
        self.start_timeout_s = start_timeout_s
        self._owns_ray = False
        self._slots: list[RaySlot] = []
        self._scheduler: Scheduler | None = None

    # ---- placement -------------------------------------------------------------------
    def _placements(self) -> list[tuple[str | None, dict[str, Any]]]:
        """(device selector, actor options) per actor."""
        base: dict[str, Any] = {"num_cpus": 1, "max_restarts": 0, "max_task_retries": 0}
        backend = get_backend(self.backend)
        if backend.one_per_gpu:
            base["num_gpus"] = 1
        base.update(self.actor_options or {})
        count = self.parallel
        per_node: list[str] = []
        if count == 0:
            if backend.one_per_gpu:
                count = int(ray.cluster_resources().get("GPU", 0))
                if count == 0:
                    raise MeasurerError(f"the Ray cluster has no GPU: no {backend.language.title} actor can be placed")
            else:
                per_node = [n["NodeID"] for n in ray.nodes() if n.get("Alive")]
                count = len(per_node)
        if len(self.selectors) not in (1, count):
            raise MeasurerError(f"{count} actors but {len(self.selectors)} devices were named; name one device "
                                "for all actors or one per actor")
        placements = []
        for i in range(count):
            options = dict(base)
            if per_node:
                from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

                options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(per_node[i], soft=False)
            placements.append((self.selectors[i if len(self.selectors) > 1 else 0], options))
        return placements

    def start(self) -> HardwareSpec:
        if self._scheduler is None:
            wanted = self.parallel if self.parallel > 0 else 2
            self._owns_ray = connect(self.address, num_cpus=max(2, wanted)) or self._owns_ray
            remote_cls: Any = ray.remote(MeasureActor)
            placements = self._placements()
            actors: list[Any] = [remote_cls.options(**options).remote(self.backend, selector)
                                 for selector, options in placements]
            try:
                started = ray.get([a.start.remote() for a in actors], timeout=self.start_timeout_s)
            except GetTimeoutError:
                _kill_all(actors)
                raise MeasurerError(
                    f"Ray could not start {len(actors)} measurement actor(s) within {self.start_timeout_s:.0f} s; "
                    f"each asks for {placements[0][1]}, the cluster has {ray.available_resources()} free") from None
            except (RayActorError, WorkerError) as exc:
                _kill_all(actors)
                raise MeasurerError(f"a Ray measurement actor could not open its device: {exc}") from None
            infos = [_actor_info(i, answer, selector)
                     for i, (answer, (selector, _)) in enumerate(zip(started, placements, strict=True))]
            try:
                check_one_device_model([i.spec for i in infos], [i.label for i in infos], self.allow_mixed)
                self._check_not_shared(infos)
            except MeasurerError:
                _kill_all(actors)
                raise
            self._slots = [RaySlot(actor, info) for actor, info in zip(actors, infos, strict=True)]
            self._scheduler = Scheduler(self._slots)
        return self._slots[0].info.spec

    def _check_not_shared(self, infos: Sequence[ActorInfo]) -> None:
        """Two actors on one node opening the same device share it: only when asked (share_device=True)."""
        if self.share_device:
            return
        seen: dict[tuple[str, tuple[str, ...], str | None, str], str] = {}
        for info in infos:
            where = (info.node_id, info.gpu_ids, info.selector, info.spec.key)
            if where in seen:
                raise MeasurerError(f"{seen[where]} and {info.label} would measure on the same device of host "
                                    f"{info.host}; pass share_device=True to allow it (they then share its "
                                    "compute units), or give each actor its own device")
            seen[where] = info.label

    # ---- the Measurer interface ----------------------------------------------------------
    @property
    def parallelism(self) -> int:
        return len(self._slots) if self._slots else max(self.parallel, 1)

    def hardware_spec(self) -> HardwareSpec:
        return self.start()

    def hardware_specs(self) -> list[HardwareSpec]:
        self.start()
        return [s.info.spec for s in self._slots]

    def actors(self) -> list[ActorInfo]:
        """Where each actor runs and what it opened."""
        self.start()
        return [s.info for s in self._slots]

    def actor_handle(self, label: str) -> Any:
        """The Ray handle of the actor with ``label`` (to inspect or kill it)."""
        for slot in self._slots:
            if slot.label == label:
                return slot.actor
        raise MeasurerError(f"no actor {label!r}; actors: {', '.join(s.label for s in self._slots)}")

    def _any_actor(self) -> Any:
        self.start()
        live = [s for s in self._slots if s.alive]
        if not live:
            raise MeasurerError("every Ray measurement actor is lost")
        return live[0].actor

    def build(self, task: Task, candidate: Candidate, timeout_s: float = 60.0) -> tuple[str, str]:
        return ray.get(self._any_actor().build.remote(task, candidate, timeout_s))

    def check_reference(self, task: Task, sizes: str = "full", timeout_s: float = 120.0) -> list[str]:
        self.start()
        notes = ray.get([slot.actor.check_reference.remote(task, sizes, timeout_s) for slot in self._slots if slot.alive])
        return list(dict.fromkeys(note for device in notes for note in device))

    def outputs(self, task: Task, candidate: Candidate, sizes: str = "small", seed: int = 0,
                timeout_s: float = 120.0) -> tuple[dict[str, Any], list[str]]:
        return ray.get(self._any_actor().outputs.remote(task, candidate, sizes, seed, timeout_s))

    def close(self) -> None:
        for slot in self._slots:
            slot.close()
        self._slots, self._scheduler = [], None
        if self._owns_ray and ray.is_initialized():
            ray.shutdown()
            self._owns_ray = False


def _actor_info(index: int, answer: tuple[HardwareSpec, str, str, tuple[str, ...]],
                selector: str | None) -> ActorInfo:
    spec, node, host, gpus = answer
    label = f"ray:{host}:{selector or 'default'}" + (f":gpu{','.join(gpus)}" if gpus else "") + f"#{index}"
    return ActorInfo(label=label, node_id=node, host=host, gpu_ids=gpus, selector=selector, spec=spec)


def _kill_all(actors: Sequence[Any]) -> None:
    for actor in actors:
        try:
            ray.kill(actor, no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            pass


def cluster_devices(address: str, backend: str = OPENCL.backend, device: str | None = None) -> list[ActorInfo]:
    """Every device of a Ray cluster: one actor per GPU (CUDA) or per node (OpenCL), started and stopped."""
    measurer = RayMeasurer(backend, device, parallel=0, address=address, allow_mixed=True)
    try:
        return measurer.actors()
    finally:
        measurer.close()


__all__ = ["ActorInfo", "MeasureActor", "RayMeasurer", "cluster_devices", "connect"]
