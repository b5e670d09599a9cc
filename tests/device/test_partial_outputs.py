"""Kernels that write part of an output (issue 48, item 2): a 3x3 stencil leaves its border alone.

The elements the reference never writes are left out of the comparison; a candidate must leave them
unwritten too. A reference that reads an output before writing it is still a task error.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelcast.tools.core.measurement import Status
from kernelcast.tools.core.task import Task, TaskError, load_task
from kernelcast.tools.hardware.worker import MeasurementWorker

from support.cli import run_cli
from support.slowadd import CONFIG

STENCIL = """
__kernel void blur(__global const float *in, __global float *out, int W, int H)
{
    int x = get_global_id(0), y = get_global_id(1);
    if (x < 1 || y < 1 || x >= W - 1 || y >= H - 1) return;  /* the border is not written */
    float s = 0.0f;
    for (int dy = -1; dy <= 1; ++dy)
        for (int dx = -1; dx <= 1; ++dx)
            s += in[(y + dy) * W + x + dx];
    out[y * W + x] = s / 9.0f;
}
"""


def write_stencil(folder: Path, source: str = STENCIL) -> Task:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "blur.cl").write_text(source)
    (folder / "task.toml").write_text("""name = "blur_interior"
language = "opencl"
source = "blur.cl"
entry = "blur"

[sizes]
W = 512
H = 256

[small_sizes]
W = 64
H = 32

[[args]]
name = "in"
dtype = "float32"
shape = ["W * H"]
intent = "in"

[[args]]
name = "out"
dtype = "float32"
shape = ["W * H"]
intent = "out"

[[args]]
name = "W"
kind = "scalar"
dtype = "int32"
value = "W"

[[args]]
name = "H"
kind = "scalar"
dtype = "int32"
value = "H"

[launch]
global = ["W", "H"]
""")
    return load_task(folder / "task.toml")


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> Task:
    return write_stencil(tmp_path_factory.mktemp("blur"))


def test_a_reference_that_writes_only_the_interior_is_accepted_and_said_so(task: Task, worker: MeasurementWorker
                                                                           ) -> None:
    notes = worker.check_reference(task, "small")
    border = 64 * 32 - 62 * 30
    assert notes == [f"output 'out': the reference never writes {border} of its {64 * 32} elements at small sizes; "
                     "they are left out of the comparison, and a candidate must leave them unwritten too"]
    m = worker.measure(task, task.reference(), CONFIG)
    assert m.status is Status.correct and m.speedup is not None, m.reason


def test_a_candidate_must_leave_the_unwritten_elements_alone(task: Task, worker: MeasurementWorker) -> None:
    writes_border = task.source.replace("if (x < 1 || y < 1 || x >= W - 1 || y >= H - 1) return;",
                                        "if (x < 1 || y < 1 || x >= W - 1 || y >= H - 1) { out[y * W + x] = 0.0f; "
                                        "return; }")
    m = worker.measure(task, task.reference().model_copy(update={"source": writes_border}), CONFIG)
    assert m.status is Status.incorrect and "'out'" in m.reason, m.reason
    skips_interior = task.source.replace("out[y * W + x] = s / 9.0f;", "if (x != 5) out[y * W + x] = s / 9.0f;")
    m = worker.measure(task, task.reference().model_copy(update={"source": skips_interior}), CONFIG)
    assert m.status is Status.incorrect, m.reason  # an element the reference writes is still compared


def test_a_reference_that_reads_its_output_first_is_still_a_task_error(tmp_path: Path, worker: MeasurementWorker
                                                                       ) -> None:
    """Accumulating into a buffer declared out reads the poison: not "unwritten", a task-file mistake."""
    task = write_stencil(tmp_path / "acc", STENCIL.replace("out[y * W + x] = s / 9.0f;",
                                                           "out[y * W + x] += s / 9.0f;"))
    with pytest.raises(TaskError, match="before writing it"):
        worker.check_reference(task, "small")


def test_measure_runs_on_a_partly_written_output(tmp_path: Path) -> None:
    """The command a user ran: it refused the stencil before; now it runs and names the unwritten elements."""
    folder = tmp_path / "blur"
    write_stencil(folder)
    out = run_cli(tmp_path / "home", "measure", str(folder), "--sizes", "small")
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    assert "never writes 188 of its 2048 elements" in text and "Traceback" not in text
