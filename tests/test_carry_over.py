"""A child left unmeasured for want of a round's room is routed again in later rounds, on a fresh forecast and
against that round's incumbent; it is one decision, its last (a session, which does not carry over: test_session)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from kernelcast.graphs.config import RunConfig
from kernelcast.graphs.run import RunEnv, start_run
from kernelcast.graphs.trust import RouteRecord, trust_summary
from kernelcast.tools.store import Store
from tests.test_graph import check_invariants


def test_a_dropped_child_is_forecast_and_routed_again_until_decided(tmp_path: Path) -> None:
    store = Store(tmp_path / "k.db")
    config = RunConfig(task="gemm", budget=8, router="selective", sizes="small", measure_per_round=2)
    result = start_run(config, store, RunEnv(tmp_path, measure_timeout_s=60))
    check_invariants(store, result.run_id, config.budget)

    round_of: dict[str, list[int]] = defaultdict(list)
    routed: dict[str, list[RouteRecord]] = defaultdict(list)
    rounds = 0
    for event in store.events(result.run_id):
        rounds += event.kind == "generated"
        if event.kind == "route" and event.candidate_hash:
            routed[event.candidate_hash].append(RouteRecord.model_validate(event.payload))
            round_of[event.candidate_hash].append(rounds)
    again = {key: records for key, records in routed.items() if len(records) > 1}
    assert again, "no child was carried over: every round measured all it proposed"
    forecasts = defaultdict(int)
    for record in store.forecasts(run_id=result.run_id):
        forecasts[record.candidate_hash] += 1
    measured = {m.candidate_hash for m in store.measurements(run_id=result.run_id)}
    for key, records in again.items():
        # only a drop is carried: a measured, pruned or accepted child is decided and never routed again
        assert all(r.decision == "drop" for r in records[:-1]), [r.decision for r in records]
        assert round_of[key] == sorted(set(round_of[key])), "routed twice in one round"
        assert forecasts[key] == len(records), "each routing reads a forecast made for it"
        assert "carried over from round" in records[-1].reason
        assert (records[-1].decision == "measure") <= (key in measured)
    # a carried child counts once, by its last routing
    summary = trust_summary(store, result.run_id)
    assert summary.decisions == len(routed) == result.considered_all
    assert summary.trusted == sum(1 for records in routed.values() if records[-1].forecast_alone)

