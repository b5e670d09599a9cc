"""The registries as the Markdown tables in ``docs/architecture.md`` (derived, never written by hand).

``python -m kernelcast.registry_docs`` rewrites the block between the markers; a test fails when the doc
and the registries disagree.
"""

from __future__ import annotations

import sys
from pathlib import Path

from kernelcast.agents.registry import DEFAULT_FORECASTER, DEFAULT_GENERATOR, FORECASTERS, GENERATORS
from kernelcast.graphs.route.routers import DEFAULT_ROUTER, ROUTERS

START, END = "<!-- registries:start (python -m kernelcast.registry_docs) -->", "<!-- registries:end -->"
DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"


def render() -> str:
    def mark(name: str, default: str) -> str:
        return f"`{name}`" + (" (default)" if name == default else "")

    lines = ["| router | children per measurement | verification reserve | trusts forecasts (--risk, audits) | "
             "what it does |", "|---|---|---|---|---|"]
    lines += [f"| {mark(r.name, DEFAULT_ROUTER)} | {r.children_per_measurement} k (opening: {r.opening_per_measurement} k) | "
              f"{r.reserve_share:.0%} of the "
              f"budget | {'yes' if r.certifies_trust else 'no'} | {r.description} |" for r in ROUTERS.values()]
    lines += ["", "| generator | needs a model | chosen with --generator | what it does |", "|---|---|---|---|"]
    lines += [f"| {mark(g.name, DEFAULT_GENERATOR)} | {'yes' if g.needs_model else 'no'} | "
              f"{'yes' if g.selectable else 'no (a session)'} | {g.description} |" for g in GENERATORS.values()]
    lines += ["", "| forecaster | needs a model | what it does |", "|---|---|---|"]
    lines += [f"| {mark(f.name, DEFAULT_FORECASTER)} | {'yes' if f.needs_model else 'no'} | {f.description} |"
              for f in FORECASTERS.values()]
    return "\n".join(lines)


def current_block(text: str) -> str:
    """The generated block of the doc (between the markers), or "" when the markers are missing."""
    if START not in text or END not in text:
        return ""
    return text.split(START, 1)[1].split(END, 1)[0].strip("\n")


def write(doc: Path = DOC) -> bool:
    """Rewrite the block; True when it changed."""
    text = doc.read_text()
    if START not in text or END not in text:
        raise SystemExit(f"{doc}: the markers {START!r} ... {END!r} are missing")
    head, rest = text.split(START, 1)
    tail = rest.split(END, 1)[1]
    new = f"{head}{START}\n{render()}\n{END}{tail}"
    doc.write_text(new)
    return new != text


if __name__ == "__main__":
    print("updated" if write() else "up to date", DOC, file=sys.stderr)
