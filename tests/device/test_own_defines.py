"""Tuning a kernel's own #defines as it is (issue 48, item 5): a [template] without a source of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernelcast import api
from kernelcast.tools.core.task import TaskError, load_task
from kernelcast.tools.store.store import Store

# Blocks of BS along a row of 64: every BS adds the same elements in the same order, so every point is correct.
KERNEL = """#ifndef BS
#define BS 4
#endif
__kernel void rowsum(__global const float* x, __global float* y, const int n) {
    int i = get_global_id(0);
    float s = 0.0f;
    for (int k = 0; k < 64; k += BS)
        for (int j = 0; j < BS; j++)
            s += x[i * 64 + k + j];
    if (i < n) y[i] = s;
}
"""
TASK = """name = "rowsum_own"
language = "opencl"
source = "rowsum.cl"
entry = "rowsum"
[sizes]
N = 4096
[small_sizes]
N = 256
[[args]]
name = "x"
dtype = "float32"
shape = ["N * 64"]
intent = "in"
[[args]]
name = "y"
dtype = "float32"
shape = ["N"]
intent = "out"
[[args]]
name = "n"
kind = "scalar"
dtype = "int32"
value = "N"
[launch]
global = ["N"]
[template]
constraints = ["64 % BS == 0", "BS <= 16"]
[template.params]
BS = [1, 2, 4, 8, 16, 32]
"""


def write(folder: Path, kernel: str = KERNEL, task: str = TASK) -> Path:
    (folder / "rowsum.cl").write_text(kernel)
    (folder / "task.toml").write_text(task)
    return folder / "task.toml"


def test_template_without_source_tunes_the_kernel_itself(tmp_path: Path) -> None:
    task = load_task(write(tmp_path))
    assert task.template_source == task.source
    assert [p["BS"] for p in task.param_space()] == [1, 2, 4, 8, 16]  # the restriction BS <= 16 drops 32
    point = task.instantiate({"BS": 8})
    assert point.source == "#define BS 8\n" + KERNEL
    assert point.global_size == ["N"] and point.local_size is None  # no [template.launch]: the task's launch
    # the tuned value reaches the kernel: BS=8 is another kernel, BS=4 (the source's own value) is the reference
    assert point.hash != task.reference().hash
    assert task.instantiate({"BS": 4}).hash == task.reference().hash


def test_template_launch_may_use_the_parameters(tmp_path: Path) -> None:
    path = write(tmp_path, task=TASK + '[template.launch]\nglobal = ["N"]\nlocal = ["BS"]\n')
    task = load_task(path)
    assert task.instantiate({"BS": 16}).local_size == ["16"]


@pytest.mark.parametrize("kernel", [
    KERNEL.replace("#ifndef BS\n", "").replace("#endif\n", ""),  # a bare #define
    KERNEL.replace("#ifndef BS", "#ifndef OTHER"),  # guarded by another name
    KERNEL.replace("#endif\n", "#endif\n#undef BS\n#define BS 2\n"),  # redefined after the guard
])
def test_a_define_the_tuned_value_cannot_pass_is_refused(tmp_path: Path, kernel: str) -> None:
    with pytest.raises(TaskError, match=r"template\.params\.BS.*outside an '#ifndef BS' block"):
        load_task(write(tmp_path, kernel=kernel))


def test_if_not_defined_guard_is_accepted(tmp_path: Path) -> None:
    kernel = KERNEL.replace("#ifndef BS", "#if !defined(BS)")
    assert load_task(write(tmp_path, kernel=kernel)).space_count().valid == 5


def test_propose_and_measure_own_defines(tmp_path: Path) -> None:
    """The offline generator proposes points of the kernel's own #defines (never the reference's BS = 4), and
    `kernelcast measure PATH -p BS=...` measures one on the device, correct against the unchanged kernel."""
    path = write(tmp_path)
    store = Store(tmp_path / "kc.db")
    proposals = api.propose(path, n=4, store=store)
    points = [c.params for c in proposals.candidates if c.params]
    assert points, proposals.report
    assert all(p["BS"] in (1, 2, 8, 16) for p in points)
    chosen = points[0]
    env = {**os.environ, "KERNELCAST_HOME": str(tmp_path / "home"), "COLUMNS": "200"}
    out = subprocess.run([sys.executable, "-m", "kernelcast.cli", "measure", str(path), "-p", f"BS={chosen['BS']}",
                          "--sizes", "small", "--json"], capture_output=True, text=True, env=env, cwd=tmp_path,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["status"] == "correct" and result["speedup"] > 0
    stored = Store(tmp_path / "home" / "kernelcast.db").candidates.get(result["candidate_hash"])
    assert stored.params == chosen and stored.source.startswith(f"#define BS {chosen['BS']}\n#ifndef BS")
