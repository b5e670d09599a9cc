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
from kernelcast.tools.task import Task


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
                  forecaster: ops.ForecasterName = "learned", model: str | None = None) -> ops.ForecastOutput:
    """/forecast TASK FILE: forecast a kernel file's speedup without measuring it."""
    t = _task(task)
    return ops.forecast_candidate(t, ops.file_candidate(t, file), forecaster, model)


def write_run_report(run_id: str, compare: list[str] | None = None) -> ReportOutput:
    """/report RUN [--compare RUN]: write the run's HTML report with plots."""
    from kernelcast.report import write_report

    with ops.clear_errors():
        return ReportOutput(html=str(write_report(run_id, compare=compare or [])))


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
}
CHAT_ONLY: dict[str, Callable[..., BaseModel]] = {f.__name__: f for f in (measure_file, forecast_file,
                                                                         write_run_report)}
REGISTRY: dict[str, Callable[..., BaseModel]] = {**ops.TOOLS, **CHAT_ONLY}
ARGS: dict[str, type[BaseModel]] = {name: ops.args_model(fn) for name, fn in REGISTRY.items()}

HELP = """Slash commands (no model needed):
  /tasks                                   list the built-in tasks
  /task NAME                               show one task
  /measure TASK [FILE] [--sizes small]     measure the reference or a kernel file
  /forecast TASK FILE [--forecaster F]     forecast a kernel file's speedup
  /optimize TASK [--budget N] [--router selective|topk|measure-all] [--threshold T] [--sizes small]
            [--forecaster learned|llm|none] [--generator offline|llm] [--seed N]   (asks before spending)
  /runs [TASK] [--limit N]                 recent runs
  /show RUN                                one run
  /compare RUN RUN ...                     runs side by side
  /report RUN [--compare RUN]              write the HTML report with plots
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
