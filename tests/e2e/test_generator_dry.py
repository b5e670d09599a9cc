"""After the generator runs dry, the rest of the budget goes to candidates already proposed, each picked by the
forecast of that moment (issue 13; before that, the rounds with nothing new route the children carried over,
one measurement each at ``measure_per_round=1``): transpose's opening design proposes its whole template space at once, and
picking the leftovers in the opening's stale order spent 17 of 24 measurements blind. The task here is a
template of 8 points with no generic edit (integer copy, work-group dependent, no loop), so the generator runs
dry after the opening whatever the device measures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelcast.graphs import events as ev
from kernelcast.graphs.config import RunConfig
from kernelcast.graphs.context import RunEnv
from kernelcast.graphs.route.inputs import routing_input
from kernelcast.graphs.route.routers.base import measure_order
from kernelcast.graphs.run import open_measurer, open_run, start_run
from kernelcast.graphs.search.tree import node_forecast
from kernelcast.tools.store.store import Store

from support.cli import start_cli
from support.run_checks import check_invariants, kill_after_spends, resume_to_the_end


def test_each_leftover_is_picked_by_a_forecast_that_learned_every_measurement_before_it(
        tmp_path: Path, tiny_template: Path) -> None:
    store = Store(tmp_path / "k.db")
    config = RunConfig(task=str(tiny_template), budget=10, router="selective", forecaster="learned", sizes="small",
                       measure_per_round=1)
    result = start_run(config, store, RunEnv(tmp_path, measure_timeout_s=60))
    events = ev.logged(store.events.find(result.run_id))
    proposed = {c for item in events if isinstance(item.event, ev.Generated) for c in item.event.children}
    assert len(proposed) == 8  # the template's points, nothing else

    picks = [i for i, item in enumerate(events) if isinstance(item.event, ev.Leftover)]
    searched = [m.candidate_hash for m in store.ledger.find(run_id=result.run_id) if m.phase == "search"]
    # one measurement per round: the rounds measure at most 7 of the 8 points before three rounds in a row with
    # nothing new end the loop (those rounds route the children carried over), so at least one is left to pick
    assert len(picks) >= 1, "the generator did not run dry with budget left"
    assert sorted(searched) == sorted(proposed)  # every point measured once: the budget covered the space
    spent, correct, learned, untried = 0, 0, 0, None
    for i, item in enumerate(events):
        event = item.event
        if isinstance(event, ev.Spend):
            spent += 1
            correct += event.status == "correct"
        elif isinstance(event, ev.Learn) and event.error is None:
            learned = event.pairs
        elif isinstance(event, ev.Leftover):
            # forecast after every measurement bought so far, once the forecaster had learned all the correct ones
            assert event.spent == spent and learned == correct
            # the pick is a proposed candidate never measured before, and it is what the run measures next
            assert item.candidate in proposed and item.candidate not in searched[:spent]
            following = next(e for e in events[i + 1:] if isinstance(e.event, ev.Spend))
            assert following.candidate == item.candidate and following.event.phase == "search"
            assert untried is None or event.untried == untried - 1  # one fewer to choose from each time
            untried = event.untried
            assert event.p_beat is not None and 0.0 <= event.p_beat <= 1.0
    assert untried == 1  # picked down to the last untried point

    # each pick is the best by expected gain under the forecast of its moment: the run's own forecaster, built
    # again and taught the measurements bought before the pick, ranks the untried points the same way
    run = store.runs.get(result.run_id)
    assert run is not None
    stored = RunConfig.of_run(run)
    bought = [m for m in store.ledger.find(run_id=result.run_id) if m.phase == "search"]
    with open_measurer(stored, "opencl", store) as measurer:
        ctx = open_run(result.run_id, stored, store, RunEnv(tmp_path), measurer)
        task = ctx.task.at_sizes(stored.sizes)
        for i in picks:
            pick, event = events[i].candidate, events[i].event
            assert isinstance(event, ev.Leftover)
            before = bought[:event.spent]
            ctx.forecaster.learn([(store.candidates.get(m.candidate_hash), m) for m in before],  # type: ignore[attr-defined]
                                 {ctx.hardware.key: ctx.hardware})
            untried_now = sorted(proposed - {m.candidate_hash for m in before})
            assert len(untried_now) == event.untried
            forecasts = ctx.forecaster.forecast_many(task, [store.candidates.get(k) for k in untried_now], ctx.hardware)
            items = [routing_input(k, node_forecast(fc), event.incumbent, fc.provenance)
                     for k, fc in zip(untried_now, forecasts)]
            assert min(items, key=measure_order).hash == pick


def test_a_run_killed_among_its_leftovers_resumes_without_losing_what_they_measured(tmp_path: Path,
                                                                                   tiny_template: Path) -> None:
    """The verify step re-runs from the state before it: the leftovers it had bought count (toward the best, the
    confirmations, the tree) and are not bought again. Budget 9 (1 confirmation), one measurement per round:
    the rounds measure at most 7 of the 8 points (the rounds with nothing new route the children carried over,
    until three such rounds in a row end the loop), the leftovers the rest; the kill comes right after the
    first leftover's measurement."""
    home = tmp_path / "home"
    budget = 9
    proc = start_cli(home, "optimize", str(tiny_template), "--budget", str(budget), "--sizes", "small", "--router",
              "selective", "--forecaster", "learned", "--k", "1", "--events", "jsonl")
    run_id, spends = kill_after_spends(proc, 1, after="leftover")
    assert run_id is not None and spends == 1
    store = Store(home / "kernelcast.db")
    before = {m.candidate_hash: m.created_at for m in store.ledger.find(run_id=run_id)}
    assert 2 <= len(before) < budget
    assert store.events.find(run_id, kind="leftover"), "killed before any leftover: the test lost its premise"

    after = resume_to_the_end(home, store, run_id, budget, before)
    summary = check_invariants(store, run_id, budget)
    searched = [m for m in after if m.phase == "search" and m.ok]
    assert len({m.candidate_hash for m in searched}) == budget - 1
    # the best is the best of everything measured, those bought before the kill included
    assert summary["first_speedup"] == pytest.approx(max(m.speedup or 0.0 for m in searched))
    tree = json.loads((Path(store.runs.get(run_id).folder) / "tree.json").read_text())  # type: ignore[union-attr]
    assert all(tree[m.candidate_hash]["outcome"] == "measured" for m in searched)


