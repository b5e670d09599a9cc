"""The selective router follows skill where it exists (RunConfig.follow_skill, issue 62 item 4): a round follows the
forecasts' ranking, as topk does, where the forecaster's certified skill or the run's measured ranking says it
ranks, and covers families where nothing does or the run's measurements refute it. On recorded GPU spaces the
transfer forecaster certifies its skill from its sources alone, and the generator is handed its best-ranked
unmeasured template points (forecast-guided proposals)."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest

from kernelcast.agents.forecast.base import CertifiedSkill
from kernelcast.agents.forecast.distributions import lognormal_bins
from kernelcast.agents.forecast.transfer import TransferForecaster
from kernelcast.agents.generate.guided import guided_points
from kernelcast.graphs.route.forecast_skill import ForecastSkill
from kernelcast.graphs.route.routers.base import RoutingInput
from kernelcast.graphs.route.routers.ordering import EXPLOIT_CERTIFIED, choose_regime
from kernelcast.graphs.route.routers.selective import SelectiveRouter
from kernelcast.tools.core.task import Task, load_task
from kernelcast.tools.store.kernel_tuner import import_cache
from kernelcast.tools.store.store import Store

from support.kernel_tuner_cache import DEFAULT, KEYS, TASK, cache, entry, write

GPUS = {"A100": "NVIDIA A100-PCIE-40GB", "A4000": "NVIDIA RTX A4000", "A6000": "NVIDIA RTX A6000",
        "W6600": "AMD Radeon PRO W6600"}


def _item(key: str, mean: float, sd: float, family: str) -> RoutingInput:
    probs = tuple(float(p) for p in lognormal_bins(mean, sd))
    return RoutingInput(hash=key, confidence=max(probs), predicted_bin=int(np.argmax(probs)) + 1,
                        expected_log_speedup=mean, expected_bin=sum((i + 1) * p for i, p in enumerate(probs)),
                        failed=False, probabilities=probs, log_mean=mean, log_sd=sd, family=family)


def _round() -> list[RoutingInput]:
    """Sixteen children of four families with a wide shared sd (they claim little of the variance); the four the
    forecasts rank best are all of family "a"."""
    return [_item(f"{family}{i}", mean, 0.9, family) for i, (family, mean) in enumerate(
        [("a", 1.2), ("a", 1.1), ("a", 1.0), ("a", 0.95), ("b", 0.2), ("b", 0.1), ("c", 0.3), ("c", -0.2),
         ("d", 0.0), ("d", 0.15), ("b", -0.3), ("c", 0.05), ("d", -0.1), ("a", -0.4), ("b", 0.25), ("c", 0.12)])]


CERTIFIED = CertifiedSkill(0.8, 2000, "a sibling GPU forecast from the others")


def test_the_regime_follows_certified_or_measured_skill_and_is_refuted_by_measurements() -> None:
    items = _round()
    assert not choose_regime(items, None).exploit  # wide beliefs claim little, nothing certifies them
    assert choose_regime(items, None, CERTIFIED).exploit
    assert not choose_regime(items, None, CertifiedSkill(EXPLOIT_CERTIFIED - 0.1, 2000, "weak")).exploit
    shown = ForecastSkill(16, 0.9)  # the run's own measurements ranked well: followed without a certificate
    assert shown.shown >= 0.5 and choose_regime(items, shown).exploit
    refuted = choose_regime(items, ForecastSkill(10, -0.6), CERTIFIED)  # measured ranking refutes the certificate
    assert not refuted.exploit and "refutes" in refuted.why
    undecided = choose_regime(items, ForecastSkill(6, 0.3), CERTIFIED)  # measurements too few to say either way
    assert undecided.exploit
    assert not choose_regime(items, ForecastSkill(19, 0.18), CERTIFIED).exploit  # convolution/A100 at budget 24
    assert choose_regime(items, ForecastSkill(5, 0.1), CERTIFIED).exploit  # five pairs at 0.1 may still reach 0.6


def test_following_skill_measures_the_forecasts_top_picks_and_today_s_router_covers_families() -> None:
    items = _round()
    top = {"a0", "a1", "a2", "a3"}
    ranked = SelectiveRouter(measure_per_round=4, audit_rate=0.0, seed=3, budget=8, follow_skill=True,
                             certified=CERTIFIED)
    out = ranked.route(items, can_measure=8)
    assert {k for k, r in out.items() if r.decision == "measure"} == top
    assert "exploit the ranking" in out["a0"].reason and ranked.regimes[-1].exploit
    assert "followed the forecasts' ranking in 1 of 1" in ranked.regime_text()
    today = SelectiveRouter(measure_per_round=4, audit_rate=0.0, seed=3, budget=8).route(items, can_measure=8)
    measured = {k for k, r in today.items() if r.decision == "measure"}
    assert measured != top and len({k[0] for k in measured}) == 4  # one child of each family first
    uncertified = SelectiveRouter(measure_per_round=4, audit_rate=0.0, seed=3, budget=8, follow_skill=True)
    covered = uncertified.route(items, can_measure=8)
    assert {k for k, r in covered.items() if r.decision == "measure"} == measured  # no skill: today's order
    assert "cover families" in uncertified.regime_text()


# ---- a recorded space on four GPUs: three of one vendor agree, the fourth reverses them ---------------------------
@pytest.fixture(scope="module")
def task() -> Task:
    return load_task(TASK)


def _points(task: Task, n: int) -> list[dict[str, Any]]:
    """``n`` valid points besides the default, spread over the space."""
    space = [p for p in task.param_space() if p != DEFAULT]
    step = len(space) // n
    return [space[i * step] for i in range(n)]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory, task: Task) -> tuple[Store, list[dict[str, Any]]]:
    """Twelve points recorded on each GPU: the NVIDIA GPUs time point i at 4 / (1 + i) ms (a little apart from
    each other), the AMD one at 4 / (12 - i) ms, the reverse ranking."""
    folder = tmp_path_factory.mktemp("recorded")
    points = _points(task, 12)
    store = Store(folder / "k.db")
    for gpu, name in GPUS.items():
        rows = [entry(DEFAULT, [8.0, 8.0, 8.0])]
        for i, point in enumerate(points):
            ms = 4.0 / (12 - i) if gpu == "W6600" else 4.0 / (1 + i) * (1.0 + 0.01 * len(gpu) * (i % 3))
            rows.append(entry(point, [ms, ms * 1.01, ms * 0.99]))
        data = cache(device_name=name, cache={",".join(str(r[k]) for k in KEYS): r for r in rows})
        space = import_cache(write(folder, data, f"{gpu}.json.gz"), task)
        store.ledger.replace_recorded(task, space.device, space.rows)
    return store, points


def _device(store: Store, gpu: str) -> Any:
    return next(spec for key, spec in store.devices.all().items() if GPUS[gpu] in key)


def test_transfer_certifies_a_sibling_gpu_and_not_another_vendor(recorded: tuple[Store, list[dict[str, Any]]],
                                                                  task: Task) -> None:
    store, _ = recorded
    sibling = TransferForecaster(store).certified_skill(task, _device(store, "A100"))
    assert sibling is not None and sibling.rho >= EXPLOIT_CERTIFIED and "Spearman" in sibling.why
    assert TransferForecaster(store).certified_skill(task, _device(store, "W6600")) is None


def test_guided_points_are_the_forecasters_best_unmeasured_ones(recorded: tuple[Store, list[dict[str, Any]]],
                                                                 task: Task) -> None:
    store, points = recorded
    forecaster = TransferForecaster(store)
    fastest = task.instantiate(points[-1]).hash  # the NVIDIA sources' best point
    got = guided_points(forecaster, store, task, _device(store, "A100"), set(), 3)
    assert [json.dumps(p, sort_keys=True) for p in got] == [json.dumps(p, sort_keys=True)
                                                           for p in points[::-1][:3]]
    skipped = guided_points(forecaster, store, task, _device(store, "A100"), {fastest}, 3)
    assert skipped[0] == points[-2] and points[-1] not in skipped
    assert guided_points(object(), store, task, _device(store, "A100"), set(), 3) == []  # a forecaster that cannot
    assert math.isfinite(forecaster.ranked(task, _device(store, "A100"))[0][0])


def test_the_generator_proposes_the_guided_points_first_and_on_a_recording_no_generic_variant(task: Task) -> None:
    from kernelcast.agents.generate.base import GenerationContext
    from kernelcast.agents.generate.offline import OfflineGenerator

    guided = _points(task, 40)[-2:]
    reference = task.reference()
    plain = OfflineGenerator().propose(task, reference, GenerationContext(seed=1), 8).candidates
    assert not any(c.params in guided for c in plain[:2])  # the design alone does not start with them
    context = GenerationContext(seed=1, guided=guided, template_only=True)
    got = OfflineGenerator().propose(task, reference, context, 8).candidates
    assert [got[0].params, got[2].params] == guided and "forecast-guided" in got[0].intent
    assert all(c.params is not None for c in got)  # template points only: no generic variant of the reference
    assert any(c.params is None for c in plain)  # which the generator otherwise mixes in


def test_guided_points_follow_the_regime_not_the_setting_alone() -> None:
    """Forecast-guided points go to the generator only where the router follows the ranking: certified skill before
    the first round, the last round's regime after it. A GPU no source certifies (W6600) keeps its design."""
    from kernelcast.graphs.route.routers.selective import guides_generator

    items = _round()
    assert not guides_generator(SelectiveRouter(budget=8))  # follow_skill off: never
    uncertified = SelectiveRouter(budget=8, follow_skill=True)
    assert not guides_generator(uncertified)
    uncertified.route(items, can_measure=8)
    assert not uncertified.regimes[-1].exploit and not guides_generator(uncertified)  # covered: no guided points
    weak = SelectiveRouter(budget=8, follow_skill=True, certified=CertifiedSkill(EXPLOIT_CERTIFIED - 0.1, 2000, "w"))
    assert not guides_generator(weak)
    certified = SelectiveRouter(budget=8, follow_skill=True, certified=CERTIFIED)
    assert guides_generator(certified)
    certified.route(items, can_measure=8, skill=ForecastSkill(19, 0.18))  # the run's measurements refute it
    assert not certified.regimes[-1].exploit and not guides_generator(certified)
    shown = SelectiveRouter(budget=8, follow_skill=True)
    shown.route(items, can_measure=8, skill=ForecastSkill(16, 0.9))  # measured skill, no certificate
    assert guides_generator(shown)


