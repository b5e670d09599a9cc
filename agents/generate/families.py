"""Transformation families: which kind of change a candidate makes to its task's kernel.

A search on a kernel nobody here wrote knows nothing of how each kind of change fares on it; a forecaster
fitted elsewhere may be confidently wrong about one kind as a whole (on a row-per-work-item matrix-vector
kernel the prior put every coarsened point at a severe slowdown, and coarsening measured 7-11x). The family
is the unit of that ignorance: the router measures one representative of each family before it trusts any
forecast about the family, and the forecaster widens its belief about a family in proportion to how little
it has seen of it (``agents.blended_forecaster``).

Read from the candidate's typed parameters, never from its intent text: a derived point's parameters name
its transformations (``agents.generate.derived_space``, which the
transformation registry feeds), a template point carries the template's parameters, and a
kernel without parameters is written (a user's, an LLM's, a generic variant of a parent).
"""

from __future__ import annotations

from kernelcast.agents.generate.transforms.registry import point_family
from kernelcast.tools.core.candidate import DERIVED_BASE, Candidate

TEMPLATE = "template"  # a point of the task's own template
WRITTEN = "written"  # a kernel without parameters: the reference, a user's or an LLM's, a generic variant
BASE = "derived base"  # a derived point that changes nothing structural (its work-group or build options only)


def transformation_family(candidate: Candidate) -> str:
    """The family a candidate's change belongs to (see the module docstring): for a derived point, its most
    structural transformation (``FAMILY_ORDER`` in :mod:`kernelcast.agents.generate.transforms.registry`:
    coarsening, with its mapping, before row reduction, local tiling, scalar replacement, unroll, restrict and
    the work-group shape)."""
    params = candidate.params
    if not params:
        return WRITTEN
    if DERIVED_BASE not in params:
        return TEMPLATE
    return point_family(params) or BASE
