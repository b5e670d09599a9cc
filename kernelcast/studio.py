"""Entry point for LangGraph tooling (``langgraph.json``): the optimization graph for one task.

The platform supplies its own checkpointer; the run id is the thread id. Options come from
``config["configurable"]`` with the same names as :class:`kernelcast.graphs.config.RunConfig`.
"""

from __future__ import annotations

import atexit
from typing import Any

from kernelcast.app.runs import run_env
from kernelcast.graphs.config import RunConfig
from kernelcast.graphs.run import create_run, open_measurer, open_run, prepare_run
from kernelcast.graphs.search.graph import build_graph
from kernelcast.tools.core.settings import get_settings
from kernelcast.tools.store.store import Store


def make_graph(config: dict[str, Any] | None = None) -> Any:
    settings = get_settings()
    options = dict((config or {}).get("configurable", {}))
    run_id = str(options.pop("thread_id", "studio"))
    run_config = RunConfig.model_validate({"task": "gemm", **{k: v for k, v in options.items()
                                                              if k in RunConfig.model_fields}})
    run_config, task = prepare_run(run_config)  # refused as optimize refuses it, before a measurer starts
    store = Store(settings.db_path)
    measurer = open_measurer(run_config, task.backend, store)
    atexit.register(measurer.close)  # the tooling owns the graph for the process's life; the workers go with it
    env = run_env()
    if store.runs.get(run_id) is None:
        ctx = create_run(run_config, store, env, measurer, run_id=run_id)
    else:
        ctx = open_run(run_id, run_config, store, env, measurer)
    return build_graph(ctx).compile()