def test_a_first_round_of_four_does_not_reweigh_the_sources(recorded: tuple[Store, list[dict[str, Any]]],
                                                            task: Task) -> None:
    """Four measurements rank the sources on noise (a Spearman of four has a null sd of 0.58): the transfer
    forecaster keeps its weights, and so its ranking, until it has MIN_PAIRS of them; then a source that ranks
    the target's measurements in reverse (another vendor) loses weight to one that agrees."""
    from kernelcast.agents.forecast.transfer import MIN_PAIRS
    from kernelcast.tools.core.measurement import Measurement

    store, points = recorded
    a100 = _device(store, "A100")

    def measured(n: int) -> list[Any]:
        pairs = []
        for i, point in enumerate(points[:n]):
            cand = task.instantiate(point)
            pairs.append((cand, Measurement(task=task.name, candidate_hash=cand.hash, device=a100.key, sizes="full",
                                            status="correct", speedup=2.0 * (1 + i))))
        return pairs

    forecaster = TransferForecaster(store)
    before = dict((k, m) for m, k in forecaster.ranked(task, a100))
    assert forecaster.learn(measured(4), {a100.key: a100})
    assert all(s.agreement == 0.0 for s in forecaster.sources(task, a100))
    after = {k: m for m, k in forecaster.ranked(task, a100)}
    unmeasured = [task.instantiate(p).hash for p in points[4:]]
    assert all(after[k] == pytest.approx(before[k]) for k in unmeasured)
    assert MIN_PAIRS <= len(points) and forecaster.learn(measured(MIN_PAIRS), {a100.key: a100})
    agreement = {s.spec.key: s.agreement for s in forecaster.sources(task, a100)}
    assert agreement[_device(store, "W6600").key] < 0 < agreement[_device(store, "A4000").key]
