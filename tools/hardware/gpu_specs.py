"""Data-sheet specs of GPUs whose timings kernelcast imports from recordings (it never ran on them): the device
record a recording is stored under, so forecasters see the same hardware features (compute units, clock, memory,
caches, peak bandwidth and FLOP/s) for a recorded GPU as a probed device gives them.

Values are the vendors' public data sheets (boost clocks; FP32 peaks without sparsity). A recording of a GPU not
listed here imports with its name alone (``spec_for`` returns a bare record), and the importer says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernelcast.tools.core.measurement import HardwareSpec

RECORDED_PLATFORM = "recorded"  # the platform part of a recorded device's key: never a live runtime's


@dataclass(frozen=True)
class GpuSheet:
    """One GPU's data sheet."""

    vendor: str
    architecture: str
    compute_units: int  # SMs (NVIDIA) or CUs (AMD)
    boost_clock_mhz: int
    memory_gib: int
    peak_bandwidth_gbs: float  # DRAM, GB/s (10^9 bytes)
    peak_fp32_tflops: float
    l2_cache_mib: float  # the last-level cache a working set can stay in (AMD: Infinity Cache)
    shared_kib_per_block: int  # default static shared memory (LDS) one block may use


#: name fragments (as the recording's ``device_name`` spells them, lower-case) -> data sheet
SHEETS: dict[str, GpuSheet] = {
    # NVIDIA A100 PCIe 40 GB: 108 SMs, 1410 MHz boost, 1555 GB/s HBM2, 19.5 TFLOP/s FP32, 40 MB L2
    "a100": GpuSheet("NVIDIA", "Ampere (GA100)", 108, 1410, 40, 1555.0, 19.5, 40.0, 48),
    # NVIDIA RTX A4000: 48 SMs, 1560 MHz boost, 448 GB/s GDDR6, 19.2 TFLOP/s FP32, 4 MB L2
    "a4000": GpuSheet("NVIDIA", "Ampere (GA104)", 48, 1560, 16, 448.0, 19.2, 4.0, 48),
    # NVIDIA RTX A6000: 84 SMs, 1800 MHz boost, 768 GB/s GDDR6, 38.7 TFLOP/s FP32, 6 MB L2
    "a6000": GpuSheet("NVIDIA", "Ampere (GA102)", 84, 1800, 48, 768.0, 38.7, 6.0, 48),
    # AMD Radeon PRO W6600: 28 CUs, 2903 MHz peak engine clock, 224 GB/s GDDR6, 10.4 TFLOP/s FP32, 32 MB Infinity
    # Cache, 64 KB LDS per CU
    "w6600": GpuSheet("AMD", "RDNA 2 (Navi 23)", 28, 2903, 8, 224.0, 10.4, 32.0, 64),
}


def sheet_for(device_name: str) -> GpuSheet | None:
    """The data sheet of the GPU a recording names, or None when it is not in :data:`SHEETS`."""
    words = device_name.lower().replace("-", " ").split()
    found = [sheet for key, sheet in SHEETS.items() if key in words]
    return found[0] if len(found) == 1 else None


def recorded_device(device_name: str, backend: str, tool: str) -> HardwareSpec:
    """The device record of a GPU known only from a recording: its name, the backend of the task it ran, and the
    data sheet's features where :data:`SHEETS` has it (``extra`` says where every number came from)."""
    sheet = sheet_for(device_name)
    base = HardwareSpec(backend=backend, platform=RECORDED_PLATFORM, name=device_name, device_type="GPU",
                        extra={"recorded_by": tool, "spec_source": "none: a GPU without a data sheet here"})
    if sheet is None:
        return base
    return base.model_copy(update={
        "vendor": sheet.vendor, "compute_units": sheet.compute_units, "clock_mhz": sheet.boost_clock_mhz,
        "global_mem_bytes": sheet.memory_gib * 2**30, "local_mem_bytes": sheet.shared_kib_per_block * 2**10,
        "max_work_group_size": 1024, "max_work_item_sizes": [1024, 1024, 64],
        "global_cache_bytes": int(sheet.l2_cache_mib * 2**20), "last_level_cache_bytes": int(sheet.l2_cache_mib * 2**20),
        "extra": {"recorded_by": tool, "spec_source": "vendor data sheet", "architecture": sheet.architecture,
                  "peak_bandwidth_gbs": sheet.peak_bandwidth_gbs, "peak_fp32_gflops": sheet.peak_fp32_tflops * 1e3}})


__all__ = ["GpuSheet", "RECORDED_PLATFORM", "SHEETS", "recorded_device", "sheet_for"]
