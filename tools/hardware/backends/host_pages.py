"""Host memory fenced by inaccessible pages, for buffers a CPU device runs kernels on in place.

A CPU OpenCL device reads and writes host memory. The harness's guard zones (a canary pattern around every
buffer) catch a write that lands next to a buffer; a write that jumps past them lands in whatever else the worker
process has mapped there, where no check sees it and it may even pass. With the buffer's pages placed between
pages that have no access at all (``mprotect(PROT_NONE)``), such a write faults: the worker dies and the
measurement is a crash, whatever the offset within the fence. The fences are sized in proportion to the buffer
(at least :data:`MIN_FENCE_BYTES`), so an index off by a buffer's own length still faults; they are address space
only and cost no memory.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap

import numpy as np

#: the least inaccessible address space on each side of a buffer (pages cost nothing until touched, and these
#: never are)
MIN_FENCE_BYTES = 1 << 20
#: the most on each side: beyond this a buffer's own size is fence enough in proportion
MAX_FENCE_BYTES = 1 << 32

_PROT_NONE, _PROT_RW = 0, mmap.PROT_READ | mmap.PROT_WRITE
_MAP_FAILED = ctypes.c_void_p(-1).value


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return libc


_LIBC: ctypes.CDLL | None = None


def page_round(nbytes: int) -> int:
    """``nbytes`` rounded up to whole pages."""
    return -(-int(nbytes) // mmap.PAGESIZE) * mmap.PAGESIZE


class FencedPages:
    """``nbytes`` (rounded up to pages) of read-write host memory between two inaccessible fences.

    ``array`` is a uint8 view of the accessible pages; :meth:`free` unmaps everything, after which the view must
    not be touched (the owner drops it first).
    """

    def __init__(self, nbytes: int) -> None:
        global _LIBC
        if _LIBC is None:
            _LIBC = _libc()
        self.body = page_round(max(int(nbytes), 1))
        self.fence = page_round(min(max(self.body, MIN_FENCE_BYTES), MAX_FENCE_BYTES))
        self.total = self.fence + self.body + self.fence
        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_NORESERVE", 0)
        address = _LIBC.mmap(None, self.total, _PROT_NONE, flags, -1, 0)
        if address in (None, _MAP_FAILED):
            raise MemoryError(f"cannot map {self.total} bytes of fenced host memory "
                              f"(errno {ctypes.get_errno()})")
        self.address: int | None = int(address)
        if _LIBC.mprotect(ctypes.c_void_p(self.address + self.fence), self.body, _PROT_RW) != 0:
            self.free()
            raise MemoryError(f"cannot open {self.body} bytes of fenced host memory (errno {ctypes.get_errno()})")
        self.array = np.ctypeslib.as_array((ctypes.c_uint8 * self.body).from_address(self.address + self.fence))

    def free(self) -> None:
        """Unmap the pages (idempotent)."""
        if self.address is not None and _LIBC is not None:
            self.array = np.empty(0, np.uint8)
            _LIBC.munmap(ctypes.c_void_p(self.address), self.total)
            self.address = None
