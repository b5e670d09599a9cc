"""Static features of a (task, candidate, hardware) triple for the learned forecaster.

Cheap text statistics of the reference and candidate kernels (global loads and
stores, arithmetic, loops, barriers, local memory, vector width), their
deltas, the launch geometry, template parameters, the task's work estimate and
the device's numbers. Features are a flat ``dict[str, float]`` so tasks with
different template parameters share one model (a DictVectorizer aligns them;
unseen names are ignored, missing ones read as 0).

Counting is by regular expression on normalized source, not a compiler: the
point is a fast, stable signal (thousands of candidates per second), not an
exact instruction count.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kernelcast.tools.core.candidate import DERIVED_BASE, Candidate, SignatureError, entry_parameters, normalize_source
from kernelcast.tools.core.expr import ExpressionError, evaluate, evaluate_int
from kernelcast.tools.core.measurement import HardwareSpec
from kernelcast.tools.core.task import Task

Features = dict[str, float]

_PATTERNS: dict[str, re.Pattern[str]] = {
    "loops": re.compile(r"\b(?:for|while)\s*\("),
    "branches": re.compile(r"\bif\s*\(|\?"),
    "barriers": re.compile(r"\b(?:barrier|work_group_barrier|__syncthreads|mem_fence|__syncwarp)\s*\("),
    "local_mem": re.compile(r"\b(?:__local|local|__shared__)\b"),
    "unroll": re.compile(r"#pragma\s+unroll"),
    "atomics": re.compile(r"\batom(?:ic)?_?[a-zA-Z]*\s*\("),
    "math_calls": re.compile(r"\b(?:native_|half_)?(?:sqrt|rsqrt|exp|exp2|log|log2|sin|cos|tan|pow|powr|tanh|erf)\s*\("),
    "fma": re.compile(r"\b(?:fma|mad|__fmaf_rn|fmaf)\s*\("),
    "vloads": re.compile(r"\bvload(?:2|3|4|8|16)\s*\("),
    "vstores": re.compile(r"\bvstore(?:2|3|4|8|16)\s*\("),
    "arith": re.compile(r"(?<![+\-*/=<>!&|^%])[+\-*/%](?![+\-=>/*])"),
}
_VECTOR_WIDTH = re.compile(r"\b(?:float|double|half|u?int|u?char|u?short|u?long)(2|3|4|8|16)\b|\bv(?:load|store)(2|3|4|8|16)\b")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
SOURCE_KEYS = (*_PATTERNS, "global_loads", "global_stores", "vector_width", "lines", "log2_chars")


def _global_pointers(source: str, entry: str, language: str) -> list[str]:
    """Names of the kernel's global pointer arguments (all pointer arguments in CUDA)."""
    try:
        params = entry_parameters(source, entry, language)
    except SignatureError:
        return []
    names = []
    for raw in params.split(","):
        if "*" not in raw or re.search(r"\b(?:__local|local|__constant|constant)\b", raw):
            continue
        idents = _IDENT.findall(raw)
        if idents:
            names.append(idents[-1])
    return names


_DEFINE_PREFIX = re.compile(r"(?:[ \t]*#define[ \t]+[A-Za-z_]\w*[ \t]+[-+.\w]+[ \t]*\n)+")


def source_features(source: str, entry: str, language: str = "opencl") -> tuple[tuple[str, float], ...]:
    """Counts for one kernel source.

    A leading block of ``#define NAME value`` lines (how template points are
    made) is split off first, so all points of a template share one cached
    analysis of the body; their values reach the model as parameter features.
    """
    prefix = _DEFINE_PREFIX.match(source)
    return _body_features(source[prefix.end():] if prefix else source, entry, language)


@functools.lru_cache(maxsize=4096)
def _body_features(source: str, entry: str, language: str) -> tuple[tuple[str, float], ...]:
    text = normalize_source(source)
    out = {key: float(len(pattern.findall(text))) for key, pattern in _PATTERNS.items()}
    loads = stores = 0
    for name in _global_pointers(source, entry, language):
        accesses = len(re.findall(rf"\b{re.escape(name)}\s*\[", text))
        plain_stores = len(re.findall(rf"\b{re.escape(name)}\s*\[[^\]]*\]\s*=(?!=)", text))
        compound = len(re.findall(rf"\b{re.escape(name)}\s*\[[^\]]*\]\s*[+\-*/]=", text))
        loads += accesses - plain_stores
        stores += plain_stores + compound
    out["global_loads"] = float(loads) + out["vloads"]
    out["global_stores"] = float(stores) + out["vstores"]
    widths = [int(a or b) for a, b in _VECTOR_WIDTH.findall(text)]
    out["vector_width"] = float(max(widths, default=1))
    out["lines"] = float(text.count(";") + text.count("\n") + 1)
    out["log2_chars"] = math.log2(len(text) + 1)
    return tuple(out.items())


