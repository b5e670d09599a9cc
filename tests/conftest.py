"""Shared fixtures. Each block names its owner issue; add yours, keep the others."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

if str(Path(__file__).parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).parent))

from llm_server import LlamaServer, find_gguf  # noqa: E402


# ---- issue 3: a real local LLM server (llama.cpp + SmolLM2-135M) ------------------
@pytest.fixture(scope="session")
def llm_server() -> Iterator[LlamaServer]:
    """A running llama.cpp server on loopback for the whole session (skipped only without llama_cpp)."""
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install 'kernelcast[local-llm]')")
    with LlamaServer(find_gguf(), n_ctx=2048) as server:
        yield server
