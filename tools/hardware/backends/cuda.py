"""CUDA backend through pycuda (NVIDIA GPUs).

Geometry convention, the same as OpenCL so one task format serves both: a
task's ``global`` is the TOTAL number of threads per dimension and ``local``
is the block, so ``grid = global / local`` per dimension (the harness has
already checked that ``local`` divides ``global``). Dimension 0 is ``x``.
Without ``local`` a block of up to :data:`DEFAULT_BLOCK` threads is chosen
from the largest power-of-two divisors of ``global``.

Other choices, and why:

* pycuda is imported lazily, so this module (and ``make_runner``'s error
  message) works on machines without pycuda or a GPU.
* Sources compile with ``no_extern_c=True`` (pycuda would otherwise wrap the
  whole file in ``extern "C" {}``, which breaks C++ headers and templates);
  an entry point written without ``extern "C"`` gets it added, so
  ``get_function(entry)`` finds an unmangled name either way.
* A guarded buffer is one allocation of ``nbytes + 2 * GUARD_BYTES``; the
  kernel gets the pointer ``base + GUARD_BYTES`` (256-byte aligned, as
  ``cudaMalloc`` is, so float4 loads stay legal).
* Times are CUDA events recorded around the launch on the default stream.
* A kernel fault (illegal address, misaligned access, trap) poisons a CUDA
  context for good. The runner then discards it and opens a fresh one on the
  next call, so one bad candidate costs only its own measurement.
"""

from __future__ import annotations

import atexit
import hashlib
import re
import time
import warnings
from typing import Any

import numpy as np

from kernelcast.tools.core.language import CUDA
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
    trim_log,  # one trimming rule for every compiler log
)
from kernelcast.tools.hardware.program_symbols import ptx_global_variables

DEFAULT_BLOCK = 256
PLATFORM = "NVIDIA CUDA"
# driver errors after which the context is unusable (CUDA driver API documentation)
_STICKY = ("illegal memory access", "illegal address", "misaligned address", "unspecified launch failure",
           "illegal instruction", "hardware stack error", "invalid program counter", "device-side assert",
           "launch timed out", "an exception occurred on the device", "exception on the device")


def _drv() -> Any:
    """pycuda.driver, initialised; DeviceRuntimeError with the reason when unavailable."""
    try:
        import pycuda.driver as drv
    except Exception as exc:  # noqa: BLE001 - ImportError, or a broken build that fails to load libcuda
        raise DeviceRuntimeError(f"no CUDA device / pycuda not installed: {type(exc).__name__}: {exc}") from None
    try:
        drv.init()
        count = drv.Device.count()
    except Exception as exc:  # noqa: BLE001 - pycuda raises its own error types
        raise DeviceRuntimeError(f"no CUDA device / pycuda not installed: CUDA driver: {exc}") from None
    if count == 0:
        raise DeviceRuntimeError("no CUDA device / pycuda not installed: the driver sees no GPU")
    return drv


def list_devices() -> list[HardwareSpec]:
    """Specs of every visible NVIDIA GPU; empty where there is no GPU or no pycuda."""
    try:
        drv = _drv()
    except DeviceRuntimeError:
        return []
    return [device_spec(drv, drv.Device(i)) for i in range(drv.Device.count())]


def select_device(drv: Any, selector: str | None) -> Any:
    """Device by ordinal ("1", "cuda:1") or name substring ("H200"); default device 0."""
    count = drv.Device.count()
    sel = "" if selector is None else str(selector).strip().removeprefix(CUDA.backend).removeprefix(":")
    if sel == "":
        return drv.Device(0)
    if sel.isdigit():
        if int(sel) < count:
            return drv.Device(int(sel))
    else:
        for i in range(count):
            if sel.lower() in drv.Device(i).name().lower():
                return drv.Device(i)
    names = ", ".join(f"{i} {drv.Device(i).name()}" for i in range(count))
    raise DeviceRuntimeError(f"no CUDA device matches {selector!r}; available: {names}")