def resolve_geometry(exprs: list[str] | None, names: Mapping[str, int]) -> int | None:
    """Product of the geometry expressions at these sizes; None if absent or not evaluable."""
    return _resolve_cached(tuple(exprs), tuple(sorted(names.items()))) if exprs else None


_resolve = resolve_geometry


@functools.lru_cache(maxsize=8192)
def _resolve_cached(exprs: tuple[str, ...], names: tuple[tuple[str, int], ...]) -> int | None:
    try:
        return math.prod(evaluate_int(e, dict(names)) for e in exprs)
    except (ExpressionError, ZeroDivisionError, ValueError):
        return None


def _log2(x: float | None) -> float:
    return math.log2(x) if x and x > 0 else 0.0


def geometry_features(candidate: Candidate, sizes: Mapping[str, int], prefix: str) -> Features:
    work_items = _resolve(candidate.global_size, sizes)
    group = _resolve(candidate.local_size, sizes)
    return {
        f"{prefix}.log2_work_items": _log2(work_items),
        f"{prefix}.log2_work_group": _log2(group),
        f"{prefix}.work_group_by_runtime": float(group is None),
    }


def task_features(task: Task, sizes: Mapping[str, int]) -> Features:
    out: Features = {"task.cuda": float(task.language == "cuda"),
                     "task.log2_size": _log2(max(sizes.values(), default=0))}
    try:
        flops = float(evaluate(task.spec.flops, dict(sizes))) if task.spec.flops else 0.0
        moved = float(evaluate(task.spec.bytes, dict(sizes))) if task.spec.bytes else 0.0
    except (ExpressionError, ZeroDivisionError):
        return out
    out["task.log2_flops"] = _log2(flops)
    out["task.log2_bytes"] = _log2(moved)
    if flops and moved:
        out["task.log2_intensity"] = math.log2(flops / moved)
    return out


def hardware_features(hw: HardwareSpec | None) -> Features:
    if hw is None:
        return {}
    return {
        "hw.cpu": float("CPU" in hw.device_type.upper()),
        "hw.compute_units": float(hw.compute_units),
        "hw.clock_ghz": hw.clock_mhz / 1000.0,
        "hw.log2_global_mem": _log2(hw.global_mem_bytes),
        "hw.log2_local_mem": _log2(hw.local_mem_bytes),
        "hw.log2_cache": _log2(hw.global_cache_bytes),
        "hw.log2_max_work_group": _log2(hw.max_work_group_size),
        "hw.preferred_vector_width": float(hw.preferred_vector_width_float),
        "hw.native_vector_width": float(hw.native_vector_width_float),
    }


def device_similarity(a: HardwareSpec | None, b: HardwareSpec | None) -> float:
    """1 for the same device, less the further apart two specs are (type, platform, units, clock, vectors,
    cache): how much one device's measurements say about another's. Unknown specs count as half-similar."""
    if a is None or b is None:
        return 0.5
    if a.key == b.key:
        return 1.0
    distance = 0.0 if a.device_type.upper() == b.device_type.upper() else 2.0
    distance += 0.0 if a.backend == b.backend else 1.0
    distance += 0.0 if a.platform == b.platform else 0.5

    def gap(x: float, y: float, weight: float) -> float:
        return weight * abs(_log2(max(x, 1)) - _log2(max(y, 1)))

    distance += gap(a.compute_units, b.compute_units, 0.5) + gap(a.clock_mhz, b.clock_mhz, 1.0)
    distance += gap(a.native_vector_width_float, b.native_vector_width_float, 0.3)
    distance += gap(a.global_cache_bytes, b.global_cache_bytes, 0.2) + gap(a.local_mem_bytes, b.local_mem_bytes, 0.1)
    return min(0.9, math.exp(-distance))


