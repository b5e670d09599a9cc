"""The check every transformation test makes of a kernel it calls valid: the reference's signature, then the
harness's correctness on 3 seeds against the reference (outputs poisoned, guard zones checked)."""

from __future__ import annotations

from kernelcast.tools.core.candidate import Candidate, check_signature
from kernelcast.tools.core.measurement import MeasureConfig, Status
from kernelcast.tools.core.task import Task
from kernelcast.tools.hardware.worker import MeasurementWorker


def assert_correct(worker: MeasurementWorker, task: Task, candidate: Candidate, sizes: str = "small") -> None:
    check_signature(candidate.source, task.source, task.spec.entry, task.language)
    m = worker.measure(task, candidate, MeasureConfig(sizes=sizes, time_kernels=False))  # type: ignore[arg-type]
    assert m.status is Status.correct, f"{candidate.intent}: {m.status.value}: {m.reason}\n{candidate.source}"
