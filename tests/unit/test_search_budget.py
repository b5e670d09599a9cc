"""A run's budget (graphs/search/budget.py): the ledger from the store, one reserve formula, the allowance."""

from __future__ import annotations

from pathlib import Path

from test_search_tree import node  # noqa: E402 (tests/unit is on sys.path)

from kernelcast.graphs.config import RunConfig
from kernelcast.graphs.search.budget import Budget, confirm_reserve, confirmations
from kernelcast.graphs.search.tree import NodeRecord
from kernelcast.tools.store.store import Store

from support.records import measurement


def budget_of(tmp_path: Path, **config: object) -> tuple[Budget, Store]:
    store = Store(tmp_path / "k.db")
    run_id = store.runs.create("saxpy", "dev", {}, 24)
    return Budget(store, run_id, RunConfig(task="saxpy", **config)), store  # type: ignore[arg-type]


def test_confirmations_are_at_most_one_per_eight_measurements() -> None:
    assert [confirmations(RunConfig(task="saxpy", budget=b)) for b in (4, 8, 16, 24, 100)] == [1, 1, 2, 3, 3]
    assert confirmations(RunConfig(task="saxpy", budget=24, confirm_top=0)) == 0


def test_the_reserve_keeps_one_confirmation_before_anything_in_the_loop_and_none_in_verify() -> None:
    config = RunConfig(task="saxpy", budget=24)
    assert confirm_reserve({}, config) == 1 and confirm_reserve({}, config, before_any=0) == 0
    nodes: dict[str, NodeRecord] = {k: node(k, s) for k, s in (("a", 2.0), ("b", 3.0), ("c", 4.0), ("d", 5.0))}
    assert confirm_reserve(nodes, config) == 3 == confirm_reserve(nodes, config, before_any=0)


def test_the_allowance_is_the_budget_less_spent_and_reserve(tmp_path: Path) -> None:
    budget, store = budget_of(tmp_path, budget=16, router="selective")
    accepted = {f"acc{i}": node(f"acc{i}", None, outcome="accepted") for i in range(5)}
    nodes = {"a": node("a", 2.0), **accepted}
    reserve = min(budget.config.reserve, 5) + 1
    assert budget.reserve(nodes) == reserve and budget.allowance(nodes) == 16 - reserve
    for key in ("a", "b", "c"):
        store.ledger.add(measurement(key, 2.0), run_id=budget.run_id)
    assert budget.spent() == 3 and budget.spent_to("b") == 2 and budget.spent_to("zzz") == 0
    assert budget.allowance(nodes) == 16 - 3 - reserve
    assert budget.final_reserve(nodes) == 1 and budget.final_reserve({}) == 0
    assert budget.left_beyond(12) and not budget.left_beyond(13)


def test_no_allowance_past_the_device_time_limit(tmp_path: Path) -> None:
    budget, store = budget_of(tmp_path, budget=16, max_device_seconds=0.5)
    assert budget.allowance({}) == 15
    store.ledger.add(measurement("a", 2.0).model_copy(update={"wall_ms": 600.0}), run_id=budget.run_id)
    assert budget.out_of_device_time() and budget.allowance({}) == 0
