"""Issue 14: the kernel parser, the source transformations and the derived template, on the real OpenCL device.

Every test that claims a transformation is valid measures the transformed kernel with the harness
(correctness on 3 seeds against the reference) and asserts that it is correct.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kernelcast.agents.generate.base import GenerationContext
from kernelcast.agents.generate.derived_space import KEEP, DerivedSpace, work_group_shapes
from kernelcast.agents.generate.kernel_ast import KernelParseError, observes_work_group, parse, readonly_pointers
from kernelcast.agents.generate.offline import OfflineGenerator, local_size_choices
from kernelcast.agents.generate.space_filling import space_filling
from kernelcast.agents.generate.transforms import NotApplicable
from kernelcast.agents.generate.transforms.coarsen import coarsen
from kernelcast.agents.generate.transforms.restrict import restrict_const
from kernelcast.agents.generate.transforms.scalar_replace import scalar_replace
from kernelcast.agents.generate.transforms.unroll import unroll
from kernelcast.tools.core.candidate import Candidate, check_signature
from kernelcast.tools.core.measurement import MeasureConfig, Status
from kernelcast.tools.core.task import Task, builtin_task_paths, load_task, resolve_task
from kernelcast.tools.hardware.worker import MeasurementWorker

from support.paths import EXAMPLES, KERNELS

SMALL = MeasureConfig(sizes="small", time_kernels=False)
OPENCL_TASKS = sorted(n for n, p in builtin_task_paths().items() if resolve_task(n).language == "opencl")


@pytest.fixture(scope="module")
def worker() -> Iterator[MeasurementWorker]:
    with MeasurementWorker("opencl") as w:
        yield w


def without_template(task: Task) -> Task:
    """The task as a user without a template would have it: reference only."""
    return Task(task.spec.model_copy(update={"template": None}), task.path, task.source, None)


def assert_correct(worker: MeasurementWorker, task: Task, candidate: Candidate, what: str) -> None:
    check_signature(candidate.source, task.source, task.spec.entry, task.language)
    m = worker.measure(task, candidate, SMALL)
    assert m.status is Status.correct, f"{what}: {m.status.value}: {m.reason}\n{candidate.source}"


# ---- the parser ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(builtin_task_paths()))
def test_every_builtin_reference_and_template_point_parses_cleanly(name: str) -> None:
    task = resolve_task(name)
    ps = parse(task.source, task.language)
    assert ps.kernel(task.spec.entry).spelling == task.spec.entry
    if task.spec.template is not None:
        point = dict(task.spec.template.default or task.param_space()[0])
        instantiated = task.instantiate(point)
        assert parse(instantiated.source, task.language).kernel(task.spec.entry).spelling == task.spec.entry


def test_parser_reads_vector_types_typedefs_macros_and_several_kernels() -> None:
    blocked = parse((EXAMPLES / "gemm_blocked.cl").read_text())
    kernel = blocked.kernel("gemm")
    decls = {n.spelling: n.type.spelling for n in kernel.walk_preorder() if n.kind.name == "VAR_DECL"}
    assert decls["acc0"].split()[-1] == "float8"  # not silently int: the header defines the vector types
    source = ("#define DATA float\ntypedef DATA real;\n"
              "__kernel void a(__global real *x) { x[get_global_id(0)] = 1; }\n"
              "__kernel void b(__global const real *x, __global real *y) { y[0] = vload4(0, x).s1; }\n")
    ps = parse(source)
    assert [k.spelling for k in ps.kernels()] == ["a", "b"]
    b = ps.kernel("b")
    assert {name for name, _ in readonly_pointers(ps, b)} == {"x"}
    with pytest.raises(KernelParseError, match="not defined"):
        ps.kernel("c")
    with pytest.raises(KernelParseError, match="does not parse cleanly"):
        parse("__kernel void f(__global float *x) { x[0] = undefined_name; }")
    synced = parse("__kernel void f(__global float *x) { barrier(CLK_LOCAL_MEM_FENCE); }")
    assert observes_work_group(synced, synced.kernel("f"))
    assert not observes_work_group(ps, b)


# ---- scalar replacement --------------------------------------------------------------------------------
def test_scalar_replacement_moves_a_global_accumulator_into_a_register(worker: MeasurementWorker) -> None:
    task = load_task(KERNELS / "matvec_cols")
    result = scalar_replace(task, task.reference())
    assert result.label == "scalar-replace y[i]"
    assert "+= A[j * M + i] * x[j]" in result.candidate.source and "y[i] +=" not in result.candidate.source
    assert_correct(worker, task, result.candidate, result.label)

    conv = load_task(KERNELS / "conv2d")  # nested loops: the register lives across both
    result = scalar_replace(conv, conv.reference())
    assert result.label == "scalar-replace out[i * W + j]"
    assert_correct(worker, conv, result.candidate, result.label)

    gemm = resolve_task("gemm")  # already accumulates in a private variable
    with pytest.raises(NotApplicable, match="no global location"):
        scalar_replace(gemm, gemm.reference())


def test_scalar_replacement_refuses_a_moving_index_and_edits_only_the_entry_kernel(worker: MeasurementWorker) -> None:
    moving = ("__kernel void f(__global float *y, const int n) {\n"
              "  for (int j = 0; j < n; ++j) y[j] += 1.0f;\n}\n")
    ps = parse(moving)
    assert ps.kernel("f")
    task = load_task(KERNELS / "reduce_global")
    helper = task.source[: task.source.index("__kernel void colsum")]
    result = scalar_replace(task, task.reference())
    assert result.label == "scalar-replace out[c]"
    assert result.candidate.source.startswith(helper)  # the other kernel of the file is untouched
    assert_correct(worker, task, result.candidate, result.label)
    moving_task = Task(task.spec.model_copy(update={"entry": "f"}), task.path, moving, None)
    with pytest.raises(NotApplicable):
        scalar_replace(moving_task, moving_task.reference().model_copy(update={"source": moving}))


# ---- coarsening with jam ------------------------------------------------------------------------------------
@pytest.mark.parametrize("mapping", ["cyclic", "block"])
def test_coarsening_with_jam_register_blocks_the_naive_gemm(worker: MeasurementWorker, mapping: str) -> None:
    task = resolve_task("gemm")
    result = coarsen(task, task.reference(), 4, 4, mapping)
    c = result.candidate
    assert result.label == f"coarsen x4 y4 {mapping} + jam (8 of 32 loads issued)"  # 4 of A + 4 of B per k
    assert c.global_size == ["(N) / 4", "(M) / 4"]
    assert c.source.count("for (int k = 0; k < K; ++k) {") == 1  # the jammed loop; fallback loops are renamed
    assert_correct(worker, task, c, result.label)


def test_vector_coarsening_turns_the_naive_gemm_into_float4_register_blocks(worker: MeasurementWorker) -> None:
    task = resolve_task("gemm")
    result = coarsen(task, task.reference(), 4, 4, "vector")
    source = result.candidate.source
    assert result.label.startswith("coarsen x4 y4 vector + jam")
    assert source.count("float4 acc_kcv") == 4  # 4 rows of C, 4 columns each, in registers
    assert "vload4(0, B + (k * N + col_kc0x))" in source  # one vector load of B per k, shared by the 4 rows
    assert source.count("vstore4(") == 4
    assert_correct(worker, task, result.candidate, result.label)
    matvec = load_task(KERNELS / "matvec_cols")  # the rows of a column-major matrix are contiguous
    base = scalar_replace(matvec, matvec.reference()).candidate
    result = coarsen(matvec, base, 8, 1, "vector")
    assert "vload8(0, A + (j * M + i_kc0))" in result.candidate.source
    assert_correct(worker, matvec, result.candidate, result.label)


def test_a_counter_declared_before_its_loop_is_jammed_like_one_declared_in_it(worker: MeasurementWorker) -> None:
    """``int k; ... for (k = 0; ...)``, as public suites write loops: the counter is assigned, so it used to count
    as different in every copy, the copies' loop headers differed and nothing was jammed (a GEMM accumulating
    into global C got 0.36-0.85x from coarsening). Read only inside loops that start it afresh, it is uniform."""
    gemm = resolve_task("gemm")
    source = gemm.source.replace("float acc = 0.0f;\n        for (int k = 0;", "float acc = 0.0f;\n        int k;\n"
                                 "        for (k = 0;")
    assert "for (k = 0; k < K; ++k)" in source
    task = Task(gemm.spec.model_copy(update={"template": None}), gemm.path, source, None)
    result = coarsen(task, task.reference(), 4, 4, "vector")
    jammed = result.candidate.source
    assert jammed.count("float4 acc_kcv") == 4 and "vload4(0, B + (k * N + col_kc0x))" in jammed
    assert "k_kc" not in jammed.split("} else {")[0], "the jammed fast path shares one counter"
    assert_correct(worker, task, result.candidate, result.label)
    # read after its loop, the counter carries a value out of it: renamed per copy, as before
    after = source.replace("C[row * N + col] = acc;", "C[row * N + col] = acc + (float)(k - K);")
    task = Task(gemm.spec.model_copy(update={"template": None}), gemm.path, after, None)
    result = coarsen(task, task.reference(), 2, 1, "cyclic")
    assert "k_kc0" in result.candidate.source
    assert_correct(worker, task, result.candidate, result.label)


@pytest.mark.parametrize("name,fx,fy", [("stencil2d", 2, 4), ("transpose", 4, 2), ("softmax", 4, 1),
                                         ("layernorm", 2, 1), ("gemv", 8, 1), ("saxpy", 4, 1)])
def test_coarsening_keeps_guards_else_branches_and_early_returns_correct(
        worker: MeasurementWorker, name: str, fx: int, fy: int) -> None:
    task = resolve_task(name)
    for mapping in ("cyclic", "block", "vector"):
        result = coarsen(task, task.reference(), fx, fy, mapping)
        assert result.label.startswith(f"coarsen x{fx} y{fy} {mapping} + jam")
        assert_correct(worker, task, result.candidate, result.label)


@pytest.mark.parametrize("fx,fy,mapping", [(2, 1, "cyclic"), (1, 4, "block"), (2, 2, "block")])
def test_coarsening_declares_each_declarator_of_a_shared_declaration_once_per_copy(
        worker: MeasurementWorker, fx: int, fy: int, mapping: str) -> None:
    """``const int j = get_global_id(0), i = get_global_id(1);`` is one statement whose declarators depend on
    different dimensions: coarsened in x, each copy needs its own j but the copies share i (repeating the
    statement per copy redefined i and the rewrite did not compile, so no 2-D kernel written this way was
    ever coarsened)."""
    stencil = resolve_task("stencil2d")
    source = stencil.source.replace("const int j = get_global_id(0);\n    const int i = get_global_id(1);",
                                    "const int j = get_global_id(0), i = get_global_id(1);")
    assert "j = get_global_id(0), i" in source
    task = Task(stencil.spec.model_copy(update={"template": None}), stencil.path, source, None)
    result = coarsen(task, task.reference(), fx, fy, mapping)
    copies = result.candidate.source
    assert copies.count("const int j_kc") == (fx if fx > 1 else 0)  # renamed per copy where coarsened
    assert copies.count("const int i_kc") == (fy if fy > 1 else 0)
    assert ("const int i = get_global_id(1);" in copies) == (fy == 1)  # declared once when the copies share it
    assert_correct(worker, task, result.candidate, result.label)


def test_coarsening_refuses_kernels_that_observe_their_work_group_and_sizes_that_do_not_divide() -> None:
    gemm = resolve_task("gemm")
    tiled = gemm.instantiate({"TM": 2, "TN": 2, "WGX": 8, "WGY": 2, "KU": 1, "LOCAL": 1, "TK": 8})
    with pytest.raises(NotApplicable):
        coarsen(gemm, tiled, 2, 2)
    odd = gemm.reference().model_copy(update={"global_size": ["N - 1", "M"]})
    with pytest.raises(NotApplicable, match="not a multiple"):
        coarsen(gemm, odd, 2, 1)


# ---- unrolling, restrict/const, work-group sizes --------------------------------------------------------------
def test_unrolling_with_remainder_is_exact_for_any_trip_count(worker: MeasurementWorker) -> None:
    conv = load_task(KERNELS / "conv2d")  # KS = 5: every factor leaves a remainder
    base = scalar_replace(conv, conv.reference()).candidate
    for factor in (2, 4, 8):
        result = unroll(conv, base, factor)
        assert result.label == f"unroll v x{factor} + remainder"
        assert_correct(worker, conv, result.candidate, result.label)
    scan = resolve_task("scan")  # j <= i
    result = unroll(scan, scan.reference(), 4)
    assert_correct(worker, scan, result.candidate, result.label)


def test_restrict_and_const_go_on_buffers_the_kernel_never_aliases(worker: MeasurementWorker) -> None:
    task = load_task(KERNELS / "reduce_global")
    result = restrict_const(task, task.reference())
    assert result.label == "restrict on a, out"
    softmax = resolve_task("softmax")
    result = restrict_const(softmax, softmax.reference())
    assert result.label == "restrict on X, Y"  # X is already const; Y is written through the derived y
    assert_correct(worker, softmax, result.candidate, result.label)
    writable = ("__kernel void f(__global float *a, __global float *b) { const int i = get_global_id(0); "
                "b[i] = a[i]; }")
    ps = parse(writable)
    assert {n for n, _ in readonly_pointers(ps, ps.kernel("f"))} == {"a"}


def test_work_group_sizes_cover_the_full_legal_range(worker: MeasurementWorker) -> None:
    import random

    assert work_group_shapes(1, 64) == ["1", "2", "4", "8", "16", "32", "64"]
    assert "1,64" in work_group_shapes(2, 256) and "256,1" in work_group_shapes(2, 256)
    task = load_task(KERNELS / "matvec_cols")
    spec = worker.hardware_spec()
    choices = local_size_choices(task, task.reference(), spec.max_work_group_size, random.Random(0))
    assert any(int(c[0]) < 16 for c in choices), choices
    small = task.reference().model_copy(update={"local_size": ["4"]})
    assert_correct(worker, task, small, "work-group (4)")


# ---- the derived template and the generator --------------------------------------------------------------------
def test_derived_space_names_the_applicable_transformations() -> None:
    task = load_task(KERNELS / "matvec_cols")
    space = DerivedSpace(task, task.reference(), 256)
    assert {"scalar_replace", "restrict", "coarsen_x", "mapping", "unroll", "work_group"} == set(space.params)
    assert "coarsen_y" not in space.params  # a 1-D launch
    assert space.instantiate(space.identity()) is None  # the identity is the kernel itself: never proposed
    point = {**space.identity(), "scalar_replace": 1, "coarsen_x": 4, "work_group": KEEP}
    made = space.instantiate(point)
    assert made is not None
    candidate, edits = made
    assert "; ".join(e.label for e in edits).startswith("scalar-replace y[i]; coarsen x4 y1 cyclic + jam")
    assert [e.name for e in edits] == ["scalar_replace", "coarsen"] and edits[1].values == {"x": 4, "y": 1,
                                                                                          "mapping": "cyclic"}
    assert candidate.global_size == ["(M) / 4"] and candidate.params == point
    histogram = resolve_task("histogram")
    assert "scalar_replace" not in DerivedSpace(histogram, histogram.reference(), 256).params


def test_a_kernel_written_with_macros_gets_the_derived_space_of_its_expansion(worker: MeasurementWorker) -> None:
    """``#define`` constants hide text from the AST the transformations edit: such kernels were offered nothing
    but work-group shapes. The space is now built on the kernel as the compiler sees it (same identity)."""
    conv = load_task(KERNELS / "conv2d")
    source = "#define ROW(r) ((r) * W)\n#define ZERO 0.0f\n" + conv.source.replace(
        "out[i * W + j] = 0.0f;", "out[ROW(i) + j] = ZERO;").replace("img[(i + u) * W + j + v]", "img[ROW(i + u) + j + v]")
    assert source.count("ROW(") == 3
    task = Task(conv.spec, conv.path, source, None)
    reference = task.reference()
    space = DerivedSpace(task, reference, 256)
    assert {"scalar_replace", "coarsen_x", "coarsen_y", "unroll"} <= set(space.params), space.describe()
    assert "#define" not in space.base.source and "ROW(" not in space.base.source
    assert space.base.hash == reference.hash  # the same kernel to the compiler, so the same identity
    made = space.instantiate({**space.identity(), "scalar_replace": 1, "coarsen_x": 2, "unroll": 4})
    assert made is not None
    labels = "; ".join(e.label for e in made[1])
    assert labels.startswith("scalar-replace out[") and "coarsen x2" in labels, made
    assert_correct(worker, task, made[0], labels)
    plain = DerivedSpace(conv, conv.reference(), 256)
    assert plain.base.source == conv.source  # a kernel without macros keeps its own text (and comments)


@pytest.mark.parametrize("name", ["gemm", "gemv", "transpose", "stencil2d", "reduce_rows", "softmax"])
def test_offline_generator_without_template_proposes_correct_transformed_kernels(
        worker: MeasurementWorker, name: str) -> None:
    task = without_template(resolve_task(name))
    spec = worker.hardware_spec()
    generator = OfflineGenerator(worker)
    result = generator.propose(task, task.reference(), GenerationContext(hardware=spec, seed=0), 4)
    proposals = result.candidates
    assert len(proposals) == 4, result.report.summary()
    derived = [c for c in proposals if c.intent.startswith("derived: ")]
    assert derived, [c.intent for c in proposals]
    for c in proposals:
        assert_correct(worker, task, c, c.intent)
    if name == "gemm":
        more = generator.propose(task, task.reference(), GenerationContext(hardware=spec, seed=0), 12).candidates
        assert any("coarsen x" in c.intent and "+ jam" in c.intent for c in more)


def test_derived_children_are_neighbours_of_their_parent_point(worker: MeasurementWorker) -> None:
    task = load_task(KERNELS / "matvec_cols")
    spec = worker.hardware_spec()
    generator = OfflineGenerator(worker)
    first = generator.propose(task, task.reference(), GenerationContext(hardware=spec, seed=1), 3).candidates
    parent = next(c for c in first if c.intent.startswith("derived: "))
    children = generator.propose(task, parent, GenerationContext(hardware=spec, seed=1), 4).candidates
    assert children and all(c.parent == parent.hash for c in children)
    moved = [c for c in children if c.params]
    assert moved
    for c in moved:
        assert c.params is not None and parent.params is not None
        changed = [k for k in parent.params if c.params[k] != parent.params[k]]
        assert 1 <= len(changed) <= 2 or c.intent.startswith("derived: ")
    assert_correct(worker, task, children[0], children[0].intent)


# ---- space-filling first round on templates (issue 13, item 6) ---------------------------------------------------
def test_first_round_on_a_template_is_a_space_filling_design_without_the_default_point() -> None:
    task = resolve_task("gemm")
    assert task.spec.template is not None
    default = dict(task.spec.template.default or {})
    proposals = OfflineGenerator().propose(task, task.reference(), GenerationContext(seed=0), 8).candidates
    points = [c.params for c in proposals if c.params is not None]
    assert len(points) >= 5
    assert default not in points
    assert all(c.intent.startswith(("template design point", "generic:")) for c in proposals)
    for name in ("TM", "TN", "WGY"):  # spread over each parameter's range, not one step from the default
        assert len({p[name] for p in points}) >= 3, (name, points)
    again = [c.hash for c in OfflineGenerator().propose(task, task.reference(), GenerationContext(seed=0), 8).candidates]
    other = [c.hash for c in OfflineGenerator().propose(task, task.reference(), GenerationContext(seed=1), 8).candidates]
    assert again == [c.hash for c in proposals] and other != again


def test_space_filling_covers_every_value_and_snaps_to_valid_points() -> None:
    params = {"a": [1, 2, 3, 4], "b": [0, 1]}
    valid = [{"a": a, "b": b} for a in params["a"] for b in params["b"] if not (a == 4 and b == 1)]
    design = list(space_filling(params, seed=3, count=8, known_valid=valid))
    assert len(design) == len(valid) and all(p in valid for p in design)
    assert {p["a"] for p in design[:4]} == {1, 2, 3, 4}


def test_derived_space_does_not_coarsen_an_already_jammed_large_kernel() -> None:
    from kernelcast.agents.generate.derived_space import MAX_COARSENED_CHARS

    gemm = without_template(resolve_task("gemm"))
    big = coarsen(gemm, gemm.reference(), 8, 8).candidate  # 64 jammed copies of the body
    assert len(big.source) * 2 > MAX_COARSENED_CHARS
    space = DerivedSpace(gemm, big, 256)
    assert "coarsen_x" not in space.params and "too large to coarsen by 2" in space.unavailable["coarsen_x"]
    assert "work_group" in space.params  # the other transformations are still offered
    assert "coarsen_x" in DerivedSpace(gemm, gemm.reference(), 256).params
    unrolled = {**space.identity(), "unroll": 8}  # eight copies of the 64 jammed copies' loop body
    assert "unroll" in space.params and space.instantiate(unrolled) is None
    small = DerivedSpace(gemm, gemm.reference(), 256)
    assert small.instantiate({**small.identity(), "unroll": 2}) is not None


BLOCKS_TOML = """
name = "blocks"
description = "Each work-item doubles its block of four floats through a private array and a helper, in place."
language = "opencl"
source = "blocks.cl"
entry = "blocks"
[sizes]
N = 256
[[args]]
name = "X"
dtype = "float32"
shape = ["4 * N"]
intent = "inout"
[[args]]
name = "N"
kind = "scalar"
dtype = "int32"
value = "N"
[launch]
global = ["N"]
"""
BLOCKS_CL = """void twice(float *v)
{
    for (int k = 0; k < 4; k++)
        v[k] = 2.0f * v[k];
}

__kernel void blocks(__global float *X, const int N)
{
    const int tid = get_global_id(0);
    float v[4];
    for (int k = 0; k < 4; k++)
        v[k] = X[tid * 4 + k];
    twice(v);
    for (int k = 0; k < 4; k++)
        X[tid * 4 + k] = v[k] + 1.0f;
}
"""


@pytest.mark.parametrize("mapping", ["cyclic", "block"])
def test_coarsened_copies_each_get_their_own_private_array(worker: MeasurementWorker, tmp_path: Path,
                                                           mapping: str) -> None:
    """The array is written through its elements and by the helper it is passed to, never assigned itself: until
    2026-12-06 the copies shared it, and a held-out kernel of this shape computed half its outputs wrong."""
    (tmp_path / "task.toml").write_text(BLOCKS_TOML)
    (tmp_path / "blocks.cl").write_text(BLOCKS_CL)
    task = load_task(tmp_path / "task.toml")
    c = coarsen(task, task.reference(), 2, 1, mapping).candidate
    assert "v_kc0[4]" in c.source and "v_kc1[4]" in c.source
    assert_correct(worker, task, c, f"coarsen x2 {mapping}")
