"""Issue 4: the offline generator's proposals, seeds and deduplication, without a device (the proposals compiled and
checked on the device, and `kernelcast propose`: tests/device/test_generator_on_device.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelcast.agents.generate.base import GenerationContext, ProposalReport, Reason, Validator
from kernelcast.agents.generate.dedup import Deduplicator
from kernelcast.agents.generate.offline import OfflineGenerator, generic_edits
from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.measurement import Measurement, Status
from kernelcast.tools.core.task import Task, Tolerance, load_task, resolve_task
from kernelcast.tools.store.store import Store

from support.paths import KERNELS

DEVICE = "opencl:test-platform:test-device"


def test_proposals_are_deterministic_per_seed() -> None:
    task = resolve_task("gemm")
    ref = task.reference()

    def hashes(seed: int) -> list[str]:
        return [c.hash for c in OfflineGenerator().propose(task, ref, GenerationContext(seed=seed), 10).candidates]

    assert hashes(3) == hashes(3)
    assert hashes(3) != hashes(4)


def test_template_neighbours_move_one_or_two_parameters_to_adjacent_values() -> None:
    task = resolve_task("gemm")
    assert task.spec.template is not None
    params = task.spec.template.params
    base = {"TM": 2, "TN": 4, "WGX": 8, "WGY": 2, "KU": 2, "LOCAL": 0, "TK": 8}
    parent = task.instantiate(base)
    proposals = OfflineGenerator().propose(task, parent, GenerationContext(seed=1), 6).candidates
    neighbours = [c for c in proposals if c.intent.startswith("template neighbour")]
    assert neighbours, [c.intent for c in proposals]
    for c in neighbours:
        assert c.params is not None
        moved = [k for k in base if c.params[k] != base[k]]
        assert 1 <= len(moved) <= 2, c.intent
        for k in moved:
            assert abs(params[k].index(c.params[k]) - params[k].index(base[k])) == 1, c.intent


@pytest.mark.parametrize("name", ["softmax", "gemv"])
def test_generic_edits_go_on_the_parent_never_on_an_unmeasured_template_point(name: str) -> None:
    """A child with template params is exactly that template point; every other child is one generic edit of
    the parent (a stack "new point + pragma" would change two things and use up the point's identity)."""
    task = resolve_task(name)
    space = task.param_space()
    for parent in (task.reference(), task.instantiate(space[len(space) // 2])):
        children = OfflineGenerator().propose(task, parent, GenerationContext(seed=2), 32).candidates
        points = [c for c in children if c.params is not None]
        generic = [c for c in children if c.params is None]
        assert points and generic, [c.intent for c in children]
        for c in points:
            assert c.hash == task.instantiate(c.params).hash, c.intent
        prefix = "generic: " if parent.params is None else f"{parent.intent or 'parent'} + "
        assert all(c.intent.startswith(prefix) and c.parent == parent.hash for c in generic), \
            [c.intent for c in generic]
        assert len(points) >= 2 * len(generic)  # the template first: three points per generic edit


# ---- never repeat what the store has measured ---------------------------------------------------------
def _record(store: Store, candidate: Candidate, device: str, speedup: float = 1.0, sizes: str = "full") -> None:
    store.candidates.add(candidate)
    store.ledger.add(Measurement(task=candidate.task, candidate_hash=candidate.hash, device=device, sizes=sizes,
                                 status=Status.correct, speedup=speedup))


def test_offline_generator_never_proposes_a_point_measured_on_this_device(tmp_path: Path) -> None:
    task = resolve_task("saxpy")
    space = task.param_space()
    fresh, measured = space[:3], space[3:]
    store = Store(tmp_path / "kc.db")
    for i, point in enumerate(measured):
        _record(store, task.instantiate(point), DEVICE, speedup=1.0 + i / 100)
    _record(store, task.instantiate(fresh[0]), "opencl:another:device")  # measured elsewhere: still new here
    reference = task.reference()
    context = GenerationContext.from_store(store, task, DEVICE, reference, seed=0)
    assert len(context.measured_points) == len(measured)
    assert context.best[0][1] == pytest.approx(1.0 + (len(measured) - 1) / 100)  # best first

    gen = OfflineGenerator()
    result = gen.propose(task, reference, context, 500)
    proposals = result.candidates
    proposed_points = [c.params for c in proposals if c.params is not None]
    assert sorted(map(json.dumps, proposed_points)) == sorted(json.dumps(p) for p in fresh)  # each fresh point once
    assert result.report.skipped_measured == len(measured)
    assert not {c.hash for c in proposals} & context.known_hashes

    # a measured template point as the parent: no child may come back with the parent's (measured) params
    parent = task.instantiate(measured[0])
    context = GenerationContext.from_store(store, task, DEVICE, parent, seed=0)
    assert context.parent_speedup == pytest.approx(1.0) and context.parent_speedup_kind == "measured"
    children = OfflineGenerator().propose(task, parent, context, 500).candidates
    assert children
    assert all(c.params is None or c.params in fresh for c in children)
    assert all(c.parent == parent.hash for c in children)
    store.close()


def test_a_derived_point_gets_only_the_generic_edits_its_space_lacks() -> None:
    """A work-group or unroll-pragma variant of a derived point is a neighbour under another name, without params;
    expanded, it rooted a new derived template on itself, and a conv2d search spent 17 of 24 measurements there.
    A derived point is offered build options only; the reference still gets every generic edit."""
    task = load_task(KERNELS / "matvec_cols")
    gen = OfflineGenerator()
    first = gen.propose(task, task.reference(), GenerationContext(seed=0), 64).candidates
    of_reference = " ".join(c.intent for c in first if c.intent.startswith("generic:"))
    assert "work-group (" in of_reference and "#pragma unroll" in of_reference
    point = next(c for c in first if c.intent.startswith("derived:"))
    added = [c.intent.removeprefix(f"{point.intent} + ")
             for c in gen.propose(task, point, GenerationContext(seed=0), 64).candidates
             if c.intent.startswith(f"{point.intent} + ")]
    assert added and all(a.startswith("build option") and "work-group" not in a and "#pragma" not in a
                         for a in added), added


def test_fast_math_options_only_when_the_task_allows_them() -> None:
    import random

    task = resolve_task("saxpy")
    ref = task.reference()
    labels = {e.label for e in generic_edits(task, ref, 256, random.Random(0))}
    assert "build option -cl-mad-enable" in labels and "build option -cl-no-signed-zeros" in labels
    assert not any("fast-relaxed" in label or "unsafe-math" in label for label in labels)
    relaxed = Task(task.spec.model_copy(update={"tolerance": Tolerance(rtol=1e-3, atol=1e-4, allow_fast_math=True)}),
                   task.path, task.source, task.template_source)
    labels = {e.label for e in generic_edits(relaxed, ref, 256, random.Random(0))}
    assert {"build option -cl-fast-relaxed-math", "build option -cl-unsafe-math-optimizations"} <= labels


def test_floating_point_options_only_for_kernels_that_compute_on_floats() -> None:
    """A transpose only moves floats: -cl-mad-enable or -cl-no-signed-zeros gives the same kernel, and a variant
    with them spent a measurement on nothing (6 of 21 in a transpose run). Integer kernels likewise."""
    import random

    from kernelcast.agents.generate.kernel_ast import does_float_math, parse

    for name in ("transpose", "scan"):
        task = resolve_task(name)
        relaxed = Task(task.spec.model_copy(update={"tolerance": Tolerance(rtol=1e-3, atol=1e-4,
                                                                            allow_fast_math=True)}),
                       task.path, task.source, task.template_source)
        for cand in (task.reference(), task.instantiate(task.param_space()[-1])):
            labels = {e.label for e in generic_edits(relaxed, cand, 256, random.Random(0))}
            assert not any(label.startswith("build option -cl-") for label in labels), (name, labels)
    saxpy = resolve_task("saxpy")
    assert "build option -cl-mad-enable" in {e.label for e in generic_edits(saxpy, saxpy.reference(), 256,
                                                                             random.Random(0))}

    def computes(body: str, helper: str = "") -> bool:
        ps = parse(helper + "__kernel void k(__global float *a, __global const float *b) {\n" + body + "\n}")
        return does_float_math(ps, ps.kernel("k"))

    assert not computes("int i = get_global_id(0); a[2 * i + 1] = b[i];")  # integer index math, a float copy
    assert not computes("int i = get_global_id(0); vstore4(vload4(i, b), i, a);")
    assert computes("int i = get_global_id(0); a[i] = b[i] < 0.0f ? 0.0f : b[i];")  # a float comparison
    assert computes("int i = get_global_id(0); a[i] = -b[i];")  # the sign of zero
    assert computes("int i = get_global_id(0); a[i] = sqrt(b[i]);")
    assert computes("int i = get_global_id(0); a[i] = twice(b[i]);", "float twice(float x) { return x + x; }\n")
    assert not computes("int i = get_global_id(0); a[i] = pick(b, i);",
                        "float pick(__global const float *p, int i) { return p[i ^ 1]; }\n")


# ---- validation and deduplication ---------------------------------------------------------------
def test_dedup_catches_whitespace_and_comment_only_changes() -> None:
    task = resolve_task("saxpy")
    ref = task.reference()
    cosmetic = ref.model_copy(update={"source": "/* same kernel */\n" + ref.source.replace("    ", "\t\t")
                                      .replace("{", "{ // opening\n")})
    real = ref.model_copy(update={"source": ref.source.replace("a * x[i]", "x[i] * a")})
    dedup = Deduplicator({ref.hash})
    assert cosmetic in dedup and real not in dedup
    assert dedup.filter([cosmetic, real, real]) == [real]
    assert dedup.dropped == 2 and len(dedup) == 2


def test_validator_rejects_geometry_that_does_not_divide_and_counts_it() -> None:
    task = resolve_task("saxpy")
    ref = task.reference()
    report = ProposalReport(generator="test")
    validator = Validator(task, ref, report, Deduplicator())
    odd = ref.model_copy(update={"local_size": ["3"]})
    assert not validator.check(odd)
    assert report.rejected == {Reason.geometry.value: 1}
    assert "small sizes" in report.rejections[0].detail
    assert report.feedback() and "multiple of the local size" in report.feedback()[0]


def test_each_propose_call_returns_its_own_report() -> None:
    """The report travels with the proposals: a later call on the same generator cannot change it."""
    task = resolve_task("saxpy")
    gen = OfflineGenerator()
    first = gen.propose(task, task.reference(), GenerationContext(seed=0), 2)
    summary = first.report.summary()
    second = gen.propose(task, task.reference(), GenerationContext(seed=0), 5)
    assert first.report is not second.report and first.report.summary() == summary
    assert first.report.requested == 2 and first.report.accepted == len(first.candidates) == 2
    assert second.report.requested == 5 and second.report.accepted == len(second.candidates) == 5
    assert not hasattr(gen, "last_report")


def test_a_point_measured_only_at_the_other_sizes_is_still_new(tmp_path: Path) -> None:
    """A quick run at small sizes must not hide its points from the real run at full sizes (and back)."""
    task = resolve_task("saxpy")
    space = task.param_space()
    store = Store(tmp_path / "kc.db")
    _record(store, task.instantiate(space[0]), DEVICE, speedup=2.0, sizes="small")
    _record(store, task.instantiate(space[1]), DEVICE, speedup=3.0)
    reference = task.reference()
    full = GenerationContext.from_store(store, task, DEVICE, reference, seed=0)
    small = GenerationContext.from_store(store, task, DEVICE, reference, seed=0, sizes="small")
    assert full.measured_points == [space[1]] and small.measured_points == [space[0]]
    assert [s for _, s in full.best] == [3.0] and [s for _, s in small.best] == [2.0]
    proposed = [c.params for c in OfflineGenerator().propose(task, reference, full, 500).candidates]
    assert space[0] in proposed and space[1] not in proposed
    parent = task.instantiate(space[0])
    assert GenerationContext.from_store(store, task, DEVICE, parent, seed=0).parent_speedup is None
    assert GenerationContext.from_store(store, task, DEVICE, parent, seed=0, sizes="small").parent_speedup == 2.0
    store.close()
