"""One rule for "best" (issue 61 item 4) and the reference as the floor of every answer (issue 64 item 2), from
given numbers: :class:`Standing` orders what a run delivers (confirmed first) and what a child must beat (the
highest number); :class:`Answer` is the reference at 1.0x unless the best candidate beats it significantly."""

from __future__ import annotations

from kernelcast.graphs.search.result import (
    RunResult,
    ShownSpeedup,
    answer_of,
    judgement,
    provisional_answer,
    ranked,
)
from kernelcast.graphs.search.tree import NodeRecord, Standing, best_measured, incumbent_of, top_measured

REFERENCE = "r" * 64


def node(key: str, speedup: float | None, confirmed: float | None = None, outcome: str = "measured") -> NodeRecord:
    return NodeRecord(hash=key, parent=REFERENCE, depth=1, iteration=1, outcome=outcome, speedup=speedup, cv=None,
                      forecast=None, prior=1.0, visits=0, intent=key, reason="", exhausted=False,
                      confirmed=confirmed, confirmed_ci=None)


def shown(key: str, speedup: float, confirmed: bool, interval: tuple[float, float] | None = None) -> ShownSpeedup:
    return ShownSpeedup(candidate_hash=key, speedup=speedup, interval=interval, confirmed=confirmed, first=speedup * 1.1,
                        found_at=1)


def test_one_standing_two_orders_the_router_keeps_the_highest_number() -> None:
    # a confirmed at 2.0 (first 2.5); b measured once at 3.0: the search's incumbent is b's 3.0 (as before), the
    # delivered best is a (confirmed first)
    nodes = {"a": node("a", 2.5, confirmed=2.0), "b": node("b", 3.0)}
    a, b = Standing.of(nodes["a"]), Standing.of(nodes["b"])
    assert a == Standing(2.0, True) and b == Standing(3.0, False)
    assert b.lead > a.lead and a.rank > b.rank
    assert best_measured(nodes) == "b" and top_measured(nodes, 2) == ["b", "a"]
    assert incumbent_of(nodes, "b") == (3.0, "b"), "the router judges against the highest number, unchanged"
    ledger_view = {"a": shown("a", 2.0, True), "b": shown("b", 3.0, False)}
    assert [s.candidate_hash for s in ranked(ledger_view)] == ["a", "b"]
    assert ledger_view["a"].rank == a.rank and ledger_view["a"].standing == a, "the ledger's view is the same rule"
    assert Standing.of(node("c", None, outcome="failed")) is None


def result(**fields: object) -> RunResult:
    base: dict[str, object] = {"run_id": "r", "task": "t", "device": "d", "router": "measure-all", "budget": 4,
                               "spent": 4, "status": "finished", "reference_hash": REFERENCE}
    return RunResult.model_validate({**base, **fields})


def test_a_slower_best_is_not_delivered_the_reference_is() -> None:
    slow = shown("s" * 64, 0.246, True, (0.24, 0.25))
    r = result(best_hash=slow.candidate_hash, best_speedup=0.246, best=slow, confirmed=True, best_interval=(0.24, 0.25))
    answer = r.answer
    assert answer.is_reference and answer.speedup == 1.0 and answer.candidate_hash == REFERENCE
    assert answer.candidate == slow, "the best measured candidate is named beside it"
    text = answer.text()
    assert text.startswith("the reference (1.000x): no significant speedup (slower than the reference)")
    assert "best measured candidate ssssssss at 0.246x confirmed" in text
    assert text.count("0.246x") == 1, "the candidate's speedup is said once"
    assert r.model_dump()["answer"]["kernel"] == "reference", "the answer is part of every serialized result"


def test_an_interval_containing_one_or_an_unconfirmed_best_delivers_the_reference() -> None:
    close = shown("c" * 64, 1.02, True, (0.99, 1.05))
    assert result(best_hash=close.candidate_hash, best_speedup=1.02, best=close, confirmed=True,
                  best_interval=(0.99, 1.05)).answer.is_reference
    lucky = shown("l" * 64, 3.0, False, (2.9, 3.1))
    assert result(best_hash=lucky.candidate_hash, best_speedup=3.0, best=lucky).answer.is_reference
    nothing = result().answer
    assert nothing.is_reference and nothing.candidate is None and nothing.why == "no correct candidate was measured"


def test_a_significant_best_is_delivered_with_its_verdict_in_words_only() -> None:
    fast = shown("f" * 64, 15.683, True, (15.41, 15.95))
    r = result(best_hash=fast.candidate_hash, best_speedup=15.683, best=fast, confirmed=True,
               best_interval=(15.41, 15.95), noise_floor=0.02)
    assert judgement(r).significant and r.answer.kernel == "candidate" and r.answer.speedup == 15.683
    assert r.answer.candidate_hash == fast.candidate_hash
    assert r.answer.text().count("15.683x") == 1, "the speedup is not repeated by the verdict"
    replayed = r.model_copy(update={"replayed_from": "old.db"})
    assert replayed.answer.kernel == "candidate" and "replayed from old.db" in replayed.answer.why


def test_a_result_stored_before_the_best_field_keeps_its_answer() -> None:
    old = result(best_hash="f" * 64, best_speedup=4.0, confirmed=True, best_interval=(3.9, 4.1), first_speedup=4.2)
    assert old.best is None and old.answer.kernel == "candidate" and old.answer.speedup == 4.0


def test_a_session_between_rounds_delivers_a_candidate_only_above_its_interval() -> None:
    assert provisional_answer(shown("a" * 64, 1.3, False, (1.2, 1.4)), REFERENCE).kernel == "candidate"
    assert provisional_answer(shown("a" * 64, 1.3, False, (0.9, 1.4)), REFERENCE).is_reference
    assert provisional_answer(shown("a" * 64, 0.963, False, None), REFERENCE).speedup == 1.0
    assert answer_of(None, False, REFERENCE).is_reference

