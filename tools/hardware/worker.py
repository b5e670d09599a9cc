"""Process isolation for measurements.

Kernels run in a long-lived worker process (one device context, a warm
compile cache). A hang, a segfault or an aborting compiler kills only the
worker: the caller gets a ``timeout`` or ``crash`` measurement and the next
request starts a fresh worker.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.errors import DeviceError
from kernelcast.tools.core.language import OPENCL
from kernelcast.tools.core.measurement import HardwareSpec, MeasureConfig, Measurement, Status
from kernelcast.tools.core.task import BufferArg, Task, TaskError
from kernelcast.tools.hardware.backends import UnknownBackendError, get_backend, make_runner
from kernelcast.tools.hardware.backends.base import CompileError, DeviceRuntimeError
from kernelcast.tools.hardware.backends.opencl import split_selector
from kernelcast.tools.hardware.probe import DeviceStatus, choose_device

if TYPE_CHECKING:
    from kernelcast.tools.store.store import Store

STARTUP_TIMEOUT_S = 60.0
PARENT_POLL_S = 0.5  # how often the worker's watchdog looks whether its parent is still there
PR_SET_PDEATHSIG = 1  # linux/prctl.h


class WorkerError(DeviceError, RuntimeError):
    """The worker could not start or answered with an error that is not a measurement outcome."""


def die_with_parent(parent_pid: int, parent_death_signal: bool) -> None:
    """The worker never outlives the process it measures for (a kernel that hangs would otherwise spin on
    every core, re-parented to init, after its parent was killed with SIGKILL or SIGTERM).

    ``parent_death_signal`` (Linux; only when the parent started the worker from its main thread, since the
    kernel sends it when the forking *thread* ends): the kernel kills the worker with SIGKILL when the parent
    dies, with no help from Python. Always: a watchdog thread that kills the worker once its parent pid changes
    (re-parenting), for workers started from other threads (pool slots, server threads) and other systems; it
    needs the GIL, which the OpenCL runtime releases while a kernel runs. A parent already gone: exit now."""
    if parent_death_signal and sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):
            pass  # the watchdog below still holds
    if os.getppid() != parent_pid:
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(PARENT_POLL_S)
        os.kill(os.getpid(), signal.SIGKILL)  # no cleanup: a hung kernel cannot be unwound anyway

    threading.Thread(target=watch, name="parent-watchdog", daemon=True).start()


def _serve(conn: Connection, backend: str, device: str | None) -> None:
    """Worker main loop: build the runner once, then answer requests until told to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when we stop
    try:
        from kernelcast.tools.core.candidate import SignatureError
        from kernelcast.tools.hardware.harness import Harness, InvalidCandidate, ReferenceBroken

        harness = Harness(make_runner(backend, device))
        conn.send(("ready", harness.runner.hardware_spec()))
    except Exception as exc:  # noqa: BLE001 - reported to the parent verbatim
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        return
    while True:
        try:
            op, payload = conn.recv()
        except (EOFError, OSError):
            return
        try:
            if op == "stop":
                return
            if op == "measure":
                task, candidate, config = payload
                conn.send(("ok", harness.measure(task, candidate, config)))
            elif op == "outputs":
                task, candidate, sizes, seed = payload
                result = harness.outputs(task, candidate, sizes, seed)
                conn.send(("ok", (result.outputs, result.problems)))
            elif op == "check_reference":
                task, sizes = payload
                try:
                    conn.send(("ok", harness.check_reference(task, sizes)))
                except (ReferenceBroken, InvalidCandidate, SignatureError) as exc:
                    conn.send(("task_error", str(exc)))
                except CompileError as exc:
                    conn.send(("task_error", f"the reference kernel does not compile on this device:\n{exc}"))
                except DeviceRuntimeError as exc:
                    conn.send(("device_error", f"the reference kernel cannot run on this device: {exc}"))
            elif op == "build":
                task, candidate = payload
                _, hit, ms = harness.build(task, candidate)
                conn.send(("ok", (hit, ms)))
            else:
                conn.send(("error", f"unknown request {op!r}"))
        except CompileError as exc:  # a typed reply: callers must not parse exception names
            conn.send(("compile_error", str(exc)))
        except Exception as exc:  # noqa: BLE001
            conn.send(("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}"))


