"""The selective router spends the budget it was given (issue 13): a round in which every child was trusted
measures its most promising pruned children instead of leaving the budget unspent, and the trust summary
counts those as measurements, not as trusted decisions or audits."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np

from kernelcast.agents.forecast.distributions import lognormal_bins
from kernelcast.graphs.config import RunConfig
from kernelcast.graphs.context import RunEnv
from kernelcast.graphs.events import Spend
from kernelcast.graphs.route.risk_control import TrustThresholds
from kernelcast.graphs.route.routers.base import RoutingInput
from kernelcast.graphs.route.routers.selective import SelectiveRouter
from kernelcast.graphs.route.trust import RouteRecord, TrustedDecision, beat_of, trust_summary, trusted_decisions
from kernelcast.graphs.run import start_run
from kernelcast.graphs.search.budget import confirm_reserve, confirmations
from kernelcast.graphs.search.tree import best_measured, incumbent_of, new_node, standing, still_to_confirm, top_measured
from kernelcast.tools.core.measurement import Measurement, RivalComparison, Status, TimingStats
from kernelcast.tools.core.task import BUILTIN_DIR, resolve_task
from kernelcast.tools.store.store import Store

from support.run_checks import check_pairing

PRUNE_EVERYTHING = TrustThresholds(prune_below=0.3, accept_above=None, n_calibration=100)


def _item(key: str, mu: float, sigma: float = 0.3) -> RoutingInput:
    probs = tuple(lognormal_bins(mu, sigma))
    return RoutingInput(hash=key, confidence=max(probs), predicted_bin=int(np.argmax(probs)) + 1,
                        expected_log_speedup=mu, expected_bin=float(np.arange(1, 9) @ np.asarray(probs)),
                        failed=False, probabilities=probs, incumbent=1.0)


def _losers() -> list[RoutingInput]:
    """Six children forecast slower than the incumbent, each less likely than the one before to beat it."""
    return [_item(f"c{i}", math.log(0.8) - 0.15 * i) for i in range(6)]


def test_a_round_with_nothing_uncertain_measures_its_most_promising_pruned_children() -> None:
    items = _losers()
    assert all(it.p_beat is not None and it.p_beat <= 0.3 for it in items)
    out = SelectiveRouter(measure_per_round=3, audit_rate=0.0).route(items, 10, trust=PRUNE_EVERYTHING)
    spare = sorted(k for k, r in out.items() if r.decision == "measure")
    assert spare == ["c0", "c1", "c2"]  # the three highest P(beat the incumbent)
    assert all(out[k].spare and out[k].trusted_as == "prune" and not out[k].audit and not out[k].trusted
               for k in spare)
    assert all(out[k].decision == "prune" and not out[k].spare for k in ("c3", "c4", "c5"))
    # never more than the budget allows, and nothing at all without budget
    one = SelectiveRouter(measure_per_round=3, audit_rate=0.0).route(items, 1, trust=PRUNE_EVERYTHING)
    assert [k for k, r in one.items() if r.decision == "measure"] == ["c0"]
    none = SelectiveRouter(measure_per_round=3).route(items, 0, trust=PRUNE_EVERYTHING)
    assert not any(r.decision == "measure" for r in none.values())


def test_audits_share_the_round_cap_and_an_uncertain_child_takes_precedence() -> None:
    items = _losers()
    audited = SelectiveRouter(measure_per_round=3, audit_rate=1.0, seed=3).route(items, 10, trust=PRUNE_EVERYTHING,
                                                                               audits=1)
    measured = [r for r in audited.values() if r.decision == "measure"]
    assert len(measured) == 3 and sum(r.audit for r in measured) == 1 and sum(r.spare for r in measured) == 2
    # one uncertain child: it is what the round measures; the pruned stay pruned (the budget is not idle)
    mixed = SelectiveRouter(measure_per_round=3, audit_rate=0.0).route([*items, _item("unsure", 0.0)], 10,
                                                                       trust=PRUNE_EVERYTHING)
    assert mixed["unsure"].decision == "measure" and not mixed["unsure"].spare
    assert not any(r.spare for r in mixed.values())


def test_a_run_whose_router_prunes_everything_still_spends_its_budget(tmp_path: Path) -> None:
    """risk 0.99 certifies pruning from the run's first calibration rows, so later rounds trust every child;
    before spare-budget measuring such a run stopped at its round limit with half its budget unspent. One
    measurement per round: eight rounds of 8 children after the opening, so a round whose every child is
    trusted does not hang on one trajectory's timings (with 2 per round, 4 rounds of 16, one fresh-clone run
    on a loaded machine had none). Budget 32: trusted rounds first confirm their incumbent, and each stage
    bucket (0 | 1-3 | 4-7 | 8-15 | 16+ measurements) needs rows of its own before it trusts, so at budget 10 some
    runs had no round left that trusted every child, at 18 one run of the full suite had none (2026-12-04, AMD
    EPYC), and at 24 one CI run and 1 of 4 runs alone had none (2026-12-06, Intel Xeon: the 8-15 bucket first
    trusted after 11-13 measurements and then not every child). At 32 the 16+ bucket trusts whole rounds from
    about its 17th measurement: 6 of 6 runs alone had spare measurements, 2-14 each.
    On the device's own rows only: the seed's replayed thresholds would first wait for their trial, which spends
    audits this test does not count."""
    store = Store(tmp_path / "k.db")
    config = RunConfig(task="softmax", budget=32, router="selective", sizes="small", risk=0.99, measure_per_round=1,
                       trust_seed_replay=False)
    result = start_run(config, store, RunEnv(tmp_path, measure_timeout_s=60))
    assert result.spent == config.budget, result.stop_reason
    assert result.stop_reason.startswith("budget spent")

    rounds: list[list[tuple[str, RouteRecord]]] = []
    for event in store.events.find(result.run_id):
        if event.kind == "generated":
            rounds.append([])
        elif event.kind == "route":
            rounds[-1].append((event.candidate_hash or "", RouteRecord.model_validate(event.payload)))
    searched = {m.candidate_hash for m in store.ledger.find(run_id=result.run_id) if m.phase == "search"}
    spare = [(key, r) for round_ in rounds for key, r in round_ if r.spare]
    assert spare, "no round trusted every child: the run never needed its spare budget"
    for round_ in rounds:
        pruned_p = [r.p_beat or 0.0 for _, r in round_ if r.decision == "prune"]
        for key, record in round_:
            if record.spare:
                assert record.decision == "measure" and record.trusted_as == "prune" and not record.audit
                assert key in searched  # measured in the search phase, not skipped
                assert all((record.p_beat or 0.0) >= p for p in pruned_p)  # the most promising of its round
                assert not any(r.decision == "measure" and not r.spare and not r.audit for _, r in round_)

    final = {key: r for round_ in rounds for key, r in round_}  # a child carried over: its last routing decides
    records = list(final.values())
    assert len(records) < sum(len(round_) for round_ in rounds), "no child was carried over to a later round"
    summary = trust_summary(store, result.run_id, risk=config.risk)
    assert summary.spare == len(spare)
    assert summary.trusted_prunes == sum(1 for r in records if r.decision == "prune")
    assert summary.audits == sum(1 for r in records if r.audit)
    assert summary.trusted == sum(1 for r in records if r.decision in ("prune", "accept"))
    assert summary.decisions == len(records)
    assert "pruned measured anyway" in summary.line()
    # what the benches check against the truth: exactly the trusted decisions, never an audit or a spare one
    unbacked = trusted_decisions(store, result.run_id)
    assert len(unbacked) == summary.trusted
    assert sorted(d.kind for d in unbacked) == sorted(r.decision for r in records if r.decision in ("prune", "accept"))
    assert {d.candidate_hash for d in unbacked}.isdisjoint(key for key, _ in spare)
    # each decision names the kernel it was judged against: the reference (1.0, no hash) or a candidate the run
    # had measured before it, at exactly the speedup it stood on (what a head-to-head check re-measures): its
    # confirmation once it had one, else its first measurement; a trusted decision only ever against a
    # confirmed incumbent (or the reference)
    first: dict[str, float] = {}
    confirmed: dict[str, float | None] = {}
    for event in store.events.find(result.run_id):
        if event.kind == "spend":
            spend = Spend.model_validate(event.payload)
            speed = spend.speedup if spend.status == "correct" else None
            if spend.phase == "confirm":
                confirmed[event.candidate_hash or ""] = speed
            elif speed is not None:
                first.setdefault(event.candidate_hash or "", speed)
        elif event.kind == "route":
            record = RouteRecord.model_validate(event.payload)
            stands = {key: confirmed.get(key, speed) for key, speed in first.items()}
            stands = {key: speed for key, speed in stands.items() if speed is not None}  # failed confirmations
            assert record.incumbent == max([1.0, *stands.values()])  # the best so far, or the reference
            if record.incumbent_hash is None:
                assert record.incumbent == 1.0
            else:
                assert stands[record.incumbent_hash] == record.incumbent
                if record.trusted_as:  # trusted, audited or measured as spare: judged on its forecast
                    assert record.incumbent_hash in confirmed, "a forecast trusted against one measurement"
    trusted_against_a_kernel = [RouteRecord.model_validate(e.payload) for e in store.events.find(result.run_id, kind="route")]
    trusted_against_a_kernel = [r for r in trusted_against_a_kernel if r.trusted_as and r.incumbent_hash]
    confirms_before_trust = [e for e in store.events.find(result.run_id, kind="confirm") if e.payload["before_trust"]]
    assert confirms_before_trust or not trusted_against_a_kernel
    judged = {e.candidate_hash: RouteRecord.model_validate(e.payload).incumbent_hash
              for e in store.events.find(result.run_id, kind="route")}
    assert all(d.incumbent_hash == judged[d.candidate_hash] for d in unbacked)
    assert summary.paired == check_pairing(store, result.run_id)  # each paired measurement judges its decision
    assert 0 <= summary.paired_read_otherwise <= summary.paired


def test_a_confirmation_that_falls_hands_the_lead_to_the_next_kernel() -> None:
    """The run stands on a node's confirmation once it has one: a lucky first measurement that confirms low
    neither stays the incumbent nor takes a slot among the kernels still to confirm."""
    config = RunConfig(task="saxpy", budget=24, confirm_top=3)
    nodes = {}
    for name, first, again in (("lucky", 6.27, 2.79), ("steady", 3.4, None), ("third", 3.1, None),
                               ("fourth", 2.9, None), ("failed", 0.0, None)):
        node = new_node(resolve_task("saxpy").reference(), "root", 1, 1,
                        outcome="measured" if first else "failed")
        node["speedup"], node["confirmed"] = first or None, again
        nodes[name] = node
    assert standing(nodes["lucky"]) == 2.79 and standing(nodes["steady"]) == 3.4
    assert best_measured(nodes) == "steady"
    assert incumbent_of(nodes, best_measured(nodes)) == (3.4, "steady")
    assert top_measured(nodes, 3) == ["steady", "third", "fourth"]  # the fallen one is no longer among the top
    assert still_to_confirm(nodes, confirmations(config)) == ["steady", "third", "fourth"]
    nodes["lucky"]["confirmed"] = 3.6  # confirmed high: it keeps the lead and needs no second confirmation
    assert best_measured(nodes) == "lucky" and top_measured(nodes, 3) == ["lucky", "steady", "third"]
    assert still_to_confirm(nodes, confirmations(config)) == ["steady", "third", "fourth"]
    for name in ("steady", "third"):
        nodes[name]["confirmed"] = nodes[name]["speedup"]
    # the final confirmations go to the next contenders, never to a node confirmed already
    assert still_to_confirm(nodes, confirmations(config)) == ["fourth"]
    # the loop's reserve does not shrink with confirmations made during the search: one round can measure
    # several kernels that pass them
    assert confirm_reserve(nodes, config) == 3
    assert confirm_reserve(nodes, RunConfig(task="saxpy", budget=24, confirm_top=0)) == 0
    assert confirm_reserve({}, config) == 1
    assert best_measured({}) is None and incumbent_of({}, None) == (1.0, None)


def test_a_trusted_decision_is_wrong_when_the_truth_contradicts_it() -> None:
    prune = TrustedDecision(kind="prune", candidate_hash="c", incumbent=1.5)
    accept = TrustedDecision(kind="accept", candidate_hash="c", incumbent=1.5)
    assert prune.wrong(1.6) and not prune.wrong(1.5) and not prune.wrong(None)
    assert accept.wrong(1.4) and accept.wrong(None) and not accept.wrong(1.6)


def test_a_decision_is_judged_by_the_paired_comparison_with_its_incumbent() -> None:
    """A child timed beside the incumbent's kernel is judged by that pair, not by its speedup against the
    incumbent's number from minutes earlier (drift moves the two apart); another rival, or none, falls back."""
    record = RouteRecord(decision="prune", reason="", p_beat=0.1, incumbent=3.8, incumbent_hash="inc")
    timing = TimingStats.from_samples([1.0, 1.1, 1.2])

    def measured(speedup: float | None, rival: str | None = None, ratio: float = 1.0) -> Measurement:
        pair = None if rival is None else RivalComparison(candidate_hash=rival, timing=timing, speedup=2.7,
                                                          ratio=ratio, ratio_ci=(ratio * 0.95, ratio * 1.05))
        return Measurement(task="t", candidate_hash="c", device="d", sizes="full", rival=pair, speedup=speedup,
                           status=Status.correct if speedup else Status.incorrect)

    assert beat_of(record, measured(3.0, "inc", ratio=1.1))  # beat the incumbent's kernel now: a false prune
    assert not beat_of(record, measured(4.0, "inc", ratio=0.9))  # a lucky reading against a slower moment
    assert not beat_of(record, measured(3.0, "other", ratio=1.5)) and beat_of(record, measured(3.9))
    assert not beat_of(record, measured(None))
    against_reference = record.model_copy(update={"incumbent": 1.0, "incumbent_hash": None})
    assert beat_of(against_reference, measured(1.2)) and not beat_of(against_reference, measured(0.9, "inc", 2.0))


