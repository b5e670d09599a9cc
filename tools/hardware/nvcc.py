"""Compile-check CUDA sources with ``nvcc`` where no GPU exists.

A machine without a GPU can still tell a generator whether its CUDA candidate
compiles: ``nvcc`` needs no device. :func:`compile_check` builds a cubin by
default (so ``ptxas`` runs too and rejects what only surfaces at assembly,
e.g. too much static shared memory); ``ptx_only=True`` stops after the
front end, which is faster but misses those errors. The result is the same
verdict the CUDA backend's compiler would give on the device, apart from
architecture differences (pass ``arch`` for the target GPU).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from kernelcast.tools.core.language import CUDA
from kernelcast.tools.hardware.backends.base import trim_log  # one trimming rule for every compiler log

DEFAULT_ARCH = "sm_90"  # H100/H200
DEFAULT_TIMEOUT_S = 120.0


def nvcc_path() -> str | None:
    """The nvcc executable: ``$NVCC``, then ``PATH``, then ``$CUDA_HOME/bin`` or /usr/local/cuda/bin."""
    explicit = os.environ.get("NVCC")
    if explicit and Path(explicit).is_file():
        return explicit
    found = shutil.which("nvcc")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and (Path(root) / "bin" / "nvcc").is_file():
            return str(Path(root) / "bin" / "nvcc")
    return None


def nvcc_available() -> bool:
    """True when an nvcc executable exists (no GPU needed)."""
    return nvcc_path() is not None


def compile_check(source: str, options: list[str] | None = None, arch: str = DEFAULT_ARCH,
                  timeout_s: float = DEFAULT_TIMEOUT_S, ptx_only: bool = False) -> tuple[bool, str]:
    """Compile ``source`` for ``arch``; (ok, trimmed compiler log) with file paths made neutral.

    Never raises for a bad source or a missing/hung compiler: those are (False, reason).
    """
    nvcc = nvcc_path()
    if nvcc is None:
        return False, "nvcc not found (set NVCC or CUDA_HOME, or put nvcc on PATH)"
    with tempfile.TemporaryDirectory(prefix="kc_nvcc_") as tmp:
        src = Path(tmp) / f"kernel{CUDA.suffix}"
        src.write_text(source)
        out = Path(tmp) / ("kernel.ptx" if ptx_only else "kernel.cubin")
        cmd = [nvcc, "--ptx" if ptx_only else "--cubin", f"-arch={arch}", *(options or []), "-o", str(out), str(src)]
        try:
            proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return False, f"nvcc did not finish within {timeout_s:.0f} s"
        except OSError as exc:
            return False, f"could not run nvcc: {exc}"
        log = (proc.stdout + proc.stderr).replace(str(src), src.name).replace(tmp + "/", "")
        ok = proc.returncode == 0 and out.exists()
        if not ok and not log.strip():
            log = f"nvcc exited with status {proc.returncode} and printed nothing"
        return ok, trim_log(log)



def compile_ptx(source: str, options: list[str] | None = None, arch: str = DEFAULT_ARCH,
                timeout_s: float = DEFAULT_TIMEOUT_S) -> tuple[bool, str]:
    """``source`` compiled to PTX for ``arch``: (True, the PTX) or (False, the trimmed compiler log)."""
    nvcc = nvcc_path()
    if nvcc is None:
        return False, "nvcc not found (set NVCC or CUDA_HOME, or put nvcc on PATH)"
    with tempfile.TemporaryDirectory(prefix="kc_nvcc_") as tmp:
        src, out = Path(tmp) / f"kernel{CUDA.suffix}", Path(tmp) / "kernel.ptx"
        src.write_text(source)
        try:
            proc = subprocess.run([nvcc, "--ptx", f"-arch={arch}", *(options or []), "-o", str(out), str(src)],
                                  cwd=tmp, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return False, f"nvcc did not finish within {timeout_s:.0f} s"
        except OSError as exc:
            return False, f"could not run nvcc: {exc}"
        if proc.returncode != 0 or not out.exists():
            return False, trim_log((proc.stdout + proc.stderr).replace(str(src), src.name).replace(tmp + "/", ""))
        return True, out.read_text()
