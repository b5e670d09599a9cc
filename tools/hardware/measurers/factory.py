"""The one place that builds measurers: a registry of measurer kinds, asked in order which one a request wants.

Adding a measurer is its module plus one :class:`MeasurerKind` in :data:`KINDS`. Ray is optional: its module is
imported only when a request asks for Ray (it imports :mod:`~kernelcast.tools.hardware.measurers.base`, never
this module, so there is no cycle to hide).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kernelcast.tools.core.language import OPENCL
from kernelcast.tools.hardware.backends import BACKENDS
from kernelcast.tools.hardware.measurers.base import Measurer, MeasurerError, split_devices
from kernelcast.tools.hardware.measurers.local import LocalMeasurer, PoolMeasurer, plan_devices
from kernelcast.tools.hardware.measurers.replay import ReplayMeasurer

if TYPE_CHECKING:
    from kernelcast.tools.store.store import Store


@dataclass(frozen=True)
class MeasurerRequest:
    """What a caller asked :func:`make_measurer` for."""

    backend: str
    device: str | Sequence[str | None] | None
    parallel: int
    ray: str | None
    replay_store: Store | None
    allow_mixed: bool
    share_device: bool
    replay_latency: bool
    store: Store | None


@dataclass(frozen=True)
class MeasurerKind:
    """One way of measuring: when a request wants it, and how to build it."""

    name: str
    wanted: Callable[[MeasurerRequest], bool]
    build: Callable[[MeasurerRequest], Measurer]


def _replay(request: MeasurerRequest) -> Measurer:
    assert request.replay_store is not None
    if request.ray is not None:
        raise MeasurerError("a replay needs no Ray cluster: pass either replay_store or ray, not both")
    selectors = split_devices(request.device)
    if len(selectors) != 1:
        raise MeasurerError("a replay answers for one stored device; name one")
    return ReplayMeasurer(request.replay_store, request.backend, selectors[0], parallel=request.parallel,
                          latency=request.replay_latency)


def _ray(request: MeasurerRequest) -> Measurer:
    assert request.ray is not None
    try:  # Ray is an optional dependency: imported only when asked for
        from kernelcast.tools.hardware.measurers.ray import RayMeasurer
    except ImportError as exc:
        raise MeasurerError(str(exc)) from None
    return RayMeasurer(request.backend, request.device, parallel=request.parallel, address=request.ray,
                       allow_mixed=request.allow_mixed, share_device=request.share_device)


def _local(request: MeasurerRequest) -> Measurer:
    selectors = split_devices(request.device)
    parallel = len(selectors) if request.parallel == 1 and len(selectors) > 1 else request.parallel
    selectors = plan_devices(selectors, parallel, request.share_device)
    if len(selectors) == 1:
        return LocalMeasurer(request.backend, selectors[0], store=request.store)
    return PoolMeasurer(request.backend, selectors, allow_mixed=request.allow_mixed)


#: The measurer kinds, asked in this order; the first that a request wants builds it.
KINDS: tuple[MeasurerKind, ...] = (
    MeasurerKind("replay", lambda r: r.replay_store is not None, _replay),
    MeasurerKind("ray", lambda r: r.ray is not None, _ray),
    MeasurerKind("local", lambda r: True, _local),  # one worker, or a pool of them
)


def make_measurer(backend: str = OPENCL.backend, device: str | Sequence[str | None] | None = None, parallel: int = 1,
                  ray: str | None = None, replay_store: Store | None = None, *, allow_mixed: bool = False,
                  share_device: bool = False, replay_latency: bool = False, store: Store | None = None) -> Measurer:
    """Build the measurer a caller asked for.

    * ``replay_store``: a :class:`~kernelcast.tools.hardware.measurers.replay.ReplayMeasurer` over that store
      (``device`` picks the stored device);
    * ``ray`` ("auto" or a cluster address): a :class:`~kernelcast.tools.hardware.measurers.ray.RayMeasurer` with
      ``parallel`` actors (0: one per GPU of the cluster, CUDA only);
    * otherwise ``parallel`` 1 with one device: a :class:`~kernelcast.tools.hardware.measurers.local.LocalMeasurer`
      (``store`` caches its device probe), and more: a
      :class:`~kernelcast.tools.hardware.measurers.local.PoolMeasurer` with one device per worker
      (``device="0:0,0:1"``); one device for several workers only with ``share_device=True``.
    """
    if backend not in BACKENDS:
        raise MeasurerError(f"unknown backend {backend!r} (expected {' or '.join(BACKENDS)})")
    request = MeasurerRequest(backend=backend, device=device, parallel=parallel, ray=ray, replay_store=replay_store,
                              allow_mixed=allow_mixed, share_device=share_device, replay_latency=replay_latency,
                              store=store)
    kind = next(kind for kind in KINDS if kind.wanted(request))
    return kind.build(request)


__all__ = ["KINDS", "MeasurerKind", "MeasurerRequest", "make_measurer"]
