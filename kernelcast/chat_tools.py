"""kernelcast's operations as typed tools: one definition serves the chat agent and the MCP server.

Each tool is a plain function with annotated parameters (the annotations are
the schema both front doors publish) that calls :mod:`kernelcast.api` and
returns a pydantic model with a ``text()`` rendering for people and models.
Bad input of any kind leaves as :class:`OperationError` with a one-line
message, so a conversation or an MCP client can show it and carry on.
"""

from __future__ import annotations

import inspect
import math
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Literal, get_type_hints

from pydantic import BaseModel, Field, ValidationError, create_model

from kernelcast import api
from kernelcast.api import (
    DEFAULT_FORECASTER,
    DEFAULT_GENERATOR,
    LOCAL_MODEL_PREFIX,
    ForecasterName,
    GeneratorName,
    RouterName,
    RunError,
    RunRecord,
    RunResult,
    SessionResult,
    SessionStatus,
    StoreError,
    SubmitOutput,
    SubmittedCandidate,
    Suggestions,
    Throughput,
    WorkerError,
    default,
    interval_text,
    listed_router,
    plural,
    shown_flags,
    throughput,
)
from kernelcast.tools.core.bins import BIN_NAMES
from kernelcast.tools.core.candidate import Candidate, candidate_from_source
from kernelcast.tools.core.errors import InputError
from kernelcast.tools.core.measurement import Measurement
from kernelcast.tools.core.settings import get_settings
from kernelcast.tools.core.task import BufferArg, LocalArg, Task, builtin_task_paths, load_task, resolve_task_in_roots

Sizes = Literal["full", "small"]
Router = RouterName  # the names of the registries (graphs.routers, agents.registry), as Literals
EventCallback = Callable[[str, dict[str, Any]], None]

TaskName = Annotated[str, Field(description="built-in task name (see list_tasks) or path to a task.toml "
                                           "under the server's task roots (KERNELCAST_TASK_PATH)")]
Source = Annotated[str | None, Field(description="kernel source with the reference's signature; "
                                                 "omit for the reference kernel")]
GlobalSize = Annotated[list[str] | None, Field(description="global size expressions, e.g. ['N/4'] "
                                                           "(default: the reference's)")]
LocalSize = Annotated[list[str] | None, Field(description="local size expressions, e.g. ['64'] "
                                                          "(default: the reference's)")]
BuildOptions = Annotated[list[str] | None, Field(description="compiler options, e.g. ['-cl-fast-relaxed-math']")]
SizesArg = Annotated[Sizes, Field(description="'full' problem sizes, or 'small' for a quick check")]
BudgetArg = Annotated[int, Field(ge=1, le=500, description="hardware measurements to spend")]
RouterArg = Annotated[Router, Field(description="which candidates are measured")]
ForecasterArg = Annotated[ForecasterName, Field(description="which forecaster")]
GeneratorArg = Annotated[GeneratorName, Field(description="which generator")]


class OperationError(InputError, ValueError):
    """Bad input or an unusable device: a clear message for the caller, never a traceback."""


@contextmanager
def clear_errors() -> Iterator[None]:
    """Turn the errors bad input can cause anywhere below into :class:`OperationError`."""
    try:
        yield
    except OperationError:
        raise
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'input'}: {e['msg']}" for e in exc.errors())
        raise OperationError(problems) from None
    except StoreError as exc:
        raise OperationError(f"store problem: {exc}") from None
    except (ValueError, FileNotFoundError, RunError) as exc:
        raise OperationError(str(exc)) from None
    except WorkerError as exc:
        raise OperationError(f"device problem: {exc}") from None
    except sqlite3.Error as exc:
        raise OperationError(f"store problem: {_one_line(exc)} (is the database damaged or read-only?)") from None
    except OSError as exc:
        raise OperationError(f"file system problem: {_one_line(exc)}") from None


def _one_line(exc: BaseException, limit: int = 300) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[:limit] + "..."


def confined_task(task: str) -> Task:
    """A built-in task or a task file under the configured task roots: tool callers (MCP clients, the chat's
    model) cannot make the server read any other file, nor learn whether it exists."""
    return resolve_task_in_roots(task, get_settings().task_roots)


