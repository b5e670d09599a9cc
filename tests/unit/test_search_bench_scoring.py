"""bench/search_bench.py scores a tool's best template point through the point's identity (issue 46, item 6).

Points whose kernels preprocess to the same code are one candidate (one hash); the brute force keeps one parameter
set per hash, so matching a point against those sets gave None (a score of 0) to every other point of the same
kernel: Kernel Tuner's random_sample scored 0 % on a GEMM whose best point measured 5.7-6.0x. No device needed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from support.paths import ROOT

sys.path.insert(0, str(ROOT / "bench"))

from search_bench import Space, point_key, space_identities  # noqa: E402

from kernelcast.tools.core.task import load_task  # noqa: E402

# PAD never reaches the code: its #define line is gone after preprocessing, so PAD=0 and PAD=1 are one kernel
TEMPLATE = """\
__kernel void scale(__global const float *x, __global float *y, const int n) {
    int i = get_global_id(0);
    if (i < n) y[i] = 2.0f * x[i] * WPT;
}
"""
REFERENCE = """\
__kernel void scale(__global const float *x, __global float *y, const int n) {
    int i = get_global_id(0);
    if (i < n) y[i] = 2.0f * x[i];
}
"""
TASK = """\
name = "scale_dupes"
language = "opencl"
source = "ref.cl"
entry = "scale"

[sizes]
N = 1024

[[args]]
name = "x"
dtype = "float32"
shape = ["N"]
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
source = "tmpl.cl"

[template.params]
WG = [16, 32]
WPT = [1, 2]
PAD = [0, 1]

[template.launch]
global = ["N"]
local = ["WG"]
"""


@pytest.fixture
def task(tmp_path: Path):  # noqa: ANN201
    (tmp_path / "ref.cl").write_text(REFERENCE)
    (tmp_path / "tmpl.cl").write_text(TEMPLATE)
    (tmp_path / "task.toml").write_text(TASK)
    return load_task(tmp_path / "task.toml")


def test_every_point_maps_to_its_kernel(task) -> None:  # noqa: ANN001
    identities, points = space_identities(task)
    space = task.param_space()
    assert len(space) == 8 and len(identities) == 8
    assert len(points) == 4, "PAD does not change the kernel: 8 points, 4 kernels"
    for point in space:
        assert identities[point_key(point)] == task.instantiate(point).hash
    # the two PAD values of one (WG, WPT) are one identity; different WPT are different kernels
    a, b = ({"WG": 16, "WPT": 2, "PAD": pad} for pad in (0, 1))
    assert identities[point_key(a)] == identities[point_key(b)]
    assert identities[point_key(a)] != identities[point_key({"WG": 16, "WPT": 1, "PAD": 0})]


def test_a_point_sharing_its_kernel_is_scored(task) -> None:  # noqa: ANN001
    identities, points = space_identities(task)
    speedups = {key: 1.0 + i for i, key in enumerate(sorted(points))}  # every kernel measured, distinct speedups
    space = Space(task.name, str(task.path), speedups, points, identities)
    kept = list(points.values())
    dropped = [p for p in task.param_space() if p not in kept]
    assert len(dropped) == 4, "the brute force keeps one point per kernel: the other four match no kept point"
    bare = Space(task.name, str(task.path), speedups, points)  # the matching before the fix: kept points only
    assert all(bare.hash_of(p) is None for p in dropped)
    for point in task.param_space():
        key = space.hash_of(point)
        assert key == task.instantiate(point).hash
        assert space.score_of(space.speedups.get(key or "")) == pytest.approx(speedups[key] / space.optimum)
        assert space.score_of(space.speedups.get(key or "")) > 0
    # Kernel Tuner reports numpy integers: the same point
    numpy_point = {k: np.int64(v) for k, v in dropped[0].items()}
    assert space.hash_of(numpy_point) == task.instantiate(dropped[0]).hash
    # a point outside the space has no identity
    assert space.hash_of({"WG": 64, "WPT": 1, "PAD": 0}) is None
