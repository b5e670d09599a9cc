"""A small Kernel Tuner cache of the convolution_milo task (bench/tasks), for the importer's tests."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from support.paths import ROOT

TASK = ROOT / "bench" / "tasks" / "convolution_milo" / "task.toml"
SHARED = ROOT.parent / "shared" / "gpu-landscapes"
KEYS = ["block_size_x", "block_size_y", "tile_size_x", "tile_size_y", "read_only", "use_padding", "use_shmem",
        "use_cmem", "filter_height", "filter_width"]
DEFAULT = dict(zip(KEYS, [16, 16, 1, 1, 0, 1, 1, 1, 15, 15], strict=True))
FAST = {**DEFAULT, "block_size_x": 32, "use_padding": 0, "tile_size_x": 2}
BROKEN = {**DEFAULT, "block_size_x": 48}


def entry(point: dict[str, Any], times: list[float] | str) -> dict[str, Any]:
    if isinstance(times, str):
        return {**point, "time": times, "timestamp": "2023-12-22 09:54:05+00:00"}
    return {**point, "time": sum(times) / len(times), "times": times, "timestamp": "2023-12-22 09:54:05+00:00"}


def cache(**changes: Any) -> dict[str, Any]:
    rows = [entry(DEFAULT, [4.0, 4.1, 3.9, 4.0]), entry(FAST, [2.0, 2.05, 1.95, 2.0, 2.1]),
            entry(BROKEN, "RuntimeFailedConfig")]
    data = {"device_name": "NVIDIA RTX A4000", "kernel_name": "convolution_kernel", "problem_size": [4096, 4096],
            "tune_params_keys": KEYS, "tune_params": {k: [v] for k, v in DEFAULT.items()}, "objective": "time",
            "cache": {",".join(str(r[k]) for k in KEYS): r for r in rows}}
    data.update(changes)
    return data


def write(tmp_path: Path, data: dict[str, Any], name: str = "A4000.json.gz") -> Path:
    path = tmp_path / name
    path.write_bytes(gzip.compress(json.dumps(data).encode()))
    return path
