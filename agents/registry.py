"""The generators and forecasters by name, each with its settings: the one list every front door (CLI
choices, chat and MCP literals, RunConfig, the docs) derives its names and defaults from.

Implementations are imported only when an agent is built, so reading the registry stays cheap. Build an
agent with :func:`make_generator` / :func:`make_forecaster`: a CLI run, an API call and a resumed run then
mean the same thing by the same name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from kernelcast.agents import DATA_DIR

if TYPE_CHECKING:
    from kernelcast.agents.forecast.base import Forecaster
    from kernelcast.agents.generate.base import Generator
    from kernelcast.tools.hardware.measurers.base import Measurer
    from kernelcast.tools.store.store import Store


@dataclass(frozen=True)
class AgentInputs:
    """What building an agent may use: the measurer (compile checks, bandwidth probe), the model endpoint
    (LLM agents), the store and device (the learned forecaster's training data)."""

    worker: Measurer | None = None
    model: str | None = None
    api_base: str | None = None
    store: Store | None = None
    device: str | None = None
    exclude_task: str | None = None


@dataclass(frozen=True)
class GeneratorSpec:
    name: str
    description: str
    needs_model: bool  # an LLM: --model or KERNELCAST_MODEL
    build: Callable[[AgentInputs], Generator] | None  # None: not built by name (a session's caller)

    @property
    def selectable(self) -> bool:
        """Can a user pick it (``--generator``)? A session's caller is implied by starting a session."""
        return self.build is not None


@dataclass(frozen=True)
class ForecasterSpec:
    """A forecaster by name. ``seed_replay``: calibration rows replayed from the shipped seed dataset WITH THIS
    forecaster, which may certify its trust on a device's first runs; another forecaster's replay never does."""

    name: str
    description: str
    needs_model: bool
    build: Callable[[AgentInputs], Forecaster]
    seed_replay: Path | None = None


def _offline(inputs: AgentInputs) -> Generator:
    from kernelcast.agents.generate.offline import OfflineGenerator

    return OfflineGenerator(worker=inputs.worker)


def _llm_generator(inputs: AgentInputs) -> Generator:
    from kernelcast.agents.factory import llm_client
    from kernelcast.agents.generate.llm import LLMGenerator

    return LLMGenerator(llm_client(inputs.model, inputs.api_base), worker=inputs.worker)


def _learned(inputs: AgentInputs) -> Forecaster:
    from kernelcast.agents.factory import learned_forecaster

    return learned_forecaster(inputs.store, inputs.device, inputs.exclude_task, worker=inputs.worker)


def _prior(inputs: AgentInputs) -> Forecaster:
    from kernelcast.agents.forecast.blend import BlendedForecaster
    from kernelcast.agents.forecast.device_probe import device_bandwidth

    return BlendedForecaster(bandwidth=lambda hw: device_bandwidth(inputs.store, hw, inputs.worker))


def _llm_forecaster(mode: Literal["json", "logprobs"]) -> Callable[[AgentInputs], Forecaster]:
    def build(inputs: AgentInputs) -> Forecaster:
        from kernelcast.agents.factory import llm_client, local_forecaster
        from kernelcast.agents.forecast.llm import LLMForecaster

        if inputs.model and inputs.model.startswith("local:"):  # a trained model, run in process
            return local_forecaster(inputs.model)
        return LLMForecaster(llm_client(inputs.model, inputs.api_base), mode=mode)

    return build


def _transfer(inputs: AgentInputs) -> Forecaster:
    from kernelcast.agents.forecast.transfer import TransferForecaster

    if inputs.store is None:
        raise ValueError("the transfer forecaster reads other devices' rows from a store; none was given")
    return TransferForecaster(inputs.store, fallback=_prior(inputs))


def _none(inputs: AgentInputs) -> Forecaster:
    from kernelcast.agents.factory import UninformativeForecaster

    return UninformativeForecaster()


SEED_REPLAY = DATA_DIR / "seed_replay.jsonl.gz"  # made with the learned forecaster: graphs/route/replay_calibration
EXTERNAL = "external"  # the generator of a session: the caller writes the candidates

GENERATORS: dict[str, GeneratorSpec] = {spec.name: spec for spec in (
    GeneratorSpec("offline", "template points and source transformations, validated, no network",
                  needs_model=False, build=_offline),
    GeneratorSpec("llm", "an LLM rewrites the parent (litellm model string), through the same validator",
                  needs_model=True, build=_llm_generator),
    GeneratorSpec(EXTERNAL, "a session's caller (another agent) submits the candidates", needs_model=False,
                  build=None),
)}
FORECASTERS: dict[str, ForecasterSpec] = {spec.name: spec for spec in (
    ForecasterSpec("learned", "roofline prior blended with a forest trained on the store and the seed data, "
                   "corrected per task", needs_model=False, build=_learned, seed_replay=SEED_REPLAY),
    ForecasterSpec("prior", "the roofline prior alone", needs_model=False, build=_prior),
    ForecasterSpec("llm", "an LLM answers with the 8 bin probabilities as JSON; --model local:PATH runs a model "
                   "trained by `kernelcast forecaster train` in process (its bin digits' probabilities)", needs_model=True,
                   build=_llm_forecaster("json")),
    ForecasterSpec("llm-logprobs", "an LLM's token log-probabilities of the bins", needs_model=True,
                   build=_llm_forecaster("logprobs")),
    ForecasterSpec("transfer", "other devices' measured or recorded ln S of the same kernel, weighted by device "
                   "similarity and by their agreement with this run's measurements; sd widened with device distance",
                   needs_model=False, build=_transfer),
    ForecasterSpec("none", "no forecaster: every candidate is deferred to the hardware", needs_model=False,
                   build=_none),
)}
DEFAULT_GENERATOR = "offline"
DEFAULT_FORECASTER = "learned"
SELECTABLE_GENERATORS = tuple(name for name, spec in GENERATORS.items() if spec.selectable)

if TYPE_CHECKING:
    GeneratorName = str
    AnyGeneratorName = str
    ForecasterName = str
else:  # the registries' names as Literals: pydantic and the MCP schemas publish them as choices
    GeneratorName = Literal[SELECTABLE_GENERATORS]  # what a user may choose
    AnyGeneratorName = Literal[tuple(GENERATORS)]  # what a stored run may name (sessions: "external")
    ForecasterName = Literal[tuple(FORECASTERS)]


def choices(names: Iterable[str]) -> str:
    """'a, b or c': the names for messages and help texts."""
    items = list(names)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + f" or {items[-1]}"


def generator_spec(name: str) -> GeneratorSpec:
    try:
        return GENERATORS[name]
    except KeyError:
        raise ValueError(f"unknown generator {name!r} (expected {choices(SELECTABLE_GENERATORS)})") from None


def forecaster_spec(name: str) -> ForecasterSpec:
    try:
        return FORECASTERS[name]
    except KeyError:
        raise ValueError(f"unknown forecaster {name!r} (expected {choices(FORECASTERS)})") from None


def make_generator(name: str, worker: Measurer | None = None, model: str | None = None,
                   api_base: str | None = None) -> Generator:
    spec = generator_spec(name)
    if spec.build is None:
        raise ValueError(f"the {name!r} generator is not built by name: {spec.description}")
    return spec.build(AgentInputs(worker=worker, model=model, api_base=api_base))


def make_forecaster(name: str, store: Store | None = None, device: str | None = None, model: str | None = None,
                    api_base: str | None = None, exclude_task: str | None = None,
                    worker: Measurer | None = None) -> Forecaster:
    return forecaster_spec(name).build(AgentInputs(worker=worker, model=model, api_base=api_base, store=store,
                                                   device=device, exclude_task=exclude_task))