def test_small_budgets_confirm_one_winner_per_eight_measurements() -> None:
    """Three confirmations at a budget of 8 would leave five measurements to search with."""

    assert [confirmations(RunConfig(task="saxpy", budget=b)) for b in (4, 8, 16, 24, 100)] == [1, 1, 2, 3, 3]
    assert confirmations(RunConfig(task="saxpy", budget=24, confirm_top=0)) == 0
    assert confirmations(RunConfig(task="saxpy", budget=100, confirm_top=5)) == 5


def test_when_the_generator_runs_dry_the_budget_goes_to_the_best_untried_children(tmp_path: Path) -> None:
    """A space smaller than the budget: once the generator has nothing new, the children left unmeasured for
    want of budget (not trusted prunes) are measured, best forecast first, before the confirmations; before,
    the run stopped after "3 rounds without a new candidate" with most of them never tried."""
    folder = tmp_path / "tiny_saxpy"
    shutil.copytree(BUILTIN_DIR / "saxpy", folder)
    toml = folder / "task.toml"
    text = toml.read_text().replace('name = "saxpy"', 'name = "tiny_saxpy"')
    text = text.replace("VEC = [1, 2, 4, 8]", "VEC = [2, 4]").replace("COARSEN = [1, 2, 4, 8]", "COARSEN = [1]")
    toml.write_text(text.replace("WG = [16, 64, 256, 1024]", "WG = [64]"))
    store = Store(tmp_path / "k.db")
    # without the seed's replayed calibration a fresh store trusts nothing, so children are left unmeasured for
    # want of budget; with it, the trial can certify their prunes, and a run then rightly stops with budget left
    config = RunConfig(task=str(toml), budget=40, router="selective", sizes="small", measure_per_round=2,
                       trust_seed_replay=False)
    result = start_run(config, store, RunEnv(tmp_path, measure_timeout_s=60))

    events = store.events.find(result.run_id)
    last_generated = max(e.seq for e in events if e.kind == "generated")
    after = [e for e in events if e.kind == "spend" and e.seq > last_generated and e.payload["phase"] == "search"]
    assert after, f"nothing was measured after the generator ran dry: {result.stop_reason}"
    routed = {e.candidate_hash: RouteRecord.model_validate(e.payload) for e in events if e.kind == "route"}
    measured = {m.candidate_hash for m in store.ledger.find(run_id=result.run_id)}
    untried = [k for k, r in routed.items() if k not in measured and not r.trusted_as]
    assert not untried or result.spent == config.budget, (len(untried), result.stop_reason)
    assert result.spent > len(after) and result.best_hash is not None
