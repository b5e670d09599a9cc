"""The one interface every measurement backend implements.

A runner owns a device context and knows how to compile device code, move
arrays, and launch a kernel timed by device events. Everything that makes a
measurement trustworthy (seeded inputs, poisoning, guards, correctness,
interleaved timing, statistics) lives once in :mod:`kernelcast.tools.hardware.harness`, on top of
this interface, so OpenCL and CUDA follow the same protocol.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

import numpy as np

# DeviceRuntimeError is defined in tools/core (the probe and device listing raise it too) and re-exported here
from kernelcast.tools.core.errors import DeviceRuntimeError as DeviceRuntimeError
from kernelcast.tools.core.errors import KernelcastError
from kernelcast.tools.core.measurement import HardwareSpec

GUARD_BYTES = 4096  # canary zone before and after every buffer
GUARD_BYTE = 0xA5
MAX_LOG_CHARS = 4000
# compiled programs a runner keeps (tools.lru.LRUCache; a dropped program's memory is reused by the next
# compile). A worker lives for a whole search and compiles every candidate it validates or measures; kept
# forever, each program's compiled code (about 3 MiB on Intel's CPU runtime) grew a search bench's worker to
# 14 GiB on a 24 GiB machine. A round validates and then measures at most a few hundred children, so the
# programs a round measures are still here when it measures them.
KEPT_BUILDS = 256


def trim_log(text: str) -> str:
    """Compiler and runtime logs fed back to generators: head and tail of long ones."""
    text = text.strip()
    return text if len(text) <= MAX_LOG_CHARS else text[: MAX_LOG_CHARS // 2] + "\n...\n" + text[-MAX_LOG_CHARS // 2:]


class CompileError(KernelcastError, RuntimeError):
    """The device compiler rejected the source; ``log`` holds its (trimmed) output."""

    def __init__(self, log: str) -> None:
        super().__init__(log)
        self.log = log


def guard_bytes_for(nbytes: int) -> int:
    """The tail canary of a buffer of ``nbytes`` where no fence pages protect it: in proportion to the buffer
    (an eighth, at least :data:`GUARD_BYTES`, at most 16 MiB), so a write off by a fraction of the buffer's own
    length still lands in it."""
    return int(min(max(GUARD_BYTES, nbytes // 8), 16 << 20))


class ProgramStateError(KernelcastError, ValueError):
    """The built program keeps writable program-scope storage, as the runtime or the compiled binary reports it
    (whatever the source looked like to a preprocessor): state that survives between launches."""

    def __init__(self, nbytes: int | None, names: list[str] | None = None) -> None:
        what = "writable program-scope storage"
        if names:
            what += " (" + ", ".join(names[:5]) + ")"
        if nbytes:
            what += f"; the runtime counts {nbytes} bytes of program-scope data"
        super().__init__(f"the compiled program keeps {what}: state kept in the program "
                         "survives between launches (a kernel could keep its results or count its launches there); "
                         "keep data in buffer arguments, and constants const or __constant")


class Runner(ABC):
    """In-process access to one device. Not isolated: wrap it in a worker."""

    backend: str

    @abstractmethod
    def hardware_spec(self) -> HardwareSpec:
        """Properties read from the device."""

    @abstractmethod
    def build(self, source: str, entry: str, options: list[str], fresh: bool = False) -> tuple[Any, bool, float]:
        """Compile (cached by device, source hash and options): (kernel, cache_hit, compile_ms). ``fresh``
        builds a new program outside the cache, so nothing a program holds (its program-scope memory) carries
        over from the launches of the cached one. Raises :class:`ProgramStateError` when the built program keeps
        writable program-scope storage, asked of the runtime or read from the compiled binary."""

    @abstractmethod
    def alloc(self, nbytes: int) -> Any:
        """A device buffer of ``nbytes`` with guard zones of :data:`GUARD_BYTES` on each side."""

    def local_memory(self, nbytes: int) -> Any:
        """A kernel argument that sizes ``nbytes`` of work-group memory (OpenCL's ``__local`` pointers)."""
        raise DeviceRuntimeError(f"{self.backend} kernels take no local-memory arguments")

    @abstractmethod
    def upload(self, buf: Any, array: np.ndarray) -> None:
        """Copy ``array`` into the user region of ``buf`` and fill its guards with the canary."""

    @abstractmethod
    def download(self, buf: Any, dtype: np.dtype, count: int) -> np.ndarray:
        """Read the user region back."""

    @abstractmethod
    def guards_intact(self, buf: Any) -> bool:
        """True when no byte of either guard zone was written."""

    @abstractmethod
    def launch(self, kernel: Any, args: list[Any], global_size: tuple[int, ...],
               local_size: tuple[int, ...] | None) -> float:
        """Run once, wait, and return the device-event time in nanoseconds."""

    def local_memory_scrub(self, kernels: list[Any]) -> Callable[[], None] | None:
        """A call that overwrites the work-group (shared) memory ``kernels`` could read at their next launch, run
        outside any timed event; None where the device keeps none between launches or the kernels use none."""
        return None

    def copy(self, dst: Any, src: Any, array: np.ndarray) -> None:
        """Restore ``dst`` from ``src`` (a pristine copy holding ``array``); the default uploads ``array``."""
        self.upload(dst, array)

    def flush_caches(self, working_set_bytes: int = 0) -> None:  # noqa: B027 - optional hook: a no-op where caches need no flushing
        """Evict device caches before a timed launch where that is meaningful (GPU L2, a CPU's last-level
        cache after the harness's reset wrote a buffer larger than it). ``working_set_bytes`` is what the
        launch touches: a runner may skip the flush when that fits in the cache anyway."""

    def release(self, buf: Any) -> None:  # noqa: B027 - optional hook: buffers are freed with the context otherwise
        """Free a buffer early (optional)."""
