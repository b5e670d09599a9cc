"""Issue 12, the input half: hostile or careless inputs are refused at the door, one test per exploit class.

Each test names the exploit it stops; task files are written to a temporary folder and loaded as a user's would be.
Where the harness on the device is the one refusing: tests/device/test_confinement_on_device.py.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernelcast.tools.core.candidate import Candidate, SignatureError, check_signature, signature
from kernelcast.tools.core.confinement import ConfinementError, check_candidate, option_problem
from kernelcast.tools.core.expr import ExpressionError, evaluate
from kernelcast.tools.core.preprocess import MAX_SOURCE_BYTES, PreprocessError, preprocess
from kernelcast.tools.core.task import Task, TaskError, load_task, resolve_task, resolve_task_in_roots

from support.paths import ROOT
from support.saxpy_sources import SAXPY_BODY, SAXPY_SIG, saxpy_candidate

SECRET = "kc-secret-7f3a9"  # planted in files the server must never echo

TASK = """
name = "scale"
language = "opencl"
source = "k.cl"
entry = "scale"
[sizes]
N = 1024
[small_sizes]
N = 64
[[args]]
name = "x"
dtype = "float32"
shape = ["N"]
intent = "inout"
[[args]]
name = "n"
kind = "scalar"
dtype = "int32"
value = "N"
[launch]
global = ["N"]
"""
KERNEL = "__kernel void scale(__global float *x, const int n) { int i = get_global_id(0); if (i < n) x[i] *= 2.0f; }"
TEMPLATE = """
[template]
source = "t.cl"
constraints = ["N % WG == 0"]
default = { WG = 64, VEC = 1, UNROLL = 1 }
[template.params]
WG = [32, 64]
VEC = [1, 2]
UNROLL = [1, 2, 4]
[template.launch]
global = ["N / VEC"]
local = ["WG"]
"""
# UNROLL acts only when VEC > 1: with VEC = 1 every UNROLL preprocesses to the same code, equal to the reference
TEMPLATE_KERNEL = """
#if VEC == 1
__kernel void scale(__global float *x, const int n) { int i = get_global_id(0); if (i < n) x[i] *= 2.0f; }
#else
__kernel void scale(__global float *x, const int n) {
    int i = get_global_id(0) * VEC;
    #pragma unroll UNROLL
    for (int v = 0; v < VEC; ++v) x[i + v] *= 2.0f;
}
#endif
"""


def write_task(folder: Path, toml: str = TASK, kernel: str | None = KERNEL, template: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "task.toml").write_text(toml)
    if kernel is not None:
        (folder / "k.cl").write_text(kernel)
    if template is not None:
        (folder / "t.cl").write_text(template)
    return folder / "task.toml"


def load_error(path: Path) -> str:
    with pytest.raises(TaskError) as exc:
        load_task(path)
    return str(exc.value)


@pytest.fixture(scope="module")
def saxpy() -> Task:
    return resolve_task("saxpy")


@pytest.fixture()
def secret_file(tmp_path: Path) -> Path:
    path = tmp_path / "outside" / "secret.txt"
    path.parent.mkdir()
    path.write_text(f"{SECRET}\n")
    return path


# ---- 6. bounded evaluation ----------------------------------------------------------------------------
@pytest.mark.parametrize("expr", ["9**9**9**9", "2**(2**70)", "(" * 200 + "1" + ")" * 200, "-" * 5000 + "1",
                                  "1+" * 50_000 + "1", "N" + "*N" * 40, "10**19 * 10**19"])
def test_expression_bombs_are_expression_errors_in_milliseconds(expr: str) -> None:
    start = time.perf_counter()
    try:
        value = evaluate(expr, {"N": 2**40})
    except ExpressionError as exc:
        assert len(str(exc)) < 400, "the error must not echo a 100k-character expression"
    else:
        assert abs(value) < 2**64, f"{expr[:30]} gave an unbounded value"
    assert time.perf_counter() - start < 1.0


def test_bomb_in_a_constraint_is_a_task_error_at_load(tmp_path: Path) -> None:
    toml = TASK + TEMPLATE.replace('constraints = ["N % WG == 0"]', 'constraints = ["9**9**9**9 > 0"]')
    path = write_task(tmp_path, toml, template=TEMPLATE_KERNEL)
    start = time.perf_counter()
    text = load_error(path)
    assert time.perf_counter() - start < 5.0
    assert str(path) in text and "template.constraints[0]" in text and "exponent" in text


def test_huge_template_space_is_enumerated_lazily_with_a_cap(tmp_path: Path) -> None:
    params = "\n".join(f"P{i} = [{', '.join(str(v) for v in range(1, n + 1))}]"
                       for i, n in enumerate((10, 10, 12, 10, 12, 100)))  # 14.4 million combinations
    toml = TASK + f"""
