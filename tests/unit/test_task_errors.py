"""Task-file errors in plain words (issue 64, item 8): each names the table and the argument (by index and name),
says what is wrong without pydantic's vocabulary, offers a "did you mean" for a misspelt key, table or value,
names a missing small size, and lists the defined sizes when a shape uses an undefined one. And a kernel that
depends on its work-group size needs [launch] local (item 5), said when the task loads."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_task_files import GOOD, KERNEL, LOCAL_KERNEL, LOCAL_TOML, write_task  # tests/unit, on sys.path

from kernelcast.tools.core.task import TaskError, load_task
from kernelcast.tools.core.workgroup import workgroup_uses

PYDANTIC_WORDS = ("Value error", "Extra inputs", "(top level)", "Input should", "Field required", "args.0",
                  ".buffer.", "literal_error", "validation error")

CASES = [
    pytest.param('intent = "inout"', 'intent = "outt"',
                 ["args[0] 'x': intent must be 'in', 'out' or 'inout' (got 'outt') (did you mean 'out'?)"],
                 id="bad-intent"),
    pytest.param('intent = "inout"', 'intent = "inout"\nintnet = "in"',
                 ["args[0] 'x': unknown key 'intnet' (did you mean 'intent'?)"], id="misspelt-key"),
    pytest.param('[launch]', '[launh]',
                 ["unknown table [launh] (did you mean [launch]?)"], id="misspelt-table"),
    pytest.param('[small_sizes]\nN = 64', '[small_sizes]\nM = 64',
                 ["[small_sizes] lacks N (every size in [sizes] needs a small value); it names M, which [sizes] does "
                  "not define"], id="small-size-missing"),
    pytest.param('shape = ["N"]', 'shape = ["K * N"]',
                 ["args[0] 'x': shape 'K * N' uses K, which is not defined (defined sizes: N)"], id="undefined-size"),
    pytest.param('global = ["N"]', 'global = ["Nn"]',
                 ["[launch] global 'Nn' uses Nn, which is not defined (defined sizes: N) (did you mean 'N'?)"],
                 id="undefined-launch-size"),
    pytest.param('intent = "inout"', 'intent = "in"',
                 ["[[args]]: no buffer has intent 'out' or 'inout'"], id="no-output"),
    pytest.param('kind = "scalar"', 'kind = "scaler"',
                 ["args[1] 'n': kind must be 'buffer', 'scalar', 'local' (got 'scaler') (did you mean 'scalar'?)"],
                 id="bad-kind"),
    pytest.param('dtype = "float32"', 'dtype = "float"', ["args[0] 'x': dtype must be ", "(got 'float')"],
                 id="bad-dtype"),
    pytest.param('entry = "scale"\n', '', ["missing key 'entry'"], id="missing-key"),
    pytest.param('[launch]\nglobal = ["N"]', '', ["missing table [launch]"], id="missing-table"),
    pytest.param('N = 1024', 'N = true', ["[sizes]: N must be an integer (got True)"], id="size-not-int"),
    pytest.param('name = "scale"', 'name = "my scale"',
                 ["name must be letters, digits, _ and - only (got 'my scale')"], id="bad-name"),
]


@pytest.mark.parametrize(("old", "new", "expected"), CASES)
def test_task_file_errors_are_plain_words(tmp_path: Path, old: str, new: str, expected: list[str]) -> None:
    assert old in GOOD
    path = write_task(tmp_path, GOOD.replace(old, new, 1))
    with pytest.raises(TaskError) as caught:
        load_task(path)
    text = str(caught.value)
    assert text.startswith(f"{path}: ") and "\n" not in text
    for part in expected:
        assert part in text, text
    assert not [w for w in PYDANTIC_WORDS if w in text], text


def test_a_misspelt_table_is_one_sentence_not_also_a_missing_one(tmp_path: Path) -> None:
    text = GOOD + '\n[tolerence]\nrtol = 1e-3\n'
    with pytest.raises(TaskError) as caught:
        load_task(write_task(tmp_path, text))
    assert str(caught.value).endswith("unknown table [tolerence] (did you mean [tolerance]?)")
    with pytest.raises(TaskError) as caught:
        load_task(write_task(tmp_path, GOOD.replace("[launch]", "[launh]")))
    assert "missing" not in str(caught.value)  # the misspelling stands for the missing [launch]


def test_a_misspelt_key_in_a_table_is_suggested(tmp_path: Path) -> None:
    with pytest.raises(TaskError, match=r"\[tolerance\]: unknown key 'rtoll' \(did you mean 'rtol'\?\)"):
        load_task(write_task(tmp_path, GOOD + "\n[tolerance]\nrtoll = 1e-3\n"))
    with pytest.raises(TaskError, match=r"\[launch\]: unknown key 'locl' \(did you mean 'local'\?\)"):
        load_task(write_task(tmp_path, GOOD.replace('global = ["N"]', 'global = ["N"]\nlocl = ["64"]')))


TILED = ("#define TILE 16\n"
         "__kernel void scale(__global float *x, const int n) {\n"
         "  __local float tile[TILE];\n"
         "  int i = get_global_id(0), l = get_local_id(0);\n"
         "  tile[l] = x[i]; barrier(CLK_LOCAL_MEM_FENCE);\n"
         "  if (i < n) x[i] = 2.0f * tile[TILE - 1 - l];\n}\n")


def test_a_kernel_that_needs_its_work_group_size_needs_launch_local(tmp_path: Path) -> None:
    with pytest.raises(TaskError) as caught:
        load_task(write_task(tmp_path, GOOD, TILED))
    text = str(caught.value)
    assert "[launch]: the reference kernel 'scale' depends on its work-group size" in text
    assert "__local memory, get_local_id, barrier" in text and "set [launch] local" in text
    task = load_task(write_task(tmp_path, GOOD.replace('global = ["N"]', 'global = ["N"]\nlocal = ["16"]'), TILED))
    assert task.reference().local_size == ["16"]
    assert load_task(write_task(tmp_path, GOOD, KERNEL)).spec.launch.local_size is None  # no such use: optional
    assert load_task(write_task(tmp_path, LOCAL_TOML, LOCAL_KERNEL)).spec.launch.local_size == ["64"]


def test_work_group_uses_are_read_as_the_compiler_could_see_them() -> None:
    hidden = "#ifdef __clang__\n#define SYNC barrier(CLK_LOCAL_MEM_FENCE)\n#else\n#define SYNC\n#endif\n" + KERNEL.replace(
        "x[i] *= 2.0f;", "{ SYNC; x[i] *= 2.0f; }")
    assert workgroup_uses(hidden, "opencl") == ["barrier"]  # behind a compiler-defined macro, still seen
    commented = "/* get_local_id(0); __local float t[4]; barrier(0); */\n" + KERNEL
    assert workgroup_uses(commented, "opencl") == []
    assert workgroup_uses(KERNEL, "opencl") == []
    global_id = KERNEL.replace("get_global_id(0)", "(get_group_id(0) * get_local_size(0)) + get_local_id(0)")
    assert workgroup_uses(global_id, "opencl") == []  # SHOC md5hash's index: the global id at any work-group size
    assert workgroup_uses(KERNEL.replace("get_global_id(0)", "get_group_id(0)"), "opencl") == ["get_group_id"]
    cuda = "__global__ void k(float *x) { __shared__ float t[64]; t[threadIdx.x] = x[threadIdx.x]; __syncthreads(); }"
    assert workgroup_uses(cuda, "cuda") == ["__shared__ memory", "__syncthreads"]
    plain_cuda = "__global__ void k(float *x) { int i = blockIdx.x * blockDim.x + threadIdx.x; x[i] = 1.0f; }"
    assert workgroup_uses(plain_cuda, "cuda") == []
