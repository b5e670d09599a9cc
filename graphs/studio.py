"""Entry point for LangGraph tooling (``langgraph.json``): the optimization graph for one task.

The platform supplies its own checkpointer; the run id is the thread id. Options come from
``config["configurable"]`` with the same names as :class:`kernelcast.graphs.config.RunConfig`.
"""

from __future__ import annotations

import atexit
import os
from pathlib import Path
from typing import Any

from kernelcast.graphs.config import RunConfig
from kernelcast.graphs.graph import build_graph


def make_graph(config: dict[str, Any] | None = None) -> Any:
    from kernelcast.graphs.run import build_context, task_backend
    from kernelcast.tools.store import Store
    from kernelcast.tools.worker import MeasurementWorker

    home = Path(os.environ.get("KERNELCAST_HOME", ".kernelcast"))
    db = Path(os.environ.get("KERNELCAST_DB", home / "kernelcast.db"))
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
    ctx = build_context(run_id, run_config, store, home, worker, None,
                        float(os.environ.get("KERNELCAST_MEASURE_TIMEOUT_S", "120")), os.environ.get("KERNELCAST_API_BASE"))
    return build_graph(ctx).compile()
