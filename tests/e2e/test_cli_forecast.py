"""`kernelcast forecast`, `calibration` and `dataset build` as real subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from kernelcast.agents.factory import SEED_DATASET
from kernelcast.tools.core.measurement import Measurement, Status
from kernelcast.tools.core.task import resolve_task
from kernelcast.tools.store.pairs import read_pairs
from kernelcast.tools.store.store import Store


def kc(tmp_path: Path, *args: str, env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KERNELCAST_HOME": str(tmp_path / "home"), "COLUMNS": "200", **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "kernelcast.cli", *args], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=600)


def test_learned_forecast_with_an_empty_store_is_informative_on_any_device(tmp_path: Path) -> None:
    """An empty store still forecasts from the shipped seed: measured on this kind of device, or on others (the
    device spec is a feature) blended with the roofline prior of this device."""
    out = kc(tmp_path, "forecast", "saxpy", "-p", "VEC=4", "-p", "COARSEN=1", "-p", "WG=64", "--json")
    assert out.returncode == 0, out.stderr
    fc = json.loads(out.stdout)
    store = Store(tmp_path / "home" / "kernelcast.db")
    device = next(iter(store.devices.all()))
    _, seed_devices = read_pairs(SEED_DATASET)
    assert fc["provenance"]["failed"] is False and "seed dataset" in fc["provenance"]["model"]
    if device not in seed_devices:  # the seed was measured elsewhere: this device's prior carries it too
        assert "roofline prior" in fc["provenance"]["model"]
    assert abs(sum(fc["probabilities"]) - 1) < 1e-6 and max(fc["probabilities"]) > 0.125
    assert len(store.forecasts.find(forecaster="learned")) == 1  # recorded for later calibration


def test_llm_forecast_against_the_local_server(tmp_path: Path, llm_server) -> None:  # noqa: ANN001
    out = kc(tmp_path, "forecast", "saxpy", "-p", "VEC=2", "-p", "COARSEN=1", "-p", "WG=64", "--forecaster", "llm",
             "--model", llm_server.model, env_extra={"KERNELCAST_API_BASE": llm_server.api_base})
    assert out.returncode == 0, out.stderr
    assert "◀ predicted" in out.stdout
    assert ("uninformative forecast" in out.stdout) or ("confidence" in out.stdout)


def test_unknown_forecaster_is_a_clear_error(tmp_path: Path) -> None:
    out = kc(tmp_path, "forecast", "saxpy", "--forecaster", "oracle")
    assert out.returncode == 2 and "unknown forecaster 'oracle'" in out.stderr


def test_calibration_table_and_plots_from_stored_data(tmp_path: Path) -> None:
    store = Store(tmp_path / "home" / "kernelcast.db")
    task = resolve_task("saxpy")
    points = task.param_space()[:12]
    for i, point in enumerate(points):
        cand = task.instantiate(point)
        store.candidates.add(cand)
        speedup = [0.6, 0.9, 1.2, 1.8, 3.0, 5.0][i % 6]
        store.ledger.add(Measurement(task="saxpy", candidate_hash=cand.hash, device="dev", sizes="full",
                                     status=Status.correct, speedup=speedup))
        probs = [0.02] * 8
        probs[(i * 3) % 8] = 0.86
        store.forecasts.add("saxpy", cand.hash, "dev", "test-forecaster", "m", probs, (i * 3) % 8 + 1, 0.86, False)
    out = kc(tmp_path, "calibration", "--forecaster", "test-forecaster", "--out", str(tmp_path / "cal"))
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())  # rich wraps long titles
    assert "12 forecasts with a measurement" in text and "ECE" in text and "top 10%" in text
    for name in ("reliability.png", "risk_coverage.png"):
        png = tmp_path / "cal" / name
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    empty = kc(tmp_path, "calibration", "--forecaster", "nobody")
    assert empty.returncode == 2 and "no stored forecast" in empty.stderr


def test_dataset_build_is_resumable(tmp_path: Path) -> None:
    first = kc(tmp_path, "dataset", "build", "--tasks", "saxpy", "-n", "4", "--sizes", "small", "--limit", "2")
    assert first.returncode == 0, first.stderr
    assert "2 new measurements" in first.stdout
    second = kc(tmp_path, "dataset", "build", "--tasks", "saxpy", "-n", "4", "--sizes", "small")
    assert second.returncode == 0 and "2 new measurements" in second.stdout
    third = kc(tmp_path, "dataset", "build", "--tasks", "saxpy", "-n", "4", "--sizes", "small")
    assert "0 new measurements" in third.stdout
    store = Store(tmp_path / "home" / "kernelcast.db")
    assert len({m.candidate_hash for m in store.ledger.find(task="saxpy")}) == 4


def test_dataset_build_refuses_to_mix_opencl_and_cuda_tasks(tmp_path: Path) -> None:
    mixed = kc(tmp_path, "dataset", "build", "--tasks", "saxpy,gemm_cuda", "-n", "2", "--sizes", "small")
    assert mixed.returncode == 2 and "different backends" in mixed.stderr
    assert not (tmp_path / "home" / "kernelcast.db").exists()  # refused before anything was opened or measured
