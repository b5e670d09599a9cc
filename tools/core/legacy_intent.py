"""Old candidates' intent strings read once into an origin and edits.

Candidates stored before edits were data (store schema v4 and older, the shipped seed pairs, candidate JSON
files written by ``kernelcast propose``) carry only their intent text. This module is the one place that reads
such text: the store's v5 migration and :class:`~kernelcast.tools.core.candidate.Candidate`'s loader of old
serialized candidates call it; nothing else parses intents. What it returns renders back to the same text
(:func:`~kernelcast.tools.core.edit.render_intent`), so prompts, listings and reports read as before, and gives
the family and edit indicators the forecaster computed from the text, so stored runs replay to the same decisions.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kernelcast.tools.core.edit import DERIVED_INTENT, GENERIC_INTENT, TEMPLATE_POINT, Edit, Origin, Value

# the generated intents' grammar: a point, " + ", the generic edits joined by "; "; a transformation's label may
# itself hold " + " ("coarsen x4 y1 cyclic + jam", "unroll j x4 + remainder")
_LABEL_TAILS = ("jam", "remainder")
_TEMPLATE_HEADS = ("template design point", "template neighbour:", "random template point", "template point",
                   "template default point", "dataset template point")
_GENERIC = ("work-group (", "build option ", "#pragma unroll")  # how each generic edit's label starts
_GENERIC_START = re.compile("; (?=" + "|".join(re.escape(p) for p in _GENERIC) + ")")
_PRAGMA = re.compile(r"#pragma unroll(?: (?P<factor>\d+))? on '(?P<header>.*)'$", re.S)


@dataclass(frozen=True)
class _OldLabel:
    """How a derived transformation's label began in old intent text, and the values it spelled out."""

    name: str  # the transformation's name (its Edit's), as the registry in agents/generate/transforms names it
    prefixes: tuple[str, ...]
    values: Callable[[str], dict[str, Value]] = lambda label: {}


def _matched(pattern: str, convert: Callable[[re.Match[str]], dict[str, Value]]) -> Callable[[str], dict[str, Value]]:
    compiled = re.compile(pattern)
    return lambda label: convert(m) if (m := compiled.match(label)) else {}


# the old derived labels (the text of store v4 and older is frozen: a transformation added since has none); the
# one place these names are data on the tools side, which may not import the agents' registry
_SCALAR_REPLACE = _OldLabel("scalar_replace", ("scalar-replace ",), lambda label: {"accesses": 1})
OLD_LABELS = (
    _SCALAR_REPLACE,
    _OldLabel("restrict", ("restrict on ", "const on ")),
    _OldLabel("coarsen", ("coarsen x",), _matched(r"coarsen x(?P<x>\d+) y(?P<y>\d+) (?P<mapping>\w+)",
                                                  lambda m: {"x": int(m["x"]), "y": int(m["y"]), "mapping": m["mapping"]})),
    _OldLabel("local_tile", ("local-tile ",), _matched(r"local-tile (?P<tile>\d+)x", lambda m: {"tile": int(m["tile"])})),
    _OldLabel("unroll", ("unroll ",), _matched(r"unroll .* x(?P<factor>\d+) \+ remainder",
                                               lambda m: {"factor": int(m["factor"])})),
    _OldLabel("work_group", ("work-group (",),
              lambda label: {"shape": label[len("work-group ("):-1].replace(", ", ",")} if label.endswith(")") else {}),
)
_DERIVED = {prefix: old for old in OLD_LABELS for prefix in old.prefixes}


def parse_legacy_intent(intent: str, params: dict[str, Any] | None, generator: str | None) -> dict[str, Any]:
    """``origin``, ``edits`` and ``note`` of an old candidate from its intent text, its params and generator."""
    if intent.startswith(GENERIC_INTENT):
        tail = _generic_edits(intent.removeprefix(GENERIC_INTENT))
        if tail is not None:
            return _fields("variant", tail)
    if intent.startswith(DERIVED_INTENT):
        body = intent.removeprefix(DERIVED_INTENT)
        head, tail = _split_tail(body)
        return _fields("derived", _derived_edits(head) + tail)
    head, tail = _split_tail(intent)
    if head.startswith(_TEMPLATE_HEADS):
        point = {k: v for k, v in (params or {}).items() if isinstance(v, (int, float, str))}
        return _fields("template", [Edit(name=TEMPLATE_POINT, values=point, label=head), *tail])
    origin: Origin = ("reference" if generator == "reference" else "llm" if (generator or "").startswith("llm")
                      else "written")
    return _fields(origin, tail, head)


def _fields(origin: Origin, edits: list[Edit], note: str = "") -> dict[str, Any]:
    return {"origin": origin, "edits": edits, "note": note}


def _split_tail(text: str) -> tuple[str, list[Edit]]:
    """(the point's text, the generic edits after its " + ") where the text after it reads as generic edits;
    else (the whole text, none)."""
    parts: list[str] = []
    for part in text.split(" + "):
        if parts and part.startswith(_LABEL_TAILS):
            parts[-1] += f" + {part}"
        else:
            parts.append(part)
    if len(parts) > 1:
        tail = _generic_edits(" + ".join(parts[1:]))
        if tail is not None:
            return parts[0], tail
    return text, []


def _generic_edits(text: str) -> list[Edit] | None:
    """The generic edits of ``text`` ("work-group (64); build option -cl-mad-enable"), or None when a part of it
    is no generic edit's label (an unroll pragma's loop header may hold "; ")."""
    edits = []
    for label in _GENERIC_START.split(text):
        edit = _generic_edit(label)
        if edit is None:
            return None
        edits.append(edit)
    return edits


def _generic_edit(label: str) -> Edit | None:
    values: dict[str, Value]
    if label.startswith("work-group (") and label.endswith(")"):
        name, values = "local_size", {"shape": label[len("work-group ("):-1].replace(", ", ",")}
    elif label.startswith("build option ") and len(label) > len("build option "):
        name, values = "build_option", {"option": label.removeprefix("build option ")}
    elif match := _PRAGMA.match(label):
        name = "unroll_pragma"
        values = {"factor": int(match["factor"]) if match["factor"] else None, "header": match["header"]}
    else:
        return None
    return Edit(name=name, values=values, label=label, generic=True)


def _derived_edits(text: str) -> list[Edit]:
    """A derived point's transformations from its "; "-joined labels; a part no transformation starts (more of
    the previous label, as scalar replacement's "; "-joined accesses) stays with the label before it."""
    edits: list[Edit] = []
    for part in text.split("; ") if text else []:
        old = next((o for prefix, o in _DERIVED.items() if part.startswith(prefix)), None)
        if edits and (old is None or old is _SCALAR_REPLACE and edits[-1].name == _SCALAR_REPLACE.name):
            last = edits[-1]
            values = {**last.values, "accesses": int(last.values.get("accesses") or 0) + 1} \
                if old is _SCALAR_REPLACE else last.values
            edits[-1] = last.model_copy(update={"label": f"{last.label}; {part}", "values": values})
            continue
        edits.append(Edit(name=old.name if old else "unknown", values=old.values(part) if old else {}, label=part))
    return edits


__all__ = ["OLD_LABELS", "parse_legacy_intent"]
