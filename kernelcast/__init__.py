"""kernelcast: optimize OpenCL/CUDA kernels with agents that treat hardware measurements as scarce.

The Python API lives in :mod:`kernelcast.api`; the names below are the stable entry points.
"""

from __future__ import annotations

from typing import Any

__all__ = ["measure", "forecast", "propose", "optimize", "Session"]


def __getattr__(name: str) -> Any:
    # lazy: importing kernelcast must not open devices or pull in langgraph
    if name in __all__:
        from kernelcast import api

        return getattr(api, name)
    raise AttributeError(name)
