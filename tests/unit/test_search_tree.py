"""The one definition of a run's best, incumbent and standing (graphs/search/tree.py), and checkpoint versions."""

from __future__ import annotations

import pytest

from kernelcast.graphs.errors import RunError
from kernelcast.graphs.search.tree import (
    CHECKPOINT_VERSION,
    NodeRecord,
    best_measured,
    check_version,
    family_record,
    generator_ran_dry,
    incumbent_of,
    standing,
    still_to_confirm,
    takes_the_lead,
    top_measured,
)


def node(key: str, speedup: float | None, confirmed: float | None = None, outcome: str = "measured") -> NodeRecord:
    return NodeRecord(hash=key, parent="ref", depth=1, iteration=1, outcome=outcome, speedup=speedup, cv=None,
                      forecast=None, prior=1.0, visits=0, intent="", reason="", exhausted=False, confirmed=confirmed,
                      confirmed_ci=None)


def tree() -> dict[str, NodeRecord]:
    return {"ref": node("ref", None, outcome="root"), "lucky": node("lucky", 6.0, confirmed=2.5),
            "steady": node("steady", 4.0), "third": node("third", 3.0), "wrong": node("wrong", 9.0, outcome="failed"),
            "trusted": node("trusted", None, outcome="accepted")}


def test_a_node_stands_on_its_confirmation_once_it_has_one() -> None:
    nodes = tree()
    assert standing(nodes["lucky"]) == 2.5 and standing(nodes["steady"]) == 4.0 and standing(nodes["trusted"]) is None


def test_the_best_is_the_highest_standing_correct_measured_node() -> None:
    nodes = tree()
    assert top_measured(nodes, 3) == ["steady", "third", "lucky"]  # the failed 9x and the unmeasured never count
    assert best_measured(nodes) == "steady"
    assert best_measured({"ref": nodes["ref"]}) is None


def test_the_incumbent_is_the_best_standing_or_the_reference() -> None:
    nodes = tree()
    assert incumbent_of(nodes, "lucky") == (2.5, "lucky")
    assert incumbent_of(nodes, None) == (1.0, None)
    slow = {**nodes, "slow": node("slow", 0.8)}
    assert incumbent_of(slow, "slow") == (1.0, None)  # below the reference: the reference is what to beat


def test_a_first_measurement_takes_the_lead_over_the_best_standing() -> None:
    nodes = tree()
    assert takes_the_lead(nodes, "third", "lucky")  # 3.0 first measurement passes 2.5 confirmed
    assert not takes_the_lead(nodes, "third", "steady")
    assert takes_the_lead(nodes, "third", None)
    assert not takes_the_lead(nodes, "trusted", None)  # nothing measured: no lead


def test_the_final_confirmations_pass_over_nodes_confirmed_already() -> None:
    assert still_to_confirm(tree(), 2) == ["steady", "third"]
    assert still_to_confirm(tree(), 0) == []


def test_the_generator_ran_dry_after_empty_rounds_or_nothing_to_expand() -> None:
    assert generator_ran_dry({"empty_rounds": 3}) and generator_ran_dry({"stop_reason": "nothing left to expand"})
    assert not generator_ran_dry({"empty_rounds": 2, "stop_reason": ""})


def test_a_checkpoint_from_before_versions_is_read_as_version_0_and_a_newer_one_is_refused() -> None:
    check_version({"nodes": {}}, "r1")  # no version: written before versions were, the same shape
    check_version({"version": CHECKPOINT_VERSION}, "r1")
    with pytest.raises(RunError, match=r"run r1's checkpoint has version 99; this kernelcast reads checkpoint "
                                       r"versions 0, 1") as caught:
        check_version({"version": 99}, "r1")
    assert "\n" not in str(caught.value)


def test_a_family_record_counts_correct_and_failed_children_apart() -> None:
    """What the router reads as a family's record in the run: correct measurements, failed ones (a failed
    confirmation after a correct one among them), and nothing for the root or for children never measured."""
    nodes = tree()
    nodes["broken"] = node("broken", None, outcome="failed")
    nodes["broken2"] = node("broken2", None, outcome="failed")
    nodes["pruned"] = node("pruned", None, outcome="pruned")
    family = {"lucky": "coarsen (block)", "steady": "coarsen (block)", "wrong": "coarsen (block)",
              "broken": "coarsen (block)", "broken2": "local tile", "third": "restrict", "trusted": "restrict",
              "pruned": "local tile", "ref": "written"}
    correct, failed = family_record(nodes, family.__getitem__)
    assert correct == {"coarsen (block)": 2, "restrict": 1}
    assert failed == {"coarsen (block)": 2, "local tile": 1}
