"""Errors a run reports to its caller (front doors map them to exit codes and tool errors)."""

from __future__ import annotations

from kernelcast.tools.core.errors import EXIT_FAILED, InputError


class RunError(InputError, RuntimeError):
    """A run cannot be started or resumed (unknown id, finished already, bad config)."""


class SearchFailed(RunError):
    """The search cannot go on (e.g. its generator fails on every call): the run ends with an error."""

    exit_code = EXIT_FAILED