def same_hardware(a: HardwareSpec, b: HardwareSpec) -> bool:
    """Whether two specs under one device key describe the same hardware. The key names the runtime and the CPU
    model, so two machines of one name can differ: the seed dataset's "AMD EPYC" under Intel's runtime has 16
    float lanes and a 1 MiB cache, a machine of the same name 8 lanes and 0.5 MiB."""
    fields = ("device_type", "backend", "platform", "name", "driver", "compute_units", "clock_mhz",
              "native_vector_width_float", "global_cache_bytes", "local_mem_bytes", "max_work_group_size")
    return all(getattr(a, f) == getattr(b, f) for f in fields)


def _param_value(v: Any) -> float | None:
    """A parameter's value on a scale where powers of two are evenly spaced (1 + log2 v from 1 up) and which
    is linear below 1: monotone and one-to-one. Plain log2 mapped both 0 and 1 to 0, so every 0/1 switch of a
    template (gemm's and transpose's LOCAL, softmax's ONLINE, histogram's PRIVATE 0 vs 1) was invisible to the
    models."""
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)) and math.isfinite(v):
        return 1.0 + math.log2(v) if v >= 1 else float(v)
    return None


_SHAPE = re.compile(r"\d+(,\d+)*")


def param_features(task: Task, candidate: Candidate) -> Features:
    """Template parameters and their deltas vs the template default. Numbers are on the scale of
    :func:`_param_value`; a string that is a launch shape ("64,4") gives each dimension on that scale; any other
    string is an indicator of its value (a derived template's coarsening mapping, its "keep" work-group). Until
    2026-12-02 strings were dropped, so the models could not tell a vectorized coarsening from a cyclic one
    (matvec_cols x8: 8.5x against 0.7x) nor one work-group shape of a derived point from another."""
    out: Features = {}
    default = (task.spec.template.default or {}) if task.spec.template else {}
    for key, value in (candidate.params or {}).items():
        if key == DERIVED_BASE:
            continue
        if isinstance(value, str):
            out.update(_string_param(key, value))
            continue
        v = _param_value(value)
        if v is None:
            continue
        out[f"param.{key}"] = v
        d = _param_value(default.get(key))
        if d is not None:
            out[f"param_delta.{key}"] = v - d
    return out


def _string_param(key: str, value: str) -> Features:
    text = value.replace(" ", "")
    if _SHAPE.fullmatch(text):
        return {f"param.{key}[{i}]": _param_value(int(d)) or 0.0 for i, d in enumerate(text.split(","))}
    return {f"param.{key}={value}": 1.0}


@dataclass(frozen=True)
class Context:
    """What all candidates of one (task, hardware) share, computed once per batch."""

    task: Task
    sizes: dict[str, int]
    reference: dict[str, float]
    shared: Features  # reference geometry, task and hardware features


def context(task: Task, hardware: HardwareSpec | None) -> Context:
    sizes = task.sizes("full")
    shared = geometry_features(task.reference(), sizes, "ref")
    shared.update(task_features(task, sizes))
    shared.update(hardware_features(hardware))
    return Context(task, sizes, dict(source_features(task.source, task.spec.entry, task.language)), shared)


def candidate_features(ctx: Context, candidate: Candidate) -> Features:
    """All features of one candidate: reference, candidate, deltas, geometry, params, task, device."""
    task = ctx.task
    cand = dict(source_features(candidate.source, task.spec.entry, task.language))
    out: Features = dict(ctx.shared)
    for key in SOURCE_KEYS:
        out[f"ref.{key}"] = ctx.reference[key]
        out[f"cand.{key}"] = cand[key]
        out[f"delta.{key}"] = cand[key] - ctx.reference[key]
    out.update(geometry_features(candidate, ctx.sizes, "cand"))
    for key in ("log2_work_items", "log2_work_group"):
        out[f"delta.{key}"] = out[f"cand.{key}"] - out[f"ref.{key}"]
    options = " ".join(candidate.build_options)
    out["opt.fast_math"] = float("fast-relaxed-math" in options or "use_fast_math" in options)
    out["opt.count"] = float(len(candidate.build_options))
    out.update(param_features(task, candidate))
    if "hw.compute_units" in out:
        out["fit.vector_vs_preferred"] = out["cand.vector_width"] / max(out["hw.preferred_vector_width"], 1.0)
        out["fit.log2_items_per_unit"] = out["cand.log2_work_items"] - _log2(max(out["hw.compute_units"], 1.0))
    return out


def features(task: Task, candidate: Candidate, hardware: HardwareSpec | None) -> Features:
    """Features of one candidate (batch callers build :func:`context` once and use :func:`candidate_features`)."""
    return candidate_features(context(task, hardware), candidate)
