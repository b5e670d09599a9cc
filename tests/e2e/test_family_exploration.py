"""Exploration that uncertainty pays for (issue 46, items 2 and 3): transformation families.

On a kernel nobody here wrote the forecaster may be confidently wrong about a whole family of
transformations. The selective router measures one representative of each family first, trusts no forecast
about a family before it has measured it, and the blended forecaster's belief about a family it has no
evidence of is wide.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelcast.agents.generate.families import TEMPLATE, WRITTEN, transformation_family
from kernelcast.graphs.route.risk_control import TrustThresholds
from kernelcast.graphs.route.routers.base import RoutingInput
from kernelcast.graphs.route.routers.family_rules import MIN_FAMILY_EVIDENCE
from kernelcast.graphs.route.routers.selective import SelectiveRouter
from kernelcast.tools.core.candidate import Candidate

from support.cli import run_cli
from support.paths import ROOT


def item(key: str, family: str, measured: int, p_mean: float) -> RoutingInput:
    """A child whose continuous belief about ln S has mean ``p_mean`` and sd 0.1 (a confident forecast)."""
    return RoutingInput(hash=key, confidence=0.9, predicted_bin=4, expected_log_speedup=p_mean, expected_bin=4.0,
                        failed=False, probabilities=(0.0, 0.0, 0.0, 0.2, 0.6, 0.2, 0.0, 0.0), incumbent=1.0,
                        log_mean=p_mean, log_sd=0.1, family=family, family_measured=measured)


def test_the_first_measurements_cover_the_families_before_the_ranking() -> None:
    """Six confident children of a well-measured family outrank everything on the forecast; the round still
    measures the best child of each family it has not measured, and the forecasts decide the rest (Thompson
    draws: five sd apart, the order of the means)."""
    items = [item(f"w{i}", "restrict", 3, 0.5 - 0.5 * i) for i in range(6)]
    items += [item("c1", "coarsen (cyclic)", 0, -2.5), item("c2", "coarsen (cyclic)", 0, -1.2),
              item("t1", "local tile", 0, -2.0)]
    routed = SelectiveRouter(measure_per_round=4).route(items, can_measure=4)
    measured = {key for key, r in routed.items() if r.decision == "measure"}
    assert measured == {"c2", "t1", "w0", "w1"}, routed
    assert "first of its family" in routed["c2"].reason


def test_no_forecast_about_an_unproven_family_is_trusted() -> None:
    """Thresholds that would prune every child: only the children of a family measured often enough here are
    pruned on the forecast; the others are deferred to the hardware."""
    trust = TrustThresholds(prune_below=0.5, risk=0.1, n_calibration=500)
    items = [item("old", "restrict", MIN_FAMILY_EVIDENCE, -2.0),
             item("new", "coarsen (vector)", MIN_FAMILY_EVIDENCE - 1, -2.0)]
    routed = SelectiveRouter(measure_per_round=4, audit_rate=0.0).route(items, can_measure=4, trust=trust)
    assert routed["old"].decision == "prune" and routed["old"].trusted
    assert routed["new"].decision == "measure" and not routed["new"].trusted
    assert "not trusted before" in routed["new"].reason


def test_families_are_read_from_typed_parameters() -> None:
    base = dict(task="t", source="__kernel void k(__global float *a) {}", global_size=["N"])
    derived = {"base": "abc", "coarsen_x": 2, "coarsen_y": 1, "mapping": "vector", "restrict": 1, "work_group": "keep"}
    assert transformation_family(Candidate(**base)) == WRITTEN
    assert transformation_family(Candidate(**base, params={"VEC": 4})) == TEMPLATE
    assert transformation_family(Candidate(**base, params=derived)) == "coarsen (vector)"
    assert transformation_family(Candidate(**base, params={**derived, "coarsen_x": 1})) == "restrict"


def test_a_family_without_evidence_gets_a_wider_belief() -> None:
    """The blended forecaster's epistemic spread: widest for a family it has never seen, narrower once the task
    has measured some of it."""
    from kernelcast.agents.forecast.blend import FAMILY_SPREAD, BlendedForecaster, _TaskData
    from kernelcast.tools.core.measurement import HardwareSpec, Measurement, Status
    from kernelcast.tools.core.task import resolve_task

    task = resolve_task("saxpy")
    hw = HardwareSpec(backend="opencl", platform="p", name="d")
    derived = task.reference().model_copy(update={"params": {"base": "x", "coarsen_x": 2, "mapping": "cyclic"}})
    tile = task.reference().model_copy(update={"params": {"base": "x", "local_tile": 8}})
    seen = Measurement(task="saxpy", candidate_hash=derived.hash, device=hw.key, sizes="full", status=Status.correct,
                       reason="", speedup=2.0)
    entry = _TaskData(task, hw, [], [(derived, seen), (derived, seen)])
    spread = BlendedForecaster().family_spread(entry, [derived, tile])
    assert spread[1] == pytest.approx(FAMILY_SPREAD)
    assert spread[0] < 0.75 * spread[1]


def test_a_fresh_store_spends_its_first_measurements_on_distinct_families(tmp_path: Path) -> None:
    """A kernel loaded by path, no template, a fresh store: the run's first search measurements are one
    representative each of distinct transformation families (budget 10: one confirmation kept, the first round
    may cover 9 - 5 = 4 families within COVERAGE_SHARE of the budget)."""
    from kernelcast.tools.store.store import Store

    out = run_cli(tmp_path / "home", "optimize", str(ROOT / "bench/kernels/matvec_cols"), "--budget", "10",
             "--sizes", "small")
    assert out.returncode == 0, out.stdout + out.stderr
    store = Store(tmp_path / "home" / "kernelcast.db", read_only=True)
    [run] = store.runs.recent()
    search = [m for m in store.ledger.find(run_id=run.id) if m.phase == "search"]
    families = [transformation_family(store.candidates.get(m.candidate_hash)) for m in search]  # type: ignore[arg-type]
    first = families[:4]
    assert len(first) == 4 and len(set(first)) == 4, families