def device_spec(drv: Any, device: Any) -> HardwareSpec:
    """What the forecaster is told, read from the device's attributes (no context needed)."""
    attr = drv.device_attribute

    def get(name: str, default: int = 0) -> int:
        try:
            return int(device.get_attribute(getattr(attr, name)))
        except Exception:  # noqa: BLE001 - attribute missing in this pycuda/driver version
            return default

    major, minor = device.compute_capability()
    try:
        version = drv.get_driver_version()
        driver = f"{version // 1000}.{version % 1000 // 10}"
    except Exception:  # noqa: BLE001
        driver = ""
    sms = get("MULTIPROCESSOR_COUNT")
    return HardwareSpec(
        backend=CUDA.backend,
        platform=PLATFORM,
        name=device.name().strip(),
        device_type="GPU",
        vendor="NVIDIA",
        driver=driver,
        compute_units=sms,
        clock_mhz=get("CLOCK_RATE") // 1000,
        global_mem_bytes=int(device.total_memory()),
        local_mem_bytes=get("MAX_SHARED_MEMORY_PER_BLOCK"),
        max_work_group_size=get("MAX_THREADS_PER_BLOCK"),
        max_work_item_sizes=[get("MAX_BLOCK_DIM_X"), get("MAX_BLOCK_DIM_Y"), get("MAX_BLOCK_DIM_Z")],
        # NVIDIA GPUs are scalar per thread (their OpenCL driver reports 1); wide loads are the
        # vector win, see extra.max_vector_load_bytes
        preferred_vector_width_float=1,
        native_vector_width_float=1,
        global_cache_bytes=get("L2_CACHE_SIZE"),
        global_cacheline_bytes=128,
        extra={
            "compute_capability": f"{major}.{minor}",
            "arch": f"sm_{major}{minor}",
            "warp_size": get("WARP_SIZE", 32),
            "memory_clock_mhz": get("MEMORY_CLOCK_RATE") // 1000,
            "memory_bus_width_bits": get("GLOBAL_MEMORY_BUS_WIDTH"),
            "shared_mem_per_sm_bytes": get("MAX_SHARED_MEMORY_PER_MULTIPROCESSOR"),
            "shared_mem_per_block_optin_bytes": get("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"),
            "registers_per_block": get("MAX_REGISTERS_PER_BLOCK"),
            "registers_per_sm": get("MAX_REGISTERS_PER_MULTIPROCESSOR"),
            "max_threads_per_sm": get("MAX_THREADS_PER_MULTIPROCESSOR"),
            "max_grid_size": [get("MAX_GRID_DIM_X"), get("MAX_GRID_DIM_Y"), get("MAX_GRID_DIM_Z")],
            "max_vector_load_bytes": 16,
            "geometry": "global = total threads per dimension, local = block, grid = global / local",
        },
    )


def ensure_c_linkage(source: str, entry: str) -> str:
    """Give the entry kernel ``extern "C"`` linkage if it lacks it, so its name is not mangled."""
    pattern = re.compile(rf'(^|[^\w"])(__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+{re.escape(entry)}\s*\()')
    match = pattern.search(source)
    if match is None:
        return source
    before = source[: match.start(2)].rstrip()
    if before.endswith('extern "C"'):
        return source
    return source[: match.start(2)] + 'extern "C" ' + source[match.start(2):]


