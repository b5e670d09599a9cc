"""What the router reads of a run's families (graphs/search/family_book.py): each child's family from the store,
and the record of that family in the run from the checkpointed nodes, for the route step and the leftovers."""

from __future__ import annotations

from pathlib import Path

from kernelcast.graphs.route.routers.base import RoutingInput
from kernelcast.graphs.search.family_book import FamilyBook
from kernelcast.graphs.search.tree import NodeRecord
from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.store.store import Store


def candidate(n: int, **params: object) -> Candidate:
    """A derived point of a kernel (the source differs per ``n``, so each has its own hash)."""
    source = f"__kernel void k(__global float *a) {{ a[get_global_id(0)] *= {n + 2}.0f; }}"
    return Candidate(task="t", source=source, global_size=["N"], params={"base": "b", **params})


def node(key: str, outcome: str, speedup: float | None, parent: str | None = "ref") -> NodeRecord:
    return NodeRecord(hash=key, parent=parent, depth=1, iteration=1, outcome=outcome, speedup=speedup, cv=None,
                      forecast=None, prior=1.0, visits=0, intent="", reason="", exhausted=False, confirmed=None,
                      confirmed_ci=None)


def item(key: str) -> RoutingInput:
    return RoutingInput(hash=key, confidence=0.5, predicted_bin=4, expected_log_speedup=0.0, expected_bin=4.0,
                        failed=False, probabilities=(0.0, 0.0, 0.0, 0.5, 0.5, 0.0, 0.0, 0.0))


def test_each_child_reads_its_familys_record_in_the_run(tmp_path: Path) -> None:
    store = Store(tmp_path / "k.db")
    assert len({candidate(i).hash for i in range(14)}) == 14
    block = [store.candidates.add(candidate(i, coarsen_x=2, mapping="block")) for i in range(4)]
    unroll = [store.candidates.add(candidate(10 + i, unroll=4)) for i in range(2)]
    nodes = {"ref": node("ref", "root", None, parent=None),
             block[0]: node(block[0], "failed", None), block[1]: node(block[1], "failed", None),
             block[2]: node(block[2], "pending", None), block[3]: node(block[3], "dropped", None),
             unroll[0]: node(unroll[0], "measured", 1.2), unroll[1]: node(unroll[1], "pending", None)}
    read = {it.hash: it for it in FamilyBook(store).annotate([item(block[2]), item(unroll[1]), item("absent")], nodes)}
    assert (read[block[2]].family, read[block[2]].family_measured, read[block[2]].family_failed) == \
        ("coarsen (block)", 0, 2)
    assert (read[unroll[1]].family, read[unroll[1]].family_measured, read[unroll[1]].family_failed) == ("unroll", 1, 0)
    assert read["absent"].family == "" and read["absent"].p_correct == 1.0  # not in the store: no family, no record
    assert {it.run_measured for it in read.values()} == {3}
    assert read[block[2]].p_correct == 1 / 3
