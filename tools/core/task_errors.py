"""A task file's validation errors in plain words: where (the table, the argument by index and name), what is
wrong, and a "did you mean" for a misspelt key, table or value.

Pydantic says ``args.0.buffer.intent: Input should be 'in', 'out' or 'inout'`` and ``Extra inputs are not
permitted``; a user who wrote the file reads ``args[1] 'y': intent must be 'in', 'out' or 'inout' (got 'outt';
did you mean 'out'?)`` and ``unknown table [tolerence] (did you mean [tolerance]?)`` (issue 64, item 8).
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

# what a value of a pydantic error type must be, in words
_MUST_BE = {"int_type": "an integer", "int_parsing": "an integer", "int_from_float": "a whole number",
            "float_type": "a number", "float_parsing": "a number", "finite_number": "a finite number",
            "string_type": "a string", "list_type": "a list", "dict_type": "a table", "model_type": "a table",
            "model_attributes_type": "a table", "bool_type": "true or false", "bool_parsing": "true or false",
            "union_tag_not_found": "a table"}
_PATTERNS = {r"^[A-Za-z0-9_\-]+$": "letters, digits, _ and - only",
             r"^[A-Za-z_][A-Za-z0-9_]*$": "an identifier (letters, digits and _, not starting with a digit)"}


def did_you_mean(word: str, choices: Iterable[str], form: str = "{!r}") -> str:
    """``" (did you mean 'x'?)"`` for the closest of ``choices``, or ``""``."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {form.format(close[0])}?)" if close else ""


def plain_errors(exc: ValidationError, raw: Any, root: type[BaseModel]) -> list[str]:
    """One sentence per error of validating ``raw`` against ``root``; a misspelt key and the missing key it
    stands for are one sentence."""
    errors = [(_locate(err["loc"], raw, root), err) for err in exc.errors()]
    misspelt = {(where.label, suggestion) for where, err in errors if err["type"] == "extra_forbidden"
                for suggestion in [_closest(where.key, where.siblings)] if suggestion}
    out = []
    for where, err in errors:
        if err["type"] == "missing" and (where.label, where.key) in misspelt:
            continue
        sentence = _sentence(where, err)
        if sentence not in out:
            out.append(sentence)
    return out


@dataclass
class _Where:
    label: str  # the table or argument holding the key: "[launch]", "args[0] 'x'", "" at the top level
    key: str  # the key in it ("" for the argument itself)
    siblings: list[str]  # the keys that table accepts
    table: str = ""  # when the key is itself a table (or an array of tables): its own label


def _locate(loc: tuple[int | str, ...], raw: Any, root: type[BaseModel]) -> _Where:
    """Walk ``loc`` through the models (discriminator tags skipped) and the raw data (for argument names)."""
    models: list[type[BaseModel]] | None = [root]  # None: a table of free keys ([sizes])
    path: list[str] = []  # the tables walked, e.g. ["template", "launch"]
    label = parent = ""
    keys: list[str] = []
    node, at_item = raw, False
    for part in loc:
        if isinstance(part, int):
            node = node[part] if isinstance(node, list) and 0 <= part < len(node) else None
            if keys:
                keys[-1] += f"[{part}]"
            elif path == ["args"]:
                name = node.get("name") if isinstance(node, dict) else None
                label, at_item = f"args[{part}]" + (f" {name!r}" if isinstance(name, str) else ""), True
            continue
        fields = _fields(models or [])
        if not keys and models and len(models) > 1 and part not in fields:  # a discriminator's tag
            models = [m for m in models if _tag(m) == part] or models
            continue
        node = node.get(part) if isinstance(node, dict) else None
        if not keys and part in fields and _is_table(fields[part]):
            path.append(part)
            parent, label, at_item = label, "" if part == "args" else f"[{'.'.join(path)}]", False
            models = _models_in(fields[part]) or None
            continue
        keys.append(str(part))
    siblings = list(_fields(models or []))
    if keys:
        return _Where(label, ".".join(keys), siblings)
    if at_item or not path:
        return _Where(label, "", siblings)
    return _Where(parent, path[-1], list(_fields_above(root, path)), label or "[[args]]")


