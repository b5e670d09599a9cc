"""Edits: what a generator changed to make a candidate, as data.

A candidate says where it comes from (its :data:`Origin`) and which edits made it: the transformations of a
derived point, the template point chosen, the generic edits (work-group size, build option, unroll pragma) put
on top of a point or a kernel. Models read these (families, the in-task model's edit indicators); the intent a
person reads is rendered from them (:func:`render_intent`) and is never parsed back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

# reference: the task's reference kernel; template: a point of the task's template; derived: a point of a derived
# template (the transformations that apply to a kernel); variant: generic edits of a kernel that is no point;
# written: a kernel someone wrote (a user, an external agent); llm: a kernel an LLM wrote
Origin = Literal["reference", "template", "derived", "variant", "written", "llm"]
Value = int | float | str | None

TEMPLATE_POINT = "template_point"  # the edit naming a template point (its values are the point's parameters)
DERIVED_INTENT = "derived: "  # how a derived point's intent starts: "derived: <its transformations>"
GENERIC_INTENT = "generic: "  # how a variant's intent starts: "generic: <its generic edits>"


class Edit(BaseModel):
    """One change: the transformation's name, its parameter values, and the label it reads as."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str  # e.g. coarsen, unroll, local_tile, work_group, template_point, local_size, build_option
    values: dict[str, Value] = Field(default_factory=dict)
    label: str
    # made on top of a point or a kernel (a work-group size, a build option, an unroll pragma), not part of the
    # point itself (a derived point's transformations, the template point)
    generic: bool = False


def render_intent(origin: Origin, edits: Sequence[Edit], note: str) -> str:
    """The one-line intent shown to people and to LLMs: the point (or the author's note), then " + " and the
    generic edits made on top of it; a variant reads "generic: <edits>"."""
    on_top = "; ".join(e.label for e in edits if e.generic)
    if origin == "variant":
        return GENERIC_INTENT + on_top
    own = "; ".join(e.label for e in edits if not e.generic)
    head = DERIVED_INTENT + own if origin == "derived" else own if origin == "template" else note
    return f"{head or 'parent'} + {on_top}" if on_top else head


__all__ = ["DERIVED_INTENT", "Edit", "GENERIC_INTENT", "Origin", "TEMPLATE_POINT", "Value", "render_intent"]
