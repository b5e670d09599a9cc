"""Independent numpy implementations of the CUDA built-in tasks (float64 math, float32 result).

Argument names follow the OpenCL built-ins (X/Y, A/out, A/B). Each function takes the task's input arrays
(flat, as the harness makes them) and sizes and
returns the expected outputs by argument name. The tests compare a task's reference kernel and
its template points against these, so a wrong reference cannot certify itself.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

Arrays = dict[str, np.ndarray]


def gemm_cuda(x: Arrays, s: dict[str, int]) -> Arrays:
    a = x["A"].reshape(s["M"], s["K"]).astype(np.float64)
    b = x["B"].reshape(s["K"], s["N"]).astype(np.float64)
    return {"C": (a @ b).astype(np.float32).ravel()}


def softmax_cuda(x: Arrays, s: dict[str, int]) -> Arrays:
    v = x["X"].reshape(s["M"], s["N"]).astype(np.float64)
    e = np.exp(v - v.max(axis=1, keepdims=True))
    return {"Y": (e / e.sum(axis=1, keepdims=True)).astype(np.float32).ravel()}


def reduce_rows_cuda(x: Arrays, s: dict[str, int]) -> Arrays:
    v = x["A"].reshape(s["M"], s["N"]).astype(np.float64)
    return {"out": v.sum(axis=1).astype(np.float32)}


def transpose_cuda(x: Arrays, s: dict[str, int]) -> Arrays:
    return {"B": np.ascontiguousarray(x["A"].reshape(s["M"], s["N"]).T).ravel()}


def layernorm_cuda(x: Arrays, s: dict[str, int], eps: float = 1e-5) -> Arrays:
    v = x["X"].reshape(s["M"], s["N"]).astype(np.float64)
    mean = v.mean(axis=1, keepdims=True)
    var = v.var(axis=1, keepdims=True)  # biased, as in the kernels
    y = (v - mean) / np.sqrt(var + eps) * x["gamma"].astype(np.float64) + x["beta"].astype(np.float64)
    return {"Y": y.astype(np.float32).ravel()}


NUMPY_REFS: dict[str, Callable[[Arrays, dict[str, int]], Arrays]] = {
    "gemm_cuda": gemm_cuda,
    "softmax_cuda": softmax_cuda,
    "reduce_rows_cuda": reduce_rows_cuda,
    "transpose_cuda": transpose_cuda,
    "layernorm_cuda": layernorm_cuda,
}
