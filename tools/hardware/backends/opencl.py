"""OpenCL backend through pyopencl; the default install brings CPU runtimes (Intel's, PoCL), so any CPU is a device."""

from __future__ import annotations

import hashlib
import time
import warnings
from collections.abc import Callable
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
    ProgramStateError,
    Runner,
    guard_bytes_for,
    trim_log,
)
from kernelcast.tools.hardware.backends.host_pages import FencedPages, page_round
from kernelcast.tools.hardware.opencl_devices import (
    device_spec,
    list_devices,
    match_device,
    pyopencl_module,
)
from kernelcast.tools.hardware.probe import choose_device
from kernelcast.tools.hardware.program_symbols import writable_symbols


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
    cl = pyopencl_module()
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
        selector = choose_device(None).index
    index = match_device(str(selector), [(i, p.name, d.name) for i, p, d in devices])
    return next((p, d) for i, p, d in devices if i == index)


# reads its scratch and writes one word per work-item, so the compiler cannot drop the reads
_FLUSH_SOURCE = """
__kernel void kernelcast_flush(__global const float4 *scratch, __global float4 *sink, const uint words) {
    float4 acc = (float4)(0.0f);
    for (uint i = get_global_id(0); i < words; i += get_global_size(0)) acc += scratch[i];
    sink[get_global_id(0)] = acc;
}
"""
_FLUSH_ITEMS = 4096


# fills the work-group memory it is given with a NaN pattern, each work-group the whole of it
_SCRUB_SOURCE = """
__kernel void kernelcast_scrub(__local uint *slab, const uint words) {
    for (uint i = get_local_id(0); i < words; i += get_local_size(0)) slab[i] = 0xFFA5A5A5u;
    barrier(CLK_LOCAL_MEM_FENCE);
}
"""
# work-groups per compute unit in a scrub: a CPU runtime hands work-groups to its worker threads as they come free,
# and a thread that runs none keeps its slab; more groups reached no more threads in a test of 300 scrubs
_SCRUB_GROUPS_PER_UNIT = 4
_SCRUB_ITEMS = 64


class _Buf:
    """A guarded buffer: ``parent`` holds the front canary, the user region ``sub`` and the tail canary
    (``tail`` bytes); ``pages`` the fenced host memory it lives in on a CPU device (None elsewhere)."""

    __slots__ = ("parent", "sub", "nbytes", "tail", "pages")

    def __init__(self, parent: Any, sub: Any, nbytes: int, tail: int, pages: FencedPages | None = None) -> None:
        self.parent, self.sub, self.nbytes, self.tail, self.pages = parent, sub, nbytes, tail, pages


