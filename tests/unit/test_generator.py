"""Issue 4: the offline generator, validation, deduplication and `kernelcast propose`, on the real default OpenCL device."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernelcast.agents.generate.dedup import Deduplicator
from kernelcast.agents.generate.base import GenerationContext, Generator, ProposalReport, Reason, Validator
from kernelcast.agents.generate.offline import (OfflineGenerator, generic_edits, local_size_independent,
                                                 pragma_sites)
from kernelcast.tools.core.settings import get_settings
from kernelcast.tools.core.candidate import Candidate, candidate_from_file, check_signature
from kernelcast.tools.core.measurement import HardwareSpec, Measurement, MeasureConfig, Status
from kernelcast.tools.store.store import Store
from kernelcast.tools.core.task import Task, Tolerance, builtin_task_paths, load_task, resolve_task
from kernelcast.tools.hardware.worker import MeasurementWorker, WorkerError
from support.paths import KERNELS

SMALL = MeasureConfig(sizes="small", time_kernels=False)
DEVICE = "opencl:test-platform:test-device"


@pytest.fixture(scope="module")
def worker() -> Iterator[MeasurementWorker]:
    with MeasurementWorker("opencl") as w:
        yield w


@pytest.fixture(scope="module")
def cuda_worker() -> Iterator[MeasurementWorker | None]:
    """A CUDA worker where a GPU and the CUDA backend exist, else None (CUDA tasks are then nvcc-checked)."""
    w = MeasurementWorker("cuda")
    try:
        w.start()
    except (WorkerError, OSError):
        yield None
        return
    yield w
    w.close()


@pytest.fixture(scope="module")
def spec(worker: MeasurementWorker) -> HardwareSpec:
    return worker.hardware_spec()


def write_task(folder: Path, name: str, kernel: str, *, local: str = "", extra: str = "") -> Task:
    """A one-buffer-in, one-buffer-out task without a template (the bring-your-own-kernel path)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.cl").write_text(kernel)
    (folder / "task.toml").write_text(f'''
name = "{name}"
language = "opencl"
source = "{name}.cl"
entry = "{name}"
[sizes]
R = 1024
C = 64
[small_sizes]
R = 256
C = 16
[[args]]
name = "a"
dtype = "float32"
shape = ["R", "C"]
intent = "in"
[[args]]
name = "out"
dtype = "float32"
shape = ["R"]
intent = "out"
[[args]]
name = "cols"
kind = "scalar"
dtype = "int32"
value = "C"
[launch]
global = ["R"]
{local}
[tolerance]
rtol = 1e-4
atol = 1e-4
{extra}
''')
    return load_task(folder / "task.toml")


ROWSUM = """__kernel void rowsum(__global const float *a, __global float *out, const int cols)
{
    const int r = get_global_id(0);
    float s = 0.0f;
    for (int j = 0; j < cols; ++j)
        s += a[r * cols + j];
    out[r] = s;
}
"""

ROWSUM_LOCAL = """__kernel void rowsum(__global const float *a, __global float *out, const int cols)
{
    const int r = get_group_id(0) * get_local_size(0) + get_local_id(0);
    float s = 0.0f;
    for (int j = 0; j < cols; ++j)
        s += a[r * cols + j];
    out[r] = s;
}
"""


