"""Unit tests run without a device: while a test here sets up, runs or tears down, opening an OpenCL context,
starting a measurement worker or device probe process, starting Ray or connecting to the network fails the test.
That keeps `make unit` fast and runnable anywhere; a test that needs one of these belongs in tests/device or
tests/e2e."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Generator
from typing import Any

import pytest

MOVE = "unit tests run without a device: move this test to tests/device (or tests/e2e)"
# the child processes that open a device: the measurement worker and the device probe
DEVICE_PROCESSES = ("kernelcast.tools.hardware.worker", "kernelcast.tools.hardware.probe")
RAY_PROCESSES = ("gcs_server", "raylet")  # what ray.init starts, when a test imported ray after the guard was set
NETWORK = (socket.AF_INET, socket.AF_INET6)


def _refuse(what: str) -> None:
    # pytest.fail raises an OutcomeException (a BaseException): product code's `except Exception` cannot swallow it
    pytest.fail(f"{MOVE}; it tried to {what}", pytrace=True)


def _guard(mp: pytest.MonkeyPatch) -> None:
    execute_child = subprocess.Popen._execute_child  # type: ignore[attr-defined]

    def no_device_process(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> None:
        words = [args] if isinstance(args, (str, bytes)) else list(args)
        command = " ".join(map(str, words))
        if any(name in command for name in DEVICE_PROCESSES):
            _refuse(f"start a device process ({command[:120]})")
        if any(name in command for name in RAY_PROCESSES):
            _refuse("start Ray")
        execute_child(self, args, *rest, **kwargs)

    mp.setattr(subprocess.Popen, "_execute_child", no_device_process)

    connect, connect_ex = socket.socket.connect, socket.socket.connect_ex

    def no_network(self: socket.socket, address: Any) -> Any:
        if self.family in NETWORK:
            _refuse(f"open a network connection to {address}")
        return connect(self, address)

    def no_network_ex(self: socket.socket, address: Any) -> Any:
        if self.family in NETWORK:
            _refuse(f"open a network connection to {address}")
        return connect_ex(self, address)

    mp.setattr(socket.socket, "connect", no_network)
    mp.setattr(socket.socket, "connect_ex", no_network_ex)

    try:
        import pyopencl as cl
    except ImportError:  # no OpenCL runtime at all: nothing to guard
        pass
    else:
        def no_context(*args: Any, **kwargs: Any) -> Any:
            _refuse("create an OpenCL context")

        mp.setattr(cl, "Context", no_context)
        mp.setattr(cl, "create_some_context", no_context)

    if "ray" in sys.modules:  # imported by a test or the code under it; starting it is what costs
        def no_ray(*args: Any, **kwargs: Any) -> Any:
            _refuse("start Ray")

        mp.setattr(sys.modules["ray"], "init", no_ray)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    with pytest.MonkeyPatch.context() as mp:
        _guard(mp)
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    with pytest.MonkeyPatch.context() as mp:
        _guard(mp)
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, None, None]:
    with pytest.MonkeyPatch.context() as mp:
        _guard(mp)
        return (yield)
