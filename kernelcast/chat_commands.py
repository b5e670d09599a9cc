"""Slash commands of the chat: parsed into validated tool calls, with no model involved.

Also the chat-only tools (a file on this machine is fine here; the MCP tools take source text). The chat
session (:mod:`kernelcast.chat`) and the model's protocol (:mod:`kernelcast.chat_protocol`) build on this.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Collection
from typing import Annotated, Any, get_origin

from pydantic import BaseModel, Field, ValidationError

from kernelcast import api
from kernelcast import chat_tools as ops
from kernelcast.agents.registry import (DEFAULT_FORECASTER, EXTERNAL, FORECASTERS, SELECTABLE_GENERATORS,
                                        ForecasterName)
from kernelcast.graphs.config import RunConfig
from kernelcast.graphs.route.routers import ROUTERS
from kernelcast.session_views import SessionResult, SessionStatus, SubmitOutput, Suggestions
from kernelcast.tools.core.task import Task


class ReportOutput(BaseModel):
    html: str

    def text(self) -> str:
        return f"report written: {self.html} (PNGs beside it)"


def measure_file(task: ops.TaskName, file: Annotated[str | None, Field(description="kernel or candidate .json")] = None,
                 sizes: ops.SizesArg = "full") -> ops.MeasureOutput:
    """/measure TASK [FILE]: measure the reference or a kernel file."""
    t = _task(task)
    return ops.measure_candidate(t, ops.file_candidate(t, file), sizes)


def forecast_file(task: ops.TaskName, file: Annotated[str, Field(description="kernel or candidate .json")],
                  forecaster: ForecasterName = DEFAULT_FORECASTER, model: str | None = None) -> ops.ForecastOutput:
    """/forecast TASK FILE: forecast a kernel file's speedup without measuring it."""
    t = _task(task)
    return ops.forecast_candidate(t, ops.file_candidate(t, file), forecaster, model)


def write_run_report(run_id: str, compare: list[str] | None = None) -> ReportOutput:
    """/report RUN [--compare RUN]: write the run's HTML report with plots."""
    from kernelcast.report import write_report

    with ops.clear_errors():
        return ReportOutput(html=str(write_report(run_id, compare=compare or [])))


# ---- sessions from the chat: SESSION defaults to the most recent unfinished one ---------------------
SessionOpt = Annotated[str | None, Field(description="session id (default: the most recent unfinished session)")]


def current_session(session: str | None) -> str:
    """The session named, or the most recent one still waiting for candidates."""
    if session:
        return session
    if api.has_store():
        with ops.clear_errors(), api.reading_store() as store:
            for run in store.runs(limit=200):
                if RunConfig.of_run(run).generator == EXTERNAL and run.status not in ("finished", "failed"):
                    return run.id
    raise ops.OperationError("no unfinished session: start one with /session start TASK")


def suggest_next(session: SessionOpt = None, count: int = 1) -> Suggestions:
    """/suggest [SESSION] [--count N]: the parents the search wants mutated next."""
    return ops.suggest_parents(current_session(session), count)


def submit_files(files: Annotated[list[str], Field(min_length=1, description="kernel sources or candidate .json")],
                 session: SessionOpt = None, parent: str | None = None,
                 global_size: ops.GlobalSize = None, local_size: ops.LocalSize = None,
                 build_options: ops.BuildOptions = None,
                 on_event: ops.EventCallback | None = None) -> SubmitOutput:
    """/submit FILE... [--session S] [--parent HASH] [--global-size G,..] [--local-size L,..] [--build-options O]:
    submit kernel files as candidates (a kernel source gets the launch geometry given, else the parent's)."""
    from pathlib import Path

    from kernelcast.session import as_submitted
    from kernelcast.tools.core.candidate import Candidate

    with ops.clear_errors():
        items = []
        for name in files:
            path = Path(name)
            if not path.is_file():
                raise ops.OperationError(f"candidate file {name} not found")
            text = path.read_text()
            geometry = {k: v for k, v in (("global_size", global_size), ("local_size", local_size),
                                          ("build_options", build_options)) if v is not None}
            items.append(as_submitted(Candidate.model_validate_json(text)) if path.suffix == ".json" else
                         as_submitted({"source": text, "intent": f"from {path.name}", **geometry}))
    return ops.submit_candidates(current_session(session), items, parent, on_event=on_event)


def show_session(session: SessionOpt = None) -> SessionStatus:
    """/status [SESSION]: where the session stands."""
    return ops.session_status(current_session(session))


def finish_current(session: SessionOpt = None, on_event: ops.EventCallback | None = None) -> SessionResult:
    """/finish [SESSION]: confirm the best, write the report, close the session."""
    return ops.finish_session(current_session(session), on_event=on_event)


def _task(name: str) -> Task:
    with ops.clear_errors():
        return api.as_task(name)