class OpenCLRunner(Runner):
    backend = OPENCL.backend

    def __init__(self, device: str | None = None, kept_builds: int = KEPT_BUILDS) -> None:
        cl = self.cl = pyopencl_module()
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
        self._scrub: Any = None
        self._cache_bytes: int | None = None
        self.align = max(1, int(getattr(self.device, "mem_base_addr_align", 1024)) // 8)
        self.guard = self._aligned(GUARD_BYTES)
        # a CPU device runs kernels on host memory in place: buffers go between inaccessible pages there
        self.fenced = self.spec.device_type == "CPU"

    def _aligned(self, nbytes: int) -> int:
        return -(-int(nbytes) // self.align) * self.align

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
        self._refuse_program_state(program)
        try:
            kernel = self.cl.Kernel(program, entry)
        except self.cl.Error as exc:
            raise CompileError(f"kernel {entry!r} not found in the compiled program: {trim_log(str(exc))}") from None
        if not fresh:
            self._kernels.put(key, kernel)
        return kernel, False, (time.perf_counter() - start) * 1e3

    def _refuse_program_state(self, program: Any) -> None:
        """Refuse a built program that keeps writable program-scope storage, read from the compiled binary
        (:mod:`kernelcast.tools.hardware.program_symbols`: its data symbols in writable sections), whatever the
        source looked like to a preprocessor. The runtime's own total (OpenCL 2.0's
        ``CL_PROGRAM_BUILD_GLOBAL_VARIABLE_TOTAL_SIZE``) counts ``__constant`` data too on Intel's CPU runtime and
        is 0 for everything on PoCL, so it only sizes the message. A binary in a format that names no symbols
        (PoCL's bitcode) leaves the source gate as the check."""
        try:
            binary = bytes(program.binaries[0])
        except (self.cl.Error, IndexError, TypeError, ValueError):
            return
        names = writable_symbols(binary)
        if names:
            raise ProgramStateError(self._program_scope_bytes(program), names)

    def _program_scope_bytes(self, program: Any) -> int | None:
        query = getattr(self.cl.program_build_info, "GLOBAL_VARIABLE_TOTAL_SIZE", None)
        try:
            return int(program.get_build_info(self.device, query)) if query is not None else None
        except (self.cl.Error, ValueError, TypeError):
            return None

    def alloc(self, nbytes: int) -> _Buf:
        """A buffer with canary zones; on a CPU device in fenced host memory (``CL_MEM_USE_HOST_PTR``), its
        tail canary running to the page's end, so every byte between the user region and the fence is
        checked. Elsewhere the tail canary grows with the buffer (:func:`guard_bytes_for`)."""
        cl = self.cl
        nbytes = max(int(nbytes), 1)
        if not self.fenced:
            tail = self._aligned(guard_bytes_for(nbytes))
            parent = cl.Buffer(self.context, cl.mem_flags.READ_WRITE, size=self.guard + nbytes + tail)
            return _Buf(parent, parent.get_sub_region(self.guard, nbytes), nbytes, tail)
        size = page_round(self.guard + nbytes + GUARD_BYTES)
        pages = FencedPages(size)
        try:
            parent = cl.Buffer(self.context, cl.mem_flags.READ_WRITE | cl.mem_flags.USE_HOST_PTR, hostbuf=pages.array)
            sub = parent.get_sub_region(self.guard, nbytes)
        except cl.Error as exc:
            pages.free()
            raise DeviceRuntimeError(f"cannot allocate {nbytes} bytes: {trim_log(str(exc))}") from None
        return _Buf(parent, sub, nbytes, size - self.guard - nbytes, pages)

    def local_memory(self, nbytes: int) -> Any:
        return self.cl.LocalMemory(max(int(nbytes), 1))

    def upload(self, buf: _Buf, array: np.ndarray) -> None:
        data = np.ascontiguousarray(array)
        if data.nbytes != buf.nbytes:
            raise ValueError(f"array of {array.nbytes} bytes does not fit a buffer of {buf.nbytes} bytes")
        self.cl.enqueue_copy(self.queue, buf.parent, np.full(self.guard, GUARD_BYTE, dtype=np.uint8), dst_offset=0)
        if data.nbytes:
            self.cl.enqueue_copy(self.queue, buf.parent, data, dst_offset=self.guard)
        self.cl.enqueue_copy(self.queue, buf.parent, np.full(buf.tail, GUARD_BYTE, dtype=np.uint8),
                             dst_offset=self.guard + buf.nbytes)
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
        after = np.empty(buf.tail, dtype=np.uint8)
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

    def local_memory_scrub(self, kernels: list[Any]) -> Callable[[], None] | None:
        """A scrub of the work-group memory ``kernels`` could read at their next launch, or None when none of them
        uses any (the runtime's ``CL_KERNEL_LOCAL_MEM_SIZE``).

        Intel's CPU runtime keeps one slab of work-group memory per worker thread, shared by every work-group and
        every kernel that runs there, across launches: a kernel could leave its results in a ``__local`` array
        and find them at its next launch (a memo keyed by its inputs measured 2.4-2.6x). The scrub fills the
        device's whole work-group memory with a NaN pattern in several work-groups per compute unit, and waits
        for them, so the slabs the next launch gets hold nothing of the last one. Which thread runs which
        work-group is the runtime's choice: a slab the scrub misses now and then (about one launch in a hundred,
        measured) can serve a memo only that once, which moves no median. Kernels that use no work-group memory
        cost nothing."""
        cl = self.cl
        used = 0
        for kernel in kernels:
            try:
                used = max(used, int(kernel.get_work_group_info(cl.kernel_work_group_info.LOCAL_MEM_SIZE,
                                                                self.device)))
            except (cl.Error, ValueError, TypeError, AttributeError):
                used = max(used, 1)
        if used <= 0:
            return None
        size = max(int(self.spec.local_mem_bytes), used) // 4 * 4
        if self._scrub is None:
            self._scrub = cl.Kernel(cl.Program(self.context, _SCRUB_SOURCE).build(), "kernelcast_scrub")
        groups = _SCRUB_GROUPS_PER_UNIT * max(1, self.spec.compute_units)
        scrub_kernel = self._scrub

        def scrub() -> None:
            try:
                scrub_kernel.set_args(cl.LocalMemory(size), np.uint32(size // 4))
                cl.enqueue_nd_range_kernel(self.queue, scrub_kernel, (groups * _SCRUB_ITEMS,), (_SCRUB_ITEMS,)).wait()
            except cl.Error as exc:
                raise DeviceRuntimeError(f"work-group memory scrub: {trim_log(str(exc))}") from None

        return scrub

    def release(self, buf: _Buf) -> None:
        buf.sub.release()
        buf.parent.release()
        if buf.pages is not None:
            self.queue.finish()  # nothing may still read or write the pages
            buf.pages.free()
