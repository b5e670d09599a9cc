"""What a trained forecaster model reads and writes: the compact forecast prompt, kernels without comments,
and the answer format "bin | eight percentages".

One module for training data, training and serving, so a model is always asked the question it was
trained on. Comments are stripped from both kernels before any model sees them (training and
evaluation alike): a comment can state the speedup its author hoped for, which leaks the label (the GPU
Forecasters paper found such comments in its evaluation set).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pydantic import BaseModel, Field

from kernelcast.agents.forecast.base import RepairError, parse_bin, repair_probabilities
from kernelcast.agents.llm.prompting import bin_table, clip_source, launch_text, load_prompt
from kernelcast.tools.core.bins import NUM_BINS
from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.measurement import HardwareSpec
from kernelcast.tools.core.preprocess import blank_comments_and_literals
from kernelcast.tools.core.task import Task

DIGITS = tuple(str(b) for b in range(1, NUM_BINS + 1))
MAX_SOURCE_CHARS = 1200  # per kernel: a template point's #defines and the kernel's start fit
MAX_PROMPT_TOKENS = 1024  # longer prompts keep their end (the candidate and the question)
_BLANK_RUNS = re.compile(r"\n[ \t]*(?:\n[ \t]*)+")
_ANSWER = re.compile(r"^\s*([1-8])\s*\|\s*(.*)$", re.S)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def strip_comments(source: str) -> str:
    """``source`` without comments (string literals blanked too, as the compiler's first phases see them: kernels
    have none but printf's), trailing blanks and runs of empty lines."""
    code = blank_comments_and_literals(source)
    lines = [line.rstrip() for line in code.splitlines()]
    return _BLANK_RUNS.sub("\n", "\n".join(lines)).strip("\n")


def forecast_prompt(task: Task, candidate: Candidate, hardware: HardwareSpec,
                    max_source_chars: int = MAX_SOURCE_CHARS) -> str:
    """The compact forecast prompt of a trained model, both kernels without comments."""
    sizes = task.sizes("full")
    reference = task.reference()
    return load_prompt("forecast_compact").substitute(
        language="CUDA" if task.language == "cuda" else "OpenCL",
        bin_table=bin_table(),
        task_name=task.name,
        sizes=", ".join(f"{k} = {v}" for k, v in sizes.items()),
        hardware=hardware.summary().replace("\n", "; "),
        reference_launch=launch_text(reference.global_size, reference.local_size, sizes),
        reference_source=clip_source(strip_comments(task.source), max_source_chars),
        candidate_launch=launch_text(candidate.global_size, candidate.local_size, sizes),
        build_options=" ".join(candidate.build_options) or "(none)",
        params=", ".join(f"{k}={v}" for k, v in (candidate.params or {}).items()) or "(none)",
        intent=candidate.intent or "(not stated)",
        candidate_source=clip_source(strip_comments(candidate.source), max_source_chars),
    )


class PromptSettings(BaseModel, frozen=True):
    """How a trained model's prompt is built and cut. Recorded with every dataset row, the trained folder
    (:class:`kernelcast.agents.train.model.TrainedMeta`) and its export, and read back by the ``local:``
    forecaster and the bench: a model served with other settings reads a question it was never asked (issue 65:
    a dataset built at 200 characters and served at 1,200 doubled the model's ECE)."""

    max_source_chars: int = Field(MAX_SOURCE_CHARS, ge=1, description="per kernel, before the cut mark")
    max_prompt_tokens: int = Field(MAX_PROMPT_TOKENS, ge=16, description="longer prompts keep their last tokens")

    def prompt(self, task: Task, candidate: Candidate, hardware: HardwareSpec) -> str:
        return forecast_prompt(task, candidate, hardware, self.max_source_chars)


def common_settings(settings: list[PromptSettings | None]) -> PromptSettings:
    """The one prompt setting a set of rows was built with; ValueError when they differ or were not recorded."""
    found = set(settings)
    if None in found:
        raise ValueError("rows without recorded prompt settings (a dataset from before they were recorded): "
                         "rebuild it with `kernelcast forecaster dataset`")
    if len(found) != 1:
        raise ValueError(f"rows built with different prompt settings ({len(found)}): train on one dataset")
    return next(iter(found))  # type: ignore[return-value]


@dataclass(frozen=True)
class Answer:
    """A model's answer: the bin it named and its stated distribution (repaired), or why it was unusable."""

    predicted_bin: int | None
    probabilities: list[float] | None
    problem: str = ""

    @property
    def parsed(self) -> bool:
        return self.predicted_bin is not None and self.probabilities is not None


def parse_answer(text: str) -> Answer:
    """Read "5 | 2 5 10 18 30 20 10 5": the bin, then eight probabilities (percentages or fractions, repaired by
    :func:`kernelcast.agents.forecast.base.repair_probabilities`; unsound numbers make the answer unparsed)."""
    match = _ANSWER.match(text)
    if match is None:
        return Answer(None, None, "no bin digit followed by '|'")
    predicted = parse_bin(match.group(1))
    numbers = _NUMBER.findall(match.group(2))[:NUM_BINS]
    try:
        fixed = repair_probabilities([float(n) for n in numbers], None)
    except RepairError as exc:
        return Answer(predicted, None, str(exc))
    return Answer(predicted, [float(p) for p in fixed.probabilities], "; ".join(fixed.notes))
