"""Trust is per forecaster: calibration rows certify only the (forecaster, model) whose runs made them.

The hazard this guards: rows were pooled by device, so a store full of the learned forecaster's decisions (and
the seed replay, made with the learned forecaster) certified whatever ``--forecaster`` a run chose.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from kernelcast.agents.registry import FORECASTERS, SEED_REPLAY, forecaster_spec
from kernelcast.graphs.config import RunConfig
from kernelcast.graphs.route.replay_calibration import shipped_by_stage, stage_bucket
from kernelcast.graphs.route.risk_control import SEED_REPLAY as SEED_REPLAY_SOURCE
from kernelcast.graphs.route.trust import ForecasterKey, forecaster_of, trust_for
from kernelcast.tools.core.measurement import Measurement, Status, TimingStats
from kernelcast.tools.store.store import Store

from support.decisions import record_route

LEARNED = ("learned", None)
PRIOR = ForecasterKey("prior", None)


def _measured(child: str, speedup: float) -> Measurement:
    stats = TimingStats.from_samples([100.0, 110.0, 105.0])
    return Measurement(task="saxpy", candidate_hash=child, device="dev", sizes="full", status=Status.correct,
                       speedup=speedup, reference=stats, candidate=stats)


def _learned_store(path: Path, rows: int = 300) -> Store:
    """A store whose device holds ``rows`` measured decisions of learned-forecaster runs, well calibrated (a low p
    lost to its incumbent, a high p beat it): enough to certify both thresholds at risk 0.1."""
    store = Store(path)
    run = store.runs.create("saxpy", "dev", RunConfig(task="saxpy", forecaster="learned").model_dump(), 24)
    for i in range(rows):
        child = hashlib.sha256(f"learned-{i}".encode()).hexdigest()
        p = 0.02 if i % 2 else 0.98
        record_route(store, run, child, decision="measure", p_beat=p, incumbent=1.0)
        store.ledger.add(_measured(child, 0.5 if p < 0.5 else 2.0), run_id=run)
    return store


def test_another_forecasters_rows_never_certify_a_run(tmp_path: Path) -> None:
    store = _learned_store(tmp_path / "k.db")
    learned = trust_for(store, "dev", 0, 0.1, LEARNED)
    assert learned.n_calibration == 300 and learned.prune_below is not None, "the rows certify their own forecaster"
    prior = trust_for(store, "dev", 0, 0.1, PRIOR)
    assert prior.n_calibration == 0 and prior.prune_below is None and prior.accept_above is None
    model = trust_for(store, "dev", 0, 0.1, ("learned", "some-model"))
    assert model.n_calibration == 0, "a (forecaster, model) pair is its own key"


def test_the_seed_replay_certifies_only_the_forecaster_that_made_it(tmp_path: Path) -> None:
    store = Store(tmp_path / "empty.db")
    stage = next(s for s in range(40) if shipped_by_stage(SEED_REPLAY).get(stage_bucket(s)))
    declared = [name for name, spec in FORECASTERS.items() if spec.seed_replay is not None]
    assert declared == ["learned"] and forecaster_spec("learned").seed_replay == SEED_REPLAY
    replayed = trust_for(store, "dev", stage, 0.1, LEARNED, replayed=True)
    assert replayed.source == SEED_REPLAY_SOURCE and replayed.n_calibration > 0
    for other in [PRIOR, ("llm", "local:/models/trained"), ("none", None)]:
        thresholds = trust_for(store, "dev", stage, 0.1, other, replayed=True)
        assert thresholds.source != SEED_REPLAY_SOURCE and thresholds.n_calibration == 0, other


def test_a_run_whose_config_does_not_validate_belongs_to_no_forecaster(tmp_path: Path) -> None:
    store = Store(tmp_path / "k.db")
    good = store.runs.create("saxpy", "dev", RunConfig(task="saxpy", forecaster="prior").model_dump(), 24)
    odd = store.runs.create("saxpy", "dev", {"forecaster": "prior"}, 24)  # no task: not a RunConfig
    runs = {r.id: r for r in store.runs.recent()}
    assert forecaster_of(runs[good]) == PRIOR
    assert forecaster_of(runs[odd]) is None


def test_a_local_model_is_keyed_by_its_weights_not_its_path(tmp_path: Path) -> None:
    """A model exported over another at the same path starts a record of its own (issue 65: it inherited the
    old model's trust); the same weights keep theirs; a stored run keeps the digest it recorded."""
    from kernelcast.graphs.route.trust import forecaster_key

    folder = tmp_path / "model"
    folder.mkdir()
    weights = folder / "model.safetensors"
    weights.write_bytes(b"old weights")
    old = RunConfig(task="saxpy", forecaster="llm", model=f"local:{folder}")
    assert old.model_weights is not None and old.model_weights.startswith("local-sha256:")
    store = _learned_store(tmp_path / "k.db", rows=0)
    run = store.runs.create("saxpy", "dev", old.model_dump(), 24)
    for i in range(300):
        child = hashlib.sha256(f"local-{i}".encode()).hexdigest()
        p = 0.02 if i % 2 else 0.98
        record_route(store, run, child, forecaster_key(old), decision="measure", p_beat=p, incumbent=1.0)
        store.ledger.add(_measured(child, 0.5 if p < 0.5 else 2.0), run_id=run)
    assert trust_for(store, "dev", 0, 0.1, forecaster_key(old)).n_calibration == 300
    same = RunConfig(task="saxpy", forecaster="llm", model=f"local:{folder}")
    assert forecaster_key(same) == forecaster_key(old), "the same weights keep their record"
    weights.write_bytes(b"new weights, exported over the old ones")
    new = RunConfig(task="saxpy", forecaster="llm", model=f"local:{folder}")
    assert new.model == old.model and forecaster_key(new) != forecaster_key(old)
    assert trust_for(store, "dev", 0, 0.1, forecaster_key(new)).n_calibration == 0, "another model, no record"
    stored = {r.id: r for r in store.runs.recent()}[run]
    assert forecaster_of(stored) == forecaster_key(old), "a stored run keeps the digest it was started with"
