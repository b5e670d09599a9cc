"""Throughput next to speedup, as the front doors show it: the numbers come from the graph layer's roofline
(:mod:`kernelcast.graphs.search.roofline`, which a run's result needs too); the words of a measurement's flags
are the front doors' own."""

from __future__ import annotations


def shown_flags(flags: list[str]) -> list[str]:
    """A measurement's flags as outputs show them: the harness re-measures a large speedup (a fixed ratio) and
    says "implausible"; that word is kept for the roofline's verdict
    (:func:`kernelcast.graphs.search.roofline.throughput`), so the flag reads as what happened: it was re-measured and held."""
    return [f.replace("implausible: speedup", "re-measured: speedup", 1) if f.startswith("implausible: speedup")
            else f for f in flags]


__all__ = ["shown_flags"]
