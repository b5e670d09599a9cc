"""Entry point for LangGraph tooling (``langgraph.json``): the optimization graph for one task.

The platform supplies its own checkpointer; the run id is the thread id. Options come from
``config["configurable"]`` with the same names as :class:`kernelcast.graphs.config.RunConfig`.
"""

from __future__ import annotations

import atexit
from typing import Any

from kernelcast.graphs.config import RunConfig
from kernelcast.graphs.graph import build_graph
from kernelcast.settings import get_settings


def make_graph(config: dict[str, Any] | None = None) -> Any:
    from kernelcast.graphs.run import build_context, task_backend
    from kernelcast.tools.store import Store
    from kernelcast.tools.worker import MeasurementWorker

    settings = get_settings()
    home, db = settings.home, settings.db_path
    options = dict((config or {}).get("configurable", {}))
    run_id = str(options.pop("thread_id", "studio"))
    run_config = RunConfig.model_validate({"task": "gemm", **{k: v for k, v in options.items()
                                                              if k in RunConfig.model_fields}})
    store = Store(db)
    worker = MeasurementWorker(task_backend(run_config.task), run_config.device, store=store)
    atexit.register(worker.close)  # the tooling owns the graph for the process's life; the worker goes with it
    hardware = worker.hardware_spec()
    if store.run(run_id) is None:
        store.create_run(run_config.task, hardware.key, run_config.model_dump(), run_config.budget, run_id=run_id)
    ctx = build_context(run_id, run_config, store, home, worker, None, settings.measure_timeout_s, settings.api_base)
    return build_graph(ctx).compile()
