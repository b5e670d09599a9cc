"""A replayed threshold on probation is tried first within its round (issue 13): the route step measures the
trial audits, then routes the rest of the round on the thresholds as the trial left them, so a passed trial
trusts the same round's other would-be decisions instead of deferring them; a kill right after a trial audit
was bought resumes without buying it again or routing it again (real device, small sizes)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernelcast.graphs.route.risk_control import PROBATION_AUDITS, SEED_REPLAY
from kernelcast.graphs.route.trust import RouteRecord, beat_of, trust_summary, wrong_given
from kernelcast.tools.store.store import Store

from support.paths import ROOT
from support.run_checks import check_invariants, resume_to_the_end

BUDGET = 10
DRIVER = f"""
import json
import kernelcast
kernelcast.optimize("gemm", budget={BUDGET}, router="selective", sizes="small", measure_per_round=2,
                    trust_seed_replay=True, audit_share=0.3,
                    on_event=lambda kind, data: print(json.dumps({{"event": kind, **data}}, default=str), flush=True))
"""


def _kill_after_the_first_trial_audit(home: Path) -> tuple[str | None, str | None]:
    """Run the driver and SIGKILL it right after the first trial audit was bought: (run id, that candidate)."""
    env = {**os.environ, "KERNELCAST_HOME": str(home), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", DRIVER], stdout=subprocess.PIPE, text=True, env=env,
                            cwd=home.parent)
    assert proc.stdout is not None
    run_id, on_trial, killed = None, set(), None
    deadline = time.time() + 240
    while time.time() < deadline and (line := proc.stdout.readline()):
        event = json.loads(line)
        run_id = event.get("run_id", run_id)
        if event["event"] == "route" and event.get("probation"):
            on_trial.add(event["candidate"])
        elif event["event"] == "spend" and event.get("candidate") in on_trial:
            killed = event["candidate"]
            os.kill(proc.pid, signal.SIGKILL)
            break
    proc.wait()
    assert killed is not None or proc.returncode == 0, f"the run failed (exit {proc.returncode}) before any trial"
    return run_id, killed


def test_a_passed_trial_trusts_its_own_round_and_a_kill_after_a_trial_audit_loses_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    run_id, killed = _kill_after_the_first_trial_audit(home)
    store = Store(home / "kernelcast.db")
    if killed is None:
        pytest.skip("the seed's replayed thresholds certified nothing for gemm on this device within the budget: "
                    "no trial to read")
    assert run_id is not None
    before = {m.candidate_hash: m.created_at for m in store.ledger.find(run_id=run_id) if m.phase != "confirm"}
    assert killed in before
    resume_to_the_end(home, store, run_id, BUDGET, before)  # nothing bought before the kill is bought again
    check_invariants(store, run_id, BUDGET)

    routes = store.decisions.last_of_run(run_id)
    assert routes[killed].probation and routes[killed].audit, "the killed trial audit was routed again on resume"
    measured = {m.candidate_hash: m for m in store.ledger.find(run_id=run_id) if m.phase == "search"}
    round_no, round_of, spent_at, events = 0, {}, {}, store.events.find(run_id)
    for i, event in enumerate(events):
        round_no += event.kind == "generated"
        if event.kind == "route" and event.candidate_hash:
            round_of[event.candidate_hash] = round_no
        elif event.kind == "spend" and event.candidate_hash:
            spent_at.setdefault(event.candidate_hash, i)
    for side in ("prune", "accept"):
        trial = sorted((spent_at[key], key) for key, r in routes.items()  # its audits bought, in order
                       if r.probation and r.trusted_as == side and key in measured and key in spent_at)
        verdicts = [wrong_given(side, beat_of(routes[key], measured[key])) for _, key in trial]
        trusted = [i for i, e in enumerate(events) if e.kind == "route" and e.candidate_hash
                   and (r := RouteRecord.model_validate(e.payload)).forecast_alone and r.decision == side
                   and r.trust_source == SEED_REPLAY]  # the device's own record needs no trial
        if len(verdicts) < PROBATION_AUDITS or any(verdicts[:PROBATION_AUDITS]):
            assert not trusted, f"replayed {side}s trusted without a passed trial"
            continue
        passed_at, last = trial[PROBATION_AUDITS - 1]  # the trial's last audit, bought
        assert all(i > passed_at for i in trusted), f"a {side} was trusted before its trial audits were measured"
        # the passing round routed the rest of its children after the trial: none of them waits on it
        passing_round, round_no = round_of[last], 0
        for event in events:
            round_no += event.kind == "generated"
            if event.kind == "route" and round_no == passing_round and not (record := RouteRecord.model_validate(
                    event.payload)).audit:
                assert f"replayed {side} threshold is on probation (not trusted" not in record.reason, \
                    f"deferred in the round its trial passed: {record.reason}"
    summary = trust_summary(store, run_id)
    assert summary.probation_audits == sum(1 for r in routes.values() if r.probation) >= 1
