"""Prompt pieces both LLM agents use: templates from agents/prompts, the bin table, device guides,
launch geometry and work estimates in words. One module, so the generator and the forecaster describe a
kernel and a device the same way."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from string import Template

from kernelcast.agents.bins import NUM_BINS, bin_label
from kernelcast.tools.expr import ExpressionError, evaluate, evaluate_int
from kernelcast.tools.measurement import HardwareSpec
from kernelcast.tools.task import Task

PROMPT_DIR = Path(__file__).parent / "prompts"


@functools.cache
def load_prompt(name: str) -> Template:
    """A template from agents/prompts (``$name`` placeholders, so kernel braces need no escaping)."""
    return Template((PROMPT_DIR / f"{name}.md").read_text())


def bin_table() -> str:
    """The bin table as the model sees it, generated from the one definition in kernelcast.tools.bins."""
    return "\n".join(f"- bin {b}: {bin_label(b)}" for b in range(1, NUM_BINS + 1))


def device_guide(hardware: HardwareSpec) -> str:
    """CPU guide for CPU devices (PoCL and friends), GPU guide otherwise."""
    is_cpu = "CPU" in hardware.device_type.upper() and hardware.backend != "cuda"
    return load_prompt("guide_cpu" if is_cpu else "guide_gpu").template.strip()


def launch_text(global_size: Sequence[str | int], local_size: Sequence[str | int] | None, sizes: dict[str, int]) -> str:
    def show(exprs: Sequence[str | int]) -> str:
        text = ", ".join(str(e) for e in exprs)
        try:
            values = ", ".join(str(evaluate_int(e, sizes)) for e in exprs)
        except (ExpressionError, ZeroDivisionError, ValueError):
            return f"[{text}]"
        return f"[{text}] = ({values})" if text != values else f"({values})"

    local = show(local_size) if local_size else "chosen by the runtime"
    return f"global {show(global_size)}, local {local}"


def work_estimate(task: Task, sizes: dict[str, int]) -> str:
    try:
        flops = float(evaluate(task.spec.flops, sizes)) if task.spec.flops else None
        moved = float(evaluate(task.spec.bytes, sizes)) if task.spec.bytes else None
    except (ExpressionError, ZeroDivisionError):
        return ""
    parts = []
    if flops:
        parts.append(f"{flops / 1e6:.3g} MFLOP")
    if moved:
        parts.append(f"{moved / 1e6:.3g} MB of compulsory memory traffic")
    if flops and moved:
        parts.append(f"arithmetic intensity {flops / moved:.3g} FLOP/byte")
    return ("Work per launch: " + ", ".join(parts) + ".") if parts else ""


def clip_source(source: str, limit: int) -> str:
    return source if len(source) <= limit else source[:limit] + f"\n/* ... {len(source) - limit} more characters */"
