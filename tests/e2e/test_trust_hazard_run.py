"""A run is never certified by another forecaster's calibration rows (the trust hazard, end to end).

The store's device holds hundreds of well-calibrated decisions of learned-forecaster runs at every stage a short
run passes through: enough to certify pruning and accepting. A run with ``--forecaster prior`` on that store
must take every decision on its own record (none yet): it measures, drops for want of budget, or audits, but
never prunes or accepts a child on its forecast alone.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from kernelcast.api import hardware
from kernelcast.graphs.config import RunConfig
from kernelcast.graphs.context import RunEnv
from kernelcast.graphs.events import Route
from kernelcast.graphs.route.trust import trust_for
from kernelcast.graphs.run import start_run
from kernelcast.tools.core.measurement import Measurement, Status, TimingStats
from kernelcast.tools.store.store import Store

from support.decisions import record_route


def _seed_learned_rows(store: Store, device: str, stages: int = 12, per_stage: int = 120) -> None:
    """``per_stage`` measured decisions of a learned run at each stage 0..stages-1, calibrated: a low p lost to
    its incumbent, a high p beat it."""
    run = store.runs.create("saxpy", device, RunConfig(task="saxpy", forecaster="learned").model_dump(), 24)
    store.runs.update(run, calibration_group="saxpy")
    stats = TimingStats.from_samples([100.0, 110.0, 105.0])
    for stage in range(stages):
        for i in range(per_stage):
            child = hashlib.sha256(f"learned-{stage}-{i}".encode()).hexdigest()
            p = 0.02 + 0.3 * (i % 3) / 3 if i % 2 else 0.98
            record_route(store, run, child, device=device, decision="measure", p_beat=p, incumbent=1.0, stage=stage)
            store.ledger.add(Measurement(task="saxpy", candidate_hash=child, device=device, sizes="full",
                                         status=Status.correct, speedup=0.5 if p < 0.5 else 2.0,
                                         reference=stats, candidate=stats), run_id=run)


def test_a_prior_run_is_not_certified_by_the_learned_forecasters_rows(tmp_path: Path) -> None:
    store = Store(tmp_path / "k.db")
    device = hardware().key
    _seed_learned_rows(store, device)
    learned = trust_for(store, device, 3, 0.1, ("learned", None), group="saxpy")
    assert learned.prune_below is not None and learned.accept_above is not None, "the rows certify their own"
    config = RunConfig(task="saxpy", budget=8, router="selective", forecaster="prior", sizes="small",
                       measure_per_round=2, confirm_top=0)
    result = start_run(config, store, RunEnv(tmp_path, measure_timeout_s=60))
    routes = [Route.model_validate(e.payload) for e in store.events.find(result.run_id, kind="route")]
    assert len(routes) > 8, "the run routed more children than it could measure"
    assert not [r for r in routes if r.forecast_alone], "a prior run trusted the learned forecaster's record"
    assert {r.trust_source for r in routes} == {""}
