"""The ``kernelcast`` command line: assembles the command modules."""

from __future__ import annotations

import signal
from typing import Any

import typer
from typer.core import TyperGroup

from kernelcast.commands import (
    chat,
    dataset,
    forecast,
    forecaster,
    imports,
    init,
    mcp,
    measure,
    optimize,
    propose,
    report,
    tasks,
)
from kernelcast.console import fail
from kernelcast.logs import configure_logging
from kernelcast.tools.core.errors import KernelcastError
from kernelcast.tools.core.settings import get_settings


class Commands(TyperGroup):
    """The command group that maps every :class:`KernelcastError` a command lets through to its one-line message
    and its exit code: the CLI's only error mapping."""

    def invoke(self, ctx: Any) -> Any:  # typer's vendored click Context
        try:
            return super().invoke(ctx)
        except KernelcastError as exc:
            fail(str(exc), exc.exit_code)


app = typer.Typer(
    cls=Commands,
    name="kernelcast",
    help="Optimize OpenCL/CUDA kernels with agents that treat hardware measurements as the scarce resource.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(tasks.app, name="tasks")
app.add_typer(dataset.app, name="dataset")
app.add_typer(forecaster.app, name="forecaster")
app.add_typer(imports.app, name="import")
app.registered_commands += measure.app.registered_commands
app.registered_commands += optimize.app.registered_commands
app.registered_commands += propose.app.registered_commands
app.registered_commands += forecast.app.registered_commands
app.registered_commands += chat.app.registered_commands
app.registered_commands += mcp.app.registered_commands
app.registered_commands += report.app.registered_commands
app.registered_commands += init.app.registered_commands


@app.callback()
def main() -> None:
    configure_logging(get_settings().log_level)
    # SIGINT stops every command, also when a shell started it in the background (which ignores SIGINT for it):
    # a run is then marked interrupted and its measurement worker killed, not left spinning in a hung kernel
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


if __name__ == "__main__":
    app()
