"""Which calibration rows a run's trust may rest on: its task's own, only when the name is the task's alone."""

from __future__ import annotations

import shutil
from pathlib import Path

from kernelcast.graphs.trust import calibration_group
from kernelcast.tools.task import builtin_task_paths, load_task, resolve_task


def test_a_builtin_task_is_its_own_group() -> None:
    assert calibration_group(resolve_task("gemm")) == "gemm"


def test_a_path_task_borrowing_a_builtin_name_with_another_reference_gets_no_group(tmp_path: Path) -> None:
    """Rows are kept by task name: a user's "gemm" with a different kernel must not be certified on the
    built-in gemm's record, while an unchanged copy of the built-in may."""
    folder = tmp_path / "gemm"
    shutil.copytree(builtin_task_paths()["gemm"].parent, folder)
    assert calibration_group(load_task(folder / "task.toml")) == "gemm"
    reference = folder / "gemm.cl"
    reference.write_text(reference.read_text().replace("C[row * N + col] = acc;", "C[row * N + col] = 2.0f * acc;"))
    assert load_task(folder / "task.toml").reference().hash != resolve_task("gemm").reference().hash
    assert calibration_group(load_task(folder / "task.toml")) == ""


def test_a_path_task_with_its_own_name_keeps_it(tmp_path: Path) -> None:
    folder = tmp_path / "mine"
    shutil.copytree(builtin_task_paths()["saxpy"].parent, folder)
    toml = folder / "task.toml"
    toml.write_text(toml.read_text().replace('name = "saxpy"', 'name = "my_saxpy"', 1))
    task = load_task(toml)
    assert task.name == "my_saxpy" and calibration_group(task) == "my_saxpy"