def confined_model(model: str | None) -> str | None:
    """``model`` as given, unless it names a model on this machine (``local:PATH``): then PATH must lie under the
    server's model roots (``<KERNELCAST_HOME>/models`` and KERNELCAST_MODEL_PATH), symlinks resolved. A path
    outside them and a missing one get the same message, so a tool caller learns nothing of the disk."""
    if model is None or not model.startswith(LOCAL_MODEL_PREFIX):
        return model
    name = model[len(LOCAL_MODEL_PREFIX):]
    shown = name if len(name) <= 120 else name[:120] + "..."
    refused = OperationError(f"model 'local:{shown}' is not a model under the server's model roots (its "
                             "KERNELCAST_HOME/models folder and KERNELCAST_MODEL_PATH); tool callers may load no "
                             "other folder")
    if not name or "\x00" in name:
        raise refused
    try:
        path = Path(name).expanduser()
        path = (path if path.is_absolute() else get_settings().home / "models" / path).resolve()
        roots = [root.expanduser().resolve() for root in get_settings().model_roots]
        inside = path.exists() and any(path.is_relative_to(root) for root in roots)
    except (OSError, RuntimeError, ValueError):
        raise refused from None
    if not inside:
        raise refused
    return LOCAL_MODEL_PREFIX + str(path)


# ---- outputs ------------------------------------------------------------------------
class TaskInfo(BaseModel):
    name: str
    language: str
    description: str
    template_points: int = Field(description="valid points of the tunable template (0: none)")
    sizes: dict[str, int]
    small_sizes: dict[str, int]

    def text(self) -> str:
        return (f"{self.name} ({self.language}, {self.template_points or 'no'} template points, "
                f"sizes {_kv(self.sizes)}): {self.description}")

    def line(self) -> str:
        """The short form for listings: the description's first sentence."""
        return f"{self.name} ({self.language}): {self.description.split('. ')[0].rstrip('.')}"


class TaskList(BaseModel):
    tasks: list[TaskInfo]

    def text(self) -> str:
        return "\n".join(t.line() for t in self.tasks) or "no tasks"


class TaskDetail(TaskInfo):
    entry: str
    arguments: list[str] = Field(description="one line per kernel argument")
    global_size: list[str]
    local_size: list[str] | None
    rtol: float
    atol: float
    template_params: dict[str, list[Any]] = Field(default_factory=dict)
    source: str

    def text(self) -> str:
        local = self.local_size or "runtime-chosen"
        lines = [super().text(), (f"entry {self.entry}; launch global {self.global_size} local {local}; "
                                  f"tolerance rtol {self.rtol} atol {self.atol}"),
                 f"small sizes {_kv(self.small_sizes)}", "arguments:", *(f"  {a}" for a in self.arguments)]
        if self.template_params:
            lines.append("template: " + "; ".join(f"{k} in {v}" for k, v in self.template_params.items()))
        return "\n".join([*lines, "reference source:", self.source.rstrip()])


class MeasureOutput(BaseModel):
    task: str
    candidate: str = Field(description="candidate hash")
    device: str
    sizes: str
    status: str = Field(description="correct, or the failure class")
    reason: str = ""
    speedup: float | None = Field(None, description="median reference time / median candidate time (one "
                                                    "measurement: not a run's confirmation)")
    interval: tuple[float, float] | None = Field(None, description="95 % bootstrap interval of the speedup")
    bin: int = Field(description="speedup bin 1..8, 0 = failure")
    bin_name: str
    reference_ms: float | None = None
    candidate_ms: float | None = None
    candidate_cv: float | None = None
    flags: list[str] = Field(default_factory=list)
    throughput: Throughput | None = Field(None, description="GFLOP/s and GB/s against the device's peaks")

    @classmethod
    def of(cls, m: Measurement, rate: Throughput | None = None) -> MeasureOutput:
        return cls(task=m.task, candidate=m.candidate_hash, device=m.device, sizes=m.sizes, status=m.status.value,
                   reason=m.reason[:1500], speedup=m.speedup, interval=m.speedup_ci, bin=m.bin(),
                   bin_name=BIN_NAMES[m.bin()],
                   reference_ms=m.reference.median_ns / 1e6 if m.reference else None,
                   candidate_ms=m.candidate.median_ns / 1e6 if m.candidate else None,
                   candidate_cv=m.candidate.cv if m.candidate else None, flags=shown_flags(m.flags), throughput=rate)

    def text(self) -> str:
        head = f"{self.task} candidate {self.candidate[:8]} on {self.device} ({self.sizes} sizes): {self.status}"
        if self.status != "correct":
            return f"{head}\n{self.reason}"
        interval = f", 95 % {interval_text(self.interval)}" if self.interval else ""
        return (f"{head}, speedup {self.speedup:.3f}x (one measurement{interval}; bin {self.bin} {self.bin_name}); "
                f"reference {self.reference_ms:.4f} ms, candidate {self.candidate_ms:.4f} ms "
                f"(CV {self.candidate_cv or 0:.1%})"
                + (f"; throughput {self.throughput.text()}" if self.throughput else "")
                + (f"; flags: {', '.join(self.flags)}" if self.flags else ""))


