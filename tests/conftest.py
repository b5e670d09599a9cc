"""Fixtures that several test folders use, and the device report. Each block names its owner issue; add yours,
keep the others. Helpers that are not fixtures live in tests/support."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

if str(Path(__file__).parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).parent))

from kernelcast.tools.core.settings import get_settings  # noqa: E402
from kernelcast.tools.hardware.worker import MeasurementWorker  # noqa: E402

from support.llm_server import LlamaServer, find_gguf  # noqa: E402
from support.tiny_template import write_tiny_template  # noqa: E402


# ---- issue 11: say which device the suite ran on --------------------------------------
def device_report() -> list[str]:
    """The OpenCL devices at hand, their probe verdicts and the default: results depend on the device."""
    from kernelcast.tools.hardware.probe import probe_devices

    lines = []
    statuses = probe_devices()
    default = next((s for s in statuses if s.healthy), None)
    for s in statuses:
        verdict = "healthy" if s.healthy else f"skipped: {s.reason}"
        mark = " (default)" if s is default else ""
        lines.append(f"opencl {s.index}: {s.name} ({s.platform}, driver {s.driver}): {verdict}{mark}")
    return lines or ["no OpenCL device found"]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    terminalreporter.write_line("devices this suite ran on:")
    for line in device_report():
        terminalreporter.write_line("  " + line)


# ---- issue 3: a real local LLM server (llama.cpp + SmolLM2-135M) ------------------
@pytest.fixture(scope="session")
def llm_server() -> Iterator[LlamaServer]:
    """A running llama.cpp server on loopback for the whole session (skipped only without llama_cpp)."""
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install 'kernelcast[local-llm]')")
    with LlamaServer(find_gguf(), n_ctx=2048) as server:
        yield server


# ---- issue 49: one measurement worker per test module (the exploit suites) -------------------
@pytest.fixture(scope="module")
def worker() -> Iterator[MeasurementWorker]:
    """A worker on the default device, shared by a module's tests (a module may define its own)."""
    with MeasurementWorker() as w:
        yield w


# ---- a private KERNELCAST_HOME, and a template the generator runs dry on (used by e2e and device tests) ----
@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    """A private KERNELCAST_HOME (the chat's tools read the settings)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KERNELCAST_HOME", str(tmp_path / "home"))
        mp.delenv("KERNELCAST_MODEL", raising=False)
        get_settings.cache_clear()
        yield tmp_path / "home"
    get_settings.cache_clear()


@pytest.fixture()
def tiny_template(tmp_path: Path) -> Path:
    """support.tiny_template's task, written under tmp_path: its task.toml."""
    return write_tiny_template(tmp_path)
