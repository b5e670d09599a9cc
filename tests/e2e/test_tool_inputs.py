"""What the chat and MCP tools read on this machine (issue 60's lesser defects).

- The MCP (and the chat model's) ``forecast_speedup`` loads a ``local:PATH`` model only from the server's model
  roots (``<KERNELCAST_HOME>/models``, ``KERNELCAST_MODEL_PATH``), and its refusal reads the same whether the
  path exists or not.
- The chat's ``/measure``, ``/forecast`` and ``/submit`` read a named file as a kernel file: a FIFO or
  ``/dev/zero`` is a one-line error at once, not a hang or a MemoryError.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernelcast import chat_tools as ops
from kernelcast.chat_local_tools import forecast_file, measure_file, submit_files
from kernelcast.tools.core.settings import get_settings


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("KERNELCAST_MODEL_PATH", raising=False)
    get_settings.cache_clear()
    yield tmp_path / "home"
    get_settings.cache_clear()


def test_forecast_speedup_loads_no_model_from_outside_the_model_roots(home: Path, tmp_path: Path) -> None:
    outside = tmp_path / "someone-elses-model"
    outside.mkdir()
    (home / "models").mkdir(parents=True)
    refusals = set()
    for path in (str(outside), str(tmp_path / "missing"), str(home / "models" / ".." / "models" / ".." / "x"),
                 "../../someone-elses-model", "/", ""):
        with pytest.raises(ops.OperationError) as caught:
            ops.forecast_speedup("saxpy", forecaster="llm", model=f"local:{path}")
        refusals.add(str(caught.value).replace(f"'local:{path}'", "'local:PATH'"))
    assert len(refusals) == 1, refusals  # an existing folder and a missing one read the same
    assert "model roots" in refusals.pop()


def test_a_model_under_the_roots_is_allowed(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mine = home / "models" / "mine"
    mine.mkdir(parents=True)
    assert ops.confined_model("local:mine") == f"local:{mine.resolve()}"  # relative: under <home>/models
    assert ops.confined_model(f"local:{mine}") == f"local:{mine.resolve()}"
    assert ops.confined_model("openai/gpt-4o") == "openai/gpt-4o" and ops.confined_model(None) is None
    shared = tmp_path / "shared-models"
    (shared / "team").mkdir(parents=True)
    with pytest.raises(ops.OperationError):
        ops.confined_model(f"local:{shared / 'team'}")
    monkeypatch.setenv("KERNELCAST_MODEL_PATH", str(shared))  # the server's own allowlist
    get_settings.cache_clear()
    assert ops.confined_model(f"local:{shared / 'team'}") == f"local:{(shared / 'team').resolve()}"
    escape = shared / "link"
    escape.symlink_to(tmp_path)
    with pytest.raises(ops.OperationError):  # symlinks resolved: a link out of a root is outside
        ops.confined_model(f"local:{escape}")


@pytest.fixture(params=["fifo", "/dev/zero"])
def unreadable(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "fifo":
        os.mkfifo(tmp_path / "kernel.cl")  # no writer: a blocking open would wait forever
        return str(tmp_path / "kernel.cl")
    return request.param


@pytest.mark.timeout(60)
def test_chat_file_tools_refuse_a_fifo_and_dev_zero_at_once(home: Path, unreadable: str) -> None:
    for call in (lambda: measure_file("saxpy", unreadable), lambda: forecast_file("saxpy", unreadable),
                 lambda: submit_files([unreadable], session="no-such-session")):
        with pytest.raises(ops.OperationError, match="is not a regular file"):
            call()
