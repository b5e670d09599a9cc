"""Settings from the environment and ``.env`` (see ``.env.example``): the only reader of ``KERNELCAST_*``.

It sits in the lowest layer so the agents (the model endpoint) and the tools read the same settings as the front
doors; the process environment is read nowhere else except what is not kernelcast's own setting (a subprocess's
environment, the OpenCL runtime registration, the CUDA toolkit's location, litellm's and the OpenAI client's own
variables as fallbacks named there)."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from platformdirs import user_data_dir
from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from kernelcast.tools.core.measurement import MeasureConfig


class Settings(BaseSettings):
    """Everything configurable; each field reads ``KERNELCAST_<NAME>``."""

    model_config = SettingsConfigDict(env_prefix="KERNELCAST_", env_file=".env", extra="ignore")

    home: Path = Field(default_factory=lambda: Path(user_data_dir("kernelcast")), description=(
        "folder for the database and run folders (default: the platform's user data folder, so a server "
        "started in any directory finds the same store)"))
    db: Path | None = Field(default=None, description="SQLite file (default: <home>/kernelcast.db)")
    device: str | None = Field(default=None, description="platform:device index or name substring")
    model: str | None = Field(default=None, description="litellm model string for LLM agents")
    api_base: str | None = Field(default=None, description="OpenAI-compatible base URL (vLLM, llama.cpp)")
    api_key: SecretStr | None = Field(default=None, description="API key for the model endpoint")
    measure_timeout_s: float = Field(default=MeasureConfig.model_fields["timeout_s"].default, description=(
        "seconds one measurement may take before its worker is killed (a timeout outcome)"))
    log_level: str = "WARNING"
    task_path: str = Field(default=".", description=(
        "folders (os.pathsep separated) whose task files MCP and chat callers may name; built-in tasks are "
        "always available. Default: the current directory. Empty: built-ins only"))
    model_path: str = Field(default="", description=(
        "folders (os.pathsep separated) besides <home>/models whose models MCP and chat tool callers may load "
        "with model=\"local:PATH\"; no other folder on the server's disk is loaded for them"))
    mcp_token: SecretStr | None = Field(default=None, description="bearer token the MCP HTTP server requires")
    no_runtime_registration: bool = Field(default=False, description=(
        "leave OCL_ICD_VENDORS alone: do not register the OpenCL runtimes kernelcast installed"))

    @property
    def db_path(self) -> Path:
        return self.db or self.home / "kernelcast.db"

    @property
    def runs_dir(self) -> Path:
        return self.home / "runs"

    @property
    def task_roots(self) -> list[Path]:
        """The folders of KERNELCAST_TASK_PATH (empty entries dropped)."""
        return [Path(p) for p in self.task_path.split(os.pathsep) if p.strip()]


    @property
    def model_roots(self) -> list[Path]:
        """Where tool callers' ``local:`` models may live: <home>/models, then KERNELCAST_MODEL_PATH's folders."""
        return [self.home / "models", *(Path(p) for p in self.model_path.split(os.pathsep) if p.strip())]


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
