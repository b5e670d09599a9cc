"""The only caller of the Measurer inside a run: every measurement a run buys goes through :class:`Spender`.

Resume-safe: a measurement is written to the store (with the run id) before the step that bought it returns,
so before the checkpoint that mentions it is written; a candidate this run already measured in a phase is
reused from the store, never bought twice. After each bought measurement the after-measurement hooks run in
order (as TVM MetaSchedule's measure callbacks do): the first stores it, the second reports it as an event;
a run may add more (a learning forecaster reads the store, so it learns from what the first hook wrote).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kernelcast.graphs import events as ev
from kernelcast.graphs.context import RunContext
from kernelcast.graphs.search.budget import Budget
from kernelcast.graphs.search.tree import NodeRecord, TreeEdit
from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.measurement import MeasureConfig, Measurement
from kernelcast.tools.hardware.measurers.replay import REPLAY_MISSING_FLAG

AfterMeasurement = Callable[[Candidate, Measurement], None]  # a hook, called with each bought measurement


def confirmation_config(config: MeasureConfig) -> MeasureConfig:
    """More repetitions and a tighter interval: a winner's number must not be the luck of one measurement."""
    return config.model_copy(update={"min_reps": max(config.min_reps, 20), "target_seconds": 4 * config.target_seconds,
                                     "ci_target": config.ci_target / 2, "max_timing_seconds": 2 * config.max_timing_seconds,
                                     "max_batches": 2 * config.max_batches})


def apply_measurement(node: NodeRecord, result: Measurement, phase: str) -> None:
    """What a measurement says about its node."""
    if phase == "confirm":
        node["confirmed"] = result.speedup if result.ok else None
        node["confirmed_ci"] = list(result.speedup_ci) if result.ok and result.speedup_ci else None
        if not result.ok:
            node["outcome"] = "failed"
            node["reason"] = f"failed its confirmation: {result.status.value}: {result.reason[:300]}"
        return
    node["speedup"] = result.speedup if result.ok else None
    node["cv"] = result.candidate.cv if result.candidate else None
    node["reason"] = "" if result.ok else f"{result.status.value}: {result.reason[:300]}"


