"""The offline generator's proposals compiled and checked on the real default OpenCL device, and `kernelcast propose`
(issue 4); the pure-logic half is tests/unit/test_generator.py."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernelcast.agents.generate.base import GenerationContext, Generator
from kernelcast.agents.generate.offline import OfflineGenerator, generic_edits, local_size_independent, pragma_sites
from kernelcast.tools.core.candidate import candidate_from_file, check_signature
from kernelcast.tools.core.measurement import HardwareSpec, MeasureConfig, Status
from kernelcast.tools.core.settings import get_settings
from kernelcast.tools.core.task import Task, builtin_task_paths, load_task, resolve_task
from kernelcast.tools.hardware.worker import MeasurementWorker, WorkerError
from kernelcast.tools.store.store import Store

from support.paths import KERNELS

SMALL = MeasureConfig(sizes="small", time_kernels=False)


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
    assert store.candidates.of_task("saxpy") == [] and store.ledger.find() == []  # proposing buys and stores nothing
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
    assert [RunConfig.of_run(store.runs.get(r.run_id)).sizes for r in runs] == ["full", "full"]  # type: ignore[arg-type]
    searched = [{m.candidate_hash for m in store.ledger.find(run_id=r.run_id) if m.phase == "search"} for r in runs]
    assert all(searched) and not searched[0] & searched[1], "the full-size run measured the small run's kernels again"
    assert all(m.sizes == "full" for m in store.ledger.find(task="one_size"))
