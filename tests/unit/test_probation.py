"""A replayed threshold is tried on a task before it is trusted there: its first audits on the task and device
must be right (issue 13: the seed's calibration did not transfer to gemv's flat space, and the round that
pruned 166 children bought the audits that showed it)."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import numpy as np

from kernelcast.agents.forecast.distributions import lognormal_bins
from kernelcast.graphs.route.risk_control import DEVICE_RECORD, PROBATION_AUDITS, SEED_REPLAY, TrustThresholds, probation
from kernelcast.graphs.route.routers.base import RoutingInput
from kernelcast.graphs.route.routers.selective import SelectiveRouter, acts_on
from kernelcast.graphs.route.trust import trust_for
from kernelcast.tools.store.store import Store

from support.decisions import record_route
from support.records import measurement

LEARNED = ("learned", None)  # the forecaster the shipped seed replay was made with

REPLAYED = TrustThresholds(prune_below=0.2, accept_above=0.9, prune_bound=0.08, accept_bound=0.07,
                           n_calibration=3000, source=SEED_REPLAY)


def test_a_replayed_side_waits_for_its_first_audits_and_one_wrong_withdraws_it() -> None:
    untried = probation(REPLAYED, {})
    assert untried.probation == (("prune", PROBATION_AUDITS), ("accept", PROBATION_AUDITS))
    assert untried.prune_below == 0.2 and not untried.failed_probation
    assert untried.on_probation("prune") and not untried.on_probation(None)
    assert "on probation" in untried.describe()
    one_right = probation(REPLAYED, {"prune": [False]})
    assert one_right.on_probation("prune"), f"{PROBATION_AUDITS} audits decide, not one"
    assert one_right.trial_audits_needed("prune") == PROBATION_AUDITS - 1 and one_right.trial_audits_needed(None) == 0
    passed = probation(REPLAYED, {"prune": [False] * PROBATION_AUDITS})
    assert passed.probation == (("accept", PROBATION_AUDITS),) and passed.prune_below == 0.2 and passed.prune_bound == 0.08
    failed = probation(REPLAYED, {"prune": [False, True], "accept": [True]})
    assert failed.prune_below is None and failed.prune_bound is None
    assert failed.accept_above is None and failed.failed_probation == ("prune", "accept") and not failed.probation
    assert "failed one of its first audits" in failed.describe()
    # the gate is the first audits: a later wrong one is the device record's to judge (refutation), not a gate
    later = probation(REPLAYED, {"prune": [False] * PROBATION_AUDITS + [True]})
    assert later.prune_below == 0.2 and not later.on_probation("prune")
    own = TrustThresholds(prune_below=0.1, n_calibration=400, source=DEVICE_RECORD)
    assert probation(own, {"prune": [True, True]}) == own, "the device's own certificate needs no trial"


def _item(key: str, mu: float) -> RoutingInput:
    probs = tuple(lognormal_bins(mu, 0.2))
    return RoutingInput(hash=key, confidence=max(probs), predicted_bin=int(np.argmax(probs)) + 1,
                        expected_log_speedup=mu, expected_bin=float(np.arange(1, 9) @ np.asarray(probs)),
                        failed=False, probabilities=probs)


def test_on_probation_nothing_is_trusted_the_audits_go_to_its_would_be_decisions_first() -> None:
    items = [_item(f"slow{i}", math.log(0.5)) for i in range(12)] + [_item("unsure", 0.0)]
    on_trial = probation(REPLAYED, {})
    router = SelectiveRouter(measure_per_round=2, audit_rate=0.0, seed=3)
    out = router.route(items, 10, trust=on_trial, audits=5)
    assert not any(r.trusted for r in out.values()), "a side on probation decides nothing alone"
    audits = [r for r in out.values() if r.audit]
    assert len(audits) == PROBATION_AUDITS, "as many audits as the trial needs, not the whole allowance"
    assert all(r.probation and r.trusted_as == "prune" and r.decision == "measure" for r in audits)
    # the rest are routed as uncertain children: measured in Thompson order within the cap, the others dropped
    rest = [r for key, r in out.items() if not r.audit]
    assert sum(r.decision == "measure" for r in rest) == 2
    assert {r.decision for r in rest} == {"measure", "drop"}
    assert any("on probation" in r.reason for r in rest)
    half_tried = probation(REPLAYED, {"prune": [False]})
    assert sum(r.audit for r in router.route(items, 10, trust=half_tried, audits=5).values()) == 1
    # with no audits left the side stays untrusted: nothing audited, nothing trusted
    spent = router.route(items, 10, trust=on_trial, audits=0)
    assert not any(r.audit or r.trusted for r in spent.values())
    assert not acts_on(on_trial, items[0], 0) and acts_on(on_trial, items[0], 1)
    # once passed, the same children are trusted, and audited only at the audit rate (0 here)
    passed = probation(REPLAYED, {"prune": [False, False]})
    after = router.route(items, 10, trust=passed, audits=2)
    assert sum(r.decision == "prune" and r.trusted for r in after.values()) == 12
    assert not any(r.audit for r in after.values())
    assert acts_on(passed, items[0], 0)


def test_the_trial_reads_the_tasks_audits_under_replayed_trust_on_the_device(tmp_path: Path) -> None:
    """trust_for puts a replayed threshold on probation per task: two right audits of gemm's replayed prunes
    pass gemm, not softmax; a wrong one withdraws it for gemm alone; audits under the device's own record or
    on another device do not count."""
    store = Store(tmp_path / "k.db")
    stage = 5  # a stage bucket the shipped replay certifies a prune threshold for

    def audit_run(group: str, speedups: list[float], device: str = "dev", source: str = SEED_REPLAY) -> None:
        run = store.runs.create(group.split("@")[0], device, {"task": group.split("@")[0]}, 24)
        store.runs.update(run, calibration_group=group)
        for i, speedup in enumerate(speedups):
            child = hashlib.sha256(f"{run}-{i}".encode()).hexdigest()
            record_route(store, run, child, device=device, decision="measure", p_beat=0.01, incumbent=1.0, audit=True,
                         trusted_as="prune", trust_source=source, probation=True)
            store.ledger.add(measurement(child, speedup).model_copy(update={"device": device}), run_id=run)

    def thresholds(group: str) -> TrustThresholds:
        return trust_for(store, "dev", stage, 0.1, LEARNED, replayed=True, group=group, trial_group=group)

    assert thresholds("gemm").on_probation("prune")
    audit_run("gemm", [0.5, 0.8])
    audit_run("softmax", [0.5, 0.6], device="other")  # another device's audits say nothing about this one
    audit_run("softmax", [0.5, 0.6], source=DEVICE_RECORD)  # nor do audits of the device's own certificate
    gemm = thresholds("gemm")
    assert gemm.prune_below is not None and not gemm.on_probation("prune")
    assert thresholds("softmax").on_probation("prune")
    audit_run("gemv", [0.7, 1.4])  # the second audit's child beat the incumbent: a false prune
    gemv = thresholds("gemv")
    assert gemv.prune_below is None and gemv.failed_probation == ("prune",)
    assert thresholds("gemm").prune_below is not None, "gemv's failed trial is its own"
    audit_run("gemm", [1.6])  # a later run's wrong audit is past gemm's trial: the device's record judges it
    assert thresholds("gemm").prune_below is not None and not thresholds("gemm").on_probation("prune")
    assert trust_for(store, "dev", stage, 0.1, LEARNED, replayed=False, group="gemm",
                     trial_group="gemm").source == DEVICE_RECORD
