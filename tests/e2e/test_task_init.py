"""`kernelcast init` writes a task file from a kernel's signature; `kernelcast tasks show` lists its TODOs
(issue 48, item 4). The kernels are written here, in tmp_path: none is in the repository."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernelcast.cli import app
from kernelcast.task_init import guess_args
from kernelcast.tools.core.task import load_task

KERNEL = """#define SCALE 2.0f
typedef float real;
__kernel void blend(__global const real* a, __global float* b, __global float* acc,
                    __global int* flags, const float w, const int n, __local float* tile) {
    int i = get_global_id(0);
    __global float* row = b + i;              /* written through a derived pointer */
    tile[get_local_id(0)] = a[i];
    barrier(CLK_LOCAL_MEM_FENCE);
    if (i < n && flags[i] > 0) {
        row[0] = tile[get_local_id(0)] * w * SCALE;
        acc[i] += a[i];
    }
}
__kernel void other(__global float* z) { z[get_global_id(0)] = 1.0f; }
"""


def kc(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


@pytest.fixture
def kernel(tmp_path: Path) -> Path:
    (tmp_path / "k.cl").write_text(KERNEL)
    return tmp_path / "k.cl"


def test_init_writes_the_signature_with_guessed_intents(kernel: Path) -> None:
    code, out = kc("init", "blend", "--source", str(kernel))
    assert code == 2 and "2 kernels (blend, other)" in out and "--entry" in out  # which one is ambiguous
    code, out = kc("init", "blend", "--source", str(kernel), "--entry", "blend")
    assert code == 0, out
    path = kernel.parent / "task.toml"
    raw = tomllib.loads(path.read_text())
    assert (raw["name"], raw["language"], raw["source"], raw["entry"]) == ("blend", "opencl", "k.cl", "blend")
    got = [(a["name"], a["kind"], a["dtype"], a.get("intent")) for a in raw["args"]]
    assert got == [("a", "buffer", "float32", "in"),  # points to const (through a typedef)
                   ("b", "buffer", "float32", "out"),  # written, never read
                   ("acc", "buffer", "float32", "inout"),  # += reads and writes
                   ("flags", "buffer", "int32", "in"),  # not const, but never written
                   ("w", "scalar", "float32", None), ("n", "scalar", "int32", None),
                   ("tile", "local", "float32", None)]
    assert raw["sizes"] == {} and raw["launch"]["global"] == ["TODO"]
    assert "# TODO: " in path.read_text() and "guessed: written and also read" in path.read_text()
    code, out = kc("init", "blend", "--source", str(kernel), "--entry", "blend")
    assert code == 2 and "exists" in out  # never overwritten without --force


def test_tasks_show_lists_what_is_missing_then_the_task(kernel: Path) -> None:
    assert kc("init", "blend", "--source", str(kernel), "--entry", "blend")[0] == 0
    path = kernel.parent / "task.toml"
    code, out = kc("tasks", "show", str(path))
    assert code == 2 and "Traceback" not in out
    assert "not complete: 10 field(s)" in out
    for field in ("sizes", "args.a.shape[0]", "args.w.value", "args.tile.shape[0]", "launch.global[0]",
                  "launch.local[0]"):
        assert f"  {field}: " in out, field
    assert "per work-group" in out and "how large your problem is" in out

    text = path.read_text().replace("[sizes]\n", "[sizes]\nN = 1024\n")
    text = re.sub(r'(name = "tile"\n(?:.*\n)*?shape = )\["TODO"\]', r'\1["64"]', text)
    text = text.replace('shape = ["TODO"]', 'shape = ["N"]').replace('global = ["TODO"]', 'global = ["N"]')
    text = text.replace('local = ["TODO"]', 'local = ["64"]')
    text = re.sub(r'(name = "w"\n(?:.*\n)*?value = )"TODO"', r"\g<1>1.5", text).replace('value = "TODO"', 'value = "N"')
    path.write_text(text)
    code, out = kc("tasks", "show", str(path))
    assert code == 0, out
    task = load_task(path)  # the guessed dtypes and intents pass the signature check
    assert [getattr(a, "direction", None) for a in task.spec.args][:4] == ["in", "out", "inout", "in"]


def test_cuda_kernel_and_an_unknown_entry(tmp_path: Path) -> None:
    source = ("__global__ void axpy(const float* __restrict__ x, float* y, double* stats, int n) {\n"
              "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
              "  if (i < n) { y[i] = 2.0f * x[i]; stats[0] = y[i]; }\n}\n")
    guesses = guess_args(source, "axpy", "cuda")
    assert [(g.name, g.kind, g.dtype, g.intent) for g in guesses] == [
        ("x", "buffer", "float32", "in"), ("y", "buffer", "float32", "inout"),  # y[i] is read back after the store
        ("stats", "buffer", "float64", "out"), ("n", "scalar", "int32", None)]
    (tmp_path / "axpy.cu").write_text(source)
    code, out = kc("init", "axpy", "--source", str(tmp_path / "axpy.cu"), "--entry", "nope")
    assert code == 2 and "'nope' not found" in out
    code, out = kc("init", "axpy", "--source", str(tmp_path / "axpy.cu"))
    assert code == 0 and tomllib.loads((tmp_path / "task.toml").read_text())["language"] == "cuda"


def test_a_kernel_that_needs_its_work_group_size_gets_a_required_local(kernel: Path, tmp_path: Path) -> None:
    """Issue 64 item 5: blend uses __local memory, get_local_id and a barrier, so init writes local as a TODO
    that says why; a kernel with none of them keeps local optional."""
    assert kc("init", "blend", "--source", str(kernel), "--entry", "blend")[0] == 0
    text = (kernel.parent / "task.toml").read_text()
    assert tomllib.loads(text)["launch"]["local"] == ["TODO"]
    assert re.search(r'^local = \["TODO"\]  # TODO: required: blend uses __local memory, get_local_id, barrier; ', text,
                     re.M), text
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "k.cl").write_text("__kernel void add(__global float* y) { y[get_global_id(0)] += 1.0f; }\n")
    assert kc("init", "add", "--source", str(plain / "k.cl"))[0] == 0
    text = (plain / "task.toml").read_text()
    assert "local" not in tomllib.loads(text)["launch"] and "# local = [...]  # optional" in text


INJECTED = 'x\nrtol = 1e6\n[tolerance]\natol = 1e6\n'


@pytest.mark.parametrize("where", ["file name", "static assert"])
def test_init_writes_no_line_it_did_not_mean(tmp_path: Path, where: str) -> None:
    """Issue 60: nothing copied from the source (a file name holding a newline, a diagnostic quoting a
    _Static_assert message) may become a TOML line: the injected tolerance must not take effect."""
    folder = tmp_path / "k"
    folder.mkdir()
    body = "__kernel void zero(__global float* y) { y[get_global_id(0)] = 0.0f; }\n"
    name = "k.cl"
    if where == "file name":
        name = "k" + INJECTED + ".cl"
    else:  # the AST cannot be read: the parser's diagnostic, quoting the message, lands in the intent's comment
        body = '_Static_assert(0, "' + INJECTED.replace("\n", "\\n") + '");\n' + body
    source = folder / name
    source.write_text(body)
    code, out = kc("init", "zero", "--source", str(source), "--entry", "zero", "--out", str(folder / "task.toml"))
    assert code == 0, out
    text = (folder / "task.toml").read_text()
    raw = tomllib.loads(text)
    assert "rtol" not in raw and "tolerance" not in raw, text
    if where == "static assert":
        assert "static assertion failed" in text  # the diagnostic is there, as one comment line
    assert raw["source"] == name and set(raw) == {"name", "description", "language", "source", "entry", "sizes",
                                                  "args", "launch"}
    assert not [line for line in text.splitlines() if line.startswith(("rtol", "atol", "[tolerance]"))], text


def test_init_force_replaces_only_a_task_file(kernel: Path) -> None:
    """Issue 60: `init --out SOURCE --force` replaced the kernel with the task file; --force replaces only a
    task file, never the source or another file."""
    before = kernel.read_text()
    code, out = kc("init", "blend", "--source", str(kernel), "--entry", "blend", "--out", str(kernel), "--force")
    assert code == 2 and "is the kernel source itself" in out and "Traceback" not in out
    assert kernel.read_text() == before
    notes = kernel.parent / "notes.txt"
    notes.write_text("my notes\n")
    code, out = kc("init", "blend", "--source", str(kernel), "--entry", "blend", "--out", str(notes), "--force")
    assert code == 2 and "is not a task file" in out and notes.read_text() == "my notes\n"
    assert kc("init", "blend", "--source", str(kernel), "--entry", "blend")[0] == 0
    assert kc("init", "blend", "--source", str(kernel), "--entry", "blend", "--force")[0] == 0  # a task file: replaced
