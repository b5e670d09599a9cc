"""Probe OpenCL devices before trusting them: build and run a tiny kernel, check its result.

A runtime can list a device that cannot compile anything (PoCL's PyPI build
names CPUs newer than its LLVM 14 "generic" and then rejects that name), so
listing is not enough. Every device is probed once per (device, driver) —
in a child process, so a runtime that aborts takes only the probe with it —
the verdict is cached in the store, and the default device is the first
healthy one in :func:`preference` order.

Run as ``python -m kernelcast.tools.hardware.probe [INDEX ...]`` it probes in-process
and prints one JSON line per device (used by :func:`probe_devices`).
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from kernelcast.tools.core.errors import DeviceRuntimeError
from kernelcast.tools.core.language import OPENCL
from kernelcast.tools.hardware.opencl_devices import device_spec, list_devices, match_device, pyopencl_module

if TYPE_CHECKING:
    from kernelcast.tools.store.store import Store

PROBE_SOURCE = """
__kernel void kernelcast_probe(__global const float* a, __global float* b, const int n) {
    int i = get_global_id(0);
    if (i < n) b[i] = 2.0f * a[i] + (float)i;
}
"""
PROBE_N = 256
PROBE_TIMEOUT_S = 90.0


class DeviceUnusable(DeviceRuntimeError):
    """No healthy device, or the selected device failed its probe; the message says why."""


@dataclass(frozen=True)
class DeviceStatus:
    """One listed device and its probe verdict."""

    index: str  # "platform:device" as pyopencl enumerates them in this process
    key: str  # HardwareSpec.key
    platform: str
    name: str
    driver: str
    device_type: str
    healthy: bool
    reason: str  # "" when healthy; else why the device is skipped


def explain(log: str) -> str:
    """A one-line reason a user can act on, from a compiler or runtime message."""
    text = " ".join(log.split())
    if "unknown target CPU" in text:
        cpu = text.split("unknown target CPU", 1)[1].split()[0].strip("'\":,")
        return (f"compiler rejects this CPU: unknown target CPU '{cpu}' (PoCL built with LLVM 14, older than this "
                "CPU); kernelcast uses another runtime")
    at = text.find("error:")
    return (text[at:] if at >= 0 else text)[:300]


def probe(platform: Any, device: Any, source: str = PROBE_SOURCE) -> str:
    """Build and run ``source`` (a kernel ``kernelcast_probe(a, b, n)``) on ``device``; "" when correct."""
    cl = pyopencl_module()
    try:
        ctx = cl.Context([device])
        queue = cl.CommandQueue(ctx)
        program = cl.Program(ctx, source).build()
        kernel = cl.Kernel(program, "kernelcast_probe")
        a = np.arange(PROBE_N, dtype=np.float32) * 0.5
        b = np.full(PROBE_N, np.nan, dtype=np.float32)
        mf = cl.mem_flags
        a_buf = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=a)
        b_buf = cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=b)
        kernel.set_args(a_buf, b_buf, np.int32(PROBE_N))
        cl.enqueue_nd_range_kernel(queue, kernel, (PROBE_N,), None)
        cl.enqueue_copy(queue, b, b_buf)
        queue.finish()
    except cl.Error as exc:
        return explain(str(exc))
    expected = 2.0 * a + np.arange(PROBE_N, dtype=np.float32)
    if not np.allclose(b, expected):
        return f"probe kernel ran but computed wrong results ({int((~np.isclose(b, expected)).sum())} of {PROBE_N})"
    return ""


def _listed() -> list[tuple[str, Any, Any]]:
    return list_devices()


def _describe(index: str, platform: Any, device: Any, reason: str) -> DeviceStatus:
    spec = device_spec(platform, device)
    return DeviceStatus(index=index, key=spec.key, platform=spec.platform, name=spec.name, driver=spec.driver,
                        device_type=spec.device_type, healthy=reason == "", reason=reason)


def _probe_in_child(indices: list[str], source: str) -> dict[str, str]:
    """Verdicts by index from a child process; a device whose probe killed the child is unusable."""
    verdicts: dict[str, str] = {}
    pending = list(indices)
    while pending:
        try:
            proc = subprocess.run([sys.executable, "-m", "kernelcast.tools.hardware.probe", "--source", source, *pending],
                                  capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, stdin=subprocess.DEVNULL)
            out, err, code = proc.stdout, proc.stderr, proc.returncode
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            err, code = f"probe exceeded {PROBE_TIMEOUT_S:.0f} s", -1
        started = None
        for line in out.splitlines():
            record = json.loads(line)
            if "start" in record:
                started = record["start"]
            else:
                verdicts[record["index"]] = record["reason"]
                started = None
        pending = [i for i in pending if i not in verdicts]
        if started is not None:  # the child died (or hung) probing this device
            tail = " ".join([ln for ln in err.strip().splitlines() if "warning" not in ln.lower()][-2:])
            verdicts[started] = f"the runtime crashed while compiling the probe kernel (exit {code}): {tail[:200]}"
            pending.remove(started)
        elif pending:  # died before starting any: give up on the rest
            for index in pending:
                verdicts[index] = f"probe process failed (exit {code}): {err.strip()[-200:]}"
            pending = []
    return verdicts


_memo: dict[tuple[str, str, str], str] = {}


def probe_devices(store: Store | None = None, source: str = PROBE_SOURCE, refresh: bool = False) -> list[DeviceStatus]:
    """Every OpenCL device with its verdict, in :func:`preference` order (cached per device and driver)."""
    listed = _listed()
    specs = {index: device_spec(p, d) for index, p, d in listed}
    known: dict[str, str] = {}
    for index, spec in specs.items():
        memo_key = (spec.key, spec.driver, source)
        if not refresh and memo_key in _memo:
            known[index] = _memo[memo_key]
        elif not refresh and store is not None and source == PROBE_SOURCE:
            cached = store.devices.verdict(spec.key, spec.driver)  # None too for a damaged row: probed again
            if cached is not None:
                known[index] = cached
    missing = [index for index in specs if index not in known]
    if missing:
        fresh = _probe_in_child(missing, source)
        for index, reason in fresh.items():
            spec = specs[index]
            _memo[(spec.key, spec.driver, source)] = reason
            if store is not None and not store.read_only and source == PROBE_SOURCE:  # read-only: not cached
                store.devices.record_verdict(spec.key, spec.driver, reason)
        known.update(fresh)
    return preference([_describe(index, p, d, known[index]) for index, p, d in listed])


def preference(statuses: list[DeviceStatus]) -> list[DeviceStatus]:
    """The documented default order: GPUs, then Intel's CPU runtime, then PoCL, then anything else.

    Intel's runtime comes before PoCL on CPUs: it compiles for every x86-64 CPU, while PoCL's PyPI build fails
    on CPUs newer than its LLVM; on speed neither wins across the built-ins (README, "CPU runtimes side by side").
    """
    def rank(status: DeviceStatus) -> int:
        if status.device_type == "GPU":
            return 0
        if "intel" in status.platform.lower():
            return 1
        if "portable computing language" in status.platform.lower() or "pocl" in status.platform.lower():
            return 2
        return 3

    return sorted(statuses, key=rank)


def choose_device(selector: str | None, store: Store | None = None, source: str = PROBE_SOURCE) -> DeviceStatus:
    """The device a worker should open: the selected one (which must be healthy) or the first healthy one."""
    statuses = probe_devices(store, source)
    if not statuses:
        raise DeviceUnusable("no OpenCL device found (is pyopencl with a CPU runtime installed?)")
    if selector in (None, "", OPENCL.backend):
        for status in statuses:
            if status.healthy:
                return status
        raise DeviceUnusable("no usable OpenCL device: " + "; ".join(f"{s.name} ({s.platform}): {s.reason}"
                                                                      for s in statuses))
    index = match_device(str(selector), [(s.index, s.platform, s.name) for s in statuses])
    chosen = next(s for s in statuses if s.index == index)
    if not chosen.healthy:
        raise DeviceUnusable(f"device {chosen.name} ({chosen.platform}) is unusable: {chosen.reason}")
    return chosen


def _main(argv: list[str]) -> None:
    source = PROBE_SOURCE
    if argv[:1] == ["--source"]:
        source, argv = argv[1], argv[2:]
    wanted = set(argv)
    for index, platform, device in _listed():
        if wanted and index not in wanted:
            continue
        print(json.dumps({"start": index}), flush=True)
        print(json.dumps({"index": index, "reason": probe(platform, device, source)}), flush=True)


def as_dict(status: DeviceStatus) -> dict[str, Any]:
    return asdict(status)


if __name__ == "__main__":
    _main(sys.argv[1:])
