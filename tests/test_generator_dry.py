"""After the generator runs dry, the rest of the budget goes to candidates already proposed, each picked by the
forecast of that moment (issue 13): transpose's opening design proposes its whole template space at once, and
picking the leftovers in the opening's stale order spent 17 of 24 measurements blind. The task here is a
template of 8 points with no generic edit (integer copy, work-group dependent, no loop), so the generator runs
dry after the opening whatever the device measures."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelcast.graphs import events as ev
from kernelcast.graphs.config import RunConfig
from kernelcast.graphs.context import RunEnv
from kernelcast.graphs.run import start_run
from kernelcast.tools.store import Store


TASK = """
name = "tiny_copy"
description = "N ints copied; 8 template points that differ by a no-op term"
language = "opencl"
source = "copy.cl"
entry = "copy"
tags = ["memory-bound", "integer"]
bytes = "8 * N"
[sizes]
N = 1048576
[small_sizes]
N = 65536
[[args]]
name = "a"
dtype = "int32"
shape = ["N"]
intent = "in"
init = "randint"
low = 0
high = 1000
[[args]]
name = "b"
dtype = "int32"
shape = ["N"]
intent = "out"
[[args]]
name = "N"
kind = "scalar"
dtype = "int32"
value = "N"
[launch]
global = ["N"]
local = [64]
[tolerance]
rtol = 0.0
atol = 0.0
[template]
source = "copy_tunable.cl"
default = { K = 0 }
[template.params]
K = [0, 1, 2, 3, 4, 5, 6, 7]
[template.launch]
global = ["N"]
local = [64]
"""
KERNEL = """__kernel void copy(__global const int *a, __global int *b, const int N)
{
    const int i = get_group_id(0) * get_local_size(0) + get_local_id(0);
    if (i < N)
        b[i] = a[i]%s;
}
"""


@pytest.fixture()
def tiny_template(tmp_path: Path) -> Path:
    folder = tmp_path / "tiny_copy"
    folder.mkdir()
    (folder / "task.toml").write_text(TASK)
    (folder / "copy.cl").write_text(KERNEL % "")
    (folder / "copy_tunable.cl").write_text(KERNEL % " + (K - K)")
    return folder / "task.toml"


def test_each_leftover_is_picked_by_a_forecast_that_learned_every_measurement_before_it(
        tmp_path: Path, tiny_template: Path) -> None:
    store = Store(tmp_path / "k.db")
    config = RunConfig(task=str(tiny_template), budget=10, router="selective", forecaster="learned", sizes="small",
                       measure_per_round=2)
    result = start_run(config, store, RunEnv(tmp_path, measure_timeout_s=60))
    events = ev.logged(store.events(result.run_id))
    proposed = {c for item in events if isinstance(item.event, ev.Generated) for c in item.event.children}
    assert len(proposed) == 8  # the template's points, nothing else

    picks = [i for i, item in enumerate(events) if isinstance(item.event, ev.Leftover)]
    searched = [m.candidate_hash for m in store.measurements(run_id=result.run_id) if m.phase == "search"]
    assert len(picks) >= 3, "the generator did not run dry with budget left"
    assert sorted(searched) == sorted(proposed)  # every point measured once: the budget covered the space
    spent, learned, untried = 0, 0, None
    for i, item in enumerate(events):
        event = item.event
        if isinstance(event, ev.Spend):
            spent += 1
        elif isinstance(event, ev.Learn) and event.error is None:
            learned = event.pairs
        elif isinstance(event, ev.Leftover):
            # forecast after every measurement bought so far, once the forecaster had learned all of them
            assert event.spent == spent == learned
            # the pick is a proposed candidate never measured before, and it is what the run measures next
            assert item.candidate in proposed and item.candidate not in searched[:spent]
            following = next(e for e in events[i + 1:] if isinstance(e.event, ev.Spend))
            assert following.candidate == item.candidate and following.event.phase == "search"
            assert untried is None or event.untried == untried - 1  # one fewer to choose from each time
            untried = event.untried
            assert event.p_beat is not None and 0.0 <= event.p_beat <= 1.0
    assert untried == 1  # picked down to the last untried point
