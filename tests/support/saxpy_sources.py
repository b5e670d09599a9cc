"""saxpy's signature and body as text, for candidates that wrap them in hostile preprocessor tricks."""

from __future__ import annotations

from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.task import Task

SAXPY_SIG = "__kernel void saxpy(__global const float *x, __global float *y, const float a, const int n)"
SAXPY_BODY = "{ int i = get_global_id(0); if (i < n) y[i] = a * x[i] + y[i]; }"


def saxpy_candidate(saxpy: Task, source: str, options: list[str] | None = None) -> Candidate:
    return Candidate(task="saxpy", source=source, global_size=["N"], build_options=options or [])
