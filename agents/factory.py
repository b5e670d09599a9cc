"""Build agents by name (CLI/API/graph resume all use these, so options mean the same everywhere)."""

from __future__ import annotations

import os
from pathlib import Path
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kernelcast.agents.forecast import Forecast, Forecaster
from kernelcast.agents.generator import Generator
from kernelcast.tools.candidate import Candidate
from kernelcast.tools.measurement import HardwareSpec
from kernelcast.tools.task import Task

if TYPE_CHECKING:
    from kernelcast.tools.store import Store
    from kernelcast.tools.worker import MeasurementWorker


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
    from kernelcast.agents.llm_client import LLMClient

    model = model or os.environ.get("KERNELCAST_MODEL")
    if not model:
        raise ValueError("an LLM agent needs a model: pass --model or set KERNELCAST_MODEL")
    return LLMClient(model, api_base=api_base or os.environ.get("KERNELCAST_API_BASE"),
                     api_key=api_key or os.environ.get("KERNELCAST_API_KEY"))


SEED_DATASET = Path(__file__).parent / "data" / "seed_pairs.jsonl.gz"


def learned_forecaster(store: "Store | None", device: str | None, exclude_task: str | None = None,
                       seed_path: Path = SEED_DATASET) -> Forecaster:
    """Train on the store's measured pairs for this device; while the store holds fewer than the
    model needs, add the shipped seed dataset's pairs measured on the same device."""
    from kernelcast.agents.learned_forecaster import MIN_SAMPLES, LearnedForecaster, training_set
    from kernelcast.tools.store import Store

    if store is None:
        return UninformativeForecaster("learned forecaster without a store")
    pairs = store.measured_pairs(device=device, sizes="full")
    devices = store.devices()
    seeded = False
    if len(pairs) < MIN_SAMPLES and seed_path.exists():
        seed_pairs, seed_devices = Store.read_pairs(seed_path)
        known = {(m.candidate_hash, m.device) for _, m in pairs}
        extra = [(c, m) for c, m in seed_pairs if (device is None or m.device == device)
                 and (m.candidate_hash, m.device) not in known]
        seeded = bool(extra)
        pairs = pairs + extra
        devices = {**seed_devices, **devices}
    data = training_set(pairs, hardware=devices)
    if exclude_task is not None:
        data = data.subset([t != exclude_task for t in data.tasks])
    return LearnedForecaster(seeded=seeded).fit(data)


def make_generator(name: str, worker: "MeasurementWorker | None" = None, model: str | None = None,
                   api_base: str | None = None) -> Generator:
    if name == "offline":
        from kernelcast.agents.offline_generator import OfflineGenerator

        return OfflineGenerator(worker=worker)
    if name == "llm":
        from kernelcast.agents.llm_generator import LLMGenerator

        return LLMGenerator(llm_client(model, api_base), worker=worker)
    raise ValueError(f"unknown generator {name!r} (expected offline or llm)")


def make_forecaster(name: str, store: "Store | None" = None, device: str | None = None, model: str | None = None,
                    api_base: str | None = None, exclude_task: str | None = None) -> Forecaster:
    """``learned`` trains on the store's measured pairs (uninformative until it has enough data)."""
    if name == "learned":
        return learned_forecaster(store, device, exclude_task)
    if name == "llm":
        from kernelcast.agents.llm_forecaster import LLMForecaster

        return LLMForecaster(llm_client(model, api_base))
    if name == "llm-logprobs":
        from kernelcast.agents.llm_forecaster import LLMForecaster

        return LLMForecaster(llm_client(model, api_base), mode="logprobs")
    if name == "none":
        return UninformativeForecaster()
    raise ValueError(f"unknown forecaster {name!r} (expected learned, llm, llm-logprobs or none)")