def _fields_above(root: type[BaseModel], path: list[str]) -> dict[str, Any]:
    models = [root]
    for name in path[:-1]:
        models = _models_in(_fields(models).get(name))
    return _fields(models)


def _is_table(annotation: Any) -> bool:
    """A model, a list of models or a dict (a table of free keys such as [sizes]), optional or not."""
    if _models_in(annotation) or typing.get_origin(annotation) is dict:
        return True
    return any(typing.get_origin(arg) is dict for arg in typing.get_args(annotation))


def _fields(models: list[type[BaseModel]]) -> dict[str, Any]:
    """The keys the models accept (their aliases, as the file spells them) and each one's annotation."""
    out: dict[str, Any] = {}
    for model in models:
        for name, info in model.model_fields.items():
            out[info.alias or name] = info.annotation
    return out


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The models inside an annotation (``list[Arg]`` -> the three argument models)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    origin = typing.get_origin(annotation)
    if origin is dict:  # a table of free keys ([sizes], template.params) holds values, not tables
        return []
    args = typing.get_args(annotation) if origin is not None or isinstance(annotation, types.UnionType) else ()
    for arg in args:
        for model in _models_in(arg):
            if model not in found:
                found.append(model)
    return found


def _tag(model: type[BaseModel]) -> str | None:
    kind = model.model_fields.get("kind")
    return kind.default if kind is not None and isinstance(kind.default, str) else None


def _closest(word: str, choices: list[str]) -> str | None:
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return close[0] if close else None


def _shown(value: Any) -> str:
    if isinstance(value, (bool, int, float)) or (isinstance(value, str) and len(value) <= 60):
        return repr(value)
    return type(value).__name__


def _sentence(where: _Where, err: Any) -> str:  # noqa: C901 - one branch per kind of error, each one line
    kind, ctx, value = err["type"], err.get("ctx") or {}, err.get("input")
    prefix = f"{where.label}: " if where.label else ""
    if kind == "extra_forbidden":
        if isinstance(value, (dict, list)) and not where.label:
            return f"unknown table [{where.key}]" + did_you_mean(where.key, where.siblings, "[{}]")
        return f"{prefix}unknown key {where.key!r}" + did_you_mean(where.key, where.siblings)
    if kind == "missing":
        if where.table:
            return f"{prefix}missing table " + ("[[args]] (one per kernel argument)" if where.key == "args"
                                                else where.table)
        return f"{prefix}missing key {where.key!r}"
    if where.table:  # an error about a whole table: said in the table's own name
        prefix, subject = f"{where.table}: ", ""
    else:
        subject = f"{where.key} " if where.key else ""
    got = f"got {_shown(value)}"
    if kind == "literal_error":
        expected = str(ctx.get("expected", ""))
        hint = did_you_mean(value, expected.replace("'", "").replace(" or ", ", ").split(", ")) if isinstance(
            value, str) else ""
        return f"{prefix}{subject}must be {expected} ({got}){hint}"
    if kind == "union_tag_invalid":
        tags, tag = str(ctx.get("expected_tags", "")), str(ctx.get("tag", ""))
        return f"{prefix}kind must be {tags} (got {tag!r})" + did_you_mean(tag, tags.replace("'", "").split(", "))
    if kind == "string_pattern_mismatch":
        words = _PATTERNS.get(str(ctx.get("pattern")), f"the pattern {ctx.get('pattern')}")
        return f"{prefix}{subject}must be {words} ({got})"
    if kind == "too_short":
        least = ctx.get("min_length", 1)
        return f"{prefix}{subject}must have at least {least} entr{'y' if least == 1 else 'ies'}"
    if kind == "too_long":
        return f"{prefix}{subject}may have at most {ctx.get('max_length')} entries ({ctx.get('actual_length')} given)"
    if kind in ("value_error", "assertion_error"):
        message = str(ctx.get("error") or err["msg"]).removeprefix("Value error, ")
        return f"{prefix}{subject.strip() + ': ' if subject else ''}{message}"
    if kind in _MUST_BE:
        return f"{prefix}{subject}must be {_MUST_BE[kind]} ({got})"
    return f"{prefix}{subject}{err['msg'][:1].lower()}{err['msg'][1:]}"
