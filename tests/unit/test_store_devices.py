"""The store's devices (``store.devices``): specs, probe verdicts per driver, and once-per-device probes, whose
damaged rows read as "never probed" rather than failing every forecast."""

from __future__ import annotations

from pathlib import Path

from kernelcast.tools.core.measurement import HardwareSpec
from kernelcast.tools.store.store import Store

CPU = HardwareSpec(backend="opencl", platform="Intel(R) OpenCL", name="AMD EPYC", device_type="CPU", compute_units=2)


def test_specs_upsert_but_an_import_never_rewrites_a_known_device(tmp_path: Path) -> None:
    store = Store(tmp_path / "k.db")
    assert store.devices.all() == {}
    store.devices.upsert(CPU)
    bigger = CPU.model_copy(update={"compute_units": 64})
    assert store.devices.add_if_unknown(bigger) is False
    assert store.devices.all() == {CPU.key: CPU}
    store.devices.upsert(bigger)  # the device itself reports again
    assert store.devices.all()[CPU.key].compute_units == 64
    other = CPU.model_copy(update={"name": "Other"})
    assert store.devices.add_if_unknown(other) is True and set(store.devices.all()) == {CPU.key, other.key}


def test_probe_verdicts_are_per_driver_and_a_row_without_a_text_reason_is_no_verdict(tmp_path: Path) -> None:
    store = Store(tmp_path / "k.db")
    assert store.devices.verdict("k", "1.0") is None
    store.devices.record_verdict("k", "1.0", "")
    store.devices.record_verdict("k", "2.0", "crashed in the probe")
    assert store.devices.verdict("k", "1.0") == "" and store.devices.verdict("k", "2.0") == "crashed in the probe"
    store.devices.record_verdict("k", "2.0", "")  # probed again: overwritten
    assert store.devices.verdict("k", "2.0") == ""
    with store.db.conn:
        store.db.execute("update device_probes set reason = NULL where driver = '1.0'")
    assert store.devices.verdict("k", "1.0") is None


def test_device_probes_keep_a_finite_value_and_damaged_rows_read_as_never_probed(tmp_path: Path) -> None:
    store = Store(tmp_path / "k.db")
    assert store.devices.probe("dev", "triad") is None
    store.devices.set_probe("dev", "triad", 12.5e9, {"bytes": 1 << 26})
    store.devices.set_probe("dev", "launch", 4e-6)
    assert store.devices.probe("dev", "triad") == 12.5e9 and store.devices.probe("dev", "launch") == 4e-6
    assert store.devices.probe("other", "triad") is None
    for damage in ("not json", '{"value": "NaN"}', '{"detail": {}}'):
        with store.db.conn:
            store.db.execute("update meta set value = ? where key = 'probe:triad:dev'", [damage])
        assert store.devices.probe("dev", "triad") is None, damage
