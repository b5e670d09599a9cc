"""Prompt pieces both LLM agents use: templates from agents/llm/prompts, the bin table, device guides,
launch geometry and work estimates in words. One module, so the generator and the forecaster describe a
kernel and a device the same way."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from string import Template

from kernelcast.agents.generate.base import Tried
from kernelcast.agents.generate.derived_space import DerivedSpace
from kernelcast.agents.generate.kernel_ast import KernelParseError
from kernelcast.agents.generate.offline import DEFAULT_MAX_WG
from kernelcast.agents.generate.transforms import NotApplicable
from kernelcast.tools.core.bins import NUM_BINS, bin_label
from kernelcast.tools.core.edit import DERIVED_INTENT
from kernelcast.tools.core.expr import ExpressionError, evaluate, evaluate_int
from kernelcast.tools.core.measurement import HardwareSpec
from kernelcast.tools.core.task import Task

PROMPT_DIR = Path(__file__).parent / "prompts"


@functools.cache
def load_prompt(name: str) -> Template:
    """A template from agents/llm/prompts (``$name`` placeholders, so kernel braces need no escaping)."""
    return Template((PROMPT_DIR / f"{name}.md").read_text())


def bin_table() -> str:
    """The bin table as the model sees it, generated from the one definition in kernelcast.tools.core.bins."""
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


# ---- one picture for both generators: the derived template and what was tried ---------------------------
MAX_TRIED_LINES = 12
MAX_TRIED_INTENT_CHARS = 100  # a jammed kernel's intent lists every transformation; the prompt keeps its start
MAX_SPACE_VALUES = 6


def derived_space_text(task: Task, max_wg: int | None) -> str:
    """The derived template of the task's reference (the transformations whose preconditions hold, with
    their values, and why the others do not apply): the space the offline generator explores. Without a
    device limit, the offline generator's default limit."""
    space = _derived_space(task, max_wg or DEFAULT_MAX_WG)
    if isinstance(space, str):
        return f"(no derived template: {space})"
    if not space.params:
        return "(no transformation applies to the reference)\n" + space.describe(MAX_SPACE_VALUES)
    return space.describe(MAX_SPACE_VALUES)


_SPACES: dict[tuple[str, str, int], DerivedSpace | str] = {}


def _derived_space(task: Task, max_wg: int) -> DerivedSpace | str:
    """The reference's DerivedSpace, built once per (task, reference, device limit); or why it cannot be built."""
    reference = task.reference()
    key = (task.name, reference.hash, max_wg)
    if key not in _SPACES:
        try:
            _SPACES[key] = DerivedSpace(task, reference, max_wg)
        except (NotApplicable, KernelParseError) as exc:
            _SPACES[key] = str(exc)
    return _SPACES[key]


def tried_text(tried: Sequence[Tried], limit: int = MAX_TRIED_LINES) -> str:
    """What was measured so far, compactly: the fastest correct kernels with their speedups, then the
    failures by status with one example intent each, then how many more are not shown."""
    if not tried:
        return "(nothing measured yet)"
    correct = sorted((t for t in tried if t.speedup is not None), key=lambda t: -(t.speedup or 0.0))
    failed: dict[str, list[Tried]] = {}
    for t in tried:
        if t.speedup is None:
            failed.setdefault(t.status, []).append(t)
    lines = [f"- {t.speedup:.3g}x: {_short(t.intent)}" for t in correct[: max(1, limit - len(failed))]]
    lines += [f"- {len(group)} {status}, e.g.: {_short(group[0].intent)}" for status, group in failed.items()]
    shown = min(len(correct), max(1, limit - len(failed))) + sum(len(g) for g in failed.values())
    if shown < len(tried):
        lines.append(f"- ... and {len(tried) - shown} slower correct kernel(s)")
    return f"{len(tried)} kernel(s) measured ({len(correct)} correct):\n" + "\n".join(lines)


def _short(intent: str) -> str:
    intent = intent.removeprefix(DERIVED_INTENT)
    return intent if len(intent) <= MAX_TRIED_INTENT_CHARS else intent[: MAX_TRIED_INTENT_CHARS - 3] + "..."