# slash command -> (tool, positional parameter names; a trailing "*" takes all remaining)
COMMANDS: dict[str, tuple[str, list[str]]] = {
    "tasks": ("list_tasks", []),
    "task": ("describe_task", ["task"]),
    "optimize": ("optimize_kernel", ["task"]),
    "measure": ("measure_file", ["task", "file"]),
    "forecast": ("forecast_file", ["task", "file"]),
    "runs": ("list_runs", ["task"]),
    "show": ("get_run", ["run_id"]),
    "compare": ("compare_runs", ["run_ids*"]),
    "report": ("write_run_report", ["run_id"]),
    "session start": ("start_session", ["task"]),
    "suggest": ("suggest_next", ["session"]),
    "submit": ("submit_files", ["files*"]),
    "status": ("show_session", ["session"]),
    "finish": ("finish_current", ["session"]),
}
CHAT_ONLY: dict[str, Callable[..., BaseModel]] = {f.__name__: f for f in (
    measure_file, forecast_file, write_run_report, suggest_next, submit_files, show_session, finish_current)}
REGISTRY: dict[str, Callable[..., BaseModel]] = {**ops.TOOLS, **CHAT_ONLY}
ARGS: dict[str, type[BaseModel]] = {name: ops.args_model(fn) for name, fn in REGISTRY.items()}

HELP = f"""Slash commands (no model needed):
  /tasks                                   list the built-in tasks
  /task NAME                               show one task
  /measure TASK [FILE] [--sizes small]     measure the reference or a kernel file
  /forecast TASK FILE [--forecaster F]     forecast a kernel file's speedup
  /optimize TASK [--budget N] [--router {"|".join(ROUTERS)}] [--sizes small]
            [--forecaster {"|".join(FORECASTERS)}]
            [--generator {"|".join(SELECTABLE_GENERATORS)}] [--seed N]   (asks before spending)
  /runs [TASK] [--limit N]                 recent runs
  /show RUN                                one run
  /compare RUN RUN ...                     runs side by side
  /report RUN [--compare RUN]              write the HTML report with plots
  /session start TASK [--budget N] [--router R] [--risk R] [--sizes small] [--forecaster F]
                                           a session: you write the candidates, kernelcast spends the budget
  /suggest [SESSION] [--count N]           the parents the search wants mutated next
  /submit FILE... [--session S] [--parent HASH] [--global-size G,..] [--local-size L,..] [--build-options O]
                                           submit kernel files (or candidate .json) as children
  /status [SESSION]                        where the session stands
  /finish [SESSION]                        confirm the best, write the report
  /help, /quit
Anything else goes to the model (when one is configured)."""


class CommandError(ValueError):
    """A slash line that cannot be turned into a tool call."""


def parse_command(line: str) -> dict[str, Any] | str:
    """A ``/command`` line -> a validated tool call ``{"tool", "arguments"}``, or text to show (``/help``)."""
    try:
        words = shlex.split(line[1:])
    except ValueError as exc:
        raise CommandError(f"cannot parse {line!r}: {exc}") from None
    if not words or words[0] == "help":
        return HELP
    name, rest = words[0], words[1:]
    if rest and f"{name} {rest[0]}" in COMMANDS:  # two-word commands (/session start)
        name, rest = f"{name} {rest[0]}", rest[1:]
    if name not in COMMANDS:
        raise CommandError(f"unknown command /{name} (type /help)")
    tool, positional_names = COMMANDS[name]
    positionals: list[str] = []
    options: dict[str, Any] = {}
    i = 0
    while i < len(rest):
        word = rest[i]
        if word.startswith("--"):
            key, eq, value = word[2:].partition("=")
            if not eq:
                if i + 1 >= len(rest):
                    raise CommandError(f"option --{key} needs a value")
                i += 1
                value = rest[i]
            key = key.replace("-", "_")
            options[key] = [*options[key], value] if isinstance(options.get(key), list) else (
                [options[key], value] if key in options else value)
        else:
            positionals.append(word)
        i += 1
    arguments: dict[str, Any] = {}
    for pname in positional_names:
        if pname.endswith("*"):
            arguments[pname[:-1]], positionals = positionals, []
        elif positionals:
            arguments[pname] = positionals.pop(0)
    if positionals:
        raise CommandError(f"/{name}: unexpected argument(s) {' '.join(positionals)} (type /help)")
    arguments.update(options)
    return {"tool": tool, "arguments": validate_call(tool, arguments)}


def validate_call(tool: str, arguments: Any, allowed: Collection[str] = tuple(ARGS)) -> dict[str, Any]:
    """Arguments checked against the tool's signature (types, choices, required, no unknown names)."""
    if tool not in allowed:
        raise CommandError(f"there is no tool named {tool!r}; tools: {', '.join(ops.TOOLS)}")
    if isinstance(arguments, str):  # arguments sent as a JSON string
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            pass
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise CommandError(f"{tool}: arguments must be an object, got {type(arguments).__name__}")
    model = ARGS[tool]
    for key, value in list(arguments.items()):  # a single value where a list is expected
        info = model.model_fields.get(key)
        if info is not None and isinstance(value, str) and _is_list(info.annotation):
            arguments[key] = [v for v in value.split(",") if v]
    try:
        return model.model_validate(arguments).model_dump(exclude_unset=True)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}" for e in exc.errors())
        raise CommandError(f"{tool}: {problems}") from None


def _is_list(annotation: Any) -> bool:
    from typing import get_args

    return get_origin(annotation) is list or any(get_origin(a) is list for a in get_args(annotation))
