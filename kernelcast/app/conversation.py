"""What the chat needs below the front: the model client it talks through and where conversations are kept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kernelcast.agents.llm.client import LLMClient, LLMError
from kernelcast.graphs.search.graph import checkpointer

__all__ = ["LLMClient", "LLMError", "conversation_store", "model_client"]


def model_client(model: str, api_base: str | None, api_key: str | None, timeout_s: float) -> LLMClient:
    """The chat's model: one retry, since a person is waiting."""
    return LLMClient(model, api_base, api_key, timeout_s=timeout_s, max_retries=1)


def conversation_store(path: Path) -> Any:
    """The checkpointer conversations are resumed from (the same SQLite saver runs and sessions use)."""
    return checkpointer(path)
