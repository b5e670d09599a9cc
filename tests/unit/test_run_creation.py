"""One run creation (issue 61, item 5): ``graphs/run.py: create_run`` is the only writer of run rows, so sessions,
the studio and the benches refuse what ``optimize`` refuses (``check_startable``), before a measurer starts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kernelcast.graphs.run import NotStartable
from kernelcast.session import start_session
from kernelcast.studio import make_graph
from kernelcast.tools.core.errors import InputError

from support.paths import ROOT

CREATION = re.compile(r"\.create_run\(")
OWNERS = {Path("graphs/run.py"), Path("tools/store/store.py")}  # the creation, and the row it writes


def test_only_graphs_run_creates_a_run() -> None:
    callers = sorted(str(path.relative_to(ROOT)) for folder in ("kernelcast", "graphs", "agents", "tools", "bench")
                     for path in (ROOT / folder).rglob("*.py")
                     if path.relative_to(ROOT) not in OWNERS and CREATION.search(path.read_text()))
    assert callers == [], f"a run row is written outside graphs/run.py: create_run: {callers}"


def test_a_session_with_a_budget_of_one_is_refused_as_optimize_refuses_it(tmp_path: Path) -> None:
    with pytest.raises(NotStartable, match="minimum budget is 2") as raised:
        start_session("saxpy", budget=1, home=tmp_path)
    assert isinstance(raised.value, InputError) and raised.value.exit_code == 2
    assert not (tmp_path / "kernelcast.db").exists(), "refused before the store is opened: no run row left behind"


def test_the_studio_refuses_it_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kernelcast.tools.core.settings import get_settings

    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path))
    get_settings.cache_clear()
    try:
        with pytest.raises(NotStartable, match="--seed must be 0 or more"):
            make_graph({"configurable": {"task": "saxpy", "budget": 4, "seed": -1, "thread_id": "studio-refused"}})
    finally:
        get_settings.cache_clear()
