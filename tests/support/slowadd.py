"""The slow-add task the exploit suites attack: c = a + b through a loop, so a kernel that skips work looks fast."""

from __future__ import annotations

from pathlib import Path

from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.measurement import MeasureConfig
from kernelcast.tools.core.task import Task, load_task

CONFIG = MeasureConfig(sizes="small", max_reps=10, target_seconds=0.02, timeout_s=60)
START = "int i = get_global_id(0);"
SLOW_ADD = """
__kernel void slowadd(__global const float *a, __global const float *b, __global float *c)
{
    int i = get_global_id(0);
    float s = 0.0f;
    for (int k = 0; k < 256; ++k) s += a[i] * (float)(k & 1) + b[i] * (float)((k + 1) & 1);
    c[i] = s / 128.0f;
}
"""


def write_task(folder: Path, source: str, c_intent: str = "out", c_shape: str = "N") -> Task:
    """c = a + b the slow way (a loop), so a kernel that skips work would look much faster."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "slowadd.cl").write_text(source)
    args = "".join(f'[[args]]\nname = "{n}"\ndtype = "float32"\nshape = ["{shape}"]\nintent = "{intent}"\n\n'
                   for n, intent, shape in (("a", "in", "N"), ("b", "in", "N"), ("c", c_intent, c_shape)))
    (folder / "task.toml").write_text(
        'name = "slowadd"\nlanguage = "opencl"\nsource = "slowadd.cl"\nentry = "slowadd"\n\n'
        f'[sizes]\nN = 65536\n\n[small_sizes]\nN = 16384\n\n{args}[launch]\nglobal = ["N"]\n')
    return load_task(folder / "task.toml")


def edit(task: Task, insert: str, prefix: str = "", options: list[str] | None = None) -> Candidate:
    source = prefix + task.source.replace(START, START + "\n    " + insert)
    return task.reference().model_copy(update={"source": source, "build_options": options or []})
