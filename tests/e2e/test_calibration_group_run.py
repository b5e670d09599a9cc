"""A run on the real device keeps its calibration rows under its task's group and certifies on that group's rows
unless told to use every task's (tests/unit/test_calibration_group.py: which rows a group names)."""

from __future__ import annotations

from pathlib import Path


def test_a_run_certifies_on_its_tasks_rows_unless_told_to_use_every_tasks(tmp_path: Path) -> None:
    """Each trusted decision's reason names the rows that certified it: the run's task's own replayed rows by
    default, every task's with ``trust_task_rows`` off (what a task the rows do not know gets). A replayed
    side decides nothing alone before its probation audits on the task were measured and found right."""
    import pytest

    from kernelcast.graphs.config import RunConfig
    from kernelcast.graphs.route.risk_control import PROBATION_AUDITS
    from kernelcast.graphs.route.trust import RouteRecord, trust_summary
    from kernelcast.graphs.run import RunEnv, start_run
    from kernelcast.tools.store.store import Store

    reasons: dict[bool, list[str]] = {}
    for own_rows in (True, False):
        store = Store(tmp_path / f"{own_rows}.db")
        config = RunConfig(task="gemm", budget=10, router="selective", sizes="small", measure_per_round=2,
                           trust_seed_replay=True, trust_task_rows=own_rows, audit_share=0.3)
        result = start_run(config, store, RunEnv(tmp_path / str(own_rows), measure_timeout_s=60))
        run = store.runs.get(result.run_id)
        assert run is not None and run.calibration_group == "gemm"  # the built-in, whatever the option
        records = [RouteRecord.model_validate(e.payload) for e in store.events.find(result.run_id, kind="route")]
        reasons[own_rows] = [r.reason for r in records if r.forecast_alone]
        for side in ("prune", "accept"):
            first = next((i for i, r in enumerate(records) if r.forecast_alone and r.decision == side), None)
            if first is not None:
                tried = [r for r in records[:first] if r.probation and r.trusted_as == side]
                assert len(tried) >= PROBATION_AUDITS, f"replayed {side}s trusted before their trial on gemm"
        summary = trust_summary(store, result.run_id)
        assert summary.probation_audits == sum(1 for r in records if r.probation) <= summary.audits
        if any(r.forecast_alone for r in records):
            assert summary.probation_audits >= PROBATION_AUDITS and summary.probation_wrong == 0
    if not reasons[True]:
        pytest.skip("no forecast was trusted on this device with the task's own rows (nothing certified, or the "
                    "replayed threshold failed its trial on gemm here): nothing to read")
    assert all("calibration rows of gemm replayed from the seed" in r for r in reasons[True])
    assert not any("rows of gemm" in r for r in reasons[False])
