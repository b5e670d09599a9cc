"""Every kernelcast exception derives from KernelcastError, and the CLI maps it to its exit code."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

import kernelcast
from kernelcast.tools.core.errors import EXIT_DEVICE, EXIT_FAILED, EXIT_USAGE, KernelcastError

OPTIONAL = ("ray", "pycuda", "torch", "transformers", "datasets", "trl", "peft")  # extras a module may need


def kernelcast_exceptions() -> list[type[BaseException]]:
    """Every exception class defined in a module of the kernelcast namespace (importable here)."""
    found: dict[str, type[BaseException]] = {}
    layers = [(kernelcast.__path__, "kernelcast.")]  # the layers are installed beside the front doors, not in them
    for layer in ("tools", "agents", "graphs"):
        package = importlib.import_module(f"kernelcast.{layer}")
        layers.append((package.__path__, f"kernelcast.{layer}."))
    modules = [info for path, prefix in layers for info in pkgutil.walk_packages(path, prefix)]
    for info in modules:
        try:
            module = importlib.import_module(info.name)
        except ImportError as exc:
            if exc.name and exc.name.split(".")[0] in OPTIONAL:
                continue
            raise
        for name, obj in vars(module).items():
            if (inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == info.name):
                found[f"{info.name}.{name}"] = obj
    return list(found.values())


def test_every_exception_derives_from_kernelcast_error() -> None:
    classes = kernelcast_exceptions()
    assert len(classes) >= 25  # the walk reached every layer
    outside = sorted(f"{c.__module__}.{c.__qualname__}" for c in classes if not issubclass(c, KernelcastError))
    assert outside == []


def test_subclass_relations_callers_rely_on_are_kept() -> None:
    from kernelcast.graphs.errors import RunError, SearchFailed
    from kernelcast.tools.core.task import TaskError
    from kernelcast.tools.hardware.measurers.base import MeasurerError
    from kernelcast.tools.hardware.worker import WorkerError
    from kernelcast.tools.store.store import StoreError

    assert issubclass(TaskError, ValueError) and TaskError.exit_code == EXIT_USAGE
    assert issubclass(StoreError, RuntimeError) and StoreError.exit_code == EXIT_USAGE
    assert issubclass(MeasurerError, WorkerError) and MeasurerError.exit_code == EXIT_DEVICE
    assert issubclass(SearchFailed, RunError) and SearchFailed.exit_code == EXIT_FAILED
    assert RunError.exit_code == EXIT_USAGE


@pytest.mark.parametrize("command", [["tasks", "show"], ["measure"], ["forecast"]])
def test_cli_exits_2_on_a_malformed_task_file(command: list[str], tmp_path: Path) -> None:
    from kernelcast.cli import app

    bad = tmp_path / "task.toml"
    bad.write_text('[task]\nname = "broken"\nentry = \n')
    result = CliRunner().invoke(app, [*command, str(bad)])
    assert result.exit_code == EXIT_USAGE, result.output
    assert "not valid TOML" in result.output and "Traceback" not in result.output
