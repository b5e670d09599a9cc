"""The front doors' one list of tools: MCP and the chat's model publish the published ones, the chat's slash
commands and its /help come from the same entries, and each names the CLI command that does the same job (a
test checks those exist). A new front-door tool is a function plus one entry here."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

from pydantic import BaseModel

from kernelcast import chat_local_tools as local
from kernelcast import chat_tools as ops
from kernelcast.api import FORECASTERS, ROUTERS, SELECTABLE_GENERATORS

USAGE_WIDTH = 40  # the /help column where summaries start


@dataclass(frozen=True)
class ToolSpec:
    """One tool: the function (its annotations are the schema), how the chat spells it, where it is offered."""

    fn: Callable[..., BaseModel]
    slash: str | None = None  # the chat's slash command ("session start"); None: none
    usage: str = ""  # its arguments in /help (more lines after a newline)
    summary: str = ""  # what /help says it does
    positional: tuple[str, ...] = ()  # slash arguments taken by position; a trailing "*" takes all remaining
    published: bool = True  # an MCP tool and a tool of the chat's model (False: chat-only, reads local files)
    spends: bool = False  # buys device time: MCP runs these one at a time
    cli: str | None = None  # the CLI command doing the same job ("tasks list")

    @property
    def name(self) -> str:
        return self.fn.__name__

    @property
    def progress(self) -> bool:
        """Reports each measurement as it lands (takes an ``on_event`` callback)."""
        return "on_event" in inspect.signature(self.fn).parameters

    @cached_property
    def args(self) -> type[BaseModel]:
        return ops.args_model(self.fn)


SPECS: tuple[ToolSpec, ...] = (
    ToolSpec(ops.list_tasks, "tasks", "", "list the built-in tasks", cli="tasks"),
    ToolSpec(ops.describe_task, "task", "NAME", "show one task", ("task",), cli="tasks show"),
    ToolSpec(ops.measure_kernel, spends=True, cli="measure"),
    ToolSpec(ops.forecast_speedup, cli="forecast"),
    ToolSpec(local.measure_file, "measure", "TASK [FILE] [--sizes small]", "measure the reference or a kernel file",
             ("task", "file"), published=False, cli="measure"),
    ToolSpec(local.forecast_file, "forecast", "TASK FILE [--forecaster F]", "forecast a kernel file's speedup",
             ("task", "file"), published=False, cli="forecast"),
    ToolSpec(ops.optimize_kernel, "optimize", f"TASK [--budget N] [--router {'|'.join(ROUTERS)}] [--sizes small]\n"
             f"[--forecaster {'|'.join(FORECASTERS)}]\n"
             f"[--generator {'|'.join(SELECTABLE_GENERATORS)}] [--seed N]", "(asks before spending)", ("task",),
             spends=True, cli="optimize"),
    ToolSpec(ops.list_runs, "runs", "[TASK] [--limit N]", "recent runs", ("task",), cli="runs"),
    ToolSpec(ops.get_run, "show", "RUN", "one run", ("run_id",), cli="show"),
    ToolSpec(ops.compare_runs, "compare", "RUN RUN ...", "runs side by side", ("run_ids*",), cli="report"),
    ToolSpec(local.write_run_report, "report", "RUN [--compare RUN]", "write the HTML report with plots", ("run_id",),
             published=False, cli="report"),
    ToolSpec(ops.start_session, "session start", "TASK [--budget N] [--router R] [--risk R] [--sizes small] "
             "[--forecaster F]", "a session: you write the candidates, kernelcast spends the budget", ("task",),
             spends=True),
    ToolSpec(ops.suggest_parents),
    ToolSpec(ops.submit_candidates, spends=True),
    ToolSpec(ops.session_status),
    ToolSpec(ops.finish_session, spends=True),
    ToolSpec(local.suggest_next, "suggest", "[SESSION] [--count N]", "the parents the search wants mutated next",
             ("session",), published=False),
    ToolSpec(local.submit_files, "submit", "FILE... [--session S] [--parent HASH] [--global-size G,..] "
             "[--local-size L,..] [--build-options O]", "submit kernel files (or candidate .json) as children",
             ("files*",), published=False),
    ToolSpec(local.show_session, "status", "[SESSION]", "where the session stands", ("session",), published=False),
    ToolSpec(local.finish_current, "finish", "[SESSION]", "confirm the best, write the report", ("session",),
             published=False),
)
TOOLS: dict[str, Callable[..., BaseModel]] = {spec.name: spec.fn for spec in SPECS if spec.published}
SPENDING: frozenset[str] = frozenset(spec.name for spec in SPECS if spec.spends)


def spec(name: str) -> ToolSpec:
    return next(s for s in SPECS if s.name == name)


def help_text() -> str:
    """The chat's /help: one entry per slash command, in registry order."""
    lines = ["Slash commands (no model needed):"]
    for s in SPECS:
        if s.slash is None:
            continue
        first, *more = f"/{s.slash} {s.usage}".rstrip().split("\n")
        if len(first) < USAGE_WIDTH and not more:
            lines.append(f"  {first:<{USAGE_WIDTH}} {s.summary}")
            continue
        lines.append(f"  {first}")
        lines += [f"            {line}" for line in more]
        if more:
            lines[-1] += f"   {s.summary}"
        else:
            lines.append(f"  {'':<{USAGE_WIDTH}} {s.summary}")
    return "\n".join([*lines, "  /help, /quit", "Anything else goes to the model (when one is configured)."])