class ForecastOutput(BaseModel):
    task: str
    candidate: str
    forecaster: str
    model: str | None = None
    probabilities: list[float] = Field(description="P(bin 1..8)")
    predicted_bin: int
    bin_name: str
    confidence: float
    expected_speedup: float
    failed: bool = Field(description="true: the forecaster had nothing to say (uniform, deferred to hardware)")
    note: str = ""

    def text(self) -> str:
        probs = " ".join(f"{p:.2f}" for p in self.probabilities)
        head = (f"{self.task} candidate {self.candidate[:8]}: {self.forecaster} forecast bin {self.predicted_bin} "
                f"({self.bin_name}), confidence {self.confidence:.2f}, expected speedup {self.expected_speedup:.2f}x")
        return "\n".join([head, f"P(bin 1..8) = {probs}", *([self.note] if self.note else [])])


class RunInfo(BaseModel):
    run_id: str
    task: str
    status: str
    router: str
    budget: int
    spent: int
    best_speedup: float | None = Field(None, description="the answer's speedup once finished (1.0: the reference, "
                                       "when no candidate beat it significantly); before, the best so far")
    created_at: str = ""
    result: RunResult | None = Field(None, description="the run's result once finished")
    best_source: str | None = Field(None, description="source of the delivered kernel (the reference when no "
                                    "candidate beat it significantly)")

    def text(self) -> str:
        best = (f"answer {self.result.answer.text()}" if self.result is not None else
                f"best so far {self.best_speedup:.3f}x" if self.best_speedup else "no measured improvement")
        head = (f"run {self.run_id}: {self.task}, {self.status}, router {self.router}, "
                f"{self.spent}/{self.budget} measurements, {best}")
        r = self.result
        if r is None:
            return head
        lines = [head, f"candidates considered {r.considered}; outcomes "
                       + ", ".join(f"{k} {v}" for k, v in sorted(r.counts.items()))]
        if r.best_hash:
            lines.append(f"best measured candidate {r.best_hash[:8]} ({r.best_intent}), first measured after "
                         f"{plural(r.measurements_to_best, 'measurement')}; {r.verdict}; path: "
                         f"{' -> '.join(r.best_path)}")
        lines += [f"roofline: {r.roofline.text}"] if r.roofline is not None else []
        lines.append(f"run folder: {r.folder}")
        return "\n".join(lines)


class RunList(BaseModel):
    runs: list[RunInfo]

    def text(self) -> str:
        return "\n".join(r.text().splitlines()[0] for r in self.runs) or "no runs yet"


# ---- tools ----------------------------------------------------------------------------
def list_tasks() -> TaskList:
    """List the built-in tasks (kernels kernelcast can optimize)."""
    with clear_errors():
        return TaskList(tasks=[_task_info(load_task(p)) for p in builtin_task_paths().values()])


def describe_task(task: TaskName) -> TaskDetail:
    """Describe one task: arguments, sizes, launch geometry, tolerances, template and reference source."""
    with clear_errors():
        t = confined_task(task)
        spec = t.spec
        args = [f"{a.name}: {a.dtype} buffer [{' x '.join(map(str, a.shape))}], {a.direction}" if isinstance(a, BufferArg)
                else f"{a.name}: {a.dtype} local memory [{' x '.join(map(str, a.shape))}] per work-group"
                if isinstance(a, LocalArg) else f"{a.name}: {a.dtype} scalar = {a.value}" for a in spec.args]
        return TaskDetail(**_task_info(t).model_dump(), entry=spec.entry, arguments=args,
                          global_size=[str(g) for g in spec.launch.global_size],
                          local_size=[str(s) for s in spec.launch.local_size] if spec.launch.local_size else None,
                          rtol=spec.tolerance.rtol, atol=spec.tolerance.atol,
                          template_params=dict(spec.template.params) if spec.template else {}, source=t.source)


def measure_kernel(task: TaskName, source: Source = None, global_size: GlobalSize = None,
                   local_size: LocalSize = None, build_options: BuildOptions = None,
                   sizes: SizesArg = "full") -> MeasureOutput:
    """Measure a kernel on the device against the reference (correctness on seeded inputs, then timing)."""
    with clear_errors():
        t = confined_task(task)
        return measure_candidate(t, source_candidate(t, source, global_size, local_size, build_options), sizes)


