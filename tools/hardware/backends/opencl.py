"""OpenCL backend through pyopencl; the default install brings CPU runtimes (Intel's, PoCL), so any CPU is a device."""

from __future__ import annotations

import hashlib
import os
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from kernelcast.tools.core.language import OPENCL
from kernelcast.tools.core.lru import LRUCache
from kernelcast.tools.core.measurement import HardwareSpec
from kernelcast.tools.hardware.backends.base import (
    GUARD_BYTE,
    GUARD_BYTES,
    KEPT_BUILDS,
    CompileError,
    DeviceRuntimeError,
    Runner,
    trim_log,
)
from kernelcast.tools.hardware.runtimes import register as register_runtimes


def _cl():
    os.environ.setdefault("PYOPENCL_COMPILER_OUTPUT", "0")
    register_runtimes()  # before pyopencl lists platforms for the first time
    import pyopencl as cl

    return cl


def list_devices() -> list[tuple[str, Any, Any]]:
    """Every OpenCL device as ("platform:device" index, platform, device)."""
    cl = _cl()
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


def split_selector(selector: str | None) -> tuple[str | None, int | None]:
    """``"intel@1"`` names Intel's CPU device restricted to 1 compute unit (a sub-device): the rest of the
    CPU is left to the host, so the harness's own thread and other processes do not steal time from timed
    launches. Returns the device part and the compute units (None: the whole device)."""
    if selector is None or "@" not in selector:
        return selector, None
    base, _, units = selector.rpartition("@")
    if not units.isdigit() or int(units) < 1:
        raise DeviceRuntimeError(f"device {selector!r}: after '@' give the compute units to use (e.g. 'intel@1')")
    return base or None, int(units)


def restrict_compute_units(device: Any, units: int) -> Any:
    """A sub-device of ``device`` with ``units`` compute units (OpenCL device fission, partitioned equally)."""
    cl = _cl()
    total = int(device.max_compute_units)
    if units >= total:
        raise DeviceRuntimeError(f"device {device.name.strip()} has {total} compute units; '@{units}' leaves the "
                                 f"host none (use at most {total - 1})")
    try:
        if cl.device_partition_property.EQUALLY not in (device.partition_properties or []):
            raise DeviceRuntimeError(f"device {device.name.strip()} cannot be partitioned into sub-devices")
        return device.create_sub_devices([cl.device_partition_property.EQUALLY, units])[0]
    except cl.Error as exc:
        raise DeviceRuntimeError(f"device {device.name.strip()}: partitioning into {units} compute units failed "
                                 f"({exc})") from None


def select_device(selector: str | None) -> tuple[Any, Any]:
    """The device ``selector`` names; by default the first healthy one (see :mod:`kernelcast.tools.hardware.probe`)."""
    devices = list_devices()
    if not devices:
        raise DeviceRuntimeError("no OpenCL device found (is pyopencl with a CPU runtime installed?)")
    if selector in (None, "", OPENCL.backend):
        from kernelcast.tools.hardware.probe import choose_device

        selector = choose_device(None).index
    index = match_device(str(selector), [(i, p.name, d.name) for i, p, d in devices])
    return next((p, d) for i, p, d in devices if i == index)


def device_spec(platform: Any, device: Any, of_units: int | None = None) -> HardwareSpec:
    cl = _cl()
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


# reads its scratch and writes one word per work-item, so the compiler cannot drop the reads
_FLUSH_SOURCE = """
__kernel void kernelcast_flush(__global const float4 *scratch, __global float4 *sink, const uint words) {
    float4 acc = (float4)(0.0f);
    for (uint i = get_global_id(0); i < words; i += get_global_size(0)) acc += scratch[i];
    sink[get_global_id(0)] = acc;
}
"""
_FLUSH_ITEMS = 4096


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


class _Buf:
    __slots__ = ("parent", "sub", "nbytes")

    def __init__(self, parent: Any, sub: Any, nbytes: int) -> None:
        self.parent, self.sub, self.nbytes = parent, sub, nbytes


