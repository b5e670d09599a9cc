"""langgraph.json points LangGraph tooling at a graph factory that builds the real graph."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.paths import ROOT


def test_langgraph_json_names_the_graph_factory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = json.loads((ROOT / "langgraph.json").read_text())
    module_path, func = spec["graphs"]["optimize"].split(":")
    assert (ROOT / module_path).exists() and func == "make_graph"
    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path))
    from kernelcast.studio import make_graph
    from kernelcast.tools.core.settings import get_settings

    get_settings.cache_clear()  # settings are read once per process; this test changes the home

    graph = make_graph({"configurable": {"task": "saxpy", "budget": 3, "sizes": "small", "forecaster": "none",
                                         "thread_id": "studio-test"}})
    nodes = set(graph.get_graph().nodes)
    assert {"select", "generate", "forecast", "route", "measure", "backup", "verify", "report"} <= nodes
    assert (tmp_path / "kernelcast.db").exists()
