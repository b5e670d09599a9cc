"""The measurement protocol, once, on top of any :class:`~kernelcast.tools.hardware.backends.base.Runner`.

docs/architecture.md "Measurement protocol": our harness only; signature checked; seeded
inputs; outputs poisoned before every launch; guard zones around every
buffer; read-only inputs verified unchanged; correctness on several seeds
against the reference's outputs; warm-up, then reference and candidate timed
interleaved by device events (with a rival kernel, when asked, for a paired
comparison); noisy or implausible results re-measured and flagged. Process
isolation is :mod:`kernelcast.tools.hardware.worker`'s job.
"""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import permutations
from typing import Any

import numpy as np

from kernelcast.tools.core.candidate import Candidate, SignatureError
from kernelcast.tools.core.confinement import check_candidate as confine
from kernelcast.tools.core.errors import InputError, KernelcastError
from kernelcast.tools.core.expr import ExpressionError, evaluate
from kernelcast.tools.core.lru import LRUCache
from kernelcast.tools.core.measurement import MeasureConfig, Measurement, RivalComparison, Status, TimingStats, speedup_interval
from kernelcast.tools.core.task import BufferArg, LocalArg, ScalarArg, Task
from kernelcast.tools.hardware.backends.base import CompileError, DeviceRuntimeError, ProgramStateError, Runner

INT_POISON = 0x5A5A5A5A


class InvalidCandidate(InputError, ValueError):
    """The candidate cannot be run as given (signature, geometry)."""


class WrongResult(KernelcastError, AssertionError):
    """The candidate ran but its outputs, inputs or guards are wrong."""


class ReferenceBroken(InvalidCandidate):
    """The task's own reference fails the checks: a task-file mistake, not a candidate's."""


