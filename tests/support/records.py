"""Stored records built by hand, for tests of what reads them."""

from __future__ import annotations

from kernelcast.tools.core.measurement import Measurement, Status, TimingStats


def measurement(cand_hash: str, speedup: float | None, status: Status = Status.correct) -> Measurement:
    """A saxpy measurement on device "dev" with the given speedup (its timings only where there is one)."""
    stats = TimingStats.from_samples([100.0, 110.0, 105.0])
    return Measurement(task="saxpy", candidate_hash=cand_hash, device="dev", sizes="full", status=status,
                       speedup=speedup, reference=stats if speedup else None, candidate=stats if speedup else None)