[template]
source = "t.cl"
[template.params]
{params}
[template.launch]
global = ["N"]
"""
    path = write_task(tmp_path, toml, template=KERNEL)
    start = time.perf_counter()
    task = load_task(path)
    count = task.space_count()
    assert count.combinations == 14_400_000 and not count.exact
    assert 0 < count.valid == len(task.param_space()) <= count.examined < count.combinations
    assert "among the first" in count.text()
    assert next(task.iter_space())["P0"] == 1
    assert time.perf_counter() - start < 60.0
    shown = subprocess.run([sys.executable, "-m", "kernelcast.cli", "tasks", "show", str(path)], cwd=ROOT,
                           capture_output=True, text=True, timeout=120, check=False)
    assert shown.returncode == 0, shown.stderr


@pytest.mark.parametrize(("edit", "field", "message"), [
    (lambda t: t.replace('shape = ["N"]', 'shape = ["N / 3"]'), "args.x.shape[0]", "not a whole number"),
    (lambda t: t.replace('value = "N"', 'value = "N / 0"'), "args.n.value", "division by zero"),
    (lambda t: t.replace('value = "N"', 'value = "N * 2**40"'), "args.n.value", "does not fit in int32"),
    (lambda t: t.replace('global = ["N"]', 'global = ["N - 1024"]'), "launch.global", "positive"),
    (lambda t: t.replace('global = ["N"]', 'global = ["N"]\nlocal = ["48"]'), "launch", "not a multiple"),
    (lambda t: t.replace('language = "opencl"', 'language = "opencl"\nflops = "N ** 100"'), "flops", "exponent"),
])
def test_every_expression_is_evaluated_when_the_task_loads(tmp_path: Path, edit, field: str, message: str) -> None:
    path = write_task(tmp_path, edit(TASK))
    text = load_error(path)
    assert str(path) in text and field in text and message in text, text


def test_template_expressions_are_checked_at_load_too(tmp_path: Path) -> None:
    toml = TASK + TEMPLATE.replace('global = ["N / VEC"]', 'global = ["N / (VEC - 1)"]')
    text = load_error(write_task(tmp_path, toml, template=TEMPLATE_KERNEL))
    assert "template.launch" in text and "division by zero" in text


# ---- 5. confinement --------------------------------------------------------------------------------------
def test_include_path_options_and_injected_defines_are_refused(saxpy: Task) -> None:
    relative = saxpy_candidate(saxpy, f'#include "etc/passwd"\n{SAXPY_SIG} {SAXPY_BODY}', ["-I", "/"])
    with pytest.raises(ConfinementError):
        check_candidate(saxpy, relative)
    plain = f"{SAXPY_SIG} {SAXPY_BODY}"
    for options, message in ((["-I/"], "may not name files"), (["-I", "/"], "may not name files"),
                             (["-DX=1\n#include </etc/passwd>"], "not a single flag"),
                             (['-DX="/etc/passwd"'], "-DNAME=VALUE"), (["-DX=#"], "-DNAME=VALUE"),
                             (["-include/etc/passwd"], "may not name files"), (["-s/etc/passwd"], "may not name"),
                             (["-cl-fast-relaxed-math"], "relaxes float"), (["--frobnicate"], "allowlist")):
        with pytest.raises(ConfinementError, match=message):
            check_candidate(saxpy, saxpy_candidate(saxpy, plain, options))
    for ok in (["-cl-mad-enable"], ["-DVEC=4", "-DT=float4"], ["-cl-std=CL1.2"]):
        check_candidate(saxpy, saxpy_candidate(saxpy, plain, ok))
    assert option_problem(["--use_fast_math", "-maxrregcount=64"], "cuda", allow_fast_math=True) is None
    assert "may not name" in (option_problem(["-ccbin=/bin/sh"], "cuda") or "")


def test_generator_uses_the_same_allowlist(saxpy: Task) -> None:
    from kernelcast.agents.generate.base import bad_options

    assert "may not name files" in (bad_options(saxpy, ["-I/etc"]) or "")
    assert bad_options(saxpy, ["-cl-mad-enable"]) is None


@pytest.mark.parametrize(("params", "message"), [
    ('VEC = ["1\\n#include </etc/passwd>"]', "not an integer, a float or an identifier"),
    ('"VEC 1\\n#define X" = [1]', "not an identifier"),
    ("VEC = [true]", "boolean"),
    ("VEC = [1, 1.5]", "mixes kinds"),
    ("VEC = [inf]", "not a finite number"),
])
def test_template_values_are_literals_of_one_kind(tmp_path: Path, params: str, message: str) -> None:
    toml = TASK + '[template]\nsource = "t.cl"\n[template.params]\n' + params + '\n[template.launch]\nglobal = ["N"]\n'
    text = load_error(write_task(tmp_path, toml, template=KERNEL))
    assert message in text and "template.params" in text


def test_template_point_of_the_wrong_kind_is_not_valid(tmp_path: Path) -> None:
    task = load_task(write_task(tmp_path, TASK + TEMPLATE, template=TEMPLATE_KERNEL))
    assert task.is_valid_point({"WG": 64, "VEC": 1, "UNROLL": 1})
    assert not task.is_valid_point({"WG": 64, "VEC": True, "UNROLL": 1})
    assert not task.is_valid_point({"WG": 64.0, "VEC": 1, "UNROLL": 1})


def test_task_source_stays_inside_its_folder(tmp_path: Path, secret_file: Path) -> None:
    folder = tmp_path / "task"
    for source in ("../outside/secret.txt", str(secret_file)):
        text = load_error(write_task(folder, TASK.replace('source = "k.cl"', f'source = "{source}"')))
        assert "outside the task's folder" in text and SECRET not in text
    (folder / "link.cl").symlink_to(secret_file)
    text = load_error(write_task(folder, TASK.replace('source = "k.cl"', 'source = "link.cl"')))
    assert "symlinks resolved" in text and SECRET not in text


def test_sources_have_a_size_cap(tmp_path: Path, saxpy: Task) -> None:
    padding = "// " + "x" * 1000 + "\n"
    huge = KERNEL + padding * (MAX_SOURCE_BYTES // len(padding) + 1)
    text = load_error(write_task(tmp_path, kernel=huge))
    assert "field 'source'" in text and "256 KiB" in text
    wide = f"{SAXPY_SIG} {SAXPY_BODY}\n// " + "é" * (MAX_SOURCE_BYTES // 2 + 8)  # under the character bound
    with pytest.raises(ConfinementError, match="256 KiB"):
        check_candidate(saxpy, saxpy_candidate(saxpy, wide))


def test_task_roots_confine_what_tool_callers_can_name(tmp_path: Path, secret_file: Path) -> None:
    root = tmp_path / "tasks"
    inside = write_task(root / "scale")
    not_a_task = root / "config.toml"
    not_a_task.write_text(f'api_key = "{SECRET}"\nname = "{SECRET}"\n')
    outside = secret_file.parent / "task.toml"
    outside.write_text(TASK)
    (secret_file.parent / "k.cl").write_text(KERNEL)
    roots = [root]
    assert resolve_task_in_roots("saxpy", roots).name == "saxpy"
    assert resolve_task_in_roots(str(inside), roots).name == "scale"
    assert resolve_task_in_roots(str(inside.parent), roots).name == "scale"
    messages = set()
    for name in (str(outside), str(tmp_path / "missing.toml"), str(root / ".." / "outside" / "task.toml"),
                 "/etc/shadow", str(root / "nope" / "task.toml")):
        with pytest.raises(TaskError) as exc:
            resolve_task_in_roots(name, roots)
        messages.add(str(exc.value).replace(name, "<name>"))
    assert len(messages) == 1, f"missing, outside and unreadable must read the same: {messages}"
    with pytest.raises(TaskError) as exc:
        resolve_task_in_roots(str(not_a_task), roots)
    assert "not a valid task file" in str(exc.value) and SECRET not in str(exc.value)
    with pytest.raises(TaskError):
        resolve_task_in_roots(str(inside), [])  # no roots: built-ins only


def test_mcp_tools_use_the_task_roots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, secret_file: Path) -> None:
    from kernelcast import chat_tools
    from kernelcast.tools.core.settings import get_settings

    elsewhere = secret_file.parent / "task.toml"
    elsewhere.write_text(f'name = "{SECRET}"\n')
    monkeypatch.setenv("KERNELCAST_TASK_PATH", str(tmp_path / "tasks"))
    get_settings.cache_clear()
    try:
        for tool in (chat_tools.describe_task, chat_tools.measure_kernel, chat_tools.forecast_speedup,
                     chat_tools.optimize_kernel):
            with pytest.raises(chat_tools.OperationError) as exc:
                tool(task=str(elsewhere))
            assert "not a task file under the task roots" in str(exc.value) and SECRET not in str(exc.value)
        assert chat_tools.describe_task(task="saxpy").entry == "saxpy"
    finally:
        get_settings.cache_clear()


# ---- 7. task checks at load (static part) --------------------------------------------------------------
@pytest.mark.parametrize(("kernel", "field", "message"), [
    (KERNEL.replace("const int n", "const int n, const int extra"), "args", "extra have no entry in args"),
    (KERNEL.replace("const int n", "const float n"), "args.n", "dtype int32 (int)"),
    (KERNEL.replace("__global float *x", "__global double *x"), "args.x", "points to double"),
    (KERNEL.replace("__global float *x", "__local float *x"), "args.x", "local pointer"),
    (KERNEL.replace("__global float *x, const int n", "const int n, __global float *x"), "args.x", "order of args"),
    (KERNEL.replace("const int n", "__global int *n"), "args.n", "is a pointer"),
    (KERNEL.replace("scale(", "other("), "entry", "not found"),
])
def test_task_args_are_checked_against_the_kernel_signature(tmp_path: Path, kernel: str, field: str,
                                                            message: str) -> None:
    text = load_error(write_task(tmp_path, kernel=kernel))
    assert f"field '{field}'" in text and message in text, text


def test_missing_or_swapped_arguments_are_task_errors(tmp_path: Path) -> None:
    missing = TASK.split("[[args]]\nname = \"n\"")[0] + '[launch]\nglobal = ["N"]\n'
    text = load_error(write_task(tmp_path / "a", missing))
    assert "declares 1 arguments but kernel 'scale' takes 2" in text and "n have no entry" in text
    two = KERNEL.replace("const int n)", "const int n, const int m)")
    swapped = TASK + '[[args]]\nname = "m"\nkind = "scalar"\ndtype = "int32"\nvalue = 1\n'
    swapped = swapped.replace('name = "n"', 'name = "TMP"').replace('name = "m"', 'name = "n"').replace(
        'name = "TMP"', 'name = "m"')
    text = load_error(write_task(tmp_path / "b", swapped, kernel=two))
    assert "args.m" in text and "order of args" in text


def test_typedefs_and_vector_pointers_are_resolved(tmp_path: Path) -> None:
    typed = "typedef float DATA_TYPE;\ntypedef int INDEX;\n" + KERNEL.replace("float *x", "DATA_TYPE *x").replace(
        "const int n", "const INDEX n")
    assert load_task(write_task(tmp_path / "a", kernel=typed)).name == "scale"
    vec = KERNEL.replace("float *x", "float4 *x")
    assert load_task(write_task(tmp_path / "b", kernel=vec)).name == "scale"


# ---- 9. files with several kernels: the signature check reads preprocessed code ------------------------
def test_option_defined_decoy_is_seen_through(saxpy: Task) -> None:
    source = (f"#ifndef EVIL\n{SAXPY_SIG} {SAXPY_BODY}\n#else\n"
              "__kernel void saxpy(__global const float *x, __global float *y, const int n) { }\n#endif\n")
    check_candidate(saxpy, saxpy_candidate(saxpy, source))
    with pytest.raises(SignatureError, match="takes 3 arguments"):
        check_candidate(saxpy, saxpy_candidate(saxpy, source, ["-DEVIL"]))


def test_typedef_element_types_match_by_type_not_name(saxpy: Task) -> None:
    typed = ("typedef float DATA_TYPE;\n#define SCALAR float\n"
             "__kernel void saxpy(__global const DATA_TYPE *x, __global DATA_TYPE *y, const SCALAR a, const int n)"
             f" {SAXPY_BODY}")
    check_signature(typed, saxpy.source, "saxpy")
    assert signature(typed, "saxpy")[0] == ("global", "float", "pointer")
    wrong = typed.replace("typedef float DATA_TYPE", "typedef double DATA_TYPE")
    with pytest.raises(SignatureError, match="argument 0"):
        check_signature(wrong, saxpy.source, "saxpy")


# ---- 4. identity after preprocessing ---------------------------------------------------------------------
def test_noop_template_points_and_the_default_point_hash_equal(tmp_path: Path) -> None:
    with_local = TASK.replace('global = ["N"]\n', 'global = ["N"]\nlocal = ["64"]\n')
    task = load_task(write_task(tmp_path, with_local + TEMPLATE, template=TEMPLATE_KERNEL))
    ref = task.reference()
    plain = {task.instantiate({"WG": 64, "VEC": 1, "UNROLL": u}).hash for u in (1, 2, 4)}
    assert plain == {ref.hash}, "UNROLL acts only in the inactive branch, and VEC=1 (global N / 1) is the reference"
    assert task.instantiate(dict(task.spec.template.default)).hash == ref.hash
    vec = {task.instantiate({"WG": 32, "VEC": 2, "UNROLL": u}).hash for u in (1, 2, 4)}
    assert len(vec) == 3, "with VEC=2 the pragma is live: three different candidates"
    assert task.instantiate({"WG": 32, "VEC": 1, "UNROLL": 1}).hash != ref.hash, "another work-group size"


# one kernel for every VEC: the pragma sits on the loop over VEC, which runs once when VEC = 1
ONE_TRIP_TEMPLATE_KERNEL = """
__kernel void scale(__global float *x, const int n) {
    int i = get_global_id(0) * VEC;
    #pragma unroll UNROLL
    for (int v = 0; v < VEC; ++v) x[i + v] *= 2.0f;
}
"""


def test_unroll_hint_on_a_one_trip_loop_is_a_noop(tmp_path: Path) -> None:
    task = load_task(write_task(tmp_path, TASK + TEMPLATE, template=ONE_TRIP_TEMPLATE_KERNEL))
    one_trip = {task.instantiate({"WG": 32, "VEC": 1, "UNROLL": u}).hash for u in (1, 2, 4)}
    assert len(one_trip) == 1, "unrolling a loop of one iteration changes nothing: one candidate, not three"
    live = {task.instantiate({"WG": 32, "VEC": 2, "UNROLL": u}).hash for u in (1, 2, 4)}
    assert len(live) == 3, "on a loop of two iterations the hint is live"
    assert task.instantiate({"WG": 32, "VEC": 1, "UNROLL": 4}).hash != task.instantiate(
        {"WG": 32, "VEC": 2, "UNROLL": 4}).hash


def test_identity_includes_the_task(saxpy: Task) -> None:
    ref = saxpy.reference()
    assert ref.model_copy(update={"task": "saxpy_copy"}).hash != ref.hash


def test_hash_is_stable_and_never_raises_for_refused_sources() -> None:
    bad = Candidate(task="t", source='#include "/etc/passwd"\n__kernel void k() {}', global_size=["1"])
    assert bad.hash == bad.model_copy().hash and len(bad.hash) == 16
    with pytest.raises(PreprocessError):
        preprocess(bad.source)
    dated = Candidate(task="t", source="__constant char d[] = __DATE__ __TIME__;\n__kernel void k() {}",
                      global_size=["1"])
    assert "__DATE__" in preprocess(dated.source), "clock macros are not expanded: the hash must not change"


def test_builtin_references_and_template_points_preprocess(saxpy: Task) -> None:
    from kernelcast.tools.core.task import builtin_task_paths

    for name, path in builtin_task_paths().items():
        task = load_task(path)
        assert preprocess(task.source, task.language).strip(), name
        for point in task.param_space()[:3]:
            cand = task.instantiate(point)
            check_signature(cand.source, task.source, task.spec.entry, task.language)


def test_an_oversized_source_never_becomes_a_candidate(saxpy: Task) -> None:
    from pydantic import ValidationError

    from kernelcast import chat_tools

    with pytest.raises(ValidationError, match="at most 262144 characters"):
        saxpy_candidate(saxpy, "x" * (MAX_SOURCE_BYTES + 1))
    with pytest.raises(chat_tools.OperationError, match="at most 262144 characters"):
        chat_tools.measure_kernel(task="saxpy", source=f"{SAXPY_SIG} {SAXPY_BODY}" + " " * MAX_SOURCE_BYTES)
