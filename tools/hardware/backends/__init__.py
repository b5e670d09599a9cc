"""Measurement backends: one module per device API behind :class:`kernelcast.tools.hardware.backends.base.Runner`."""

from __future__ import annotations

from kernelcast.tools.hardware.backends.base import CompileError, DeviceRuntimeError, Runner


def make_runner(backend: str, device: str | None = None) -> Runner:
    """Instantiate the in-process runner for ``backend`` (opencl|cuda) on ``device``."""
    if backend == "opencl":
        from kernelcast.tools.hardware.backends.opencl import OpenCLRunner

        return OpenCLRunner(device)
    if backend == "cuda":
        from kernelcast.tools.hardware.backends.cuda import CudaRunner

        return CudaRunner(device)
    raise ValueError(f"unknown backend {backend!r} (expected opencl or cuda)")


__all__ = ["CompileError", "DeviceRuntimeError", "Runner", "make_runner"]
