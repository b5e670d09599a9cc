"""Optimize the built-in saxpy task from a script, print each measurement as it happens, then the result.

    python examples/optimize_saxpy.py [--budget 6] [--sizes small|full]

Runs land in KERNELCAST_HOME (default: the platform user data folder); `kernelcast report RUN` draws them.
"""

from __future__ import annotations

import argparse
from typing import Any

import kernelcast
from kernelcast.graphs.route.routers import ROUTERS


def on_event(kind: str, payload: dict[str, Any]) -> None:
    """Called on every step of the search; 'spend' is one hardware measurement. A search measurement is the
    candidate's first (one noisy number); the end of the run re-measures the best ones ('confirm')."""
    if kind == "spend":
        which = "confirmation" if payload["phase"] == "confirm" else "first measurement"
        speed = f"{payload['speedup']:.3f}x ({which})" if payload["speedup"] else "-"
        print(f"  measurement {payload['spent']}/{payload['budget']}: {payload['status']} {speed}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=6, help="hardware measurements to spend")
    parser.add_argument("--sizes", choices=["small", "full"], default="small")
    parser.add_argument("--router", choices=list(ROUTERS), default="measure-all")
    args = parser.parse_args()

    result = kernelcast.optimize("saxpy", budget=args.budget, router=args.router, sizes=args.sizes,
                                 measure_per_round=2, on_event=on_event)
    print(f"run {result.run_id}: spent {result.spent} of {result.budget} measurements, "
          f"considered {result.considered} candidates")
    if result.best is not None:  # the confirmation with its interval, or a first measurement labelled so
        print(f"best kernel: {result.best.text()} ({result.best_intent}); {result.verdict}")
        print(f"path: {' -> '.join(result.best_path)}")
    else:
        print("no candidate beat the reference on this budget")
    print(f"run folder: {result.folder}")


if __name__ == "__main__":
    main()
