"""The seed's replayed decisions: the shipped rows are what the current forecaster gives, and they show why
the router certifies per stage of a run."""

from __future__ import annotations

import numpy as np
import pytest

from kernelcast.agents.factory import SEED_DATASET
from kernelcast.agents.forecast.learned import task_lookup
from kernelcast.agents.registry import SEED_REPLAY
from kernelcast.graphs.route.replay_calibration import read_rows, replay_group, shipped_by_stage, stage_bucket
from kernelcast.graphs.route.risk_control import fit_thresholds
from kernelcast.tools.store.pairs import read_pairs


def test_the_shipped_rows_are_what_the_forecaster_gives_now() -> None:
    """Replaying one group reproduces the shipped rows: a change of the forecaster that moves its P(beat)
    fails here until the rows are rebuilt (``python -m kernelcast.graphs.route.replay_calibration``)."""
    pairs, devices = read_pairs(SEED_DATASET)
    shipped = read_rows(SEED_REPLAY)
    group = "softmax@" + next(d for d in devices if "Intel" in d)
    task_name, device = group.split("@", 1)
    for mode in ("task", "device"):
        fresh = replay_group(mode, task_name, device, pairs, devices, task_lookup(None), ks=(4,), draws=1)
        kept = [r for r in shipped if r.mode == mode and r.group == group and r.k == 4 and r.draw == 0]
        assert len(fresh) == len(kept) > 10
        assert [r.beat for r in fresh] == [r.beat for r in kept]
        assert [r.p_beat for r in fresh] == pytest.approx([r.p_beat for r in kept], abs=1e-9)


def test_a_forecaster_that_has_learned_little_is_overconfident_so_stages_are_certified_apart() -> None:
    """Among replayed decisions with P(beat) <= 0.1, those taken after 2 measurements beat the incumbent more
    often than those after 8 or more (7.2 against 5.1 % in the rows of 2026-12-04; 9.9 against 4.8 % before the
    prior probed launch costs): one pooled threshold would be earned late in runs and spent early in them. No
    stage beats the 10 % such a p claims."""
    rows = read_rows(SEED_REPLAY)

    def false_share(ks: set[int]) -> float:
        low = [r.beat for r in rows if r.k in ks and r.p_beat <= 0.1]
        return float(np.mean(low))

    late = false_share({8, 12, 16, 20})
    assert false_share({2}) > late
    assert max(false_share({k}) for k in {r.k for r in rows}) < 0.1
    thresholds = {b: fit_thresholds(rows, risk=0.1).prune_below for b, rows in shipped_by_stage(SEED_REPLAY).items()}
    assert stage_bucket(0) not in thresholds  # the opening is never replayed: nothing taught, nothing certified
    early, late = thresholds[stage_bucket(2)], thresholds[stage_bucket(16)]
    assert early is not None and late is not None and early < late
