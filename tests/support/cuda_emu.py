"""Run a CUDA candidate on the CPU through ``cuda_emu.h`` (tests on machines without a GPU).

The host side mirrors the harness: the same seeded inputs (:func:`kernelcast.tools.hardware.harness.make_inputs`),
outputs poisoned, guard zones of GUARD_BYTES filled with GUARD_BYTE around every buffer, the
launch geometry resolved as the CUDA backend does (``global`` = total threads, grid =
global / local), and every buffer read back so read-only inputs and guards can be checked.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.task import BufferArg, ScalarArg, Task
from kernelcast.tools.hardware.backends.base import GUARD_BYTE, GUARD_BYTES
from kernelcast.tools.hardware.backends.cuda import ensure_c_linkage, launch_dims
from kernelcast.tools.hardware.harness import buffer_count, poison, resolve_geometry, scalar_values

HEADER = Path(__file__).with_name("cuda_emu.h")
_CTYPES = {"float32": "float", "float64": "double", "int32": "int", "uint32": "unsigned", "int64": "long long",
           "uint8": "unsigned char", "int8": "signed char"}


class EmulationError(RuntimeError):
    """The candidate did not compile with g++ or failed while running on the emulator."""


def gxx_available() -> bool:
    return shutil.which("g++") is not None


def _driver(task: Task, candidate: Candidate, sizes: dict[str, int]) -> str:
    """main() for one launch: load buffers with guards, run, save user regions, report guards."""
    scalars = scalar_values(task, sizes)
    glob, loc = resolve_geometry(candidate, sizes, 1024)
    block, grid = launch_dims(glob, loc)
    lines = ["int main(int argc, char** argv) {", "    const char* dir = argv[1];"]
    call = []
    for i, arg in enumerate(task.spec.args):
        if isinstance(arg, ScalarArg):
            value = scalars[arg.name]
            literal = repr(float(value)) if np.issubdtype(value.dtype, np.floating) else str(int(value))
            call.append(f"({_CTYPES[arg.dtype]})({literal})")
            continue
        nbytes = buffer_count(arg, sizes) * np.dtype(arg.dtype).itemsize
        lines.append(f"    unsigned char* b{i} = load(dir, \"{arg.name}\", {nbytes}ul);")
        call.append(f"emu::AnyPtr{{b{i} + {GUARD_BYTES}}}")
    lines.append(f"    emu::launch(dim3({grid[0]}, {grid[1]}, {grid[2]}), dim3({block[0]}, {block[1]}, {block[2]}), "
                 f"[&] {{ {task.spec.entry}({', '.join(call)}); }});")
    for i, arg in enumerate(task.spec.args):
        if isinstance(arg, BufferArg):
            nbytes = buffer_count(arg, sizes) * np.dtype(arg.dtype).itemsize
            lines.append(f"    save(dir, \"{arg.name}\", b{i}, {nbytes}ul);")
    lines += ["    return 0;", "}"]
    return "\n".join(lines)


_HOST = f"""
#include <string>
static unsigned char* load(const char* dir, const char* name, size_t n) {{
    unsigned char* b = static_cast<unsigned char*>(std::aligned_alloc(256, n + 2 * {GUARD_BYTES} + 256));
    std::memset(b, {GUARD_BYTE}, n + 2 * {GUARD_BYTES});
    FILE* f = std::fopen((std::string(dir) + "/" + name + ".in").c_str(), "rb");
    if (!f || std::fread(b + {GUARD_BYTES}, 1, n, f) != n) {{ std::fprintf(stderr, "cannot read %s\\n", name); std::exit(5); }}
    std::fclose(f);
    return b;
}}
static void save(const char* dir, const char* name, unsigned char* b, size_t n) {{
    FILE* f = std::fopen((std::string(dir) + "/" + name + ".out").c_str(), "wb");
    std::fwrite(b, 1, n + 2 * {GUARD_BYTES}, f);
    std::fclose(f);
}}
"""


def run_emulated(task: Task, candidate: Candidate, sizes: dict[str, int], inputs: dict[str, np.ndarray],
                 timeout_s: float = 120.0) -> tuple[dict[str, np.ndarray], list[str]]:
    """(outputs by name, problems) like :func:`kernelcast.tools.hardware.harness.run_once`; raises EmulationError on failure."""
    source = ensure_c_linkage(candidate.source, task.spec.entry)
    program = f'#include "{HEADER}"\n#line 1 "kernel.cu"\n{source}\n#line 1 "host.cpp"\n{_HOST}\n' + \
        _driver(task, candidate, sizes) + "\n"
    with tempfile.TemporaryDirectory(prefix="kc_emu_") as tmp:
        src, exe = Path(tmp) / "main.cpp", Path(tmp) / "main"
        src.write_text(program)
        proc = subprocess.run(["g++", "-std=c++20", "-O2", "-w", "-o", str(exe), str(src)], capture_output=True,
                              text=True, timeout=timeout_s)
        if proc.returncode != 0:
            raise EmulationError("g++ rejected the kernel:\n" + proc.stderr[-3000:])
        for arg in task.spec.args:
            if isinstance(arg, BufferArg):
                dtype, count = np.dtype(arg.dtype), buffer_count(arg, sizes)
                data = inputs[arg.name] if arg.direction != "out" else poison(dtype, count)
                (Path(tmp) / f"{arg.name}.in").write_bytes(np.ascontiguousarray(data, dtype=dtype).tobytes())
        run = subprocess.run([str(exe), tmp], capture_output=True, text=True, timeout=timeout_s)
        if run.returncode != 0:
            raise EmulationError(f"the emulated kernel failed (exit {run.returncode}): {run.stderr[-2000:]}")
        outputs: dict[str, np.ndarray] = {}
        problems: list[str] = []
        for arg in task.spec.args:
            if not isinstance(arg, BufferArg):
                continue
            raw = np.frombuffer((Path(tmp) / f"{arg.name}.out").read_bytes(), dtype=np.uint8)
            guards = np.concatenate([raw[:GUARD_BYTES], raw[len(raw) - GUARD_BYTES:]])
            if not (guards == GUARD_BYTE).all():
                problems.append(f"out-of-bounds write: the guard zone around buffer {arg.name!r} was overwritten")
            data = raw[GUARD_BYTES: len(raw) - GUARD_BYTES].view(np.dtype(arg.dtype)).copy()
            if arg.direction == "in":
                if not np.array_equal(data, inputs[arg.name], equal_nan=True):
                    problems.append(f"read-only input {arg.name!r} was modified by the kernel")
            else:
                outputs[arg.name] = data
        return outputs, problems
