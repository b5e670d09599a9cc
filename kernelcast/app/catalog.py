"""What a door may offer by name: the generators, forecasters and routers, their defaults and run settings."""

from __future__ import annotations

from kernelcast.agents.forecast.local import LOCAL_PREFIX as LOCAL_MODEL_PREFIX  # --model local:PATH
from kernelcast.agents.registry import (
    DEFAULT_FORECASTER,
    DEFAULT_GENERATOR,
    EXTERNAL,
    FORECASTERS,
    SELECTABLE_GENERATORS,
    ForecasterName,
    GeneratorName,
    forecaster_spec,
    generator_spec,
)
from kernelcast.graphs.config import RunConfig, default, listed_router
from kernelcast.graphs.route.routers import ROUTERS, RouterName, router_spec

__all__ = ["DEFAULT_FORECASTER", "DEFAULT_GENERATOR", "EXTERNAL", "FORECASTERS", "LOCAL_MODEL_PREFIX", "ROUTERS",
           "SELECTABLE_GENERATORS", "ForecasterName", "GeneratorName", "RouterName", "RunConfig", "default",
           "forecaster_spec", "generator_spec", "listed_router", "router_spec"]
