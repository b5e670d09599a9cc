"""Kernel Tuner cache files as recorded measurements of a template task on a recorded device.

A Kernel Tuner cache (``tune_kernel(..., cache=FILE)``, "original" format, JSON, optionally gzipped) holds one
entry per configuration it tried: the tuning parameters, the objective ``time`` in milliseconds with every
repetition in ``times``, or an error marker for a configuration that did not compile or run. Each configuration
becomes the task's template point of the same parameters; its speedup is over the task's default point (the
point the task's reference reproduces), timed on the same GPU in the same file. Rows are ``recorded``
(``Measurement.provenance``): a replay of the device answers from them, transfer learns from them, and no read of
"this device's measurements" ever sees them.

The T4 format of the FAIR benchmark hub is not read yet (its files sit beside the original ones there).
"""

from __future__ import annotations

import gzip
import io
import json
import math
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.errors import InputError
from kernelcast.tools.core.measurement import HardwareSpec, Measurement, Status, TimingStats
from kernelcast.tools.core.task import Task, TaskError
from kernelcast.tools.hardware.gpu_specs import recorded_device

TOOL = "kernel_tuner"
MAX_CACHE_BYTES = 512 * 2**20  # decompressed; the largest hub cache is about 60 MB
#: Kernel Tuner's markers of configurations that produced no time, and the status each becomes
FAILURES: dict[str, Status] = {"CompilationFailedConfig": Status.compile_error,
                               "RuntimeFailedConfig": Status.runtime_error,
                               "InvalidConfig": Status.invalid}
#: objectives whose values are times in milliseconds (Kernel Tuner's ``time`` is its kernel time in ms)
TIME_OBJECTIVES = ("time",)


class KernelTunerError(InputError):
    """A cache file that cannot be imported into this task: one line saying why."""


class CacheFile(BaseModel):
    """The parts of a Kernel Tuner cache file the import reads."""

    model_config = ConfigDict(extra="ignore")

    device_name: str
    kernel_name: str = ""
    problem_size: Any = None
    tune_params_keys: list[str]
    objective: str = "time"
    cache: dict[str, dict[str, Any]]


@dataclass(frozen=True)
class RecordedSpace:
    """An imported recording: its device, the rows to store, and what the file and the task do not share."""

    device: HardwareSpec
    rows: list[tuple[Candidate, Measurement]]
    recorded: int  # configurations with a time
    failed: int  # configurations recorded as failures
    unrecorded: int  # valid points of the task the file has no entry for (a replay refuses them)


