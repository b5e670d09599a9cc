"""Assemble the optimization StateGraph and run or resume it with a SQLite checkpointer.

select → generate → forecast → route → (measure) → backup → [continue | verify → report]; route may first go
to confirm_incumbent or trial_audits, each of which returns to route
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph

from kernelcast.graphs.context import RunContext
from kernelcast.graphs.errors import SearchFailed
from kernelcast.graphs.events import Error, Finish
from kernelcast.graphs.search.nodes import SearchNodes, after_route, after_select, budget_check
from kernelcast.graphs.search.result import RunResult, build_result, write_run_folder
from kernelcast.graphs.search.tree import SearchState, check_version

RECURSION_LIMIT = 100_000


def add_search_steps(graph: StateGraph[Any], nodes: SearchNodes, ctx: RunContext) -> None:
    """The steps every search graph shares (runs and sessions differ only in how children are proposed and
    when the loop ends): init → select, forecast → route → (measure) → backup, verify → report; route sends a
    round it cannot decide yet to confirm_incumbent or trial_audits, which spend and return to it."""

    def report(state: SearchState) -> dict[str, Any]:
        return write_report(ctx, state)

    for name, step in (("init", nodes.init), ("select", nodes.select), ("forecast", nodes.forecast),
                       ("route", nodes.route), ("confirm_incumbent", nodes.confirm_incumbent),
                       ("trial_audits", nodes.trial), ("measure", nodes.measure), ("backup", nodes.backup),
                       ("verify", nodes.verify), ("report", report)):
        graph.add_node(name, step)
    graph.add_edge(START, "init")
    graph.add_edge("init", "select")
    graph.add_edge("forecast", "route")
    graph.add_conditional_edges("route", after_route, {"confirm": "confirm_incumbent", "trial": "trial_audits",
                                                       "measure": "measure", "backup": "backup"})
    graph.add_edge("confirm_incumbent", "route")
    graph.add_edge("trial_audits", "route")
    graph.add_edge("measure", "backup")
    graph.add_edge("verify", "report")
    graph.add_edge("report", END)


def build_graph(ctx: RunContext) -> StateGraph[SearchState]:
    nodes = SearchNodes(ctx)
    graph: StateGraph[SearchState] = StateGraph(SearchState)
    add_search_steps(graph, nodes, ctx)
    graph.add_node("generate", nodes.generate)
    graph.add_conditional_edges("select", after_select, {"generate": "generate", "finish": "verify"})
    graph.add_edge("generate", "forecast")
    graph.add_conditional_edges("backup", budget_check(nodes), {"continue": "select", "finish": "verify"})
    return graph


def write_report(ctx: RunContext, state: SearchState) -> dict[str, Any]:
    """The last step: the run's result, folder and row."""
    result = build_result(state, ctx, "finished")
    write_run_folder(result, state, ctx.store, ctx.task.language)
    ctx.store.runs.update(ctx.run_id, status="finished", spent=result.spent, best_candidate=result.best_hash,
                          best_speedup=result.best_speedup, summary=result.model_dump())
    ctx.emit(Finish(best=result.best_hash, speedup=result.best_speedup, spent=result.spent))
    return {"finished": True}


def checkpointer(path: Path) -> SqliteSaver:
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(str(path), check_same_thread=False, timeout=30.0)
    conn.execute("PRAGMA journal_mode=WAL")
    return SqliteSaver(conn)


def checkpointed_values(path: Path, run_id: str) -> dict[str, Any]:
    """The last checkpointed state of a run, read without building its context ({}: none)."""
    saver = checkpointer(path)
    try:
        found = saver.get_tuple({"configurable": {"thread_id": run_id}})
        return dict(found.checkpoint["channel_values"]) if found else {}
    finally:
        saver.conn.close()


def check_checkpoint(path: Path, run_id: str) -> None:
    """Refuse to continue a run whose checkpoint this code cannot read (a RunError naming the versions)."""
    values = checkpointed_values(path, run_id)
    if values:
        check_version(values, run_id)


def execute(ctx: RunContext, checkpoint_path: Path, resume: bool = False) -> RunResult:
    """Run the graph to the end (or continue a checkpointed run) and return the result."""
    saver = checkpointer(checkpoint_path)
    app = build_graph(ctx).compile(checkpointer=saver)
    config: RunnableConfig = {"configurable": {"thread_id": ctx.run_id}, "recursion_limit": RECURSION_LIMIT}
    try:
        snapshot = app.get_state(config)
        if resume and snapshot.values and not snapshot.next:
            state = snapshot.values  # already finished
        else:
            start: SearchState | None = None if (resume and snapshot.values) else {"run_id": ctx.run_id}
            for _ in app.stream(start, config, stream_mode="updates"):
                pass
            state = app.get_state(config).values
    except KeyboardInterrupt:
        ctx.store.runs.update(ctx.run_id, status="interrupted")
        raise
    except SearchFailed as exc:
        ctx.store.runs.update(ctx.run_id, status="failed")
        ctx.emit(Error(error=str(exc)))
        raise
    finally:
        saver.conn.close()
    return build_result(cast(SearchState, state), ctx, "finished" if state.get("finished") else "interrupted")