class Spender:
    """Buys measurements for one run: within its :class:`Budget`, stored before anything mentions them."""

    def __init__(self, ctx: RunContext, budget: Budget, hooks: Sequence[AfterMeasurement] = ()) -> None:
        self.ctx = ctx
        self.budget = budget
        self.hooks: list[AfterMeasurement] = [self.store_hook, self.event_hook, *hooks]
        self.not_in_replay: set[str] = set()  # candidates a replay had no measurement of (nothing was bought)

    # ---- the after-measurement hooks ------------------------------------------------------
    def store_hook(self, candidate: Candidate, bought: Measurement) -> None:
        """Write the measurement to the store, under the run: first, so every later hook and step reads it."""
        self.ctx.store.ledger.add(bought, run_id=self.ctx.run_id)

    def event_hook(self, candidate: Candidate, bought: Measurement) -> None:
        measurer, ctx = self.ctx.measurer, self.ctx
        ctx.emit(ev.Spend(phase=bought.phase, status=bought.status.value, speedup=bought.speedup,
                          over_incumbent=bought.rival.ratio if bought.rival is not None else None,
                          spent=self.budget.spent(), budget=ctx.config.budget, flags=bought.flags,
                          in_flight=[f"{f.worker}:{f.candidate_hash[:8]}" for f in measurer.in_flight()]),
                 candidate_hash=candidate.hash)

    # ---- buying ---------------------------------------------------------------------------
    def measure(self, nodes: TreeEdit, key: str, phase: str, rival: str | None = None) -> Measurement | None:
        """Measure one candidate (see :meth:`measure_many`)."""
        return self.measure_many(nodes, [key], phase, rival)[key]

    def measure_many(self, nodes: TreeEdit, keys: list[str], phase: str, rival: str | None = None,
                     ) -> dict[str, Measurement | None]:
        """Measure candidates concurrently through the measurer and apply each result to its node; None for those
        the budget cannot pay (or a replay has no measurement of).

        ``rival``: a measured node (the incumbent) timed beside each candidate, so whether a child beat it is a
        paired comparison of one session (the calibration rows read it: :mod:`kernelcast.graphs.route.trust`).
        The budget is reserved before dispatch (never more in flight than the store's ledger allows).
        """
        ctx = self.ctx
        results: dict[str, Measurement | None] = {}
        fresh = []
        for key in keys:
            existing = [m for m in ctx.store.ledger.find(run_id=ctx.run_id, candidate_hash=key)
                        if (m.phase == "confirm") == (phase == "confirm")]
            if existing:
                results[key] = existing[-1]
                ctx.emit(ev.Reused(phase=phase, reason="measured before a restart"), candidate_hash=key, store=False)
            else:
                fresh.append(key)
        allowed = max(0, ctx.config.budget - self.budget.spent())
        for key in fresh[allowed:]:
            results[key] = None
        dispatch = [ctx.store.candidates.get(key) for key in fresh[:allowed]]
        assert all(c is not None for c in dispatch), "a candidate is missing from the store"
        config = self._config(phase, rival)
        if dispatch:
            ctx.emit(ev.InFlight(phase=phase, workers=ctx.measurer.parallelism,
                                 candidates=[c.hash for c in dispatch if c is not None]), store=False)
        for candidate, measured in ctx.measurer.measure_many(ctx.task, [c for c in dispatch if c is not None], config):
            if ctx.measurer.simulated and REPLAY_MISSING_FLAG in measured.flags:
                results[candidate.hash] = None  # a replay without this candidate: nothing was bought
                self.not_in_replay.add(candidate.hash)
                continue
            bought = measured.model_copy(update={"phase": phase})
            for hook in self.hooks:
                hook(candidate, bought)
            results[candidate.hash] = bought
        for key, answer in results.items():
            if answer is not None:
                apply_measurement(nodes[key], answer, phase)
        return results

    def _config(self, phase: str, rival: str | None) -> MeasureConfig:
        config = confirmation_config(self.ctx.measure_config) if phase == "confirm" else self.ctx.measure_config
        if rival is not None:  # never the reference: against it the speedup itself is the pair (incumbent_of)
            incumbent = self.ctx.store.candidates.get(rival)
            assert incumbent is not None, f"the incumbent {rival} is missing from the store"
            config = config.model_copy(update={"rival": incumbent})
        return config

    # ---- what a step bought before a kill -----------------------------------------------------
    def measured_before_a_kill(self, keys: list[str]) -> list[str]:
        """Those of ``keys`` this run already measured (confirmations aside), in their order: in the route step,
        trial audits bought in that very step before a kill (a child reaches it unmeasured otherwise); in
        verify, what an earlier attempt of it bought."""
        bought = {m.candidate_hash for m in self.ctx.store.ledger.find(run_id=self.ctx.run_id) if m.phase != "confirm"}
        return [key for key in keys if key in bought]

    def confirmed_before_a_kill(self, key: str) -> bool:
        """Whether the store holds this run's confirmation of ``key`` that the state does not know of."""
        return any(m.phase == "confirm" for m in self.ctx.store.ledger.find(run_id=self.ctx.run_id,
                                                                            candidate_hash=key))

    def reuse_stored(self, nodes: TreeEdit, keys: list[str], phase: str) -> dict[str, Measurement]:
        """Apply the run's stored measurements of ``keys`` (bought before a restart) to their nodes, at no cost
        (once the budget is spent the measuring loops would never reach them): the measurements applied."""
        reused = self.measure_many(nodes, self.measured_before_a_kill(keys), phase)
        assert all(result is not None for result in reused.values()), "a stored measurement was not reused"
        return {key: result for key, result in reused.items() if result is not None}

    # ---- the harness calibration ----------------------------------------------------------------
    def noise_floor(self) -> Measurement | None:
        """The reference measured against itself with the confirmation protocol, once per task, device and
        sizes: how far from 1.0 noise alone moves a speedup here. A harness calibration, not a candidate, so
        it is stored without the run id and not charged to the budget."""
        ctx = self.ctx
        reference = ctx.task.reference()
        stored = [m for m in ctx.store.ledger.find(task=ctx.task.name, device=ctx.hardware.key,
                                                   candidate_hash=reference.hash, fingerprint=ctx.task.fingerprint)
                  if m.phase == "noise" and m.sizes == ctx.measure_config.sizes and m.ok]
        if stored:
            return stored[-1]
        result = ctx.measurer.measure(ctx.task, reference, confirmation_config(ctx.measure_config))
        result = result.model_copy(update={"phase": "noise"})
        ctx.store.ledger.add(result)
        ctx.emit(ev.NoiseFloor(speedup=result.speedup, interval=list(result.speedup_ci or ())))
        return result if result.ok else None