def read_cache(path: Path) -> CacheFile:
    """The cache file at ``path`` (``.json`` or gzipped), or :class:`KernelTunerError` in one line."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise KernelTunerError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(raw)) as fh:
                raw = fh.read(MAX_CACHE_BYTES + 1)
        except (EOFError, OSError, zlib.error) as exc:
            raise KernelTunerError(f"{path}: truncated or damaged gzip file ({exc})") from None
    if len(raw) > MAX_CACHE_BYTES:
        raise KernelTunerError(f"{path}: more than {MAX_CACHE_BYTES // 2**20} MiB of JSON; not a cache file")
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        hint = " (truncated: the file ends before the JSON does)" if "Expecting" in str(exc) and \
            getattr(exc, "pos", 0) >= len(raw.rstrip()) - 1 else ""
        raise KernelTunerError(f"{path}: not valid JSON{hint}: {exc}") from None
    if isinstance(data, dict) and "results" in data and "schema_version" in data:
        raise KernelTunerError(f"{path}: a T4 results file; import the Kernel Tuner cache file (the original format)")
    try:
        cache = CacheFile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise KernelTunerError(f"{path}: not a Kernel Tuner cache file (field "
                               f"'{'.'.join(map(str, first['loc']))}': {first['msg']})") from None
    if cache.objective not in TIME_OBJECTIVES:
        raise KernelTunerError(f"{path}: unknown units: the objective is {cache.objective!r}; only Kernel Tuner's "
                               f"'time' (milliseconds) can be imported as timings")
    return cache


def recorded_space(cache: CacheFile, task: Task, source: str) -> RecordedSpace:
    """The cache's configurations as recorded rows of ``task`` (``source``: the file's name, kept in each row's
    reason and flags). Refused in one line when the cache's parameters are not the task's, a configuration is no
    valid point of the task, a time is not a positive number of milliseconds, or the task's default point (the
    reference every speedup is over) has no time in the file."""
    template = task.spec.template
    if template is None:
        raise KernelTunerError(f"task {task.name!r} has no [template]: a Kernel Tuner space imports into a template task")
    expected = set(template.params)
    if set(cache.tune_params_keys) != expected:
        missing, extra = sorted(expected - set(cache.tune_params_keys)), sorted(set(cache.tune_params_keys) - expected)
        raise KernelTunerError(f"{source}: its parameters do not match task {task.name!r}'s template"
                               + (f"; the task tunes {', '.join(missing)}, which the cache lacks" if missing else "")
                               + (f"; the cache tunes {', '.join(extra)}, which the task lacks" if extra else ""))
    if template.default is None:
        raise KernelTunerError(f"task {task.name!r} has no [template] default: the point its reference reproduces is "
                               "the baseline of every imported speedup")
    device = recorded_device(cache.device_name, task.backend, TOOL)
    timed: list[tuple[dict[str, Any], list[float], str]] = []
    failures: list[tuple[dict[str, Any], Status, str, str]] = []
    for key, entry in cache.cache.items():
        point = {name: entry.get(name) for name in template.params}
        if not task.is_valid_point(point):
            raise KernelTunerError(f"{source}: configuration {key!r} is not a valid point of task {task.name!r}'s "
                                   "template (a value it does not list, or a constraint refuses it): the cache does "
                                   "not match the task")
        value = entry.get("time")
        stamp = str(entry.get("timestamp") or "")
        if isinstance(value, str):
            if value not in FAILURES:
                raise KernelTunerError(f"{source}: configuration {key!r} has time {value[:40]!r}, neither a number of "
                                       f"milliseconds nor one of Kernel Tuner's markers ({', '.join(FAILURES)})")
            failures.append((point, FAILURES[value], value, stamp))
            continue
        timed.append((point, _times_ms(entry, key, source), stamp))
    default = dict(template.default)
    base = next((times for point, times, _ in timed if point == default), None)
    if base is None:
        raise KernelTunerError(f"{source}: the task's default point {default} has no time in the file: it is the "
                               "reference every imported speedup is over")
    reference = _stats(base)
    rows: list[tuple[Candidate, Measurement]] = []
    for point, times, stamp in timed:
        cand = task.instantiate(point, intent=f"recorded by Kernel Tuner on {cache.device_name}", generator=TOOL)
        rows.append((cand, _row(task, cand, device, stamp, _stats(times), reference, source)))
    ref = task.reference()
    if all(cand.hash != ref.hash for cand, _ in rows):  # a reference kernel that is not the default point's source
        rows.append((ref, _row(task, ref, device, "", _stats(base), reference, source)))
    for point, status, marker, stamp in failures:
        cand = task.instantiate(point, intent=f"recorded by Kernel Tuner on {cache.device_name}", generator=TOOL)
        rows.append((cand, Measurement(
            task=task.name, task_fingerprint=task.fingerprint, candidate_hash=cand.hash, device=device.key,
            sizes="full", status=status, provenance="recorded", flags=[f"recorded:{TOOL}"], wall_ms=0.0,
            reason=f"Kernel Tuner recorded {marker} for this configuration on {cache.device_name} ({source})",
            **({"created_at": stamp} if stamp else {}))))
    recorded_points = {json.dumps(p, sort_keys=True) for p, _, _ in timed} | {
        json.dumps(p, sort_keys=True) for p, _, _, _ in failures}
    unrecorded = sum(1 for p in task.param_space() if json.dumps(p, sort_keys=True) not in recorded_points)
    return RecordedSpace(device=device, rows=rows, recorded=len(timed), failed=len(failures), unrecorded=unrecorded)


def _times_ms(entry: dict[str, Any], key: str, source: str) -> list[float]:
    """The configuration's repetitions in ms (``times``, else its single ``time``), each a positive finite number."""
    times = entry.get("times")
    values = times if isinstance(times, list) and times else [entry.get("time")]
    out: list[float] = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v <= 0:
            raise KernelTunerError(f"{source}: configuration {key!r} has a time {str(v)[:40]!r} that is no positive "
                                   "number of milliseconds")
        out.append(float(v))
    return out


def _stats(times_ms: list[float]) -> TimingStats:
    samples = [round(t * 1e6, 1) for t in times_ms]  # ns, 0.1 ns resolution: Kernel Tuner's own is 1 us / 1000
    return TimingStats.from_samples(samples).model_copy(update={"samples_ns": samples})


def _row(task: Task, cand: Candidate, device: HardwareSpec, stamp: str, stats: TimingStats, reference: TimingStats,
         source: str) -> Measurement:
    summary = reference.model_copy(update={"samples_ns": None})  # the reference row keeps its own samples
    return Measurement(
        task=task.name, task_fingerprint=task.fingerprint, candidate_hash=cand.hash, device=device.key, sizes="full",
        status=Status.correct, reference=summary, candidate=stats, speedup=reference.median_ns / stats.median_ns,
        provenance="recorded", flags=[f"recorded:{TOOL}"], wall_ms=sum(stats.samples_ns or []) / 1e6,
        reason=f"recorded by Kernel Tuner ({source})", **({"created_at": stamp} if stamp else {}))


def import_cache(path: Path, task: Task) -> RecordedSpace:
    """Read ``path`` and map it onto ``task`` (nothing stored: ``store.ledger.replace_recorded`` stores it)."""
    try:
        return recorded_space(read_cache(path), task, path.name)
    except TaskError as exc:  # a point the task cannot instantiate
        raise KernelTunerError(f"{path}: {exc}") from None


__all__ = ["CacheFile", "FAILURES", "KernelTunerError", "RecordedSpace", "TOOL", "import_cache", "read_cache",
           "recorded_space"]
