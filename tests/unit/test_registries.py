"""Routers, generators and forecasters are registered once with their settings; every front door derives its
choices and defaults from the registries (CLI help, chat and MCP schemas, RunConfig, the docs)."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from kernelcast.agents.registry import (
    DEFAULT_FORECASTER,
    DEFAULT_GENERATOR,
    EXTERNAL,
    FORECASTERS,
    GENERATORS,
    SELECTABLE_GENERATORS,
    make_forecaster,
    make_generator,
)
from kernelcast.graphs.config import RunConfig, default
from kernelcast.graphs.route.routers import DEFAULT_RISK, DEFAULT_ROUTER, ROUTERS, make_router

from support.paths import ROOT


def enum_of(schema: dict, field: str) -> list[str]:
    prop = schema["properties"][field]
    return prop["enum"] if "enum" in prop else next(a["enum"] for a in prop.get("anyOf", []) if "enum" in a)


def test_run_config_validates_names_against_the_registries_and_derives_router_settings() -> None:
    schema = RunConfig.model_json_schema()
    assert enum_of(schema, "router") == list(ROUTERS)
    assert enum_of(schema, "forecaster") == list(FORECASTERS)
    assert enum_of(schema, "generator") == list(GENERATORS)  # a stored session names "external"
    config = RunConfig(task="saxpy")
    assert (config.router, config.generator, config.forecaster, config.risk) == (
        DEFAULT_ROUTER, DEFAULT_GENERATOR, DEFAULT_FORECASTER, DEFAULT_RISK)
    for name, spec in ROUTERS.items():
        config = RunConfig(task="saxpy", router=name, budget=40, measure_per_round=3)
        assert config.n_children == spec.children_per_measurement * 3
        assert config.n_opening == spec.opening_per_measurement * 3
        assert config.reserve == round(spec.reserve_share * 40)
        explicit = RunConfig(task="saxpy", router=name, children_per_round=5)
        assert explicit.n_children == explicit.n_opening == 5  # explicit wins
    # forecasts are cheap: selective's opening design is much wider than its later expansions; the baselines'
    # are their usual ones (topk stays the paper's 16 forecast, 4 measured)
    assert ROUTERS["selective"].opening_per_measurement > ROUTERS["selective"].children_per_measurement
    assert all(ROUTERS[r].opening_per_measurement == ROUTERS[r].children_per_measurement for r in ("topk", "measure-all"))
    assert ROUTERS["selective"].reserve_share > 0 and ROUTERS["measure-all"].reserve_share == 0
    for field, bad in (("router", "fastest"), ("forecaster", "oracle"), ("generator", "magic")):
        with pytest.raises(ValidationError, match=field):
            RunConfig(task="saxpy", **{field: bad})


def test_every_registered_router_and_offline_agent_builds_under_its_name(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ROUTERS:
        router = make_router(name, k=3, seed=7)
        assert router.name == name
    assert make_router("selective", k=3, seed=7).seed == 7  # type: ignore[attr-defined]  # the run's seed audits
    assert make_generator("offline").name == "offline"
    assert make_forecaster("none").name == "none"
    assert make_forecaster("prior") is not None
    with pytest.raises(ValueError, match="unknown router 'fastest' \\(expected selective, topk or measure-all\\)"):
        make_router("fastest")
    with pytest.raises(ValueError, match="unknown forecaster 'oracle'"):
        make_forecaster("oracle")
    with pytest.raises(ValueError, match="not built by name"):
        make_generator(EXTERNAL)
    monkeypatch.delenv("KERNELCAST_MODEL", raising=False)
    with pytest.raises(ValueError, match="needs a model"):
        make_generator("llm", model=None)
    assert EXTERNAL not in SELECTABLE_GENERATORS and set(SELECTABLE_GENERATORS) < set(GENERATORS)


def test_chat_and_mcp_tool_schemas_publish_the_registered_names_and_defaults() -> None:
    from kernelcast import chat_tools as ops

    optimize = ops.args_model(ops.optimize_kernel).model_json_schema()
    assert enum_of(optimize, "router") == list(ROUTERS)
    assert enum_of(optimize, "forecaster") == list(FORECASTERS)
    assert enum_of(optimize, "generator") == list(SELECTABLE_GENERATORS)
    assert optimize["properties"]["router"]["default"] == DEFAULT_ROUTER
    session = ops.args_model(ops.start_session).model_json_schema()
    assert enum_of(session, "router") == list(ROUTERS)
    assert session["properties"]["risk"]["default"] == default("risk")
    assert session["properties"]["measure_per_round"]["default"] == default("measure_per_round")
    forecast = ops.args_model(ops.forecast_speedup).model_json_schema()
    assert enum_of(forecast, "forecaster") == list(FORECASTERS)


def test_cli_help_and_chat_help_list_every_registered_name() -> None:
    from kernelcast.chat_commands import HELP
    from kernelcast.cli import app

    runner = CliRunner()
    optimize = runner.invoke(app, ["optimize", "--help"], env={"COLUMNS": "400"})
    assert optimize.exit_code == 0
    assert " | ".join(ROUTERS) in optimize.output and " | ".join(FORECASTERS) in optimize.output
    assert " | ".join(SELECTABLE_GENERATORS) in optimize.output
    propose = runner.invoke(app, ["propose", "--help"], env={"COLUMNS": "400"})
    assert " | ".join(SELECTABLE_GENERATORS) in propose.output
    assert "|".join(ROUTERS) in HELP and "|".join(FORECASTERS) in HELP
    bad = runner.invoke(app, ["optimize", "saxpy", "--router", "fastest"])
    assert bad.exit_code == 2 and "unknown router 'fastest'" in bad.output
    bad = runner.invoke(app, ["optimize", "saxpy", "--forecaster", "oracle"])
    assert bad.exit_code == 2 and "unknown forecaster 'oracle'" in bad.output


def test_no_front_door_writes_a_router_forecaster_or_generator_name_by_hand() -> None:
    """The registries are the only lists: a quoted name in a front door or the run config is a copy."""
    names = {*ROUTERS, *FORECASTERS, *GENERATORS} - {"none", "llm", "prior"}  # common words (a PUCT prior)
    quoted = re.compile("|".join(rf"[\"']{re.escape(n)}[\"']" for n in sorted(names)))
    files = [*(ROOT / "kernelcast").rglob("*.py"), ROOT / "graphs" / "config.py", ROOT / "graphs" / "search" / "nodes.py"]
    copies = [f"{path.relative_to(ROOT)}:{i}: {line.strip()}" for path in files
              for i, line in enumerate(path.read_text().splitlines(), 1) if quoted.search(line)]
    assert copies == []


def test_the_architecture_doc_carries_the_registries_table_as_derived() -> None:
    from kernelcast.registry_docs import DOC, current_block, render

    table = render()
    assert current_block(DOC.read_text()) == table, "run: python -m kernelcast.registry_docs"
    for name in (*ROUTERS, *FORECASTERS, *GENERATORS):
        assert f"| `{name}`" in table, name


def test_a_stored_config_reads_as_a_run_config_and_an_odd_row_never_stops_a_listing() -> None:
    from kernelcast.graphs.config import listed_router
    from kernelcast.tools.store.records import RunRecord

    run = RunRecord(id="r", task="saxpy", device="d", status="finished", budget=1, spent=1,
                    config=RunConfig(task="saxpy", router="topk").model_dump())
    assert RunConfig.of_run(run).router == "topk" == listed_router(run)
    legacy = run.model_copy(update={"config": {"task": "saxpy", "router": "topk", "backend": "opencl"}})
    assert RunConfig.of_run(legacy).n_children == ROUTERS["topk"].children_per_measurement * 4  # old fields ignored
    assert listed_router(run.model_copy(update={"config": {"router": "topk"}})) == "?"  # no task: not a RunConfig