def reference_problems(task: Task, result: LaunchResult, unwritten: dict[str, np.ndarray] | None = None,
                       second: LaunchResult | None = None) -> list[str]:
    """What makes a reference run unusable as the correctness oracle, with the likely task-file fix.
    ``unwritten``: per output, the elements the reference never writes (they hold the poison and are no
    problem: a stencil leaves its border alone). ``second``: the same launch with outputs filled with finite
    values (``second_poison``), which tells NaN read from the poison (the buffer is read before it is written)
    from NaN the reference computes itself. Infinite outputs are results like any other (the poison is NaN, and
    the comparison takes equal infinities as equal)."""
    problems = []
    for problem in result.problems:
        if problem.startswith("out-of-bounds write"):
            problems.append(f"{problem} (the task's shapes are too small for the reference's launch)")
        else:
            problems.append(problem)
    for name, data in result.outputs.items():
        skip = unwritten.get(name) if unwritten else None
        if np.issubdtype(data.dtype, np.floating):
            bad_at = np.isnan(data)
        else:
            bad_at = data == poison(data.dtype, 1)[0] if data.size else np.zeros(0, bool)
        if skip is not None:
            bad_at = bad_at & ~skip
        bad = int(bad_at.sum())
        if not np.issubdtype(data.dtype, np.floating):
            bad = bad if bad > max(1, data.size // 100) else 0
        if not bad:
            continue
        if second is not None and np.issubdtype(data.dtype, np.floating) and \
                (own := int((np.isnan(second.outputs[name]) & bad_at).sum())):
            problems.append(f"output {name!r}: the reference computes NaN in {own} of {data.size} elements on the "
                            "seeded inputs, whatever the buffer held before: give the inputs a range on which its "
                            "results are numbers (the argument's init, low and high)")
        else:
            problems.append(f"output {name!r} holds {bad} of {data.size} NaN/poison values after the reference "
                            f"ran: the reference reads {name!r} before writing it (elements it never writes are "
                            f"allowed, those it computes from the poison are not); declare it intent = \"inout\"")
    return problems


@dataclass
class LaunchResult:
    outputs: dict[str, np.ndarray]
    elapsed_ns: float
    problems: list[str] = field(default_factory=list)


# ---- inputs -----------------------------------------------------------------------
def buffer_count(arg: BufferArg | LocalArg, sizes: dict[str, int]) -> int:
    return int(math.prod(int(evaluate(e, sizes)) for e in arg.shape))


def buffer_bytes(arg: BufferArg | LocalArg, sizes: dict[str, int]) -> int:
    return buffer_count(arg, sizes) * np.dtype(arg.dtype).itemsize


def make_inputs(task: Task, sizes: dict[str, int], seed: int) -> dict[str, np.ndarray]:
    """Seeded host arrays for every buffer argument that is read (in/inout)."""
    rng = np.random.default_rng(seed)
    arrays: dict[str, np.ndarray] = {}
    for arg in task.spec.args:
        if not isinstance(arg, BufferArg) or arg.direction == "out":
            continue
        arrays[arg.name] = _init_array(arg, buffer_count(arg, sizes), rng)
    return arrays


def _init_array(arg: BufferArg, count: int, rng: np.random.Generator) -> np.ndarray:
    dtype = np.dtype(arg.dtype)
    integer = np.issubdtype(dtype, np.integer)
    if arg.init == "zeros":
        return np.zeros(count, dtype)
    if arg.init == "ones":
        return np.ones(count, dtype)
    if arg.init == "arange":
        return np.arange(count).astype(dtype)
    if arg.init == "randint" or integer:
        return rng.integers(int(arg.low), int(arg.high), size=count, endpoint=False).astype(dtype)
    if arg.init == "normal":
        return rng.standard_normal(count).astype(dtype)
    if arg.init == "positive":
        return rng.uniform(0.1, 1.0, count).astype(dtype)
    return rng.uniform(arg.low, arg.high, count).astype(dtype)


def scalar_values(task: Task, sizes: dict[str, int]) -> dict[str, Any]:
    return {a.name: np.dtype(a.dtype).type(evaluate(a.value, sizes)) for a in task.spec.args if isinstance(a, ScalarArg)}


def poison(dtype: np.dtype, count: int) -> np.ndarray:
    """Values no correct kernel leaves behind: NaN for floats, a bit pattern for integers."""
    dtype = np.dtype(dtype)
    if np.issubdtype(dtype, np.floating):
        return np.full(count, np.nan, dtype)
    return np.full(count * dtype.itemsize, 0x5A, np.uint8).view(dtype)


def second_poison(dtype: np.dtype, count: int) -> np.ndarray:
    """Another fill, finite for floats: an element that holds it exactly after a launch was never written
    (one the kernel read and then wrote would have changed), so it tells unwritten elements from ones
    computed from the poison."""
    dtype = np.dtype(dtype)
    if np.issubdtype(dtype, np.floating):
        return np.full(count, -1234.5678, dtype)
    return np.full(count * dtype.itemsize, 0x3C, np.uint8).view(dtype)


def unwritten_elements(first: LaunchResult, second: LaunchResult) -> dict[str, np.ndarray]:
    """Per output, the elements a kernel left alone in both launches: the poison in the first (``poison``)
    and the other fill in the second (``second_poison``), bit for bit. Only outputs with such elements."""
    masks = {}
    for name, data in first.outputs.items():
        other = second.outputs[name]
        left = (data.view(np.uint8).reshape(data.size, -1) == poison(data.dtype, 1).view(np.uint8)).all(axis=1)
        left &= (other.view(np.uint8).reshape(other.size, -1)
                 == second_poison(other.dtype, 1).view(np.uint8)).all(axis=1)
        if left.any():
            masks[name] = left
    return masks


# ---- geometry ---------------------------------------------------------------------
def resolve_geometry(candidate: Candidate, sizes: dict[str, int], max_wg: int,
                     ) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    try:
        glob = tuple(_whole(evaluate(e, sizes), e) for e in candidate.global_size)
        loc = tuple(_whole(evaluate(e, sizes), e) for e in candidate.local_size) if candidate.local_size else None
    except (ExpressionError, ZeroDivisionError, TypeError) as exc:
        raise InvalidCandidate(f"launch geometry: {exc}") from None
    if not 1 <= len(glob) <= 3 or any(g <= 0 for g in glob):
        raise InvalidCandidate(f"global size {glob} must have 1-3 positive dimensions")
    if loc is not None:
        if len(loc) != len(glob):
            raise InvalidCandidate(f"local size {loc} and global size {glob} differ in rank")
        if any(size <= 0 or g % size for g, size in zip(glob, loc)):
            raise InvalidCandidate(f"global size {glob} is not a multiple of local size {loc}")
        if max_wg and math.prod(loc) > max_wg:
            raise InvalidCandidate(f"work-group of {math.prod(loc)} items exceeds the device limit {max_wg}")
    return glob, loc


def _whole(value: int | float, expr: str) -> int:
    if isinstance(value, float) and not value.is_integer():
        raise InvalidCandidate(f"geometry expression {expr!r} is not a whole number ({value})")
    return int(value)


# ---- one launch ---------------------------------------------------------------------
def bind_args(runner: Runner, task: Task, sizes: dict[str, int], inputs: dict[str, np.ndarray],
              fill: Callable[[np.dtype, int], np.ndarray] = poison) -> tuple[list[Any], dict[str, Any]]:
    """Kernel arguments in order: guarded device buffers (inputs uploaded, outputs filled with ``fill``,
    the poison) and scalars."""
    scalars = scalar_values(task, sizes)
    args: list[Any] = []
    bufs: dict[str, Any] = {}
    try:
        for arg in task.spec.args:
            if isinstance(arg, ScalarArg):
                args.append(scalars[arg.name])
                continue
            if isinstance(arg, LocalArg):
                args.append(runner.local_memory(buffer_bytes(arg, sizes)))
                continue
            dtype, count = np.dtype(arg.dtype), buffer_count(arg, sizes)
            buf = runner.alloc(count * dtype.itemsize)
            bufs[arg.name] = buf
            runner.upload(buf, inputs[arg.name] if arg.direction != "out" else fill(dtype, count))
            args.append(buf)
    except Exception:
        for buf in bufs.values():
            runner.release(buf)
        raise
    return args, bufs


def run_once(runner: Runner, task: Task, kernel: Any, sizes: dict[str, int], inputs: dict[str, np.ndarray],
             geometry: tuple[tuple[int, ...], tuple[int, ...] | None],
             fill: Callable[[np.dtype, int], np.ndarray] = poison) -> LaunchResult:
    """Fresh buffers, outputs poisoned (``fill``), one launch, everything read back and checked."""
    args, bufs = bind_args(runner, task, sizes, inputs, fill)
    try:
        elapsed = runner.launch(kernel, args, *geometry)
        outputs: dict[str, np.ndarray] = {}
        problems: list[str] = []
        for arg in task.spec.args:
            if not isinstance(arg, BufferArg):
                continue
            buf = bufs[arg.name]
            if not runner.guards_intact(buf):
                problems.append(f"out-of-bounds write: the guard zone around buffer {arg.name!r} was overwritten")
            data = runner.download(buf, np.dtype(arg.dtype), buffer_count(arg, sizes))
            if arg.direction == "in":
                if not same_bytes(data, inputs[arg.name]):
                    problems.append(f"read-only input {arg.name!r} was modified by the kernel")
            else:
                outputs[arg.name] = data
        return LaunchResult(outputs, elapsed, problems)
    finally:
        for buf in bufs.values():
            runner.release(buf)


def compare_outputs(task: Task, expected: dict[str, np.ndarray], actual: dict[str, np.ndarray]) -> list[str]:
    """Human-readable differences between the reference's and the candidate's outputs."""
    tol = task.spec.tolerance
    problems = []
    for name, ref in expected.items():
        got = actual[name]
        if got.shape != ref.shape:
            problems.append(f"output {name!r} has shape {got.shape}, expected {ref.shape}")
            continue
        if np.issubdtype(ref.dtype, np.floating):
            if _within_tolerance(got, ref, tol.rtol, tol.atol):
                continue  # the common case, in two passes: the timed launches are checked, so this runs often
            ref_finite, got_finite = np.isfinite(ref), np.isfinite(got)
            bad_nonfinite = ref_finite & ~got_finite
            if bad_nonfinite.any():
                idx = int(np.flatnonzero(bad_nonfinite)[0])
                problems.append(f"output {name!r}: {int(bad_nonfinite.sum())} NaN/Inf values where the reference is "
                                f"finite (first at index {idx}: {got[idx]})")
                continue
            close = np.isclose(got, ref, rtol=tol.rtol, atol=tol.atol, equal_nan=True)
        else:
            close = got == ref
        if not close.all():
            idx = int(np.flatnonzero(~close)[0])
            err = np.abs(got.astype(np.float64) - ref.astype(np.float64))
            problems.append(f"output {name!r}: {int((~close).sum())} of {ref.size} values differ "
                            f"(first at index {idx}: got {got[idx]}, expected {ref[idx]}; max abs error "
                            f"{float(np.nanmax(err)):.3g}, rtol={tol.rtol}, atol={tol.atol})")
    return problems


def _within_tolerance(got: np.ndarray, ref: np.ndarray, rtol: float, atol: float, chunk: int = 1 << 16) -> bool:
    """True when every value is within ``atol + rtol*|ref|`` (NaN or Inf in ``got`` never is); the exact
    ``np.isclose`` path names the differences when this says no. Works in cache-sized chunks: the timed
    launches are checked, so this runs several times per measurement on operands of many MiB. The caller has
    checked the shapes."""
    got, ref = got.ravel(), ref.ravel()
    size = min(chunk, ref.size)
    bound, diff, ok = np.empty(size, ref.dtype), np.empty(size, ref.dtype), np.empty(size, bool)
    for start in range(0, ref.size, chunk):
        r, g = ref[start:start + chunk], got[start:start + chunk]
        b, d, o = bound[:r.size], diff[:r.size], ok[:r.size]
        np.abs(r, out=b)
        b *= rtol
        b += atol
        np.subtract(g, r, out=d)
        np.abs(d, out=d)
        np.less_equal(d, b, out=o)
        if not o.all():
            return False
    return True


def same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    """Bit-for-bit equality (NaN payloads included), compared in the widest word that divides the size."""
    if a.nbytes != b.nbytes:
        return False
    a8, b8 = np.ascontiguousarray(a).view(np.uint8).ravel(), np.ascontiguousarray(b).view(np.uint8).ravel()
    for word in (np.uint64, np.uint32, np.uint16):
        if a8.size % np.dtype(word).itemsize == 0:
            return bool(np.array_equal(a8.view(word), b8.view(word)))
    return bool(np.array_equal(a8, b8))


def task_identity(task: Task) -> str:
    """Two task files may share a name and a kernel but not shapes or scalars: cached reference outputs are
    keyed by the whole spec, never by the name alone."""
    import hashlib

    return hashlib.sha256(f"{task.path}\x1f{task.spec.model_dump_json()}".encode()).hexdigest()[:16]


def fresh_seed(seeds: list[int]) -> int:
    """A seed the correctness phase did not use, for the final check after timing."""
    return max(seeds, default=0) + 1_000_003


# ---- the protocol -----------------------------------------------------------------
#: host memory the harness may keep for seeded inputs it will upload again (see Harness.inputs), and as much
#: for the reference's outputs it checks candidates against (per task, size set and seed: a long session over
#: many tasks kept every one of them)
INPUT_CACHE_BYTES = 512 * 2**20
REFERENCE_CACHE_BYTES = 512 * 2**20


@dataclass
class _Kernel:
    """A built kernel and the launch geometry it runs with."""

    kernel: Any
    geometry: Any


@dataclass
class _Rival(_Kernel):
    candidate: Candidate


@dataclass
class _Timed:
    """What one timing session produced."""

    reference: TimingStats
    candidate: TimingStats
    interval: tuple[float, float]
    flags: list[str]
    device_ns: float
    rival: RivalComparison | None = None


def _nbytes(arrays: dict[str, np.ndarray]) -> int:
    return sum(a.nbytes for a in arrays.values())


class Harness:
    """Measures candidates of tasks on one runner; caches reference outputs per seed."""

    def __init__(self, runner: Runner) -> None:
        self.runner = runner
        # by (task_identity, reference, sizes, seed)
        self._ref_outputs: LRUCache[dict[str, np.ndarray]] = LRUCache(REFERENCE_CACHE_BYTES, _nbytes)
        self._confined: set[tuple[str, str, tuple[str, ...]]] = set()
        self._inputs: LRUCache[dict[str, np.ndarray]] = LRUCache(INPUT_CACHE_BYTES, _nbytes)
        # per (task_identity, size set): how many elements of each output the reference never writes
        self._unwritten: dict[tuple[str, str], dict[str, int]] = {}

    def inputs(self, task: Task, sizes: dict[str, int], seed: int) -> dict[str, np.ndarray]:
        """Seeded inputs, generated once per (task, sizes, seed) and kept read-only: generating a large
        operand costs more than launching a kernel on it. The least recently used are dropped beyond
        ``INPUT_CACHE_BYTES``."""
        key = (task_identity(task), tuple(sorted(sizes.items())), seed)
        if (cached := self._inputs.get(key)) is not None:
            return cached
        arrays = make_inputs(task, sizes, seed)
        for array in arrays.values():
            array.flags.writeable = False
        self._inputs.put(key, arrays)
        return arrays

    def build(self, task: Task, candidate: Candidate, fresh: bool = False) -> tuple[Any, bool, float]:
        """Compile a confined candidate: no file directives, allowed options only, the reference's signature,
        no state kept between launches (checked once per task and candidate, so a cached build stays cheap).
        ``fresh``: a new program outside the compile cache, whose memory no earlier launch touched."""
        key = (task_identity(task), candidate.hash, tuple(candidate.build_options))
        if key not in self._confined:
            confine(task, candidate)
            self._confined.add(key)
        return self.runner.build(candidate.source, task.spec.entry, candidate.build_options, fresh=fresh)

    def outputs(self, task: Task, candidate: Candidate, sizes_name: str, seed: int) -> LaunchResult:
        """Run a candidate once on seeded inputs (for tests against numpy and for debugging)."""
        sizes = task.sizes(sizes_name)  # type: ignore[arg-type]
        kernel, _, _ = self.build(task, candidate)
        geometry = resolve_geometry(candidate, sizes, self.runner.hardware_spec().max_work_group_size)
        return run_once(self.runner, task, kernel, sizes, self.inputs(task, sizes, seed), geometry)

    def measure(self, task: Task, candidate: Candidate, config: MeasureConfig) -> Measurement:
        """The full protocol. Never raises for a bad candidate: the status says what went wrong."""
        start = time.perf_counter()
        base: dict[str, Any] = dict(task=task.name, task_fingerprint=task.fingerprint, candidate_hash=candidate.hash,
                                    device=self.runner.hardware_spec().key, sizes=config.sizes, seeds=list(config.seeds))
        kernel_ns = 0.0
        compile_ms = 0.0
        try:
            if candidate.task != task.name:
                raise InvalidCandidate(f"candidate belongs to task {candidate.task!r}, not {task.name!r}")
            sizes = task.sizes(config.sizes)  # type: ignore[arg-type]
            max_wg = self.runner.hardware_spec().max_work_group_size
            reference = task.reference()
            ref_geometry = resolve_geometry(reference, sizes, max_wg)
            geometry = resolve_geometry(candidate, sizes, max_wg)
            ref_kernel, _, _ = self.build(task, reference)
            kernel, cache_hit, compile_ms = self.build(task, candidate)
            if config.check_correctness:
                for seed in config.seeds:
                    expected = self._reference_outputs(task, reference, ref_kernel, sizes, config.sizes, seed, ref_geometry)
                    result = run_once(self.runner, task, kernel, sizes, self.inputs(task, sizes, seed), geometry)
                    kernel_ns += result.elapsed_ns
                    problems = result.problems + compare_outputs(task, expected, result.outputs)
                    if problems:
                        raise WrongResult(f"seed {seed}: " + "; ".join(problems))
            if not config.time_kernels:
                return Measurement(**base, status=Status.correct, reason="correct (not timed)", compile_ms=compile_ms,
                                   cache_hit=cache_hit, wall_ms=(time.perf_counter() - start) * 1e3)
            timing_seed = config.seeds[0] if config.seeds else 0
            timing_expected = (self._reference_outputs(task, reference, ref_kernel, sizes, config.sizes, timing_seed,
                                                       ref_geometry) if config.check_correctness else None)
            rival, rival_flags = self._rival(task, config, sizes, max_wg)
            timed = self._time(task, _Kernel(ref_kernel, ref_geometry), _Kernel(kernel, geometry), sizes, config,
                               timing_expected, rival)
            ref_stats, cand_stats, interval, flags = timed.reference, timed.candidate, timed.interval, \
                rival_flags + timed.flags
            kernel_ns += timed.device_ns
            reason = "correct on seeds " + ",".join(map(str, config.seeds))
            if config.check_correctness and config.verify_timed:
                final_seed = fresh_seed(config.seeds)
                fresh_expected = self._reference_outputs(task, reference, ref_kernel, sizes, config.sizes, final_seed,
                                                         ref_geometry)
                # a program of its own: whatever the timed launches left in the program cannot answer this one
                fresh_kernel, _, _ = self.build(task, candidate, fresh=True)  # its cost counts as the harness's
                if scrub := self.runner.local_memory_scrub([fresh_kernel]):
                    scrub()  # nor what they left in work-group memory
                result = run_once(self.runner, task, fresh_kernel, sizes, self.inputs(task, sizes, final_seed),
                                  geometry)
                kernel_ns += result.elapsed_ns
                problems = result.problems + compare_outputs(task, fresh_expected, result.outputs)
                if problems:
                    raise WrongResult(f"final check on fresh inputs (seed {final_seed}): " + "; ".join(problems))
                reason += f", timed launches checked, final check on fresh seed {final_seed} (fresh build)"
            wall_ms = (time.perf_counter() - start) * 1e3
            return Measurement(
                **base, status=Status.correct, reason=reason,
                reference=ref_stats, candidate=cand_stats, speedup=ref_stats.median_ns / cand_stats.median_ns,
                speedup_ci=interval, flags=flags, rival=timed.rival, compile_ms=compile_ms, cache_hit=cache_hit,
                wall_ms=wall_ms,
                harness_ms=max(0.0, wall_ms - compile_ms - kernel_ns / 1e6),
            )
        except (InvalidCandidate, SignatureError, ProgramStateError) as exc:
            status, reason = Status.invalid, str(exc)
        except CompileError as exc:
            status, reason = Status.compile_error, exc.log
        except WrongResult as exc:
            status, reason = Status.incorrect, str(exc)
        except DeviceRuntimeError as exc:
            status, reason = Status.runtime_error, str(exc)
        except Exception as exc:  # noqa: BLE001 - any runtime surprise is a failed measurement, not a crash
            status, reason = Status.runtime_error, f"{type(exc).__name__}: {exc}"
        return Measurement(**base, status=status, reason=reason[:4000], compile_ms=compile_ms or None,
                           wall_ms=(time.perf_counter() - start) * 1e3)

    def _reference_outputs(self, task: Task, reference: Candidate, kernel: Any, sizes: dict[str, int],
                           sizes_name: str, seed: int, geometry: Any) -> dict[str, np.ndarray]:
        key = (task_identity(task), reference.hash, sizes_name, seed)
        if (cached := self._ref_outputs.get(key)) is not None:
            return cached
        inputs = self.inputs(task, sizes, seed)
        result = run_once(self.runner, task, kernel, sizes, inputs, geometry)
        unwritten: dict[str, np.ndarray] = {}
        second = None
        if reference_problems(task, result):  # poison left behind: elements never written, or a real problem?
            second = run_once(self.runner, task, kernel, sizes, inputs, geometry, second_poison)
            unwritten = unwritten_elements(result, second)
        problems = reference_problems(task, result, unwritten, second)
        if problems:
            raise ReferenceBroken("the task's reference kernel failed its own checks: " + "; ".join(problems))
        self._unwritten[(task_identity(task), sizes_name)] = {name: int(mask.sum()) for name, mask in unwritten.items()}
        self._ref_outputs.put(key, result.outputs)
        return result.outputs

    def check_reference(self, task: Task, sizes_name: str) -> list[str]:
        """Build and run the reference once before anything is spent; raises what is wrong with the task, and
        returns what a user should know about it (outputs it writes only in part)."""
        sizes = task.sizes(sizes_name)  # type: ignore[arg-type]
        reference = task.reference()
        geometry = resolve_geometry(reference, sizes, self.runner.hardware_spec().max_work_group_size)
        kernel, _, _ = self.build(task, reference)
        self._reference_outputs(task, reference, kernel, sizes, sizes_name, 0, geometry)
        return [f"output {name!r}: the reference never writes {count} of its {buffer_count(arg, sizes)} elements at "
                f"{sizes_name} sizes; they are left out of the comparison, and a candidate must leave them unwritten too"
                for name, count in self._unwritten.get((task_identity(task), sizes_name), {}).items()
                for arg in task.spec.args if isinstance(arg, BufferArg) and arg.name == name]

    def _rival(self, task: Task, config: MeasureConfig, sizes: dict[str, int], max_wg: int
               ) -> tuple[_Rival | None, list[str]]:
        """The rival kernel to time beside the candidate (None: none asked, or it cannot run; a flag says why).
        A rival that cannot be built or launched costs the comparison, never the candidate's measurement."""
        rival = config.rival
        if rival is None:
            return None, []
        try:
            if rival.task != task.name:
                raise InvalidCandidate(f"it belongs to task {rival.task!r}")
            geometry = resolve_geometry(rival, sizes, max_wg)
            kernel, _, _ = self.build(task, rival)
        except (InvalidCandidate, SignatureError, CompileError, DeviceRuntimeError) as exc:
            return None, [f"rival {rival.hash[:12]} not timed: {str(exc)[:200]}"]
        return _Rival(kernel, geometry, rival), []

    def _time(self, task: Task, ref: _Kernel, cand: _Kernel, sizes: dict[str, int], config: MeasureConfig,  # noqa: C901
              expected: dict[str, np.ndarray] | None, rival: _Rival | None = None) -> _Timed:
        """Time reference and candidate interleaved (alternating order) on their own buffers; with a rival, the
        three in all six orders in turn, so each kernel precedes each other equally often.

        Before every launch, outside its timed event, outputs are poisoned again and inout buffers restored,
        so a kernel cannot find its previous results and skip work; the last launch of each batch and one
        launch chosen at random are checked against the reference (``expected``). Batches are added while the
        speedup's bootstrap interval is wider than ``config.ci_target``, within ``config.max_timing_seconds``.
        """
        runner = self.runner
        ref_kernel, ref_geometry, kernel, geometry = ref.kernel, ref.geometry, cand.kernel, cand.geometry
        inputs = self.inputs(task, sizes, config.seeds[0] if config.seeds else 0)
        ref_args, ref_bufs = bind_args(runner, task, sizes, inputs)
        cand_args, cand_bufs = bind_args(runner, task, sizes, inputs)
        rival_args: list[Any] = []
        rival_bufs: dict[str, Any] = {}
        rival_problems: list[str] = []  # anything wrong with the rival drops it, never the candidate
        if rival is not None:
            try:
                rival_args, rival_bufs = bind_args(runner, task, sizes, inputs)
            except DeviceRuntimeError as exc:
                rival_problems.append(f"its buffers could not be allocated: {exc}")
        fresh = {arg.name: (inputs[arg.name] if arg.direction == "inout" else poison(np.dtype(arg.dtype),
                                                                                  buffer_count(arg, sizes)))
                 for arg in task.spec.args if isinstance(arg, BufferArg) and arg.direction != "in"}
        # device copies of what each written buffer holds before a launch (inout inputs, output poison),
        # restored from on the device: a device copy is cheap everywhere, while a patterned fill is slower than
        # the kernel itself on Intel's CPU runtime
        pristine: dict[str, Any] = {}
        for name, array in fresh.items():
            pristine[name] = runner.alloc(array.nbytes)
            runner.upload(pristine[name], array)
        # a launch touches its own buffers; the reset before it dirtied the written ones in the cache
        working_set = sum(buffer_bytes(arg, sizes) for arg in task.spec.args if isinstance(arg, BufferArg))
        total_ns = 0.0
        # work-group memory that outlives a launch on some runtimes: overwritten before every timed launch
        scrub = runner.local_memory_scrub([ref_kernel, kernel] + ([rival.kernel] if rival is not None else []))

        def reset(bufs: dict[str, Any]) -> None:
            """Outputs poisoned again, inout buffers restored: on the device, outside the timed event."""
            for name, array in fresh.items():
                runner.copy(bufs[name], pristine[name], array)

        def launch(k: Any, args: list[Any], bufs: dict[str, Any], geom: Any) -> float:
            if config.verify_timed:
                reset(bufs)
            if scrub is not None:
                scrub()
            runner.flush_caches(working_set)
            return runner.launch(k, args, *geom)

        def output_problems(bufs: dict[str, Any]) -> list[str]:
            """What is wrong with the outputs a kernel's last launch left in ``bufs``."""
            assert expected is not None
            outputs = {name: runner.download(bufs[name], array.dtype, array.size) for name, array in fresh.items()}
            return compare_outputs(task, expected, outputs) + [f"out-of-bounds write into {name!r}"
                                                               for name, buf in bufs.items()
                                                               if not runner.guards_intact(buf)]

        def check_candidate(when: str) -> None:
            if expected is None:
                return
            if problems := output_problems(cand_bufs):
                raise WrongResult(f"results changed during timing ({when}): " + "; ".join(problems))

        def check_rival(when: str) -> None:
            if expected is not None and (problems := output_problems(rival_bufs)):
                rival_problems.append(f"its results were wrong during timing ({when}): " + "; ".join(problems))

        def launch_rival() -> float | None:
            """The rival's launch time, or None once it failed (a rival's failure costs the comparison only)."""
            assert rival is not None
            try:
                return launch(rival.kernel, rival_args, rival_bufs, rival.geometry)
            except Exception as exc:  # noqa: BLE001 - whatever the rival does, the candidate's measurement stands
                rival_problems.append(f"its launch failed: {type(exc).__name__}: {exc}")
                return None

        try:
            warm_ref = [launch(ref_kernel, ref_args, ref_bufs, ref_geometry) for _ in range(max(1, config.warmup))]
            warm_cand = [launch(kernel, cand_args, cand_bufs, geometry) for _ in range(max(1, config.warmup))]
            warm_rival = [t for _ in range(max(1, config.warmup)) if rival is not None and not rival_problems
                          and (t := launch_rival()) is not None]
            warm_ns = sum(warm_ref) + sum(warm_cand) + sum(warm_rival)
            per_round = max(min(warm_ref) + min(warm_cand) + min(warm_rival, default=0.0), 1.0)
            reps = int(min(config.max_reps, max(config.min_reps, config.target_seconds * 1e9 / per_round)))
            ref_t: list[float] = []
            cand_t: list[float] = []
            rival_t: list[float] = []
            flags: list[str] = []
            batches = 0
            # every order of the kernels in turn: two alternate; with a rival, all six orders (until it is dropped)
            pair_orders = list(permutations(["ref", "cand"]))
            rival_orders = list(permutations(["ref", "cand", "rival"]))
            while True:
                # the launch checked besides the last: drawn per batch from the system's cryptographic source and
                # kept nowhere, so no kernel, seed or stored row can tell which launch will be checked
                spot = secrets.randbelow(reps)
                for i in range(reps):
                    orders = rival_orders if rival is not None and not rival_problems else pair_orders
                    for which in orders[i % len(orders)]:
                        if which == "ref":
                            ref_t.append(launch(ref_kernel, ref_args, ref_bufs, ref_geometry))
                        elif which == "cand":
                            cand_t.append(launch(kernel, cand_args, cand_bufs, geometry))
                            if config.verify_timed and i in (spot, reps - 1):
                                check_candidate(f"batch {batches + 1}, launch {i + 1}")
                        elif not rival_problems and (t := launch_rival()) is not None:
                            rival_t.append(t)
                            if config.verify_timed and i in (spot, reps - 1):
                                check_rival(f"batch {batches + 1}, launch {i + 1}")
                batches += 1
                total_ns = warm_ns + sum(ref_t) + sum(cand_t) + sum(rival_t)
                speedup = float(np.median(ref_t) / np.median(cand_t))
                low, high = speedup_interval(ref_t, cand_t)
                wide = (high - low) / 2 > config.ci_target * speedup
                implausible = speedup > config.implausible_speedup or speedup < 1 / config.implausible_speedup
                if not config.remeasure or batches >= config.max_batches or total_ns / 1e9 >= config.max_timing_seconds:
                    break
                if not (wide or (implausible and batches < 2)):
                    break
            if batches > 1:
                flags.append(f"remeasured: {batches} batches of {reps} repetitions")
            ref_stats, cand_stats = TimingStats.from_samples(ref_t), TimingStats.from_samples(cand_t)
            if max(ref_stats.cv, cand_stats.cv) > config.cv_limit:
                flags.append(f"noisy: CV ref {ref_stats.cv:.1%} / cand {cand_stats.cv:.1%} above {config.cv_limit:.0%}")
            if wide:
                flags.append(f"imprecise: 95% interval {low:.2f}x-{high:.2f}x wider than +-{config.ci_target:.0%}")
            if implausible:
                flags.append(f"implausible: speedup {speedup:.2f}x confirmed by re-measurement")
            if config.verify_timed and expected is not None:
                if modified := self._modified_inputs(cand_bufs, inputs, fresh):
                    raise WrongResult(f"results changed during timing: read-only input {modified[0]!r} was modified")
                if rival is not None and not rival_problems:
                    rival_problems += [f"it modified its read-only input {name!r}"
                                       for name in self._modified_inputs(rival_bufs, inputs, fresh)]
            compared = None
            if rival is not None:
                compared, rival_flags = self._compare_rival(rival.candidate, ref_t, cand_t, rival_t, rival_problems)
                flags += rival_flags
            return _Timed(ref_stats, cand_stats, (low, high), flags, total_ns, compared)
        finally:
            for buf in [*ref_bufs.values(), *cand_bufs.values(), *rival_bufs.values(), *pristine.values()]:
                runner.release(buf)

    def _modified_inputs(self, bufs: dict[str, Any], inputs: dict[str, np.ndarray], written: dict[str, Any]
                         ) -> list[str]:
        """The read-only inputs among ``bufs`` that no longer hold their seeded values."""
        return [name for name, buf in bufs.items()
                if (arg_in := inputs.get(name)) is not None and name not in written
                and not same_bytes(self.runner.download(buf, arg_in.dtype, arg_in.size), arg_in)]

    @staticmethod
    def _compare_rival(rival: Candidate, ref_t: list[float], cand_t: list[float], rival_t: list[float],
                       problems: list[str]) -> tuple[RivalComparison | None, list[str]]:
        """The paired comparison with the rival, unless anything went wrong with it (then no comparison: a rival
        that skips work during timing would make every candidate look slow against it)."""
        if problems or not rival_t:
            return None, [f"rival {rival.hash[:12]} dropped: " + "; ".join(problems or ["it was never timed"])[:300]]
        rival_stats = TimingStats.from_samples(rival_t)
        return RivalComparison(candidate_hash=rival.hash, timing=rival_stats,
                               speedup=float(np.median(ref_t)) / rival_stats.median_ns,
                               ratio=rival_stats.median_ns / float(np.median(cand_t)),
                               ratio_ci=speedup_interval(rival_t, cand_t)), []
