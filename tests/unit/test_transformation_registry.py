"""The transformation registry (agents/generate/transforms/registry.py): the one list the derived template and the
families read. Checked here: the entries are consistent, the readers name no transformation, the old-intent
reader's names are registered ones, the coarsen/vectorize cycle is gone, and the families of stored points."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from kernelcast.agents.generate import derived_space, families
from kernelcast.agents.generate.transforms import coarsen, registry, vectorize
from kernelcast.agents.generate.transforms.registry import FAMILY_ORDER, KEEP, TRANSFORMATIONS, point_family, transformation
from kernelcast.tools.core.legacy_intent import OLD_LABELS


def test_each_parameter_belongs_to_one_transformation_and_every_one_has_a_family_rank() -> None:
    params = [p for t in TRANSFORMATIONS.values() for p in t.params]
    assert len(params) == len(set(params))
    assert sorted(FAMILY_ORDER) == sorted(TRANSFORMATIONS)
    assert all(set(t.excludes) <= set(TRANSFORMATIONS) for t in TRANSFORMATIONS.values())
    assert [t.name for t in TRANSFORMATIONS.values() if t.geometry] == ["work_group"]


def _string_constants(module: object) -> set[str]:
    tree = ast.parse(Path(module.__file__).read_text())  # type: ignore[attr-defined]
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


@pytest.mark.parametrize("module", [derived_space, families], ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_the_readers_of_the_registry_name_no_transformation(module: object) -> None:
    names = set(TRANSFORMATIONS) | {p for t in TRANSFORMATIONS.values() for p in t.params}
    assert _string_constants(module) & names == set()


def test_old_intent_labels_name_registered_transformations() -> None:
    """The tools side keeps the old labels as data (it may not import agents): their names must be the registry's."""
    assert {old.name for old in OLD_LABELS} <= set(TRANSFORMATIONS)


def test_coarsen_and_vectorize_do_not_import_each_other() -> None:
    def imported(module: object) -> set[str]:
        tree = ast.parse(Path(module.__file__).read_text())  # type: ignore[attr-defined]
        return {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}

    assert coarsen.__name__ not in imported(vectorize)
    assert vectorize.__name__ in imported(coarsen)  # coarsen's vector mapping is vectorize's jammer


@pytest.mark.parametrize(("params", "family"), [
    ({"coarsen_x": 4, "coarsen_y": 1, "mapping": "vector", "unroll": 4}, "coarsen (vector)"),
    ({"coarsen_x": "2"}, "coarsen (cyclic)"),  # stored numbers may be strings; the mapping defaults to cyclic
    ({"row_threads": 16, "scalar_replace": 1}, "row reduction"),
    ({"local_tile": 16, "restrict": 1}, "local tile"),
    ({"scalar_replace": 1, "unroll": 2, "restrict": 1}, "scalar replacement"),
    ({"unroll": 8, "restrict": 1, "work_group": "64"}, "unroll"),
    ({"restrict": 1, "work_group": "64"}, "restrict"),
    ({"work_group": "16,4"}, "work-group"),
    ({"coarsen_x": 1, "unroll": 1, "work_group": KEEP, "local_tile": 0}, None),
])
def test_a_points_family_is_its_most_structural_transformation(params: dict[str, object], family: str | None) -> None:
    assert point_family(params) == family


def test_an_unknown_transformation_is_a_clear_error() -> None:
    assert transformation("unroll").module.__name__.endswith("transforms.unroll")
    with pytest.raises(ValueError, match="unknown transformation 'fuse'.*coarsen"):
        transformation("fuse")
    assert registry.WORK_GROUP is TRANSFORMATIONS["work_group"]
