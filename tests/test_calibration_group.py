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


def test_a_run_certifies_on_its_tasks_rows_unless_told_to_use_every_tasks(tmp_path: Path) -> None:
    """Each trusted decision's reason names the rows that certified it: the run's task's own replayed rows by
    default, every task's with ``trust_task_rows`` off (what a task the rows do not know gets)."""
    import pytest

    from kernelcast.graphs.config import RunConfig
    from kernelcast.graphs.run import RunEnv, start_run
    from kernelcast.graphs.trust import RouteRecord
    from kernelcast.tools.store import Store

    reasons: dict[bool, list[str]] = {}
    for own_rows in (True, False):
        store = Store(tmp_path / f"{own_rows}.db")
        config = RunConfig(task="gemm", budget=10, router="selective", sizes="small", measure_per_round=2,
                           trust_seed_replay=True, trust_task_rows=own_rows)
        result = start_run(config, store, RunEnv(tmp_path / str(own_rows), measure_timeout_s=60))
        records = [RouteRecord.model_validate(e.payload) for e in store.events(result.run_id, kind="route")]
        reasons[own_rows] = [r.reason for r in records if r.forecast_alone]
    if not reasons[True]:
        pytest.skip("no forecast was trusted on this device with the task's own rows: nothing to read")
    assert all("calibration rows of gemm replayed from the seed" in r for r in reasons[True])
    assert not any("rows of gemm" in r for r in reasons[False])
