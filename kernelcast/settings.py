"""Settings from the environment and ``.env`` (see ``.env.example``)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Everything configurable; each field reads ``KERNELCAST_<NAME>``."""

    model_config = SettingsConfigDict(env_prefix="KERNELCAST_", env_file=".env", extra="ignore")

    home: Path = Field(default=Path(".kernelcast"), description="folder for the database and run folders")
    db: Path | None = Field(default=None, description="SQLite file (default: <home>/kernelcast.db)")
    device: str | None = Field(default=None, description="platform:device index or name substring")
    model: str | None = Field(default=None, description="litellm model string for LLM agents")
    api_base: str | None = Field(default=None, description="OpenAI-compatible base URL (vLLM, llama.cpp)")
    api_key: SecretStr | None = Field(default=None, description="API key for the model endpoint")
    measure_timeout_s: float = 120.0
    log_level: str = "WARNING"

    @property
    def db_path(self) -> Path:
        return self.db or self.home / "kernelcast.db"

    @property
    def runs_dir(self) -> Path:
        return self.home / "runs"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
