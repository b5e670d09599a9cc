"""Field and wording inconsistencies of issue 64 item 9 that need no device: a device whose runtime reports no
clock, and counts in words."""

from __future__ import annotations

from kernelcast.graphs.search.result import plural
from kernelcast.tools.core.measurement import HardwareSpec


def test_a_device_without_a_reported_clock_says_unknown_not_0_mhz() -> None:
    spec = HardwareSpec(backend="opencl", platform="Intel(R) OpenCL", name="AMD EPYC", device_type="CPU",
                        compute_units=2, clock_mhz=0)
    assert "0 MHz" not in spec.summary().replace("(the runtime reports none)", "")
    assert "compute units: 2 @ unknown clock" in spec.summary()
    assert "@ 2596 MHz" in spec.model_copy(update={"clock_mhz": 2596}).summary()


def test_one_measurement_is_singular() -> None:
    assert plural(1, "measurement") == "1 measurement" and plural(0, "measurement") == "0 measurements"
