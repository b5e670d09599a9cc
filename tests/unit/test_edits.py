"""Edits are data: a candidate carries its origin and edits, its intent is rendered from them, the forecaster
reads the edits, and candidates stored before (v4 stores, the shipped seed pairs) read into the same edits."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import sqlite_utils

from kernelcast.agents.factory import SEED_DATASET
from kernelcast.agents.forecast.blend import DERIVED, WRITTEN, family
from kernelcast.agents.forecast.task_model import edit_features
from kernelcast.agents.generate.base import GenerationContext
from kernelcast.agents.generate.families import transformation_family
from kernelcast.agents.generate.offline import OfflineGenerator
from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.legacy_intent import parse_legacy_intent
from kernelcast.tools.core.task import Task, load_task, resolve_task
from kernelcast.tools.store.pairs import read_pairs
from kernelcast.tools.store.store import MIGRATIONS, SCHEMA_VERSION, Store

from support.paths import KERNELS


def _proposals(task: Task, parent: Candidate, n: int = 16) -> list[Candidate]:
    return OfflineGenerator(max_tries=200).propose(task, parent, GenerationContext(seed=0), n).candidates


def test_a_derived_candidate_carries_typed_edits_and_renders_the_old_intent() -> None:
    task = load_task(KERNELS / "matvec_cols")
    derived = [c for c in _proposals(task, task.reference()) if c.origin == "derived"]
    assert derived
    for c in derived:
        names = [e.name for e in c.edits]
        assert names and not any(e.generic for e in c.edits) and c.params is not None
        coarsen = [e for e in c.edits if e.name == "coarsen"]
        if coarsen:  # the typed values are the point's own parameters
            assert coarsen[0].values == {"x": c.params["coarsen_x"], "y": 1, "mapping": c.params["mapping"]}
        # the text the generator used to store: "derived: " and its transformations' labels
        assert c.intent == "derived: " + "; ".join(e.label for e in c.edits)
        assert parse_legacy_intent(c.intent, c.params, c.generator) == {"origin": "derived", "edits": c.edits,
                                                                          "note": ""}


def test_a_variant_of_a_point_keeps_the_points_edits_and_adds_its_own() -> None:
    task = load_task(KERNELS / "matvec_cols")
    gen = OfflineGenerator(max_tries=200)  # one generator: it knows the derived space its points belong to
    point = next(c for c in gen.propose(task, task.reference(), GenerationContext(seed=0), 16).candidates
                 if c.origin == "derived")
    variants = [c for c in gen.propose(task, point, GenerationContext(seed=0), 32).candidates if c.params is None]
    assert variants
    for v in variants:
        added = [e for e in v.edits if e.generic]
        assert v.origin == "derived" and v.edits[:len(point.edits)] == point.edits and added
        assert v.intent == f"{point.intent} + " + "; ".join(e.label for e in added)
        assert family(v) == DERIVED and transformation_family(v) == "written"
        assert len(edit_features(v.edits)) == 1


def test_family_and_features_read_the_edits_not_the_text() -> None:
    task = load_task(KERNELS / "matvec_cols")
    c = next(c for c in _proposals(task, task.reference()) if c.origin == "derived")
    # a dump with its intent text altered reads back with the same edits; the text is rendered again
    altered = Candidate.model_validate({**c.model_dump(), "intent": "generic: build option -O3"})
    assert altered.edits == c.edits and altered.intent == c.intent and family(altered) == DERIVED
    # a kernel whose author wrote "derived: ..." is still a written kernel
    written = c.model_copy(update={"origin": "written", "edits": [], "note": c.intent, "params": None})
    assert written.intent == c.intent and family(written) == WRITTEN and edit_features(written.edits) == {}
    assert written.hash == c.hash  # identity is the source, geometry and options, never the edits


def test_template_points_and_the_reference_have_their_origin() -> None:
    task = resolve_task("saxpy")
    ref = task.reference()
    assert (ref.origin, ref.edits, ref.intent) == ("reference", [], "reference kernel")
    point = next(iter(task.param_space()))
    made = task.instantiate(point, intent="template design point")
    assert made.origin == "template" and made.edits[0].name == "template_point" and made.edits[0].values == point
    assert made.intent == "template design point"


def _v4_store(path: Path, rows: list[dict]) -> None:
    """A store as kernelcast wrote it before edits were data: schema 4, candidates with their intent only."""
    db = sqlite_utils.Database(sqlite3.connect(str(path)))
    db.table("meta").create({"key": str, "value": str}, pk="key")
    for step in MIGRATIONS[:4]:
        step(db)
    db.table("meta").insert({"key": "schema_version", "value": "4"})
    for i, row in enumerate(rows):
        db.table("candidates").insert({"hash": f"{i:016x}", "task": "saxpy", "source": "k", "global_size": '["N"]',
                                       "local_size": "null", "build_options": "[]",
                                       "params": json.dumps(row.get("params")), "parent": None,
                                       "intent": row["intent"], "generator": row["generator"], "created_at": ""})
    db.conn.close()


def test_an_old_store_migrates_its_intents_into_edits(tmp_path: Path) -> None:
    old = [{"intent": "reference kernel", "generator": "reference"},
           {"intent": "template design point VEC=2, WG=64", "generator": "offline", "params": {"VEC": 2, "WG": 64}},
           {"intent": "template neighbour: WG 64->16 + #pragma unroll 2 on 'for (int k = 0; k < nv; ++k)'",
            "generator": "offline"},
           {"intent": "generic: work-group (16, 2); build option -cl-mad-enable", "generator": "offline"},
           {"intent": "derived: restrict on x, y; coarsen x4 y1 vector + jam (3 of 4 loads issued); "
                      "unroll k x4 + remainder; work-group (32) + build option -cl-no-signed-zeros",
            "generator": "offline", "params": {"coarsen_x": 4, "base": "abc"}},
           {"intent": "tile in local memory + unroll k", "generator": "llm:some-model"}]
    _v4_store(tmp_path / "old.db", old)
    store = Store(tmp_path / "old.db")
    assert store.schema_version == SCHEMA_VERSION  # migrated through v5 (edits) to the current version
    got = store.candidates.of_task("saxpy")
    assert [c.intent for c in got] == [r["intent"] for r in old]  # every listing reads as before
    assert [c.origin for c in got] == ["reference", "template", "template", "variant", "derived", "llm"]
    assert got[1].edits[0].values == {"VEC": 2, "WG": 64}
    pragma = got[2].edits[1]
    assert (pragma.name, pragma.values, pragma.generic) == \
        ("unroll_pragma", {"factor": 2, "header": "for (int k = 0; k < nv; ++k)"}, True)
    assert [e.name for e in got[3].edits] == ["local_size", "build_option"]
    assert [e.name for e in got[4].edits] == ["restrict", "coarsen", "unroll", "work_group", "build_option"]
    assert got[4].edits[1].values == {"x": 4, "y": 1, "mapping": "vector"}
    assert [sorted(edit_features(c.edits)) for c in got] == [
        [], [], ["edit:pragma unroll"], ["edit:work-group"], ["edit:build option -cl-no-signed-zeros"], []]
    assert [family(c) for c in got] == [WRITTEN, WRITTEN, WRITTEN, WRITTEN, DERIVED, WRITTEN]
    assert got[5].note == "tile in local memory + unroll k"  # an author's words stay words
    # new rows are stored with their edits and read back equal
    fresh = resolve_task("saxpy").instantiate({"VEC": 4, "COARSEN": 1, "WG": 64}, intent="random template point")
    store.candidates.add(fresh)
    assert store.candidates.get(fresh.hash) == fresh
    store.close()


def test_the_shipped_seed_pairs_read_into_edits_that_render_their_text() -> None:
    pairs, _ = read_pairs(SEED_DATASET)
    origins = {c.origin for c, _ in pairs}
    assert origins == {"template", "variant"}
    variants = [c for c, _ in pairs if c.origin == "variant"]
    assert all(c.intent.startswith("generic: ") and c.edits and all(e.generic for e in c.edits) for c in variants)
    assert all(edit_features(c.edits) for c in variants)


def test_a_buffers_direction_is_the_task_files_intent_key() -> None:
    task = resolve_task("saxpy")
    buffers = [a for a in task.spec.args if getattr(a, "kind", "") == "buffer"]
    assert {a.direction for a in buffers} <= {"in", "out", "inout"} and any(a.direction == "inout" or
                                                                           a.direction == "out" for a in buffers)
    assert all("intent" in a.model_dump() and "direction" not in a.model_dump() for a in buffers)
