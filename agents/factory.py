"""The parts agents are built from: the LLM client from settings, the learned forecaster from the store, the
uninformative forecaster. Agents are built by name through :mod:`kernelcast.agents.registry`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from kernelcast.agents import DATA_DIR
from kernelcast.agents.forecast.base import Forecast, Forecaster
from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.measurement import HardwareSpec, Measurement
from kernelcast.tools.core.settings import get_settings
from kernelcast.tools.core.task import Task, builtin_task_paths, load_task

if TYPE_CHECKING:
    from kernelcast.tools.hardware.measurers.base import Measurer
    from kernelcast.tools.store.store import Store


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
    from kernelcast.agents.llm.client import LLMClient

    model = model or get_settings().model
    if not model:
        raise ValueError("an LLM agent needs a model: pass --model or set KERNELCAST_MODEL")
    return LLMClient(model, api_base=api_base, api_key=api_key)  # the client falls back on the settings


def local_forecaster(model: str) -> Forecaster:
    """``local:PATH[#stated]``: a trained folder, GGUF or model folder run in process (needs the ``[train]`` extra);
    ``#stated`` reads the probabilities it writes instead of its bin digits' (see :mod:`kernelcast.agents.forecast.local`)."""
    from kernelcast.agents.forecast.local import LocalModelForecaster, split_model

    path, mode = split_model(model)
    if not Path(path).exists():
        raise ValueError(f"no trained model at {path} (train one with `kernelcast forecaster train`)")
    return LocalModelForecaster(path, mode=mode)


SEED_DATASET = DATA_DIR / "seed_pairs.jsonl.gz"


def foreign_seed(pairs: list[tuple[Candidate, Measurement]], specs: dict[str, HardwareSpec],
                 local: dict[str, HardwareSpec]) -> tuple[list[tuple[Candidate, Measurement]], dict[str, HardwareSpec]]:
    """The seed dataset with each device that shares a key with a local one but is other hardware renamed, so its
    rows count as another device's (weighted by similarity), never as this device's own history, and neither
    spec overwrites the other (a forecaster built before a run and one built after it from the same store gave
    different forecasts, because the store's spec then replaced the seed's for the seed's rows)."""
    from kernelcast.agents.forecast.features import same_hardware

    renamed = {key: spec.model_copy(update={"name": f"{spec.name} (seed dataset)"}) for key, spec in specs.items()
               if key in local and not same_hardware(spec, local[key])}
    if not renamed:
        return pairs, specs
    out = [(c, m.model_copy(update={"device": renamed[m.device].key}) if m.device in renamed else m) for c, m in pairs]
    return out, {(renamed[k].key if k in renamed else k): renamed.get(k, s) for k, s in specs.items()}


def measured_on_builtins(pairs: list[tuple[Candidate, Measurement]]) -> list[tuple[Candidate, Measurement]]:
    """The shipped seed's pairs, each marked as measured on the built-in task of its name (the seed was built
    from the built-ins, before measurements carried a task fingerprint), so a user's task that borrows a
    built-in's name neither trains on them as its own nor lends them its source."""
    paths = builtin_task_paths()
    fingerprints = {name: load_task(paths[name]).fingerprint for name in {m.task for _, m in pairs} if name in paths}
    return [(c, m.model_copy(update={"task_fingerprint": fingerprints[m.task]})
             if m.task_fingerprint is None and m.task in fingerprints else m) for c, m in pairs]


def learned_forecaster(store: "Store | None", device: str | None, exclude_task: str | None = None,
                       seed_path: Path = SEED_DATASET, worker: "Measurer | None" = None) -> Forecaster:
    """The run's forecaster: the roofline prior, blended with a forest trained on every device's measured
    pairs in the store plus the shipped seed dataset (rows weighted by device similarity to ``device``),
    corrected per task by the task's own measurements. Informative from the first forecast.

    With a ``worker``, the device's bandwidth is probed once (a triad) and kept in the store.
    """
    from kernelcast.agents.forecast.blend import BlendedForecaster
    from kernelcast.agents.forecast.device_probe import device_bandwidth
    from kernelcast.agents.forecast.features import device_similarity
    from kernelcast.agents.forecast.learned import LearnedForecaster, task_lookup, training_set
    from kernelcast.tools.store.pairs import read_pairs
    from kernelcast.tools.store.store import TRAINING_PROVENANCE

    pairs = store.ledger.measured_pairs(sizes="full", provenance=TRAINING_PROVENANCE) if store is not None else []
    devices = store.devices.all() if store is not None else {}
    local = worker.hardware_spec() if worker is not None else None
    if local is not None:
        devices = {**devices, local.key: local}
    seeded = False
    if seed_path.exists():
        seed_pairs, seed_devices = foreign_seed(*read_pairs(seed_path), devices)
        seed_pairs = measured_on_builtins(seed_pairs)
        known = {(m.candidate_hash, m.device) for _, m in pairs}
        extra = [(c, m) for c, m in seed_pairs if (m.candidate_hash, m.device) not in known]
        seeded = bool(extra)
        pairs = pairs + extra
        devices = {**seed_devices, **devices}
    if exclude_task is not None:
        pairs = [(c, m) for c, m in pairs if m.task != exclude_task]
    lookup = task_lookup(store)
    data = training_set(pairs, lookup, hardware=devices)
    target = devices.get(local.key if local is not None else device or "")
    weights = [device_similarity(devices.get(dev), target) for dev in data.devices] if target is not None else None
    cross = LearnedForecaster(seeded=seeded).fit(data, weights)

    def bandwidth(hw: "HardwareSpec"):  # noqa: ANN202 - a Bandwidth
        return device_bandwidth(store, hw, worker if worker is not None and target is not None
                                and hw.key == target.key else None)

    return BlendedForecaster(cross, data, history=pairs, hardware=devices, tasks=lookup, bandwidth=bandwidth,
                             seeded=seeded)

