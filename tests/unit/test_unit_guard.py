"""The unit folder's guard (tests/unit/conftest.py) refuses what needs a device or a network, with the message
that says where the test belongs, and lets other child processes run."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from kernelcast.tools.hardware.worker import MeasurementWorker

REFUSED = "unit tests run without a device: move this test to tests/device"


def test_an_opencl_context_is_refused() -> None:
    cl = pytest.importorskip("pyopencl")
    with pytest.raises(pytest.fail.Exception, match=REFUSED):
        cl.Context(dev_type=cl.device_type.ALL)


def test_a_measurement_worker_is_refused() -> None:
    worker = MeasurementWorker()
    try:
        with pytest.raises(pytest.fail.Exception, match=REFUSED):
            worker.start()
    finally:
        worker.close()


def test_a_network_connection_is_refused() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        with pytest.raises(pytest.fail.Exception, match=REFUSED + ".*network connection to"):
            sock.connect(("127.0.0.1", 9))


def test_other_child_processes_run() -> None:
    out = subprocess.run([sys.executable, "-c", "print('ran')"], capture_output=True, text=True, check=True)
    assert out.stdout == "ran\n"
