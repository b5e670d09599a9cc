"""Build agents by name (CLI/API/graph resume all use these, so options mean the same everywhere)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from agents.forecast import Forecast, Forecaster
from agents.generator import Generator
from tools.candidate import Candidate
from tools.measurement import HardwareSpec
from tools.task import Task

if TYPE_CHECKING:
    from tools.store import Store
    from tools.worker import MeasurementWorker


class UninformativeForecaster:
    """Uniform forecasts, flagged failed: the router defers every candidate to the hardware."""

    name = "none"

    def __init__(self, reason: str = "no forecaster configured") -> None:
        self.reason = reason

    def forecast(self, task: Task, candidate: Candidate, hardware: HardwareSpec) -> Forecast:
        return Forecast.uninformative(self.reason, forecaster=self.name)

    def forecast_many(self, task: Task, candidates: Sequence[Candidate], hardware: HardwareSpec) -> list[Forecast]:
        return [self.forecast(task, c, hardware) for c in candidates]


def llm_client(model: str | None, api_base: str | None = None, api_key: str | None = None):  # noqa: ANN201
    from agents.llm_client import LLMClient

    model = model or os.environ.get("KERNELCAST_MODEL")
    if not model:
        raise ValueError("an LLM agent needs a model: pass --model or set KERNELCAST_MODEL")
    return LLMClient(model, api_base=api_base or os.environ.get("KERNELCAST_API_BASE"),
                     api_key=api_key or os.environ.get("KERNELCAST_API_KEY"))


def make_generator(name: str, worker: "MeasurementWorker | None" = None, model: str | None = None,
                   api_base: str | None = None) -> Generator:
    if name == "offline":
        from agents.offline_generator import OfflineGenerator

        return OfflineGenerator(worker=worker)
    if name == "llm":
        from agents.llm_generator import LLMGenerator

        return LLMGenerator(llm_client(model, api_base), worker=worker)
    raise ValueError(f"unknown generator {name!r} (expected offline or llm)")


def make_forecaster(name: str, store: "Store | None" = None, device: str | None = None, model: str | None = None,
                    api_base: str | None = None, exclude_task: str | None = None) -> Forecaster:
    """``learned`` trains on the store's measured pairs (uninformative until it has enough data)."""
    if name == "learned":
        from agents.learned_forecaster import LearnedForecaster, training_set

        if store is None:
            return UninformativeForecaster("learned forecaster without a store")
        data = training_set(store.measured_pairs(device=device, sizes="full"), hardware=store.devices())
        if exclude_task is not None:
            data = data.subset([t != exclude_task for t in data.tasks])
        return LearnedForecaster().fit(data)
    if name == "llm":
        from agents.llm_forecaster import LLMForecaster

        return LLMForecaster(llm_client(model, api_base))
    if name == "llm-logprobs":
        from agents.llm_forecaster import LLMForecaster

        return LLMForecaster(llm_client(model, api_base), mode="logprobs")
    if name == "none":
        return UninformativeForecaster()
    raise ValueError(f"unknown forecaster {name!r} (expected learned, llm, llm-logprobs or none)")
