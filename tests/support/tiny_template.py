"""A template of 8 points with no generic edit (an integer copy, work-group dependent, no loop): the generator
runs dry after its opening whatever the device measures."""

from __future__ import annotations

from pathlib import Path

TASK = """
name = "tiny_copy"
description = "N ints copied; 8 template points that differ by a no-op term"
language = "opencl"
source = "copy.cl"
entry = "copy"
tags = ["memory-bound", "integer"]
bytes = "8 * N"
[sizes]
N = 1048576
[small_sizes]
N = 65536
[[args]]
name = "a"
dtype = "int32"
shape = ["N"]
intent = "in"
init = "randint"
low = 0
high = 1000
[[args]]
name = "b"
dtype = "int32"
shape = ["N"]
intent = "out"
[[args]]
name = "N"
kind = "scalar"
dtype = "int32"
value = "N"
[launch]
global = ["N"]
local = [64]
[tolerance]
rtol = 0.0
atol = 0.0
[template]
source = "copy_tunable.cl"
default = { K = 0 }
[template.params]
K = [0, 1, 2, 3, 4, 5, 6, 7]
[template.launch]
global = ["N"]
local = [64]
"""
KERNEL = """__kernel void copy(__global const int *a, __global int *b, const int N)
{
    const int i = get_group_id(0) * get_local_size(0) + get_local_id(0);
    if (i < N)
        b[i] = a[i]%s;
}
"""


def write_tiny_template(parent: Path) -> Path:
    """The task folder under ``parent``; returns its task.toml."""
    folder = parent / "tiny_copy"
    folder.mkdir()
    (folder / "task.toml").write_text(TASK)
    (folder / "copy.cl").write_text(KERNEL % "")
    (folder / "copy_tunable.cl").write_text(KERNEL % " + (K - K)")
    return folder / "task.toml"
