"""Sessions reuse what this device measured before (issue 64, item 1): a kernel an earlier run or session bought at
the same sizes joins the tree with its stored result, charged nothing, instead of being refused as "already
measured"; the README's Session snippet runs twice in one home; a session writes report.html as runs do and its
``best_speedup`` is ``best.speedup`` (item 9). On the real OpenCL device, small sizes."""

from __future__ import annotations

from pathlib import Path

import pytest

import kernelcast
from kernelcast.session import SessionError
from kernelcast.tools.core.settings import get_settings
from kernelcast.tools.core.task import resolve_task
from kernelcast.tools.store.store import Store

FLOAT4 = """__kernel void saxpy(__global const float *x, __global float *y, const float a, const int n)
{
    int i = get_global_id(0) * 4;
    if (i + 3 < n) {
        float4 xv = vload4(0, x + i);
        float4 yv = vload4(0, y + i);
        vstore4(a * xv + yv, 0, y + i);
    }
}
"""


def readme_snippet(my_kernel: str) -> kernelcast.Session:
    """The README's Session snippet, as a user runs it."""
    with kernelcast.Session("saxpy", budget=8, sizes="small") as session:
        parent = session.suggest().parents[0]
        out = session.submit([{"source": my_kernel, "global_size": ["N / 4"], "intent": "float4 loads"}],
                             parent=parent.hash)
        for r in out.results:
            assert r.text()
    assert session.result is not None
    assert session.result.text()
    return session


def live_rows(task: str) -> int:
    store = Store(get_settings().db_path)
    try:
        return len(store.ledger.find(task=task))
    finally:
        store.close()


def test_a_kernel_measured_before_is_reused_free_and_the_readme_snippet_runs_twice(home: Path) -> None:
    first = readme_snippet(FLOAT4)
    assert first.result is not None
    found = first.result.result
    assert found.spent >= 2, "measured, then confirmed"
    assert Path(first.result.report).name == "report.html" and Path(first.result.report).is_file()
    rows = live_rows("saxpy")

    again = readme_snippet(FLOAT4)  # used to raise SessionError: "already measured ... not bought again"
    assert again.result is not None
    result = again.result.result
    assert result.spent == 0, "the stored measurement and its confirmation are reused: nothing charged"
    assert result.best_hash == found.best_hash and result.best is not None and found.best is not None
    assert result.best.speedup == found.best.speedup and result.best.confirmed
    assert result.answer.kernel == found.answer.kernel
    assert live_rows("saxpy") == rows, "the copies are the session's own: no other read sees them"
    assert Path(again.result.report).name == "report.html" and Path(again.result.report).is_file()


def test_a_session_reuses_another_runs_kernel_says_so_and_charges_nothing(home: Path) -> None:
    task = resolve_task("saxpy")
    point = task.instantiate({"VEC": 4, "COARSEN": 1, "WG": 64})
    kernelcast.measure("saxpy", point, sizes="small")  # an earlier measurement on this device, outside any session
    other = task.instantiate({"VEC": 2, "COARSEN": 1, "WG": 64})
    kernelcast.measure("saxpy", other, sizes="full")  # another size: not this session's problem, measured again

    session = kernelcast.Session("saxpy", budget=4, sizes="small", forecaster="none", router="measure-all")
    try:
        out = session.submit([point, other])
        reused, fresh = out.results
        assert reused.valid and reused.decision == "reused" and reused.hash == point.hash
        assert "nothing charged" in reused.decision_reason and "reused" in reused.text()
        assert reused.measurement is not None and reused.measurement.status == "correct"
        assert fresh.valid and fresh.decision == "measured", "measured at full size only: bought at small"
        assert out.spent == 1, "only the kernel never measured at these sizes was charged"
        assert out.best is None or out.best_speedup == out.best.speedup, "one value"
        assert out.answer is not None and out.best_speedup == out.answer.speedup
        status = session.status()
        assert status.spent == 1 and status.counts.get("measured", 0) + status.counts.get("failed", 0) == 2
        assert status.best is None or status.best_speedup == status.best.speedup
        with pytest.raises(SessionError, match="already in this session's tree"):
            session.submit([point], parent=task.reference().hash)  # in the tree already: nothing to reuse or buy
    finally:
        session.close()


def test_leaving_an_empty_session_by_an_exception_leaves_nothing_waiting(home: Path) -> None:
    with pytest.raises(SessionError) as raised, kernelcast.Session("saxpy", budget=2, sizes="small",
                                                                   forecaster="none") as session:
        session.submit([{"source": "__kernel void saxpy(__global float *x) { }"}])  # the wrong signature
    assert "no valid candidate" in str(raised.value) and "\n" not in str(raised.value)
    assert any("closed (nothing was spent)" in note for note in raised.value.__notes__)
    store = Store(get_settings().db_path)
    try:
        row = store.runs.get(session.id)
    finally:
        store.close()
    assert row is not None and row.status == "failed", "not left waiting"
    with pytest.raises(SessionError, match="is failed"):
        kernelcast.Session(session=session.id).submit([FLOAT4])
