"""Measure a hand-written saxpy variant on the device and forecast it first, side by side.

    python examples/measure_and_forecast.py [--sizes small|full]

The forecast costs no hardware time; the measurement is the ground truth. Both are stored,
so the next learned forecaster trains on this pair.
"""

from __future__ import annotations

import argparse

import kernelcast
from kernelcast.api import as_task, make_candidate
from kernelcast.tools.core.bins import BIN_NAMES

# Two elements per work-item through float2 loads: the same signature as the reference kernel.
VECTORIZED = """
__kernel void saxpy(__global const float *x, __global float *y, const float a, const int n)
{
    int i = get_global_id(0);
    if (2 * i + 1 < n) {
        float2 xv = vload2(i, x);
        float2 yv = vload2(i, y);
        vstore2(a * xv + yv, i, y);
    }
}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", choices=["small", "full"], default="small")
    args = parser.parse_args()

    task = as_task("saxpy")
    candidate = make_candidate(task, VECTORIZED).model_copy(update={"global_size": ["N / 2"]})

    fc = kernelcast.forecast(task, candidate)
    if fc.failed:  # e.g. the learned forecaster before it has enough measured pairs
        print(f"forecast: uninformative ({fc.provenance.failure_reason}); the router would measure it")
    else:
        print(f"forecast: bin {fc.predicted_bin} ({BIN_NAMES[fc.predicted_bin]}), confidence {fc.confidence:.2f}")

    m = kernelcast.measure(task, candidate, sizes=args.sizes)
    if m.ok:
        print(f"measured: {m.status.value}, speedup {m.speedup:.3f}x, bin {m.bin()} ({BIN_NAMES[m.bin()]})")
    else:
        print(f"measured: {m.status.value}: {m.reason}")


if __name__ == "__main__":
    main()
