"""Property-based tests of the routing policy and the budget ledger (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kernelcast.graphs.routing import RoutingInput, SelectiveRouter, TopKRouter, MeasureAllRouter

probs = st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=8, max_size=8).filter(lambda p: sum(p) > 1e-6)


@st.composite
def routing_inputs(draw) -> list[RoutingInput]:
    n = draw(st.integers(min_value=0, max_value=24))
    items = []
    for i in range(n):
        p = draw(probs)
        total = sum(p)
        p = [x / total for x in p]
        failed = draw(st.booleans())
        if failed:
            p = [1 / 8] * 8
        best = max(range(8), key=lambda b: p[b])
        items.append(RoutingInput(hash=f"c{i}", confidence=max(p), predicted_bin=best + 1,
                                  expected_log_speedup=draw(st.floats(-3, 3)),
                                  expected_bin=sum((b + 1) * q for b, q in enumerate(p)), failed=failed))
    return items


routers = st.one_of(
    st.builds(SelectiveRouter, threshold=st.floats(0.0, 1.0), measure_per_round=st.integers(1, 8)),
    st.builds(TopKRouter, k=st.integers(1, 8)),
    st.just(MeasureAllRouter()),
)


@settings(max_examples=300, deadline=None)
@given(items=routing_inputs(), can_measure=st.integers(0, 30), router=routers)
def test_every_candidate_gets_exactly_one_decision_within_budget(items, can_measure, router) -> None:
    out = router.route(items, can_measure)
    assert set(out) == {it.hash for it in items}
    measured = [h for h, r in out.items() if r.decision == "measure"]
    assert len(measured) <= can_measure
    assert all(r.decision in ("measure", "accept", "prune", "drop") and r.reason for r in out.values())


@settings(max_examples=300, deadline=None)
@given(items=routing_inputs(), can_measure=st.integers(0, 30), threshold=st.floats(0.0, 1.0))
def test_selective_trusts_only_confident_working_forecasts(items, can_measure, threshold) -> None:
    out = SelectiveRouter(threshold=threshold).route(items, can_measure)
    by_hash = {it.hash: it for it in items}
    for key, routed in out.items():
        it = by_hash[key]
        if it.failed:
            assert routed.decision in ("measure", "drop"), "a failed forecast is always deferred"
        if routed.decision == "prune":
            assert it.confidence >= threshold and it.predicted_bin <= 4
        if routed.decision == "accept":
            assert it.confidence >= threshold and it.predicted_bin >= 5
    deferred = [it for it in items if it.failed or it.confidence < threshold]
    measured = [by_hash[h] for h, r in out.items() if r.decision == "measure"]
    # deferred candidates are measured highest expected speedup first
    if measured and len(measured) < len(deferred):
        worst_measured = min(it.expected_log_speedup for it in measured)
        unmeasured = [it for it in deferred if out[it.hash].decision != "measure"]
        assert all(it.expected_log_speedup <= worst_measured for it in unmeasured)


@settings(max_examples=200, deadline=None)
@given(rounds=st.lists(routing_inputs(), min_size=1, max_size=8), budget=st.integers(0, 40), router=routers)
def test_budget_ledger_over_many_rounds_never_overspends(rounds, budget, router) -> None:
    """Drive the router round after round with the budget that is left, as the graph does."""
    spent = 0
    final: dict[str, str] = {}
    for r, items in enumerate(rounds):
        items = [RoutingInput(**{**it.__dict__, "hash": f"r{r}-{it.hash}"}) for it in items]
        out = router.route(items, budget - spent)
        spent += sum(1 for x in out.values() if x.decision == "measure")
        for key, routed in out.items():
            assert key not in final
            final[key] = routed.decision
    assert spent <= budget
    assert len(final) == sum(len(items) for items in rounds)
