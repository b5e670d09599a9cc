"""Task files: validation errors name the file and the field; templates expand correctly."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelcast.tools.core.expr import ExpressionError, evaluate, evaluate_int
from kernelcast.tools.core.task import TaskError, builtin_task_paths, load_task, resolve_task

GOOD = """
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
kind = "buffer"
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


def write_task(tmp_path: Path, toml: str, kernel: str | None = KERNEL) -> Path:
    (tmp_path / "task.toml").write_text(toml)
    if kernel is not None:
        (tmp_path / "k.cl").write_text(kernel)
    return tmp_path / "task.toml"


def test_good_task_loads(tmp_path: Path) -> None:
    task = load_task(write_task(tmp_path, GOOD))
    assert task.name == "scale"
    assert task.sizes("small") == {"N": 64}
    assert task.reference().global_size == ["N"]


@pytest.mark.parametrize(
    ("edit", "field", "message"),
    [
        (lambda t: t.replace('dtype = "float32"', 'dtype = "float33"'), "args[0] 'x': dtype", "float33"),
        (lambda t: t.replace('shape = ["N"]', 'shape = ["M"]'), "args[0] 'x': shape", "not defined"),
        (lambda t: t.replace('entry = "scale"\n', ""), "entry", "missing key"),
        (lambda t: t.replace('intent = "inout"', 'intent = "in"'), "[[args]]", "out"),
        (lambda t: t.replace('global = ["N"]', 'global = ["N +"]'), "[launch] global", "cannot parse"),
        (lambda t: t.replace("N = 64", "M = 64"), "[small_sizes]", "lacks N"),
        (lambda t: t + "\nbogus = 1\n", "[launch]: unknown key 'bogus'", "unknown key"),
    ],
)
def test_validation_errors_name_file_and_field(tmp_path: Path, edit, field: str, message: str) -> None:
    path = write_task(tmp_path, edit(GOOD))
    with pytest.raises(TaskError) as exc:
        load_task(path)
    text = str(exc.value)
    assert str(path) in text
    assert field in text
    assert message in text


def test_malformed_toml(tmp_path: Path) -> None:
    path = write_task(tmp_path, GOOD + "\n[[args]\n")
    with pytest.raises(TaskError, match="not valid TOML"):
        load_task(path)


def test_missing_source_and_entry(tmp_path: Path) -> None:
    with pytest.raises(TaskError, match="field 'source'.*not found"):
        load_task(write_task(tmp_path, GOOD, kernel=None))
    with pytest.raises(TaskError, match="field 'entry'"):
        load_task(write_task(tmp_path, GOOD, kernel=KERNEL.replace("scale", "other")))


TUNABLE = ("__kernel void scale(__global float *x, const int n) "
           "{ int i = get_global_id(0); if (i < n) x[i] *= (float)FACTOR; }")


def test_a_task_without_source_takes_its_template_default_point_as_the_reference(tmp_path: Path) -> None:
    toml = GOOD.replace('source = "k.cl"\n', "") + (
        '[template]\nsource = "t.cl"\ndefault = { FACTOR = 2 }\n[template.params]\nFACTOR = [1, 2, 4]\n')
    (tmp_path / "t.cl").write_text(TUNABLE)
    task = load_task(write_task(tmp_path, toml, kernel=None))
    assert task.source == task.instantiate({"FACTOR": 2}).source  # one text, so one identity
    assert task.source.startswith("#define FACTOR 2\n") and task.template_source == TUNABLE


def test_a_task_without_source_or_template_default_is_refused_in_one_line(tmp_path: Path) -> None:
    for extra in ("", '[template]\nsource = "t.cl"\n[template.params]\nFACTOR = [1, 2]\n'):
        (tmp_path / "t.cl").write_text(TUNABLE)
        with pytest.raises(TaskError, match="field 'source' is missing: name the reference kernel's file") as err:
            load_task(write_task(tmp_path, GOOD.replace('source = "k.cl"\n', "") + extra, kernel=None))
        assert "\n" not in str(err.value)


def test_unknown_task_lists_builtins() -> None:
    with pytest.raises(TaskError, match="unknown task 'no_such_task'.*saxpy"):
        resolve_task("no_such_task")


