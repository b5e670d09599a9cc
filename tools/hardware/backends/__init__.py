"""Measurement backends: one module per device API behind :class:`kernelcast.tools.hardware.backends.base.Runner`,
and the registry that names them.

A backend module only wraps its API; importing it loads no device library (each imports its own lazily), so the
registry lists every backend on any machine. Adding a backend is its module plus one entry in :data:`BACKENDS`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import MappingProxyType

from kernelcast.tools.core.errors import InputError
from kernelcast.tools.core.language import CUDA, OPENCL, Language
from kernelcast.tools.hardware.backends.base import CompileError, DeviceRuntimeError, Runner
from kernelcast.tools.hardware.backends.cuda import CudaRunner
from kernelcast.tools.hardware.backends.opencl import OpenCLRunner


class UnknownBackendError(InputError, ValueError):
    """A backend name that is not in :data:`BACKENDS`."""


@dataclass(frozen=True)
class Backend:
    """A device API that measures kernels of one language, and what the layers above it must know about it."""

    name: str
    language: Language
    runner: Callable[[str | None], Runner]  # the in-process runner on a device selector (None: the default)
    # devices are probed in a child process before a worker opens one (an OpenCL runtime can list a device it
    # cannot compile for; see kernelcast.tools.hardware.probe)
    probed: bool
    # a worker needs a GPU of its own: Ray asks for one per actor and counts the cluster's GPUs (else one per node)
    one_per_gpu: bool


#: Every backend by name; a language's default backend is :attr:`Language.backend`.
BACKENDS: MappingProxyType[str, Backend] = MappingProxyType({b.name: b for b in (
    Backend(OPENCL.backend, OPENCL, OpenCLRunner, probed=True, one_per_gpu=False),
    Backend(CUDA.backend, CUDA, CudaRunner, probed=False, one_per_gpu=True),
)})


def get_backend(name: str) -> Backend:
    """The backend called ``name``; :class:`UnknownBackendError` naming the known ones for any other name."""
    found = BACKENDS.get(name)
    if found is None:
        raise UnknownBackendError(f"unknown backend {name!r} (expected {' or '.join(BACKENDS)})")
    return found


def make_runner(backend: str, device: str | None = None) -> Runner:
    """Instantiate the in-process runner for ``backend`` on ``device``."""
    return get_backend(backend).runner(device)


__all__ = ["BACKENDS", "Backend", "CompileError", "DeviceRuntimeError", "Runner", "UnknownBackendError", "get_backend",
           "make_runner"]
