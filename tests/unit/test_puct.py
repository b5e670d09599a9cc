"""PUCT selection over the candidate tree."""

from __future__ import annotations

import math

from kernelcast.graphs.search import puct
from kernelcast.graphs.search.tree import NodeRecord


def node(key: str, parent: str | None, outcome: str, speedup: float | None = None, visits: int = 0,
         prior: float = 1.0, elog: float | None = None) -> NodeRecord:
    fc = None if elog is None else {"probabilities": [0.125] * 8, "predicted_bin": 5, "confidence": 0.7,
                                    "expected_log_speedup": elog, "failed": False}
    return NodeRecord(hash=key, parent=parent, depth=0, iteration=0, outcome=outcome, speedup=speedup, cv=None,  # type: ignore[typeddict-item]
                      forecast=fc, prior=prior, visits=visits, intent=key, reason="", exhausted=False)


def tree(*nodes: NodeRecord) -> dict[str, NodeRecord]:
    return {n["hash"]: n for n in nodes}


def test_descends_to_the_best_measured_subtree() -> None:
    nodes = tree(node("r", None, "root", visits=3), node("a", "r", "measured", 3.0, prior=0.5),
                 node("b", "r", "measured", 1.1, prior=0.5), node("c", "r", "failed"), node("d", "r", "pruned"))
    assert puct.select(nodes) == "a"
    assert puct.subtree_q(nodes)["r"] == math.log(3.0)


def test_exploration_bonus_shifts_choice_with_visits() -> None:
    nodes = tree(node("r", None, "root", visits=50), node("a", "r", "measured", 1.2, visits=40, prior=0.5),
                 node("b", "r", "measured", 1.15, visits=0, prior=0.5))
    assert puct.select(nodes, c=1.0) == "b"
    assert puct.select(nodes, c=0.0) == "a"


def test_unverified_nodes_are_discounted_and_failures_never_selected() -> None:
    nodes = tree(node("r", None, "root", visits=1), node("u", "r", "accepted", elog=math.log(4.0)),
                 node("f", "r", "failed"))
    assert puct.reward(nodes["u"]) == puct.UNVERIFIED_DISCOUNT * math.log(4.0)
    assert puct.select(nodes, c=0.0) == "u"
    nodes["u"]["exhausted"] = True
    nodes["r"]["exhausted"] = True
    assert puct.select(nodes) is None


def test_rank_priors_sum_to_one_and_follow_order() -> None:
    priors = puct.rank_priors({"x": 0.1, "y": 0.5, "z": -1.0})
    assert abs(sum(priors.values()) - 1.0) < 1e-12
    assert priors["y"] > priors["x"] > priors["z"]
