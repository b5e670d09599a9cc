"""`kernelcast forecaster` on bad input (issue 60's lesser defects): one line and exit code 2, never a traceback;
`export --overwrite` never deletes the trained folder, a folder holding it, a file, or what lies beside the target.

The trained folder here is written by hand (its meta, an adapter config, metrics): every refusal happens before
any model loads, so these tests need no torch and train nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernelcast.agents.train.export import EXPORT_META
from kernelcast.agents.train.model import ADAPTER_DIR, TRAINED_META, TrainedMeta
from kernelcast.agents.train.run import METRICS_FILE
from kernelcast.cli import app


def kc(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["forecaster", *args], env={"COLUMNS": "300"})
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result.exit_code, result.output


def one_line_error(code: int, out: str) -> str:
    assert code == 2, out
    assert "Traceback" not in out and out.startswith("error: ") and out.count("\n") == 1, out
    return out


@pytest.fixture
def trained(tmp_path: Path) -> Path:
    """A finished trained folder, as `forecaster train` leaves it, inside a parent folder with a file of its own."""
    parent = tmp_path / "work"
    folder = parent / "trained"
    (folder / ADAPTER_DIR).mkdir(parents=True)
    base = tmp_path / "base"
    base.mkdir()
    (folder / TRAINED_META).write_text(TrainedMeta(base=str(base), method="score", objective="crps").model_dump_json())
    (folder / ADAPTER_DIR / "adapter_config.json").write_text("{}")
    (folder / METRICS_FILE).write_text("{}")
    (parent / "notes.txt").write_text("mine\n")
    return folder


def test_export_never_deletes_the_trained_folder_or_what_is_beside_it(trained: Path, tmp_path: Path) -> None:
    parent = trained.parent
    out = one_line_error(*kc("export", str(trained), str(parent), "--overwrite"))
    assert "not into a folder holding it" in out
    assert (trained / TRAINED_META).is_file() and (parent / "notes.txt").read_text() == "mine\n"
    out = one_line_error(*kc("export", str(trained), str(tmp_path), "--overwrite"))  # the grandparent
    assert (trained / TRAINED_META).is_file()
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "keep.txt").write_text("keep")
    out = one_line_error(*kc("export", str(trained), str(occupied), "--overwrite"))
    assert "is not an earlier export" in out and (occupied / "keep.txt").read_text() == "keep"
    assert EXPORT_META in out


@pytest.mark.parametrize("overwrite", [False, True])
def test_export_onto_a_file_is_one_line(trained: Path, overwrite: bool) -> None:
    target = trained.parent / "notes.txt"
    out = one_line_error(*kc("export", str(trained), str(target), *(["--overwrite"] if overwrite else [])))
    assert "is not a folder" in out and target.read_text() == "mine\n"


def test_dataset_onto_a_file_is_one_line(tmp_path: Path) -> None:
    target = tmp_path / "data.txt"
    target.write_text("mine\n")
    out = one_line_error(*kc("dataset", str(target)))
    assert "is a file" in out and target.read_text() == "mine\n"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("data", ["/dev/zero", "fifo", "not-json", "wrong-json", "missing"])
def test_train_on_what_is_not_a_dataset_is_one_line(tmp_path: Path, data: str) -> None:
    path = Path(data) if data.startswith("/") else tmp_path / data
    if data == "fifo":
        os.mkfifo(path)
    elif data == "not-json":
        path.write_text("this is not json\n")
    elif data == "wrong-json":
        path.write_text('{"task": "saxpy"}\n')
    out = one_line_error(*kc("train", str(path), "--base", str(tmp_path), "--out", str(tmp_path / "o")))
    expected = {"/dev/zero": "not a regular file", "fifo": "not a regular file", "missing": "not found"}
    assert expected.get(data, "is not a dataset of training rows") in out


def test_train_on_a_device_that_is_not_there_is_one_line(tmp_path: Path) -> None:
    out = one_line_error(*kc("train", str(tmp_path), "--base", "b", "--out", "o", "--device", "bogus"))
    assert "--device 'bogus': no such device; use cpu or cuda" in out
    torch = pytest.importorskip("torch", reason="the cuda check asks torch (the [train] extra)")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    device = f"cuda:{count}" if count else "cuda"  # one past the last GPU, on any machine
    out = one_line_error(*kc("train", str(tmp_path), "--base", "b", "--out", "o", "--device", device))
    assert ("no CUDA device here" if count == 0 else f"has {count} CUDA device(s)") in out