def forecast_speedup(task: TaskName, source: Source = None, global_size: GlobalSize = None,
                     local_size: LocalSize = None, build_options: BuildOptions = None,
                     forecaster: ForecasterArg = DEFAULT_FORECASTER,
                     model: Annotated[str | None, Field(description="litellm model string for LLM forecasters, or "
                                                        "local:PATH, a model under the server's model roots")] = None,
                     ) -> ForecastOutput:
    """Forecast a kernel's speedup distribution over the 8 bins without measuring it."""
    with clear_errors():
        t = confined_task(task)
        return forecast_candidate(t, source_candidate(t, source, global_size, local_size, build_options),
                                  forecaster, confined_model(model))


def optimize_kernel(task: TaskName,
                    budget: BudgetArg = default("budget"),
                    router: RouterArg = default("router"),
                    sizes: SizesArg = "full",
                    forecaster: ForecasterArg = DEFAULT_FORECASTER,
                    generator: GeneratorArg = DEFAULT_GENERATOR,
                    seed: Annotated[int, Field(description="random seed")] = 0,
                    on_event: EventCallback | None = None) -> RunInfo:
    """Optimize a task under a hardware-measurement budget; returns the run (its best kernel is measured)."""
    with clear_errors():
        t = confined_task(task)
        chosen = task if task in builtin_task_paths() else str(t.path.resolve())
        result = api.optimize(chosen, budget=budget, router=router, sizes=sizes,
                              forecaster=forecaster, generator=generator, seed=seed, on_event=on_event)
        return get_run(result.run_id)


def get_run(run_id: Annotated[str, Field(description="run id (or a unique prefix)")]) -> RunInfo:
    """Show one run: status, budget spent, best speedup, the path to the best kernel and its source."""
    if not api.has_store():
        raise OperationError(f"no run with id {run_id!r} (nothing has run yet)")
    with clear_errors(), api.reading_store() as store:
        run = store.runs.get(run_id)
        if run is None:
            raise OperationError(f"no run with id {run_id!r} (see list_runs)")
        info = _run_info(run)
        delivered = info.result.answer.candidate_hash if info.result else None
        if delivered:
            best = store.candidates.get(delivered)
            info.best_source = best.source if best else None
        return info


def list_runs(task: Annotated[str | None, Field(description="only runs of this task")] = None,
              limit: Annotated[int, Field(ge=1, le=200, description="most recent first")] = 20) -> RunList:
    """List recent optimization runs."""
    if not api.has_store():
        return RunList(runs=[])  # nothing has run yet
    with clear_errors(), api.reading_store() as store:
        return RunList(runs=[_run_info(run) for run in store.runs.recent(task=task, limit=limit)])


def compare_runs(run_ids: Annotated[list[str], Field(min_length=1, description="run ids to compare")]) -> RunList:
    """Compare runs side by side: router, budget spent, best speedup, outcomes."""
    return RunList(runs=[get_run(r).model_copy(update={"best_source": None}) for r in run_ids])


# ---- sessions: the caller is the generator ----------------------------------------------------
SessionId = Annotated[str, Field(description="session id from start_session (or a unique prefix)")]


def start_session(task: TaskName,
                  budget: BudgetArg = default("budget"),
                  router: RouterArg = default("router"),
                  risk: Annotated[float, Field(gt=0.0, lt=1.0, description="selective: tolerated share of false "
                                                                           "prunes among trusted decisions")
                                  ] = default("risk"),
                  sizes: SizesArg = "full",
                  forecaster: ForecasterArg = DEFAULT_FORECASTER,
                  measure_per_round: Annotated[int, Field(ge=1, le=64, description="at most this many "
                                                                                   "measurements per submission")
                                               ] = default("measure_per_round"),
                  seed: Annotated[int, Field(description="random seed (audits)")] = 0) -> SessionStatus:
    """Start a session: a search under a measurement budget whose candidates you write. Then repeat
    suggest_parents -> submit_candidates, and end with finish_session (confirms the best, writes the report)."""
    with clear_errors():
        t = confined_task(task)
        chosen = task if task in builtin_task_paths() else str(t.path.resolve())
        session_id = api.start_session(chosen, budget, router, risk, sizes=sizes, forecaster=forecaster,
                                       measure_per_round=measure_per_round, seed=seed)
        return api.session_status(session_id)


def suggest_parents(session: SessionId,
                    count: Annotated[int, Field(ge=1, le=8, description="how many parents, best first")] = 1,
                    ) -> Suggestions:
    """The kernels the search wants mutated next (PUCT; the first is its choice), each with its source,
    measured or forecast speedup, errors, the children already tried, plus the device's hardware spec."""
    with clear_errors():
        return api.suggest_parents(session, count)