# ---- offline proposals on every built-in task ------------------------------------------------------
@pytest.mark.parametrize("name", sorted(builtin_task_paths()))
def test_offline_proposals_compile_and_are_correct_on_every_builtin_task(
        name: str, worker: MeasurementWorker, cuda_worker: MeasurementWorker | None, spec: HardwareSpec) -> None:
    task = resolve_task(name)
    runs_here = task.language == "opencl" or cuda_worker is not None
    device_worker = cuda_worker if task.language == "cuda" and cuda_worker is not None else worker
    gen = OfflineGenerator(device_worker)
    assert isinstance(gen, Generator)
    reference = task.reference()
    result = gen.propose(task, reference, GenerationContext(hardware=device_worker.hardware_spec(), seed=0), 3)
    proposals, report = result.candidates, result.report
    assert len(proposals) == 3, report.summary()
    assert len({c.hash for c in proposals}) == 3
    assert report.proposed == report.accepted + sum(report.rejected.values())
    for c in proposals:
        assert c.parent == reference.hash and c.intent and c.generator == "offline"
        check_signature(c.source, task.source, task.spec.entry, task.language)
        if runs_here:
            m = device_worker.measure(task, c, SMALL)
            assert m.status is Status.correct, f"{c.intent}: {m.reason}"
        else:
            from kernelcast.tools.hardware.nvcc import nvcc_available

            expected = "compiles (nvcc)" if nvcc_available() else "signature and geometry ok (not compiled)"
            assert report.validation[c.hash] == expected


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
    store.add_candidate(candidate)
    store.add_measurement(Measurement(task=candidate.task, candidate_hash=candidate.hash, device=device, sizes=sizes,
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


# ---- tasks without a template: derived transformations and generic variations, then a clear empty report ----
def test_task_without_template_gets_derived_and_generic_variations_then_a_clear_empty_report(
        tmp_path: Path, worker: MeasurementWorker, spec: HardwareSpec) -> None:
    task = write_task(tmp_path / "rowsum", "rowsum", ROWSUM)
    reference = task.reference()
    gen = OfflineGenerator(worker)
    result = gen.propose(task, reference, GenerationContext(hardware=spec, seed=0), 4)
    proposals = result.candidates
    assert len(proposals) == 4, result.report.summary()
    for c in proposals:
        assert c.intent.startswith(("derived:", "generic:"))
        m = worker.measure(task, c, SMALL)
        assert m.status is Status.correct, f"{c.intent}: {m.reason}"

    small = spec.model_copy(update={"max_work_group_size": 64})  # a smaller space to exhaust
    everything = OfflineGenerator(max_tries=10**6).propose(task, reference, GenerationContext(hardware=small, seed=0),
                                                           10**5).candidates
    kinds = {c.intent.split(":")[0] for c in everything}
    assert kinds == {"derived", "generic"}
    labels = " ".join(c.intent for c in everything)
    assert all(word in labels for word in ("coarsen x", "unroll j", "restrict on", "work-group (1)", "build option",
                                           "#pragma unroll"))
    context = GenerationContext(hardware=small, seed=0, known_hashes={c.hash for c in everything})
    again = OfflineGenerator()
    result = again.propose(task, reference, context, 4)
    report = result.report
    assert result.candidates == []
    assert "no tunable template" in report.empty_reason
    assert report.accepted == 0 and report.duplicates > 0


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


def test_local_size_is_only_varied_when_the_kernel_cannot_observe_it(tmp_path: Path, spec: HardwareSpec) -> None:
    task = write_task(tmp_path / "rowsum_local", "rowsum", ROWSUM_LOCAL, local='local = ["64"]')
    proposals = OfflineGenerator().propose(task, task.reference(), GenerationContext(hardware=spec, seed=0),
                                           50).candidates
    assert proposals  # options and unrolls remain
    assert all(c.local_size == ["64"] for c in proposals)

    assert local_size_independent(ROWSUM, "opencl")
    assert not local_size_independent(ROWSUM_LOCAL, "opencl")
    assert not local_size_independent("__kernel __attribute__((reqd_work_group_size(64,1,1))) void f() {}", "opencl")
    assert not local_size_independent("__kernel void f(__global float *x) { __local float t[64]; }", "opencl")
    assert not local_size_independent("__kernel void f() { barrier(CLK_GLOBAL_MEM_FENCE); }", "opencl")
    assert local_size_independent(resolve_task("gemm_cuda").source, "cuda")  # blockIdx.x * blockDim.x + threadIdx.x
    assert not local_size_independent("__global__ void f(float *x) { x[threadIdx.x] = 0; }", "cuda")
    assert not local_size_independent(
        "__global__ void f(float *x) { x[2 * blockIdx.x * blockDim.x + threadIdx.x] = 0; }", "cuda")
    assert not local_size_independent(
        "__global__ void f(float *x) { __shared__ float t[32]; x[blockIdx.x * blockDim.x + threadIdx.x] = t[0]; }",
        "cuda")


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


def test_unroll_pragma_goes_before_a_counted_loop_of_the_entry_kernel_and_stays_correct(
        worker: MeasurementWorker) -> None:
    import random

    task = resolve_task("gemm")
    ref = task.reference()
    loop_edits = [e for e in generic_edits(task, ref, 256, random.Random(0)) if e.slot == "loop 0"]
    pragmas = [e.label.split(" on ")[0] for e in loop_edits]
    assert pragmas == ["#pragma unroll 2", "#pragma unroll 4", "#pragma unroll 8"]  # runtime trip count: no full
    unrolled = loop_edits[1].apply(ref)
    lines = unrolled.source.splitlines()
    i = next(k for k, line in enumerate(lines) if "#pragma unroll 4" in line)
    assert lines[i + 1].lstrip().startswith("for (int k = 0; k < K; ++k)")
    assert lines[i].index("#") == lines[i + 1].index("for")  # same indentation
    assert pragma_sites(unrolled.source, "opencl", "gemm")[0].has_pragma
    assert worker.measure(task, unrolled, SMALL).status is Status.correct

    # loops in a preprocessor branch that is switched off are not in the AST (same binary, new hash)
    no_local = task.instantiate({"TM": 1, "TN": 1, "WGX": 8, "WGY": 1, "KU": 1, "LOCAL": 0, "TK": 8})
    headers = [site.header for site in pragma_sites(no_local.source, "opencl", "gemm")]
    assert headers and not any("k0" in h or "e = tid" in h for h in headers)
    with_local = no_local.source.replace("#define LOCAL 0", "#define LOCAL 1")
    assert any("k0" in site.header for site in pragma_sites(with_local, "opencl", "gemm"))
    # several kernels in one file: only the entry's loops
    two = "__kernel void other(__global float *y) { for (int i = 0; i < 4; ++i) y[i] = 0; }\n" + task.source
    assert [s.header for s in pragma_sites(two, "opencl", "gemm")] == ["for (int k = 0; k < K; ++k)"]


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


# ---- the CLI ------------------------------------------------------------------------------------
@pytest.fixture
def kc_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("KERNELCAST_DB", raising=False)
    monkeypatch.chdir(tmp_path)
    get_settings.cache_clear()
    yield tmp_path
    get_settings.cache_clear()


def test_cli_propose_gemm_writes_8_valid_distinct_candidates(kc_home: Path, worker: MeasurementWorker) -> None:
    from kernelcast.commands import propose

    result = CliRunner().invoke(propose.app, ["gemm", "-n", "8", "--seed", "0"])
    assert result.exit_code == 0, result.output
    folder = kc_home / "proposals" / "gemm"
    files = sorted(folder.glob("*.json"))
    assert len(files) == 8 and len(list(folder.glob("*.cl"))) == 8
    task = resolve_task("gemm")
    candidates = [candidate_from_file(str(f), task) for f in files]
    assert {c.hash for c in candidates} == {f.stem for f in files}  # 8 distinct, named by hash
    assert all(c.parent == task.reference().hash for c in candidates)
    assert "compiles" in result.output
    for c in candidates:
        assert (folder / f"{c.hash}.cl").read_text() == c.source
        m = worker.measure(task, c, SMALL)
        assert m.status is Status.correct, f"{c.intent}: {m.reason}"


def test_cli_propose_reports_bad_input_and_takes_a_parent_file(kc_home: Path) -> None:
    from kernelcast.commands import propose

    result = CliRunner().invoke(propose.app, ["gemm", "--generator", "llm"])
    assert result.exit_code == 2 and "--model" in result.output

    result = CliRunner().invoke(propose.app, ["no-such-task"])
    assert result.exit_code == 2 and "unknown task" in result.output

    shutil.copy(resolve_task("saxpy").path.parent / "saxpy.cl", kc_home / "parent.cl")
    result = CliRunner().invoke(propose.app, ["saxpy", "--parent", "parent.cl", "-n", "2", "--no-compile",
                                              "--out", "out"])
    assert result.exit_code == 0, result.output
    assert len(list((kc_home / "out").glob("*.json"))) == 2
    assert "compiles" not in result.output  # --no-compile: validated by signature and geometry only


def test_cli_propose_on_a_task_without_template_proposes_transformed_kernels_that_pass(
        kc_home: Path, worker: MeasurementWorker) -> None:
    from kernelcast.commands import propose

    task_dir = KERNELS / "matvec_cols"
    result = CliRunner().invoke(propose.app, [str(task_dir), "-n", "12", "--seed", "0", "--out", "out"])
    assert result.exit_code == 0, result.output
    task = load_task(task_dir)
    candidates = [candidate_from_file(str(f), task) for f in sorted((kc_home / "out").glob("*.json"))]
    assert len(candidates) == 12
    intents = " | ".join(c.intent for c in candidates)
    for word in ("scalar-replace y[i]", "coarsen x", "vector + jam"):
        assert word in intents, intents
    for c in candidates:
        m = worker.measure(task, c, SMALL)
        assert m.status is Status.correct, f"{c.intent}: {m.reason}"


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


def test_api_propose_validates_on_the_device_and_stores_nothing(kc_home: Path, worker: MeasurementWorker) -> None:
    """``kernelcast propose`` is ``api.propose`` plus files: same candidates for the same seed."""
    from kernelcast import api
    from kernelcast.commands import propose

    task = resolve_task("saxpy")
    store = Store(kc_home / "k.db")
    got = api.propose("saxpy", n=3, seed=4, store=store)
    assert len(got.candidates) == 3 == got.report.accepted, got.report.summary()
    assert all(got.report.validation[c.hash] == "compiles" for c in got.candidates)
    assert all(c.parent == task.reference().hash for c in got.candidates)
    assert store.candidates("saxpy") == [] and store.measurements() == []  # proposing buys and stores nothing
    store.close()
    for c in got.candidates:
        assert worker.measure(task, c, SMALL).status is Status.correct, c.intent

    result = CliRunner().invoke(propose.app, ["saxpy", "-n", "3", "--seed", "4", "--out", "cli"])
    assert result.exit_code == 0, result.output
    assert {p.stem for p in (kc_home / "cli").glob("*.json")} == {c.hash for c in got.candidates}

    unchecked = api.propose(task, n=2, seed=4, compile_check=False, store=Store(":memory:"))
    assert all("not compiled" in unchecked.report.validation[c.hash] for c in unchecked.candidates)
    with pytest.raises(ValueError, match="unknown generator 'magic'"):
        api.propose(task, generator="magic")


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


def test_a_task_without_small_sizes_measures_one_problem_under_one_label(tmp_path: Path) -> None:
    """Without [small_sizes], --sizes small measures the full problem: the run is stored at full sizes, so a
    later full-size run sees its points as measured instead of measuring them again."""
    from kernelcast.graphs.config import RunConfig
    from kernelcast.graphs.context import RunEnv
    from kernelcast.graphs.run import start_run

    folder = tmp_path / "one_size"
    shutil.copytree(builtin_task_paths()["saxpy"].parent, folder)
    toml = folder / "task.toml"
    text = toml.read_text().replace('name = "saxpy"', 'name = "one_size"').replace("N = 8388608", "N = 4096")
    toml.write_text(text.replace("[small_sizes]\nN = 4096\n", ""))
    task = load_task(toml)
    assert task.spec.small_sizes is None
    assert task.size_label("small") == task.size_label("full") == "full"
    assert resolve_task("saxpy").size_label("small") == "small"

    store = Store(tmp_path / "kc.db")
    env = RunEnv(tmp_path, measure_timeout_s=60)
    runs = [start_run(RunConfig(task=str(toml), budget=4, router="measure-all", sizes=sizes, confirm_top=0,
                                measure_per_round=2), store, env) for sizes in ("small", "full")]
    assert [RunConfig.of_run(store.run(r.run_id)).sizes for r in runs] == ["full", "full"]  # type: ignore[arg-type]
    searched = [{m.candidate_hash for m in store.measurements(run_id=r.run_id) if m.phase == "search"} for r in runs]
    assert all(searched) and not searched[0] & searched[1], "the full-size run measured the small run's kernels again"
    assert all(m.sizes == "full" for m in store.measurements(task="one_size"))