class OpenCLRunner(Runner):
    backend = OPENCL.backend

    def __init__(self, device: str | None = None, kept_builds: int = KEPT_BUILDS) -> None:
        cl = self.cl = _cl()
        selector, units = split_selector(device)
        self.platform, self.device = select_device(selector)
        whole = int(self.device.max_compute_units)
        if units is not None:
            self.device = restrict_compute_units(self.device, units)
        self.context = cl.Context([self.device])
        self.queue = cl.CommandQueue(self.context, properties=cl.command_queue_properties.PROFILING_ENABLE)
        self.spec = device_spec(self.platform, self.device, whole if units is not None else None)
        self._kernels: LRUCache[Any] = LRUCache(kept_builds)
        self._flush: tuple[Any, Any, Any] | None = None
        self._cache_bytes: int | None = None
        align = max(1, int(getattr(self.device, "mem_base_addr_align", 1024)) // 8)
        self.guard = ((GUARD_BYTES + align - 1) // align) * align

    def hardware_spec(self) -> HardwareSpec:
        return self.spec

    def build(self, source: str, entry: str, options: list[str], fresh: bool = False) -> tuple[Any, bool, float]:
        key = (self.spec.key, hashlib.sha256(source.encode()).hexdigest(), tuple(options), entry)
        if not fresh and (cached := self._kernels.get(key)) is not None:
            return cached, True, 0.0
        start = time.perf_counter()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                program = self.cl.Program(self.context, source).build(options=list(options))
        except self.cl.Error as exc:
            raise CompileError(trim_log(str(exc))) from None
        try:
            kernel = self.cl.Kernel(program, entry)
        except self.cl.Error as exc:
            raise CompileError(f"kernel {entry!r} not found in the compiled program: {trim_log(str(exc))}") from None
        if not fresh:
            self._kernels.put(key, kernel)
        return kernel, False, (time.perf_counter() - start) * 1e3

    def alloc(self, nbytes: int) -> _Buf:
        cl = self.cl
        nbytes = max(int(nbytes), 1)
        parent = cl.Buffer(self.context, cl.mem_flags.READ_WRITE, size=nbytes + 2 * self.guard)
        sub = parent.get_sub_region(self.guard, nbytes)
        return _Buf(parent, sub, nbytes)

    def local_memory(self, nbytes: int) -> Any:
        return self.cl.LocalMemory(max(int(nbytes), 1))

    def upload(self, buf: _Buf, array: np.ndarray) -> None:
        data = np.ascontiguousarray(array)
        if data.nbytes != buf.nbytes:
            raise ValueError(f"array of {array.nbytes} bytes does not fit a buffer of {buf.nbytes} bytes")
        guard = np.full(self.guard, GUARD_BYTE, dtype=np.uint8)
        self.cl.enqueue_copy(self.queue, buf.parent, guard, dst_offset=0)
        if data.nbytes:
            self.cl.enqueue_copy(self.queue, buf.parent, data, dst_offset=self.guard)
        self.cl.enqueue_copy(self.queue, buf.parent, guard, dst_offset=self.guard + buf.nbytes)
        self.queue.finish()

    def copy(self, dst: _Buf, src: _Buf, array: np.ndarray) -> None:
        """Device-to-device restore of an inout buffer from its pristine copy."""
        self.cl.enqueue_copy(self.queue, dst.sub, src.sub, byte_count=dst.nbytes)

    def download(self, buf: _Buf, dtype: np.dtype, count: int) -> np.ndarray:
        out = np.empty(count, dtype=dtype)
        self.cl.enqueue_copy(self.queue, out, buf.sub)
        self.queue.finish()
        return out

    def guards_intact(self, buf: _Buf) -> bool:
        """Reads back only the two guard zones: the timed launches are checked, and a whole GEMM operand per
        check would make checking cost more than the launch it checks."""
        before = np.empty(self.guard, dtype=np.uint8)
        after = np.empty(self.guard, dtype=np.uint8)
        self.cl.enqueue_copy(self.queue, before, buf.parent, src_offset=0)
        self.cl.enqueue_copy(self.queue, after, buf.parent, src_offset=self.guard + buf.nbytes)
        self.queue.finish()
        return bool((before == GUARD_BYTE).all() and (after == GUARD_BYTE).all())

    def launch(self, kernel: Any, args: list[Any], global_size: tuple[int, ...],
               local_size: tuple[int, ...] | None) -> float:
        cl = self.cl
        try:
            kernel.set_args(*[a.sub if isinstance(a, _Buf) else a for a in args])
            event = cl.enqueue_nd_range_kernel(self.queue, kernel, global_size, local_size)
            event.wait()
            return float(event.profile.end - event.profile.start)
        except cl.Error as exc:
            raise DeviceRuntimeError(trim_log(str(exc))) from None

    def flush_caches(self, working_set_bytes: int = 0) -> None:
        """Read a scratch buffer twice the last-level cache before a launch whose buffers exceed that cache.

        The harness restores and re-poisons the written buffers before every timed launch; on a CPU that
        leaves up to a cache-full of dirty lines, whose write-back the next launch would pay (a streaming
        kernel measured 28 % slower after a reset than in a plain loop). Reading a clean scratch evicts them
        outside the timed event. A working set that fits in the cache stays warm, as in a plain loop."""
        cache = self._flush_bytes()
        if working_set_bytes <= cache:
            return
        cl = self.cl
        if self._flush is None:
            words = 2 * cache // 16
            program = cl.Program(self.context, _FLUSH_SOURCE).build()
            kernel = cl.Kernel(program, "kernelcast_flush")
            scratch = cl.Buffer(self.context, cl.mem_flags.READ_WRITE, words * 16)
            cl.enqueue_fill_buffer(self.queue, scratch, np.zeros(1, np.float32), 0, words * 16)
            sink = cl.Buffer(self.context, cl.mem_flags.READ_WRITE, _FLUSH_ITEMS * 16)
            kernel.set_args(scratch, sink, np.uint32(words))
            self._flush = (kernel, scratch, sink)
        try:
            cl.enqueue_nd_range_kernel(self.queue, self._flush[0], (_FLUSH_ITEMS,), None)
        except cl.Error as exc:
            raise DeviceRuntimeError(f"cache flush: {trim_log(str(exc))}") from None

    def _flush_bytes(self) -> int:
        """The cache a flush must cover: the device's last-level cache (on a CPU the host's largest cache, see
        :func:`device_spec`), else its global cache."""
        if self._cache_bytes is None:
            cache = int(self.spec.last_level_cache_bytes or self.spec.global_cache_bytes or 0)
            self._cache_bytes = min(max(cache, 4 * 2**20), 512 * 2**20)
        return self._cache_bytes

    def release(self, buf: _Buf) -> None:
        buf.sub.release()
        buf.parent.release()
