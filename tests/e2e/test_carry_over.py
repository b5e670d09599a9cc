"""A child left unmeasured for want of a round's room is routed again in later rounds, on a fresh forecast and
against that round's incumbent; it is one decision, its last (a session, which does not carry over: test_session)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from kernelcast.graphs.config import RunConfig
from kernelcast.graphs.events import Skip
from kernelcast.graphs.route.trust import RouteRecord, trust_summary
from kernelcast.graphs.run import RunEnv, start_run
from kernelcast.graphs.search.tree import NOT_IN_REPLAY
from kernelcast.tools.store.store import Store

from support.decisions import record_route
from support.run_checks import check_invariants


def test_a_dropped_child_is_forecast_and_routed_again_until_decided(tmp_path: Path) -> None:
    store = Store(tmp_path / "k.db")
    config = RunConfig(task="gemm", budget=8, router="selective", sizes="small", measure_per_round=2)
    result = start_run(config, store, RunEnv(tmp_path, measure_timeout_s=60))
    check_invariants(store, result.run_id, config.budget)

    round_of: dict[str, list[int]] = defaultdict(list)
    routed: dict[str, list[RouteRecord]] = defaultdict(list)
    rounds = 0
    for event in store.events.find(result.run_id):
        rounds += event.kind == "generated"
        if event.kind == "route" and event.candidate_hash:
            routed[event.candidate_hash].append(RouteRecord.model_validate(event.payload))
            round_of[event.candidate_hash].append(rounds)
    again = {key: records for key, records in routed.items() if len(records) > 1}
    assert again, "no child was carried over: every round measured all it proposed"
    forecasts = defaultdict(int)
    for record in store.forecasts.find(run_id=result.run_id):
        forecasts[record.candidate_hash] += 1
    measured = {m.candidate_hash for m in store.ledger.find(run_id=result.run_id)}
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


def routings(store: Store, run_id: str) -> dict[str, list[RouteRecord]]:
    """Every routing of each routed candidate, in order."""
    routed: dict[str, list[RouteRecord]] = defaultdict(list)
    for event in store.events.find(run_id, kind="route"):
        if event.candidate_hash:
            routed[event.candidate_hash].append(RouteRecord.model_validate(event.payload))
    return routed


def test_a_child_routed_to_a_replay_without_it_is_not_carried(tmp_path: Path) -> None:
    """A replay that has no measurement of a child the router sent to the hardware buys nothing; that child
    is not a drop of the router's, so it is not routed again round after round (it would never be measured)."""
    recorded = Store(tmp_path / "recorded.db")
    start_run(RunConfig(task="gemm", budget=4, router="measure-all", sizes="small", measure_per_round=2),
              recorded, RunEnv(tmp_path / "recorded", measure_timeout_s=60))
    store = Store(tmp_path / "k.db")
    config = RunConfig(task="gemm", budget=10, router="selective", sizes="small", measure_per_round=2,
                       replay=str(tmp_path / "recorded.db"), seed=7, max_rounds=4)
    result = start_run(config, store, RunEnv(tmp_path / "replayed", measure_timeout_s=60))
    routed = routings(store, result.run_id)
    measured = {m.candidate_hash for m in store.ledger.find(run_id=result.run_id)}
    missing = [key for key, records in routed.items() if records[0].decision == "measure" and key not in measured]
    assert missing, "every child sent to the replay was in it: nothing to check"
    for key in missing:
        assert len(routed[key]) == 1, f"{key[:8]} was routed again after the replay had no measurement of it"
    skips = {e.candidate_hash: Skip.model_validate(e.payload).reason for e in store.events.find(result.run_id, kind="skip")}
    assert all(skips.get(key) == NOT_IN_REPLAY for key in missing), skips


def test_the_carried_flag_marks_only_routings_after_the_first(tmp_path: Path) -> None:
    store = Store(tmp_path / "k.db")
    config = RunConfig(task="gemm", budget=8, router="selective", sizes="small", measure_per_round=2)
    result = start_run(config, store, RunEnv(tmp_path, measure_timeout_s=60))
    routed = routings(store, result.run_id)
    assert any(len(records) > 1 for records in routed.values()), "nothing was carried over"
    for records in routed.values():
        assert [r.carried for r in records] == [False] + [True] * (len(records) - 1)
    summary = trust_summary(store, result.run_id)
    assert summary.trusted_carried == sum(1 for records in routed.values()
                                          if len(records) > 1 and records[-1].forecast_alone)


def test_a_child_routed_more_than_once_is_one_decision_its_last(tmp_path: Path) -> None:
    """A carried child, or a round logged again after a kill in its route step: every reader of decisions
    (the trusted ones a check samples, the audits spent, the incumbent to time beside) takes its last routing."""
    from kernelcast.graphs.route.trust import trusted_decisions

    store = Store(tmp_path / "k.db")
    run_id = store.runs.create("gemm", "dev", {}, 8)
    carried, relogged = "c" * 64, "d" * 64
    log = [(carried, RouteRecord(decision="drop", p_beat=0.4, incumbent=1.0)),
           (relogged, RouteRecord(decision="prune", p_beat=0.01, incumbent=1.2, trusted_as="prune")),
           (relogged, RouteRecord(decision="prune", p_beat=0.01, incumbent=1.2, trusted_as="prune")),
           (carried, RouteRecord(decision="prune", p_beat=0.02, incumbent=1.3, incumbent_hash="e" * 64,
                                 trusted_as="prune", carried=True))]
    for key, record in log:
        record_route(store, run_id, key, **record.model_dump())
    assert list(store.decisions.last_of_run(run_id)) == [relogged, carried]
    decisions = trusted_decisions(store, run_id)
    assert [(d.candidate_hash, d.incumbent, d.carried) for d in decisions] == [(relogged, 1.2, False),
                                                                               (carried, 1.3, True)]
    summary = trust_summary(store, run_id)
    assert (summary.decisions, summary.trusted_prunes, summary.trusted_carried) == (2, 2, 1)