def test_template_space_respects_constraints_at_both_sizes() -> None:
    task = resolve_task("saxpy")
    points = task.param_space()
    assert points, "saxpy has a template"
    for p in points:
        for n in (task.sizes("full")["N"], task.sizes("small")["N"]):
            assert n % (p["VEC"] * p["COARSEN"] * p["WG"]) == 0
    cand = task.instantiate({"VEC": 4, "COARSEN": 2, "WG": 64})
    assert cand.source.startswith("#define COARSEN 2\n#define VEC 4\n#define WG 64\n")
    assert cand.global_size == ["N / (4 * 2)"] and cand.local_size == ["64"]
    with pytest.raises(TaskError, match="not a valid template point"):
        task.instantiate({"VEC": 3, "COARSEN": 2, "WG": 64})


def test_every_builtin_task_loads() -> None:
    paths = builtin_task_paths()
    assert "saxpy" in paths
    for name, path in paths.items():
        assert load_task(path).name == name


def test_expressions_are_safe_and_exact() -> None:
    assert evaluate("N / 4", {"N": 16}) == 4 and isinstance(evaluate("N / 4", {"N": 16}), int)
    assert evaluate("N / 3", {"N": 16}) == pytest.approx(16 / 3)
    assert evaluate_int("ceil_div(N, 3) * 3", {"N": 16}) == 18
    assert evaluate("N % 4 == 0 and N > 2", {"N": 16}) == 1
    with pytest.raises(ExpressionError):
        evaluate("__import__('os')", {})
    with pytest.raises(ExpressionError, match="unknown name"):
        evaluate("M + 1", {"N": 1})
    with pytest.raises(ExpressionError, match="whole number"):
        evaluate_int("N / 3", {"N": 16})


def test_shapes_that_do_not_divide_are_errors_at_load(tmp_path: Path) -> None:
    path = write_task(tmp_path, GOOD.replace('shape = ["N"]', 'shape = ["N / 3"]'))
    with pytest.raises(TaskError, match=r"field 'args.x.shape\[0\]'.*not a whole number"):
        load_task(path)


def test_a_missing_argument_is_a_task_error_not_a_type_error(tmp_path: Path) -> None:
    path = write_task(tmp_path, GOOD, kernel=KERNEL.replace("const int n)", "const int n, const float s)"))
    with pytest.raises(TaskError, match="kernel 'scale' takes 3: the kernel's parameter\\(s\\) s have no entry"):
        load_task(path)


LOCAL_TOML = GOOD.replace('[[args]]\nname = "n"', '[[args]]\nname = "scratch"\nkind = "local"\ndtype = "float32"\n'
                          'shape = ["64"]\n[[args]]\nname = "n"').replace('global = ["N"]', 'global = ["N"]\nlocal = ["64"]')
LOCAL_KERNEL = ("__kernel void scale(__global float *x, __local float *scratch, const int n) {"
                " int i = get_global_id(0), l = get_local_id(0); scratch[l] = x[i]; barrier(CLK_LOCAL_MEM_FENCE);"
                " x[i] = 2.0f * scratch[l]; }")


def test_a_local_memory_argument_is_declared_with_kind_local(tmp_path: Path) -> None:
    task = load_task(write_task(tmp_path, LOCAL_TOML, LOCAL_KERNEL))
    assert [a.kind for a in task.spec.args] == ["buffer", "local", "scalar"]
    as_buffer = LOCAL_TOML.replace('kind = "local"', 'kind = "buffer"\nintent = "in"')
    with pytest.raises(TaskError, match=r"field 'args.scratch': a buffer, .* local pointer .*kind = \"local\""):
        load_task(write_task(tmp_path, as_buffer, LOCAL_KERNEL))
    with pytest.raises(TaskError, match=r"field 'args.scratch': local memory, but .* not a __local pointer"):
        load_task(write_task(tmp_path, LOCAL_TOML, LOCAL_KERNEL.replace("__local float *scratch",
                                                                         "__global float *scratch")))
    with pytest.raises(TaskError, match=r"field 'args.scratch.shape\[0\]': .*not positive"):
        load_task(write_task(tmp_path, LOCAL_TOML.replace('shape = ["64"]', 'shape = ["64 - 64"]'), LOCAL_KERNEL))
    cuda = LOCAL_TOML.replace('language = "opencl"', 'language = "cuda"').replace('source = "k.cl"', 'source = "k.cu"')
    (tmp_path / "k.cu").write_text('extern "C" __global__ void scale(float *x, float *scratch, const int n) {}')
    with pytest.raises(TaskError, match=r"field 'args.scratch': local-memory arguments exist in OpenCL only"):
        load_task(write_task(tmp_path, cuda, None))


def test_builtin_template_spaces_are_counted_exactly() -> None:
    task = resolve_task("gemm")
    count = task.space_count()
    assert count.exact and count.valid == len(task.param_space()) and count.combinations == 3456
    assert count.text() == f"{count.valid} valid points"
