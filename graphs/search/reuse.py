"""What this device measured before, reused by a session at no cost.

A session's caller may submit a kernel an earlier run (or session) already bought on the same device, at the same
sizes, for the same task: its stored live measurement is the answer, so the kernel joins the tree with that result
instead of being refused or bought again. The rows are copied under the session with provenance ``reused``
(:data:`~kernelcast.tools.core.measurement.Provenance`): every reader of the session's ledger sees them, the budget
(``store.ledger.totals``) does not count them, and no other run's read sees the copies. Replayed, imported and
recorded rows are never reused: only live ones (the store's default reads).
"""

from __future__ import annotations

from dataclasses import dataclass

from kernelcast.tools.core.measurement import Measurement
from kernelcast.tools.core.task import Task
from kernelcast.tools.store.store import Store

REUSED = "reused"  # the provenance of a session's copy of an earlier run's measurement


@dataclass(frozen=True)
class StoredResult:
    """An earlier live measurement of one kernel at a session's device and sizes, with its confirmation if any."""

    first: Measurement  # the latest search or verify measurement
    confirmation: Measurement | None  # the latest confirmation (the reported speedup when there is one)

    def describe(self) -> str:
        """What the caller reads: where the result comes from and that nothing was charged."""
        return (f"reused: measured on this device at these sizes before ({self.first.created_at[:19].replace('T', ' ')}"
                f"{', confirmed' if self.confirmation is not None else ''}); its stored result stands, nothing charged")


def stored_results(store: Store, task: Task, device: str, sizes: str) -> dict[str, StoredResult]:
    """Every kernel of ``task`` with a live measurement on ``device`` at ``sizes`` (the store's default read keeps
    live rows only), by candidate hash."""
    first: dict[str, Measurement] = {}
    confirmation: dict[str, Measurement] = {}
    for m in store.ledger.find(task=task.name, device=device, sizes=sizes, fingerprint=task.fingerprint):
        if m.phase == "confirm":
            confirmation[m.candidate_hash] = m
        elif m.phase != "noise":
            first[m.candidate_hash] = m
    return {key: StoredResult(m, confirmation.get(key)) for key, m in first.items()}


def reuse(store: Store, run_id: str, found: StoredResult) -> list[Measurement]:
    """The run's copies of ``found`` (first, then the confirmation), written unless the run holds them already
    (a step run again after a kill copies nothing twice). The rival of another run is left out: it was timed beside
    that run's incumbent, not this one's."""
    held = [m for m in store.ledger.find(run_id=run_id, candidate_hash=found.first.candidate_hash)
            if m.provenance == REUSED]
    if held:
        return held
    copies = [m.model_copy(update={"provenance": REUSED, "rival": None})
              for m in (found.first, found.confirmation) if m is not None]
    for copy in copies:
        store.ledger.add(copy, run_id=run_id)
    return copies
