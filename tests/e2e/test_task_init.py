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
    assert "not complete: 9 field(s)" in out
    for field in ("sizes", "args.a.shape[0]", "args.w.value", "args.tile.shape[0]", "launch.global[0]"):
        assert f"  {field}: " in out, field
    assert "per work-group" in out and "how large your problem is" in out

    text = path.read_text().replace("[sizes]\n", "[sizes]\nN = 1024\n")
    text = re.sub(r'(name = "tile"\n(?:.*\n)*?shape = )\["TODO"\]', r'\1["64"]', text)
    text = text.replace('shape = ["TODO"]', 'shape = ["N"]').replace('global = ["TODO"]', 'global = ["N"]')
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
