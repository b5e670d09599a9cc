"""Register the CPU OpenCL runtimes kernelcast installs, in-process, before the first OpenCL call.

The OpenCL ICD loader finds runtimes through ``.icd`` files in a vendors folder
(``OCL_ICD_VENDORS``, else ``/etc/OpenCL/vendors``). PoCL's wheel is found by
pyopencl's own loader; Intel's CPU runtime from PyPI ships an ``.icd`` that
points at its build machine, so it is invisible until registered. Doing that
here, in Python, means the CLI, the API, an MCP server started by any client
(with a minimal environment) and worker processes all see the same devices,
with no shell variables, no apt and no root.

The folder we point the loader at also links every ``.icd`` of the folder it
would have used, so a system GPU driver stays visible.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from importlib import metadata
from pathlib import Path

from kernelcast.tools.core.settings import get_settings

VENDORS_ENV = "OCL_ICD_VENDORS"
SYSTEM_VENDORS = Path("/etc/OpenCL/vendors")
_registered: list[Path] | None = None


def intel_cpu_library() -> Path | None:
    """``libintelocl.so`` of the installed ``intel-opencl-rt`` distribution, if any."""
    try:
        dist = metadata.distribution("intel-opencl-rt")
    except metadata.PackageNotFoundError:
        return None
    for file in dist.files or []:
        if file.name == "libintelocl.so":
            path = Path(str(dist.locate_file(file))).resolve()
            if path.exists():
                return path
    candidate = Path(sys.prefix) / "lib" / "libintelocl.so"  # the wheel's data scheme on a venv
    return candidate if candidate.exists() else None


def _vendor_folder(libraries: list[Path], inherited: Path | None) -> Path:
    """A folder of .icd files: ours plus links to the inherited ones; named by its content, so stable."""
    digest = hashlib.sha256("\n".join([*map(str, libraries), str(inherited)]).encode()).hexdigest()[:12]
    for base in _cache_roots():
        folder = base / f"opencl-vendors-{digest}"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            for lib in libraries:
                icd = folder / f"kernelcast-{lib.stem}.icd"
                if not icd.exists() or icd.read_text().strip() != str(lib):
                    tmp = folder / f".{icd.name}.{os.getpid()}"
                    tmp.write_text(f"{lib}\n")
                    tmp.replace(icd)  # atomic: concurrent processes never see a half-written file
            if inherited is not None and inherited.is_dir():
                for icd in inherited.glob("*.icd"):
                    link = folder / f"system-{icd.name}"
                    if not link.exists():
                        try:
                            link.symlink_to(icd)
                        except FileExistsError:
                            pass
            return folder
        except OSError:
            continue
    raise OSError("no writable folder for the OpenCL vendor registry (cache and temp folders are read-only)")


def _cache_roots() -> list[Path]:
    from platformdirs import user_cache_dir

    return [Path(user_cache_dir("kernelcast")), Path(tempfile.gettempdir()) / f"kernelcast-{os.getuid()}"]


def register() -> list[Path]:
    """Point the ICD loader at a vendors folder that includes the runtimes we install. Idempotent.

    Returns the libraries registered (empty where none is installed, e.g. on aarch64 or macOS, where PoCL
    alone is the default CPU runtime).
    """
    global _registered
    if _registered is not None:
        return _registered
    libraries = [lib for lib in (intel_cpu_library(),) if lib is not None]
    if libraries and not get_settings().no_runtime_registration:
        current = os.environ.get(VENDORS_ENV)
        inherited = Path(current) if current else (SYSTEM_VENDORS if SYSTEM_VENDORS.is_dir() else None)
        if inherited is None or not _already_listed(inherited, libraries):
            os.environ[VENDORS_ENV] = str(_vendor_folder(libraries, inherited))
    _registered = libraries
    return libraries


def _already_listed(folder: Path, libraries: list[Path]) -> bool:
    """True when ``folder`` already registers every library (e.g. our own folder, inherited by a worker)."""
    if not folder.is_dir():
        return False
    listed = set()
    for icd in folder.glob("*.icd"):
        try:
            listed.add(icd.read_text().strip())
        except OSError:
            continue
    return all(str(lib) in listed for lib in libraries)