def test_a_leftover_a_replay_cannot_measure_does_not_end_the_leftovers(tmp_path: Path, tiny_template: Path) -> None:
    """Replaying a store that measured 3 of the 8 points: once the generator runs dry, a pick the replay has
    no measurement of is passed over (nothing bought), and the points it has are still measured."""
    from kernelcast.graphs.search.tree import NOT_IN_REPLAY

    recorded = Store(tmp_path / "recorded.db")
    start_run(RunConfig(task=str(tiny_template), budget=3, router="measure-all", forecaster="none", sizes="small",
                        measure_per_round=3, confirm_top=0), recorded, RunEnv(tmp_path / "recorded", measure_timeout_s=60))
    have = {m.candidate_hash for m in recorded.ledger.find() if m.phase == "search"}
    assert len(have) == 3
    store = Store(tmp_path / "k.db")
    config = RunConfig(task=str(tiny_template), budget=10, router="selective", forecaster="learned", sizes="small",
                       measure_per_round=1, replay=str(tmp_path / "recorded.db"), confirm_top=0)
    result = start_run(config, store, RunEnv(tmp_path / "replayed", measure_timeout_s=60))
    events = ev.logged(store.events.find(result.run_id))
    skips = [item for item in events if isinstance(item.event, ev.Skip)]
    assert {item.event.reason for item in skips} <= {NOT_IN_REPLAY}, [item.event.reason for item in skips]
    assert any(isinstance(item.event, ev.Leftover) for item in events), "the generator did not run dry"
    assert {m.candidate_hash for m in store.ledger.find(run_id=result.run_id)} == have
    assert len({item.candidate for item in skips}) == len(skips)  # each missing point passed over once