class MeasurementWorker:
    """Runs the harness in a child process with a hard timeout per request."""

    def __init__(self, backend: str = OPENCL.backend, device: str | None = None, store: "Store | None" = None) -> None:
        self.backend = backend
        self.device = device
        self.store = store  # where device probe verdicts are cached (optional)
        self.device_status: DeviceStatus | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: Any = None
        self._conn: Connection | None = None
        self._spec: HardwareSpec | None = None
        self.restarts = 0

    # ---- lifecycle ------------------------------------------------------------------
    def start(self) -> HardwareSpec:
        if self._proc is not None and self._proc.poll() is None:
            assert self._spec is not None
            return self._spec
        opened = self._resolve_device()
        parent_sock, child_sock = socket.socketpair()
        # stderr is kept in a file: after a crash its tail (e.g. "LLVM ERROR: ...") explains why
        self._stderr = tempfile.TemporaryFile()
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "kernelcast.tools.hardware.worker", str(child_sock.fileno()), self.backend, opened or "",
             str(os.getpid()), "1" if threading.current_thread() is threading.main_thread() else "0"],
            pass_fds=[child_sock.fileno()], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._stderr,
            preexec_fn=_no_core_dumps,
            env={**os.environ, "PYTHONPATH": _import_root() + os.pathsep + os.environ.get("PYTHONPATH", "")},
        )
        child_sock.close()
        parent = self._conn = Connection(parent_sock.detach())
        try:
            started = parent.poll(STARTUP_TIMEOUT_S)
        except BaseException:  # interrupted while the worker starts: it goes too
            self._kill()
            raise
        if not started:
            self._kill()
            raise WorkerError(f"measurement worker did not start within {STARTUP_TIMEOUT_S:.0f} s")
        try:
            kind, payload = parent.recv()
        except EOFError:
            code = self._kill()
            raise WorkerError(f"measurement worker died while starting ({_describe_exit(code)})") from None
        if kind != "ready":
            self._kill()
            raise WorkerError(f"measurement worker could not open the {self.backend} device: {payload}")
        self._spec = payload
        return payload

    def _resolve_device(self) -> str | None:
        """The explicit device the child opens: probed first, so a broken device fails here with its reason."""
        try:
            if not get_backend(self.backend).probed:
                return self.device
            selector, units = split_selector(self.device)
            self.device_status = choose_device(selector, self.store)
        except (UnknownBackendError, DeviceRuntimeError) as exc:
            raise WorkerError(str(exc)) from None
        return self.device_status.index + (f"@{units}" if units is not None else "")

    def close(self) -> None:
        if self._conn is not None and self._proc is not None and self._proc.poll() is None:
            try:
                self._conn.send(("stop", None))
                self._proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self._kill()

    def __enter__(self) -> "MeasurementWorker":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _kill(self) -> int | None:
        code = None
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.kill()
            code = self._proc.wait(timeout=30)
        if self._conn is not None:
            self._conn.close()
        self._proc, self._conn = None, None
        return code

    def _stderr_tail(self, lines: int = 5) -> str:
        """Last lines the worker printed to stderr (compiler aborts say why there)."""
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        text = self._stderr.read().decode(errors="replace").strip().splitlines()
        wanted = [line for line in text if "warning" not in line.lower()][-lines:]
        return "\n".join(wanted)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def hardware_spec(self) -> HardwareSpec:
        return self.start()

    # ---- requests -------------------------------------------------------------------
    def _request(self, op: str, payload: Any, timeout_s: float) -> tuple[str, Any]:
        """("ok", value), ("compile_error"|"error"|"timeout"|"crash", reason); never leaves a broken worker behind."""
        self.start()
        assert self._conn is not None
        try:
            self._conn.send((op, payload))
            if not self._conn.poll(timeout_s):
                self._kill()
                self.restarts += 1
                return "timeout", f"killed after the hard time limit of {timeout_s:.0f} s (kernel hang or too slow)"
            return self._conn.recv()
        except (EOFError, OSError):
            code = self._kill()
            self.restarts += 1
            tail = self._stderr_tail()
            return "crash", (f"the measurement process died ({_describe_exit(code)}): device compiler or runtime crash"
                             + (f"; it printed: {tail}" if tail else ""))
        except BaseException:  # an interrupt (Ctrl-C, SIGINT) while waiting: the worker goes at once, not later
            self._kill()  # (its late reply would answer the next request, and a hung kernel never returns)
            self.restarts += 1
            raise

    def measure(self, task: Task, candidate: Candidate, config: MeasureConfig | None = None) -> Measurement:
        config = config or MeasureConfig()
        start = time.perf_counter()
        kind, value = self._request("measure", (task, candidate, config), config.timeout_s)
        if kind == "ok":
            return value
        status = _failure_status(kind)
        return Measurement(task=task.name, task_fingerprint=task.fingerprint, candidate_hash=candidate.hash,
                           device=self._device_key(), sizes=config.sizes,
                           status=status, reason=str(value)[:4000], seeds=list(config.seeds),
                           wall_ms=(time.perf_counter() - start) * 1e3)

    def outputs(self, task: Task, candidate: Candidate, sizes: str = "small", seed: int = 0,
                timeout_s: float = 120.0) -> tuple[dict[str, Any], list[str]]:
        """One seeded run's outputs (for checks against numpy); raises :class:`WorkerError` on failure."""
        kind, value = self._request("outputs", (task, candidate, sizes, seed), timeout_s)
        if kind != "ok":
            raise WorkerError(f"{kind}: {value}")
        return value

    def check_reference(self, task: Task, sizes: str = "full", timeout_s: float = 120.0) -> list[str]:
        """Run the reference once before anything is spent, within the measurement timeout (notes for the user
        come back, such as outputs the reference writes only in part): :class:`TaskError`
        for a task-file problem (exit 2; a reference that does not finish in time is one), :class:`WorkerError`
        when the device cannot run it (exit 3)."""
        self._check_memory(task, sizes)
        kind, value = self._request("check_reference", (task, sizes), timeout_s)
        if kind == "ok":
            return list(value)
        if kind == "task_error":
            raise TaskError(f"{task.path}: {value}")
        if kind == "timeout":
            raise TaskError(f"{task.path}: the reference kernel did not finish within the measurement timeout of "
                            f"{timeout_s:g} s at {sizes} sizes (KERNELCAST_MEASURE_TIMEOUT_S): it hangs, or the "
                            "sizes are too large for this device")
        if kind == "crash":  # the reference wrote far outside its buffers, most likely
            raise TaskError(f"{task.path}: the reference kernel crashed the runtime ({value}); the task's shapes "
                            "may be too small for the reference's launch")
        raise WorkerError(f"{kind}: {value}" if kind in ("timeout", "crash") else str(value))

    def _check_memory(self, task: Task, sizes: str) -> None:
        """:class:`TaskError` when the task's buffers at ``sizes`` do not fit the device's global memory, before
        anything is allocated (a task file's 7 TiB buffer passed validation, then its host inputs were allocated)."""
        from kernelcast.tools.hardware.harness import buffer_bytes

        spec = self.start()
        values = task.sizes("small" if sizes == "small" else "full")
        need = sum(buffer_bytes(arg, values) for arg in task.spec.args if isinstance(arg, BufferArg))
        if spec.global_mem_bytes and need > spec.global_mem_bytes:
            raise TaskError(f"{task.path}: its buffers at {sizes} sizes take {need / 2**30:,.1f} GiB; the device "
                            f"({spec.name}) has {spec.global_mem_bytes / 2**30:.1f} GiB of global memory")

    def build(self, task: Task, candidate: Candidate, timeout_s: float = 60.0) -> tuple[str, str]:
        """Compile only: ("ok", "") or (status, reason) for validation of proposals."""
        kind, value = self._request("build", (task, candidate), timeout_s)
        if kind == "ok":
            return "ok", ""
        return _failure_status(kind).value, value

    def _device_key(self) -> str:
        return self._spec.key if self._spec else f"{self.backend}:{self.device or 'default'}"


def _failure_status(kind: str) -> Status:
    """The measurement status of a worker reply that is not "ok"."""
    return {"compile_error": Status.compile_error, "timeout": Status.timeout,
            "crash": Status.crash}.get(kind, Status.runtime_error)


def _no_core_dumps() -> None:
    """A crashing compiler should die fast, not spend seconds writing a core file."""
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _import_root() -> str:
    """The folder holding the ``kernelcast`` package, so the worker imports the same code as its parent."""
    import importlib.util

    spec = importlib.util.find_spec("kernelcast")
    locations = list(spec.submodule_search_locations or []) if spec else []
    return os.path.dirname(locations[0]) if locations else ""


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "exit status unknown"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


if __name__ == "__main__":
    die_with_parent(int(sys.argv[4]), sys.argv[5] == "1")
    _serve(Connection(int(sys.argv[1])), sys.argv[2], sys.argv[3] or None)
