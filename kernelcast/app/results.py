"""What a run tells a door: its events as they happen, its result, and the figures a door prints.

The doors render these (the CLI's live panel and tables, MCP's progress lines, the chat's tool results); the
definitions stay in ``graphs``, where the search writes them.
"""

from __future__ import annotations

from kernelcast.graphs import events
from kernelcast.graphs.events import Spend, logged, parse
from kernelcast.graphs.search.result import (
    RunResult,
    ShownSpeedup,
    interval_text,
    plural,
    ranked,
    run_roofline,
    shown_speedups,
    spend_text,
)
from kernelcast.graphs.search.roofline import RooflineVerdict, Throughput, run_throughput, throughput

__all__ = ["RooflineVerdict", "RunResult", "ShownSpeedup", "Spend", "Throughput", "events", "interval_text",
           "logged", "parse", "plural", "ranked", "run_roofline", "run_throughput", "shown_speedups", "spend_text",
           "throughput"]
