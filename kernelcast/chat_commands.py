"""Slash commands of the chat: parsed into validated tool calls, with no model involved.

The commands, their help and the tools they call come from :mod:`kernelcast.tools_registry`. The chat session
(:mod:`kernelcast.chat`) and the model's protocol (:mod:`kernelcast.chat_protocol`) build on this.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Collection
from typing import Any, get_origin

from pydantic import BaseModel, ValidationError

from kernelcast.tools.core.errors import InputError
from kernelcast.tools_registry import SPECS, TOOLS, help_text

REGISTRY: dict[str, Callable[..., BaseModel]] = {spec.name: spec.fn for spec in SPECS}
ARGS: dict[str, type[BaseModel]] = {spec.name: spec.args for spec in SPECS}
COMMANDS: dict[str, tuple[str, tuple[str, ...]]] = {spec.slash: (spec.name, spec.positional) for spec in SPECS
                                                    if spec.slash}
HELP = help_text()


class CommandError(InputError, ValueError):
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
        raise CommandError(f"there is no tool named {tool!r}; tools: {', '.join(TOOLS)}")
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
