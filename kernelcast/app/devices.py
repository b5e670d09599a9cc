"""The devices a door lists: every OpenCL device with its probe verdict, CUDA GPUs, a Ray cluster's devices."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kernelcast.tools.core.measurement import HardwareSpec
from kernelcast.tools.hardware.measurers.factory import make_measurer
from kernelcast.tools.hardware.opencl_devices import device_spec, list_devices
from kernelcast.tools.hardware.probe import probe_devices
from kernelcast.tools.hardware.worker import WorkerError
from kernelcast.tools.store.store import Store

if TYPE_CHECKING:
    from kernelcast.tools.hardware.measurers.ray import ActorInfo

__all__ = ["DeviceRow", "WorkerError", "cluster_devices", "device_rows", "make_measurer"]


@dataclass(frozen=True)
class DeviceRow:
    """One device as ``kernelcast devices`` lists it: OpenCL ones with their probe verdict, CUDA ones healthy."""

    index: str  # "platform:device" (OpenCL) or "cuda:N"
    spec: HardwareSpec
    healthy: bool
    reason: str  # why it is skipped ("" when healthy)


def device_rows(store: Store | None, refresh: bool = False) -> tuple[list[DeviceRow], str | None]:
    """Every device, OpenCL first in the probe's preference order, and the default (the first healthy OpenCL
    device; None: none). Verdicts come from ``store`` (``refresh``: probed again and recorded there)."""
    statuses = {s.index: s for s in probe_devices(store, refresh=refresh)}
    default = next((s.index for s in statuses.values() if s.healthy), None)
    listed = {index: device_spec(p, d) for index, p, d in list_devices()}
    rows = [DeviceRow(index, listed[index], s.healthy, s.reason) for index, s in statuses.items()]
    try:
        from kernelcast.tools.hardware.backends.cuda import list_devices as cuda_devices

        rows += [DeviceRow(f"cuda:{i}", spec, True, "") for i, spec in enumerate(cuda_devices())]
    except ImportError:
        pass
    return rows, default


def cluster_devices(address: str, backend: str) -> list[ActorInfo]:
    """One actor per device of a Ray cluster (GPU for CUDA, node for OpenCL), started, asked, stopped; an
    ImportError where the ray package is missing."""
    from kernelcast.tools.hardware.measurers.ray import cluster_devices as ray_devices

    return ray_devices(address, backend)