def launch_dims(global_size: tuple[int, ...], local_size: tuple[int, ...] | None,
                ) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(block, grid) as 3-tuples from OpenCL-style total threads and block size."""
    glob = tuple(int(g) for g in global_size) + (1,) * (3 - len(global_size))
    if local_size is None:
        budget, block = DEFAULT_BLOCK, []
        for g in glob:
            b = 1
            while b * 2 <= budget and g % (b * 2) == 0:
                b *= 2
            block.append(b)
            budget //= b
        loc = tuple(block)
    else:
        loc = tuple(int(x) for x in local_size) + (1,) * (3 - len(local_size))
    if any(size <= 0 or g % size for g, size in zip(glob, loc)):
        raise DeviceRuntimeError(f"global size {global_size} is not a multiple of the block {local_size}")
    grid = tuple(g // size for g, size in zip(glob, loc))
    return loc, grid  # type: ignore[return-value]


class _Buf:
    """One allocation: guard | user region | tail guard (``tail`` bytes, in proportion to the buffer).
    ``ptr`` is what the kernel gets."""

    __slots__ = ("alloc", "base", "ptr", "nbytes", "tail", "generation")

    def __init__(self, alloc: Any, base: int, nbytes: int, generation: int) -> None:
        self.alloc, self.base, self.ptr, self.nbytes, self.generation = alloc, base, base + GUARD_BYTES, nbytes, generation
        self.tail = _tail_bytes(nbytes)


def _tail_bytes(nbytes: int) -> int:
    """The tail guard of a buffer: in proportion to it, in whole 256-byte units (allocation alignment)."""
    return -(-guard_bytes_for(nbytes) // 256) * 256


class _Kernel:
    """A compiled entry point; keeps its module alive for as long as the function is used."""

    __slots__ = ("module", "function", "entry", "generation")

    def __init__(self, module: Any, function: Any, entry: str, generation: int) -> None:
        self.module, self.function, self.entry, self.generation = module, function, entry, generation


class CudaRunner(Runner):
    """A pycuda context on one NVIDIA GPU; see the module docstring for the conventions."""

    backend = CUDA.backend

    def __init__(self, device: str | None = None, kept_builds: int = KEPT_BUILDS) -> None:
        self.drv = _drv()
        self.device = select_device(self.drv, device)
        self.spec = device_spec(self.drv, self.device)
        self._kernels: LRUCache[_Kernel] = LRUCache(kept_builds)
        self._generation = 0
        self._poisoned: str | None = None
        self._scratch: Any = None
        self._flushes = 0
        self.context = self._open_context()
        atexit.register(self._close)

    # ---- context lifecycle ----------------------------------------------------------
    def _open_context(self) -> Any:
        try:
            return self.device.make_context()
        except Exception as exc:  # noqa: BLE001
            raise DeviceRuntimeError(f"cannot create a CUDA context on {self.spec.name}: {exc}") from None

    def _recover(self) -> None:
        """After a sticky kernel fault: drop everything tied to the dead context and open a new one."""
        if self._poisoned is None:
            return
        self._kernels.clear()
        self._scratch = None
        self._discard_context()
        self._generation += 1
        self.context = self._open_context()
        self._poisoned = None

    def _discard_context(self) -> None:
        """Destroy our context (pycuda's detach pops it first when it is current)."""
        try:
            self.context.detach()
        except Exception:  # noqa: BLE001 - a dead context may refuse; it is abandoned either way
            try:
                self.context.pop()
            except Exception:  # noqa: BLE001
                pass

    def _close(self) -> None:
        self._kernels.clear()
        self._scratch = None
        self._discard_context()

    def _fail(self, exc: Exception, what: str) -> DeviceRuntimeError:
        """Wrap a driver error; remember if it killed the context (then every later call fails too)."""
        message = f"{what}: {type(exc).__name__}: {exc}"
        sticky = isinstance(exc, getattr(self.drv, "LaunchError", ())) or any(s in str(exc).lower() for s in _STICKY)
        if not sticky:
            try:
                self.context.synchronize()
            except Exception:  # noqa: BLE001 - the context is dead
                sticky = True
        if sticky:
            self._poisoned = message
            message += " (kernel fault: the CUDA context was reset)"
        return DeviceRuntimeError(trim_log(message))

    # ---- Runner interface ----------------------------------------------------------
    def hardware_spec(self) -> HardwareSpec:
        return self.spec

    def build(self, source: str, entry: str, options: list[str], fresh: bool = False) -> tuple[Any, bool, float]:
        """nvcc through pycuda (whose own disk cache may make a 'miss' fast across processes)."""
        self._recover()
        key = (self.spec.key, hashlib.sha256(source.encode()).hexdigest(), tuple(options), entry)
        if not fresh and (cached := self._kernels.get(key)) is not None:
            return cached, True, 0.0
        from pycuda.compiler import SourceModule

        start = time.perf_counter()
        try:
            with warnings.catch_warnings():  # "nvcc succeeded but said ...": warnings are not failures
                warnings.simplefilter("ignore")
                module = SourceModule(ensure_c_linkage(source, entry), options=list(options), no_extern_c=True)
        except self.drv.CompileError as exc:
            raise CompileError(trim_log(_compile_log(exc))) from None
        except OSError as exc:
            raise DeviceRuntimeError(f"cannot run nvcc (is the CUDA toolkit on PATH?): {exc}") from None
        except self.drv.Error as exc:  # e.g. loading a cubin the device cannot run
            raise CompileError(trim_log(f"the compiled module could not be loaded: {exc}")) from None
        self._refuse_module_state(source, entry, options)
        try:
            function = module.get_function(entry)
        except self.drv.Error as exc:
            raise CompileError(f"kernel {entry!r} not found in the compiled module: {trim_log(str(exc))}") from None
        kernel = _Kernel(module, function, entry, self._generation)
        if not fresh:
            self._kernels.put(key, kernel)
        return kernel, False, (time.perf_counter() - start) * 1e3

    def _refuse_module_state(self, source: str, entry: str, options: list[str]) -> None:
        """Refuse a module that declares writable module-scope variables, read from the compiler's PTX (the CUDA
        driver lists no module's globals): ``__device__``, ``__managed__`` and ``static`` variables survive
        between launches, whatever macros hid them in the source. pycuda caches the compile on disk."""
        from pycuda.compiler import compile as compile_module

        try:
            ptx = compile_module(ensure_c_linkage(source, entry), options=list(options), no_extern_c=True,
                                 target="ptx")
        except self.drv.CompileError as exc:
            raise CompileError(trim_log(_compile_log(exc))) from None
        if names := ptx_global_variables(ptx.decode(errors="replace") if isinstance(ptx, bytes) else str(ptx)):
            raise ProgramStateError(None, names)

    def alloc(self, nbytes: int) -> _Buf:
        self._recover()
        nbytes = max(int(nbytes), 1)
        try:
            alloc = self.drv.mem_alloc(GUARD_BYTES + nbytes + _tail_bytes(nbytes))
        except self.drv.Error as exc:
            raise self._fail(exc, f"cannot allocate {nbytes} bytes") from None
        return _Buf(alloc, int(alloc), nbytes, self._generation)

    def upload(self, buf: _Buf, array: np.ndarray) -> None:
        data = np.ascontiguousarray(array)
        if data.nbytes != buf.nbytes:
            raise ValueError(f"array of {data.nbytes} bytes does not fit a buffer of {buf.nbytes} bytes")
        try:
            self.drv.memcpy_htod(buf.base, np.full(GUARD_BYTES, GUARD_BYTE, dtype=np.uint8))
            self.drv.memcpy_htod(buf.ptr, data)
            self.drv.memcpy_htod(buf.ptr + buf.nbytes, np.full(buf.tail, GUARD_BYTE, dtype=np.uint8))
        except self.drv.Error as exc:
            raise self._fail(exc, "upload") from None

    def copy(self, dst: _Buf, src: _Buf, array: np.ndarray) -> None:
        """Device-to-device restore between timed launches (no host transfer)."""
        try:
            self.drv.memcpy_dtod(dst.ptr, src.ptr, dst.nbytes)
        except self.drv.Error as exc:
            raise self._fail(exc, "restoring a buffer") from None

    def download(self, buf: _Buf, dtype: np.dtype, count: int) -> np.ndarray:
        out = np.empty(count, dtype=dtype)
        try:
            self.drv.memcpy_dtoh(out, buf.ptr)
        except self.drv.Error as exc:
            raise self._fail(exc, "download") from None
        return out

    def guards_intact(self, buf: _Buf) -> bool:
        """Reads back only the two guard zones (a GEMM operand can be hundreds of MiB)."""
        before = np.empty(GUARD_BYTES, dtype=np.uint8)
        after = np.empty(buf.tail, dtype=np.uint8)
        try:
            self.drv.memcpy_dtoh(before, buf.base)
            self.drv.memcpy_dtoh(after, buf.ptr + buf.nbytes)
        except self.drv.Error as exc:
            raise self._fail(exc, "reading guard zones") from None
        return bool((before == GUARD_BYTE).all() and (after == GUARD_BYTE).all())

    def launch(self, kernel: _Kernel, args: list[Any], global_size: tuple[int, ...],
               local_size: tuple[int, ...] | None) -> float:
        drv = self.drv
        if kernel.generation != self._generation:
            raise DeviceRuntimeError("kernel belongs to a CUDA context that was reset; build it again")
        block, grid = launch_dims(global_size, local_size)
        limits = self.spec.extra.get("max_grid_size") or [2**31 - 1, 65535, 65535]
        if any(g > lim > 0 for g, lim in zip(grid, limits)):
            raise DeviceRuntimeError(f"grid {grid} exceeds the device limits {limits} (global {global_size}, "
                                     f"block {block})")
        # an explicit struct format per launch: pycuda's implicit packing memoizes argument tuples
        # globally, and equal numpy scalars of different dtypes (int32 2 == float32 2.0) share an entry
        fmt = "".join("P" if isinstance(a, _Buf) else _scalar(a).dtype.char for a in args)
        values = [a.ptr if isinstance(a, _Buf) else a for a in args]
        try:
            kernel.function.prepare(fmt)
            start, end = drv.Event(), drv.Event()
            start.record()
            kernel.function.prepared_call(grid, block, *values)
            end.record()
            end.synchronize()
            return float(end.time_since(start)) * 1e6
        except drv.Error as exc:
            raise self._fail(exc, f"launch of {kernel.entry!r} with grid {grid} and block {block}") from None

    def flush_caches(self, working_set_bytes: int = 0) -> None:
        """Overwrite a scratch buffer twice the L2 size so the next launch starts with a cold L2 (always, as
        GPU practice has it, whatever the working set)."""
        if self._poisoned is not None:
            return
        l2 = self.spec.global_cache_bytes or 64 * 2**20
        size = 2 * l2
        try:
            if self._scratch is None:
                self._scratch = self.drv.mem_alloc(size)
            self._flushes += 1
            # the memset runs on the default stream, so it finishes before the next start event
            self.drv.memset_d8(self._scratch, self._flushes & 0xFF, size)
        except self.drv.Error as exc:
            raise self._fail(exc, "cache flush") from None

    def release(self, buf: _Buf) -> None:
        """Free now; a buffer of a reset context is only dropped (its memory went with the context)."""
        if buf.generation != self._generation or self._poisoned is not None:
            return
        try:
            buf.alloc.free()
        except self.drv.Error as exc:
            raise self._fail(exc, "free") from None


def _scalar(value: Any) -> np.generic:
    """Kernel scalars must have an explicit width; the harness passes numpy scalars already."""
    if isinstance(value, np.generic):
        return value
    raise DeviceRuntimeError(f"scalar argument {value!r} must be a numpy scalar with an explicit dtype")


def _compile_log(exc: Exception) -> str:
    """nvcc's own words from pycuda's CompileError (stderr has the diagnostics)."""
    stderr = getattr(exc, "stderr", "") or ""
    stdout = getattr(exc, "stdout", "") or ""
    if isinstance(stderr, bytes):
        stderr = stderr.decode(errors="replace")
    if isinstance(stdout, bytes):
        stdout = stdout.decode(errors="replace")
    text = (stderr + "\n" + stdout).strip()
    # pycuda compiles kernel.cu in a temp dir; keep just the file name
    text = re.sub(r"/\S*/kernel\.cu", "kernel.cu", text)
    return text or str(exc)


__all__ = ["CudaRunner", "device_spec", "ensure_c_linkage", "launch_dims", "list_devices", "select_device"]
