"""Which calibration rows a run's trust may rest on, and what its own rows are kept under: a built-in's name, or
any other task's name with its reference kernel's hash."""

from __future__ import annotations

import shutil
from pathlib import Path

from kernelcast.graphs.route.trust import calibration_group
from kernelcast.tools.core.task import builtin_task_paths, load_task, resolve_task


def test_a_builtin_task_is_its_own_group() -> None:
    assert calibration_group(resolve_task("gemm")) == "gemm"


def test_a_path_task_borrowing_a_builtin_name_with_another_reference_gets_its_own_group(tmp_path: Path) -> None:
    """A user's "gemm" with a different kernel must neither be certified on the built-in gemm's record nor
    write into it, while an unchanged copy of the built-in is the built-in."""
    folder = tmp_path / "gemm"
    shutil.copytree(builtin_task_paths()["gemm"].parent, folder)
    assert calibration_group(load_task(folder / "task.toml")) == "gemm"
    reference = folder / "gemm.cl"
    reference.write_text(reference.read_text().replace("C[row * N + col] = acc;", "C[row * N + col] = 2.0f * acc;"))
    assert load_task(folder / "task.toml").reference().hash != resolve_task("gemm").reference().hash
    changed = load_task(folder / "task.toml")
    assert calibration_group(changed) == "gemm@" + changed.reference().hash[:12]


def test_two_path_tasks_of_one_name_keep_apart(tmp_path: Path) -> None:
    folder = tmp_path / "mine"
    shutil.copytree(builtin_task_paths()["saxpy"].parent, folder)
    toml = folder / "task.toml"
    toml.write_text(toml.read_text().replace('name = "saxpy"', 'name = "my_saxpy"', 1))
    task = load_task(toml)
    assert task.name == "my_saxpy" and calibration_group(task).startswith("my_saxpy@")
    kernel = folder / "saxpy.cl"  # the same name, another reference kernel
    kernel.write_text(kernel.read_text().replace("y[i] = a * x[i] + y[i];", "y[i] = y[i] + a * x[i];"))
    other = load_task(toml)
    assert other.name == task.name and calibration_group(other) != calibration_group(task)


def test_calibration_rows_carry_their_runs_group(tmp_path: Path) -> None:
    """A run's rows are labelled with the group it recorded; a run from before groups were recorded reads as
    its task's name if it ran the built-in by name, else as that name marked legacy."""
    from kernelcast.graphs.route.trust import calibration_rows
    from kernelcast.tools.store.store import Store

    from support.decisions import record_route
    from support.records import measurement

    store = Store(tmp_path / "k.db")
    labelled = store.runs.create("gemm", "dev", {}, 4)
    store.runs.update(labelled, calibration_group="gemm@0123456789ab")
    legacy = store.runs.create("gemm", "dev", {"task": "gemm"}, 4)
    legacy_path = store.runs.create("gemm", "dev", {"task": str(tmp_path / "gemm" / "task.toml")}, 4)
    for run_id, child in ((labelled, "a" * 64), (legacy, "b" * 64), (legacy_path, "c" * 64)):
        record_route(store, run_id, child, decision="measure", p_beat=0.3, incumbent=1.0)
        store.ledger.add(measurement(child, 1.5), run_id=run_id)
    groups = sorted(row.group for row in calibration_rows(store, "dev"))
    assert groups == ["gemm", "gemm@0123456789ab", "gemm@legacy"]  # an old path run: neither the built-in nor a task
