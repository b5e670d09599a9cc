"""The chat's own tools: they read files on this machine (kernel sources, candidate .json), which the MCP tools
never do (those take source text), and default a session to the most recent unfinished one. Every file is read
through ``read_kernel_file``: a regular file, opened non-blocking, under the size cap, so a FIFO or /dev/zero
named by mistake is a one-line error, not a hang or a MemoryError."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from kernelcast import api
from kernelcast import chat_tools as ops
from kernelcast.api import (
    DEFAULT_FORECASTER,
    EXTERNAL,
    ForecasterName,
    RunConfig,
    SessionResult,
    SessionStatus,
    SubmitOutput,
    Suggestions,
)
from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.task import Task, read_kernel_file


class ReportOutput(BaseModel):
    html: str

    def text(self) -> str:
        return f"report written: {self.html} (PNGs beside it)"


def measure_file(task: ops.TaskName, file: Annotated[str | None, Field(description="kernel or candidate .json")] = None,
                 sizes: ops.SizesArg = "full") -> ops.MeasureOutput:
    """/measure TASK [FILE]: measure the reference or a kernel file."""
    t = _task(task)
    return ops.measure_candidate(t, ops.file_candidate(t, file), sizes)


def forecast_file(task: ops.TaskName, file: Annotated[str, Field(description="kernel or candidate .json")],
                  forecaster: ForecasterName = DEFAULT_FORECASTER, model: str | None = None) -> ops.ForecastOutput:
    """/forecast TASK FILE: forecast a kernel file's speedup without measuring it."""
    t = _task(task)
    return ops.forecast_candidate(t, ops.file_candidate(t, file), forecaster, model)


def write_run_report(run_id: str, compare: list[str] | None = None) -> ReportOutput:
    """/report RUN [--compare RUN]: write the run's HTML report with plots."""
    with ops.clear_errors():
        return ReportOutput(html=str(api.write_report(run_id, compare=compare or [])))


# ---- sessions from the chat: SESSION defaults to the most recent unfinished one ---------------------
SessionOpt = Annotated[str | None, Field(description="session id (default: the most recent unfinished session)")]


def current_session(session: str | None) -> str:
    """The session named, or the most recent one still waiting for candidates."""
    if session:
        return session
    if api.has_store():
        with ops.clear_errors(), api.reading_store() as store:
            for run in store.runs.recent(limit=200):
                if RunConfig.of_run(run).generator == EXTERNAL and run.status not in ("finished", "failed"):
                    return run.id
    raise ops.OperationError("no unfinished session: start one with /session start TASK")


def suggest_next(session: SessionOpt = None, count: int = 1) -> Suggestions:
    """/suggest [SESSION] [--count N]: the parents the search wants mutated next."""
    return ops.suggest_parents(current_session(session), count)


def submit_files(files: Annotated[list[str], Field(min_length=1, description="kernel sources or candidate .json")],
                 session: SessionOpt = None, parent: str | None = None,
                 global_size: ops.GlobalSize = None, local_size: ops.LocalSize = None,
                 build_options: ops.BuildOptions = None,
                 on_event: ops.EventCallback | None = None) -> SubmitOutput:
    """/submit FILE... [--session S] [--parent HASH] [--global-size G,..] [--local-size L,..] [--build-options O]:
    submit kernel files as candidates (a kernel source gets the launch geometry given, else the parent's)."""
    from pathlib import Path

    with ops.clear_errors():
        items = []
        for name in files:
            path = Path(name)
            text = read_kernel_file(path, f"candidate file {name}")  # a FIFO or /dev/zero: one line, no hang
            geometry = {k: v for k, v in (("global_size", global_size), ("local_size", local_size),
                                          ("build_options", build_options)) if v is not None}
            items.append(api.as_submitted(Candidate.model_validate_json(text)) if path.suffix == ".json" else
                         api.as_submitted({"source": text, "intent": f"from {path.name}", **geometry}))
    return ops.submit_candidates(current_session(session), items, parent, on_event=on_event)


def show_session(session: SessionOpt = None) -> SessionStatus:
    """/status [SESSION]: where the session stands."""
    return ops.session_status(current_session(session))


def finish_current(session: SessionOpt = None, on_event: ops.EventCallback | None = None) -> SessionResult:
    """/finish [SESSION]: confirm the best, write the report, close the session."""
    return ops.finish_session(current_session(session), on_event=on_event)


def _task(name: str) -> Task:
    with ops.clear_errors():
        return api.as_task(name)
