"""Independent numpy implementations of the built-in tasks, the oracle for their reference kernels.

``NUMPY_REFS[name](inputs, scalars, sizes)`` returns the expected content of every
output buffer (intent "out" or "inout") as a flat array of the buffer's dtype.
``inputs`` are the seeded host arrays the harness uploads (``kernelcast.tools.hardware.harness.make_inputs``),
``scalars`` the by-value arguments (``kernelcast.tools.hardware.harness.scalar_values``), ``sizes`` the named
problem sizes. Floating-point results are computed in float64 and rounded once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

Inputs = Mapping[str, np.ndarray]
Scalars = Mapping[str, Any]
Sizes = Mapping[str, int]
NumpyRef = Callable[[Inputs, Scalars, Sizes], dict[str, np.ndarray]]


def _f32(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).ravel()


def saxpy(inputs: Inputs, scalars: Scalars, sizes: Sizes) -> dict[str, np.ndarray]:
    a = np.float64(scalars["a"])
    return {"y": _f32(a * inputs["x"].astype(np.float64) + inputs["y"].astype(np.float64))}


def reduce_rows(inputs: Inputs, scalars: Scalars, sizes: Sizes) -> dict[str, np.ndarray]:
    m, n = sizes["M"], sizes["N"]
    return {"out": _f32(inputs["A"].astype(np.float64).reshape(m, n).sum(axis=1))}


def softmax(inputs: Inputs, scalars: Scalars, sizes: Sizes) -> dict[str, np.ndarray]:
    m, n = sizes["M"], sizes["N"]
    x = inputs["X"].astype(np.float64).reshape(m, n)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return {"Y": _f32(e / e.sum(axis=1, keepdims=True))}


def layernorm(inputs: Inputs, scalars: Scalars, sizes: Sizes) -> dict[str, np.ndarray]:
    m, n = sizes["M"], sizes["N"]
    x = inputs["X"].astype(np.float64).reshape(m, n)
    mean = x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)  # biased, as the kernel
    y = (x - mean) / np.sqrt(var + np.float64(scalars["eps"]))
    y = y * inputs["gamma"].astype(np.float64) + inputs["beta"].astype(np.float64)
    return {"Y": _f32(y)}


def transpose(inputs: Inputs, scalars: Scalars, sizes: Sizes) -> dict[str, np.ndarray]:
    m, n = sizes["M"], sizes["N"]
    return {"B": _f32(inputs["A"].reshape(m, n).T)}


def gemm(inputs: Inputs, scalars: Scalars, sizes: Sizes) -> dict[str, np.ndarray]:
    m, n, k = sizes["M"], sizes["N"], sizes["K"]
    a = inputs["A"].astype(np.float64).reshape(m, k)
    b = inputs["B"].astype(np.float64).reshape(k, n)
    return {"C": _f32(a @ b)}


def gemv(inputs: Inputs, scalars: Scalars, sizes: Sizes) -> dict[str, np.ndarray]:
    m, n = sizes["M"], sizes["N"]
    return {"y": _f32(inputs["A"].astype(np.float64).reshape(m, n) @ inputs["x"].astype(np.float64))}


def stencil2d(inputs: Inputs, scalars: Scalars, sizes: Sizes) -> dict[str, np.ndarray]:
    h, w = sizes["H"], sizes["W"]
    x = inputs["in"].astype(np.float64).reshape(h, w)
    out = x.copy()  # the boundary is copied
    out[1:-1, 1:-1] = 0.25 * (x[:-2, 1:-1] + x[2:, 1:-1] + x[1:-1, :-2] + x[1:-1, 2:])
    return {"out": _f32(out)}


def histogram(inputs: Inputs, scalars: Scalars, sizes: Sizes) -> dict[str, np.ndarray]:
    counts = np.bincount(inputs["data"].astype(np.int64), minlength=256)
    # bins is inout: the kernel adds to whatever the buffer held (zeros by the task's init)
    return {"bins": (inputs["bins"].astype(np.int64) + counts).astype(np.uint32)}


def scan(inputs: Inputs, scalars: Scalars, sizes: Sizes) -> dict[str, np.ndarray]:
    return {"out": np.cumsum(inputs["x"].astype(np.int64)).astype(np.int32)}


NUMPY_REFS: dict[str, NumpyRef] = {
    "saxpy": saxpy,
    "reduce_rows": reduce_rows,
    "softmax": softmax,
    "layernorm": layernorm,
    "transpose": transpose,
    "gemm": gemm,
    "gemv": gemv,
    "stencil2d": stencil2d,
    "histogram": histogram,
    "scan": scan,
}
