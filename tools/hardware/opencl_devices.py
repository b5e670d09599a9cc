"""OpenCL devices as the runtime lists them: enumeration, selector matching and each device's spec.

Shared by the OpenCL backend (which opens a device) and the probe (which checks every listed device before
one is trusted). It sits outside the backends package and imports neither, so the probe stays below the
backends and the OpenCL backend asks it for the default device without an import cycle.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from kernelcast.tools.core.errors import DeviceRuntimeError
from kernelcast.tools.core.language import OPENCL
from kernelcast.tools.core.measurement import HardwareSpec
from kernelcast.tools.hardware.runtimes import register as register_runtimes


def pyopencl_module() -> Any:
    """pyopencl, imported once the runtimes kernelcast ships are registered (and its compiler output silenced)."""
    os.environ.setdefault("PYOPENCL_COMPILER_OUTPUT", "0")
    register_runtimes()  # before pyopencl lists platforms for the first time
    import pyopencl as cl

    return cl


def list_devices() -> list[tuple[str, Any, Any]]:
    """Every OpenCL device as ("platform:device" index, platform, device)."""
    cl = pyopencl_module()
    out = []
    try:
        platforms = cl.get_platforms()
    except cl.Error:
        return []
    for pi, platform in enumerate(platforms):
        try:
            devices = platform.get_devices()
        except cl.Error:
            continue
        for di, device in enumerate(devices):
            out.append((f"{pi}:{di}", platform, device))
    return out


def match_device(selector: str, devices: list[tuple[str, str, str]]) -> str:
    """The "platform:device" index that ``selector`` names: an index, a bare device index, or a name substring."""
    sel = selector.removeprefix(f"{OPENCL.backend}:")
    for index, _, _ in devices:
        if sel == index or (sel.isdigit() and index == f"0:{sel}"):
            return index
    for index, platform, name in devices:
        if sel.lower() in name.lower() or sel.lower() in platform.lower():
            return index
    names = ", ".join(f"{i} {n.strip()} ({p.strip()})" for i, p, n in devices)
    raise DeviceRuntimeError(f"no OpenCL device matches {selector!r}; available: {names}")


def device_spec(platform: Any, device: Any, of_units: int | None = None) -> HardwareSpec:
    cl = pyopencl_module()
    dtype = next((name for bit, name in ((cl.device_type.GPU, "GPU"), (cl.device_type.CPU, "CPU"),
                                         (cl.device_type.ACCELERATOR, "ACCELERATOR")) if device.type & bit), "OTHER")

    def get(attr: str, default: Any = 0) -> Any:
        try:
            return getattr(device, attr)
        except (cl.Error, AttributeError):
            return default

    global_cache = int(get("global_mem_cache_size"))
    return HardwareSpec(
        backend=OPENCL.backend,
        platform=platform.name.strip(),
        # a sub-device is another device for performance: its name (and so its key) says which part it is
        name=device.name.strip() + (f" [{int(get('max_compute_units'))} of {of_units} compute units]"
                                    if of_units else ""),
        device_type=dtype,
        vendor=get("vendor", "").strip(),
        driver=get("driver_version", "").strip(),
        compute_units=int(get("max_compute_units")),
        clock_mhz=int(get("max_clock_frequency")),
        global_mem_bytes=int(get("global_mem_size")),
        local_mem_bytes=int(get("local_mem_size")),
        max_work_group_size=int(get("max_work_group_size")),
        max_work_item_sizes=[int(x) for x in get("max_work_item_sizes", [])],
        preferred_vector_width_float=int(get("preferred_vector_width_float")),
        native_vector_width_float=int(get("native_vector_width_float")),
        global_cache_bytes=global_cache,
        global_cacheline_bytes=int(get("global_mem_cacheline_size")),
        last_level_cache_bytes=max(global_cache, host_last_level_cache() if dtype == "CPU" else 0),
        extra={"opencl_version": get("version", "").strip(),
               "local_mem_type": "local" if get("local_mem_type", 1) == 1 else "global (emulated)"},
    )


def host_last_level_cache() -> int:
    """Bytes of the largest cache of CPU 0 (Linux sysfs), or 0 where that cannot be read."""
    best = 0
    for size in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        try:
            text = size.read_text().strip().upper()
        except OSError:
            continue
        unit = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            best = max(best, int(digits) * unit)
    return best
