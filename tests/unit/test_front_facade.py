"""The front's one facade (issue 61 item 6) and the device listing the probe shares with the OpenCL backend (item 7).

The import rules themselves are import-linter contracts (pyproject.toml, `make check`); these tests check what a
contract cannot: that ``kernelcast.api`` defines nothing of its own, and that the listing keeps its behaviour and
its error class where it moved.
"""

from __future__ import annotations

import inspect

import pytest

from kernelcast import api
from kernelcast.tools.core.errors import DeviceError, DeviceRuntimeError
from kernelcast.tools.hardware.backends import base as backend_base
from kernelcast.tools.hardware.opencl_devices import match_device


def test_the_facade_only_names_what_the_layers_below_define() -> None:
    assert len(api.__all__) == len(set(api.__all__)), "a name listed twice"
    for name in api.__all__:
        value = getattr(api, name)  # every listed name resolves
        module = getattr(value, "__module__", None) if inspect.isfunction(value) or inspect.isclass(value) else None
        assert module != "kernelcast.api", f"api.{name} is defined in the facade; define it in kernelcast/app/"
    defined = [name for name, value in vars(api).items()
               if (inspect.isfunction(value) or inspect.isclass(value)) and value.__module__ == "kernelcast.api"]
    assert defined == []


def test_the_library_names_come_from_the_facade() -> None:
    import kernelcast

    for name in kernelcast.__all__:
        assert getattr(kernelcast, name) is getattr(api, name)


DEVICES = [("0:0", "Intel(R) OpenCL", "AMD EPYC 7B13"), ("1:0", "Portable Computing Language", "pthread-AMD EPYC"),
           ("1:1", "Portable Computing Language", "cpu-other")]


@pytest.mark.parametrize(("selector", "index"), [("0:0", "0:0"), ("opencl:1:1", "1:1"), ("0", "0:0"),
                                                 ("pthread", "1:0"), ("portable", "1:0"), ("INTEL", "0:0")])
def test_a_selector_names_a_listed_device(selector: str, index: str) -> None:
    assert match_device(selector, DEVICES) == index


def test_an_unmatched_selector_is_a_device_error_that_names_the_devices() -> None:
    with pytest.raises(DeviceRuntimeError, match=r"no OpenCL device matches 'nvidia'; available: 0:0 AMD EPYC"):
        match_device("nvidia", DEVICES)
    # defined in tools/core now (below the probe): still the backends' class, a DeviceError (exit 3), a RuntimeError
    assert backend_base.DeviceRuntimeError is DeviceRuntimeError
    assert issubclass(DeviceRuntimeError, DeviceError) and issubclass(DeviceRuntimeError, RuntimeError)