def submit_candidates(session: SessionId,
                      candidates: Annotated[list[SubmittedCandidate], Field(min_length=1, max_length=64, description=(
                          "candidate kernels: source with the reference's signature, optional geometry, build "
                          "options and intent"))],
                      parent: Annotated[str | None, Field(description="node to extend (hash or prefix; default: "
                                                                      "the parent suggest_parents chose)")] = None,
                      on_event: EventCallback | None = None) -> SubmitOutput:
    """Submit candidate kernels as children of a parent: each is validated (compiled), forecast and routed
    (measured, trusted, pruned or deferred, with the reason) under the session's budget; measurements are
    reported as progress."""
    with clear_errors():
        return api.submit_candidates(session, parent, candidates, on_event=on_event)


def session_status(session: SessionId) -> SessionStatus:
    """Where a session stands: budget spent and left, tree outcomes, best so far, the last submission."""
    with clear_errors():
        return api.session_status(session)


def finish_session(session: SessionId, on_event: EventCallback | None = None) -> SessionResult:
    """Finish a session: verify trusted nodes, confirm the best with a re-measurement and an interval, write
    the report; returns the confirmed best and the report path."""
    with clear_errors():
        return api.finish_session(session, on_event=on_event)


# ---- shared helpers ---------------------------------------------------------------------
def source_candidate(task: Task, source: str | None, global_size: list[str] | None = None,
                     local_size: list[str] | None = None, build_options: list[str] | None = None) -> Candidate:
    """The reference (no source), else the source text with the given or the reference's geometry.

    Source is always text here, never a path: tool callers cannot make the server read files.
    """
    ref = task.reference()
    if not source:
        if global_size or local_size or build_options:
            return ref.model_copy(update={"global_size": global_size or ref.global_size,
                                          "local_size": local_size or ref.local_size,
                                          "build_options": build_options or [], "origin": "written",
                                          "note": "reference, new geometry",
                                          "generator": "user"})
        return ref
    return candidate_from_source(task, source, global_size, local_size, build_options)


def file_candidate(task: Task, path: str | None) -> Candidate:
    """A candidate from a kernel source or candidate .json file (the chat's /measure and /forecast), read as
    ``api.candidate_file`` reads a file a user names (a FIFO or /dev/zero is a one-line error)."""
    with clear_errors():
        return api.candidate_file(path, task) if path else task.reference()


def measure_candidate(task: Task, candidate: Candidate, sizes: Sizes = "full") -> MeasureOutput:
    with clear_errors():
        m = api.measure(task, candidate, sizes=sizes)
        rate = None
        if m.ok:
            with api.reading_store() as store:
                hw = store.devices.all().get(m.device)
                rate = throughput(task, m, hw, store) if hw is not None else None
        return MeasureOutput.of(m, rate)


def forecast_candidate(task: Task, candidate: Candidate, forecaster: str = DEFAULT_FORECASTER,
                       model: str | None = None) -> ForecastOutput:
    with clear_errors():
        fc = api.forecast(task, candidate, forecaster=forecaster, model=model)
        prov = fc.provenance
        return ForecastOutput(task=task.name, candidate=candidate.hash, forecaster=prov.forecaster, model=prov.model,
                              probabilities=list(fc.probabilities), predicted_bin=fc.predicted_bin,
                              bin_name=BIN_NAMES[fc.predicted_bin], confidence=fc.confidence,
                              expected_speedup=math.exp(prov.log_speedup_mean if prov.log_speedup_mean is not None
                                                        else fc.expected_log_speedup), failed=fc.failed,
                              note=(f"uninformative: {prov.failure_reason}" if fc.failed else fc.reasoning[:500]))


def args_model(fn: Callable[..., Any]) -> type[BaseModel]:
    """A pydantic model of a tool's parameters (callbacks left out): validates a model's tool call."""
    hints = get_type_hints(fn, include_extras=True)
    fields: dict[str, Any] = {}
    for name, param in inspect.signature(fn).parameters.items():
        if name == "on_event":
            continue
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[name] = (hints[name], default)
    return create_model(f"{fn.__name__}_args", __config__={"extra": "forbid"}, **fields)


def _task_info(t: Task) -> TaskInfo:
    return TaskInfo(name=t.name, language=t.language, description=t.spec.description,
                    template_points=t.space_count().valid,
                    sizes=t.sizes("full"), small_sizes=t.sizes("small"))


def _run_info(run: RunRecord) -> RunInfo:
    result = RunResult.of_run(run)
    return RunInfo(run_id=run.id, task=run.task, status=run.status, router=listed_router(run),
                   budget=run.budget, spent=run.spent, created_at=run.created_at, result=result,
                   best_speedup=result.answer.speedup if result is not None else run.best_speedup)


def _kv(values: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items())
