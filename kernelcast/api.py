"""The Python API and the front doors' one facade: the operations the CLI, chat session and MCP server use.

The CLI mirrors it (sqlite-utils style): each command parses its options, calls functions here and prints what
comes back. Doors import this module (and the vocabulary in ``tools/core``) and nothing below it: the names
here come from the application layer (:mod:`kernelcast.app`), the sessions (:mod:`kernelcast.session`) and the
views, so those can change without touching a door (the import contract in pyproject.toml checks it). Defaults
come from ``RunConfig`` and the registries, never written here.
"""

from __future__ import annotations

from kernelcast.app.catalog import (
    DEFAULT_FORECASTER,
    DEFAULT_GENERATOR,
    EXTERNAL,
    FORECASTERS,
    LOCAL_MODEL_PREFIX,
    ROUTERS,
    SELECTABLE_GENERATORS,
    ForecasterName,
    GeneratorName,
    RouterName,
    RunConfig,
    default,
    forecaster_spec,
    generator_spec,
    listed_router,
    router_spec,
)
from kernelcast.app.conversation import LLMError, conversation_store, model_client
from kernelcast.app.devices import DeviceRow, WorkerError, cluster_devices, device_rows, make_measurer
from kernelcast.app.operations import (
    ProposalReport,
    as_task,
    candidate_file,
    forecast,
    hardware,
    make_candidate,
    measure,
    propose,
)
from kernelcast.app.results import (
    RooflineVerdict,
    RunResult,
    ShownSpeedup,
    Spend,
    Throughput,
    events,
    interval_text,
    logged,
    parse,
    plural,
    ranked,
    run_roofline,
    run_throughput,
    shown_speedups,
    spend_text,
    throughput,
)
from kernelcast.app.runs import RunError, optimize, resume, run_env
from kernelcast.app.training import (
    CORPUS_MANIFEST,
    MAX_SOURCE_CHARS,
    REPORT_ROWS,
    TrainingRow,
    build_dataset,
    eval_forecaster,
    evaluate_model,
    export_model,
    forecaster_dataset,
    read_jsonl,
    read_kernel_tuner,
    store_kernel_tuner,
    train_model,
)
from kernelcast.calibration_report import evaluate as score_calibration
from kernelcast.calibration_report import load_pairs as calibration_pairs
from kernelcast.calibration_report import write_plots as calibration_plots
from kernelcast.report import report_note, write_report
from kernelcast.session import (
    Session,
    SubmittedCandidate,
    as_submitted,
    finish_session,
    session_status,
    start_session,
    submit_candidates,
    suggest_parents,
)
from kernelcast.session_views import SessionResult, SessionStatus, SubmitOutput, Suggestions
from kernelcast.stores import RunRecord, Store, StoreError, has_store, open_store, reading_store, store_scope
from kernelcast.task_init import missing, write_task
from kernelcast.throughput import shown_flags

__all__ = [
    # the library's operations (kernelcast.measure, forecast, propose, optimize; Session)
    "as_task", "candidate_file", "forecast", "hardware", "make_candidate", "measure", "optimize", "propose",
    "resume", "run_env", "ProposalReport", "RunError",
    # sessions: the caller writes the candidates
    "Session", "SessionResult", "SessionStatus", "SubmitOutput", "SubmittedCandidate", "Suggestions", "as_submitted",
    "finish_session", "session_status", "start_session", "submit_candidates", "suggest_parents",
    # names a door offers, and run settings
    "DEFAULT_FORECASTER", "DEFAULT_GENERATOR", "EXTERNAL", "FORECASTERS", "LOCAL_MODEL_PREFIX", "ROUTERS",
    "SELECTABLE_GENERATORS", "ForecasterName", "GeneratorName", "RouterName", "RunConfig", "default",
    "forecaster_spec", "generator_spec", "listed_router", "router_spec",
    # a run's events and results, and what doors print of them
    "RooflineVerdict", "RunResult", "ShownSpeedup", "Spend", "Throughput", "events", "interval_text", "logged",
    "parse", "plural", "ranked", "run_roofline", "run_throughput", "shown_flags", "shown_speedups", "spend_text",
    "throughput", "report_note", "write_report", "calibration_pairs", "calibration_plots", "score_calibration",
    # the store
    "RunRecord", "Store", "StoreError", "has_store", "open_store", "reading_store", "store_scope",
    # devices
    "DeviceRow", "WorkerError", "cluster_devices", "device_rows", "make_measurer",
    # the forecaster's data and models
    "CORPUS_MANIFEST", "MAX_SOURCE_CHARS", "REPORT_ROWS", "TrainingRow", "build_dataset", "eval_forecaster",
    "evaluate_model", "export_model", "forecaster_dataset", "read_jsonl", "read_kernel_tuner", "store_kernel_tuner",
    "train_model",
    # task files, the chat's model
    "missing", "write_task", "LLMError", "conversation_store", "model_client",
]
