"""The language table: every name the task format accepts has a row, and any other name is refused, never read
as OpenCL."""

from __future__ import annotations

from typing import get_args

import pytest

from kernelcast.tools.core.candidate import entry_parameters
from kernelcast.tools.core.confinement import option_problem
from kernelcast.tools.core.errors import EXIT_USAGE, InputError
from kernelcast.tools.core.language import (
    CUDA,
    LANGUAGES,
    OPENCL,
    LanguageName,
    UnknownLanguageError,
    language,
    language_of_source,
    language_of_suffix,
)
from kernelcast.tools.hardware.backends import BACKENDS, UnknownBackendError, get_backend


def test_every_task_language_has_a_row_and_a_backend() -> None:
    assert set(get_args(LanguageName)) == set(LANGUAGES) == {"opencl", "cuda"}
    for name, row in LANGUAGES.items():
        assert language(name) is row and row.name == name
        assert BACKENDS[row.backend].language is row


def test_an_unknown_language_is_refused_by_name() -> None:
    with pytest.raises(UnknownLanguageError, match=r"unknown kernel language 'hip' \(known: opencl, cuda\)"):
        language("hip")
    with pytest.raises(InputError) as refused:  # a door maps it as bad input
        language("OpenCL")  # names are exact: no case folding, no fallback
    assert refused.value.exit_code == EXIT_USAGE


def test_language_specific_checks_refuse_an_unknown_language_instead_of_reading_it_as_opencl() -> None:
    with pytest.raises(UnknownLanguageError):
        option_problem(["-cl-mad-enable"], "hip")
    with pytest.raises(UnknownLanguageError):
        entry_parameters("__kernel void f(int n) {}", "f", "hip")


def test_rows_hold_each_languages_own_words() -> None:
    assert option_problem(["-cl-mad-enable"], OPENCL.name) is None
    assert option_problem(["-cl-mad-enable"], CUDA.name) is not None  # an OpenCL flag is not a CUDA flag
    assert entry_parameters("__global__ void f(float* a, int n) {}", "f", CUDA.name) == "float* a, int n"
    assert language_of_source("__global__ void f() {}") is CUDA
    assert language_of_source("__kernel void f() {}") is OPENCL
    assert language_of_suffix(".cuh") is CUDA and language_of_suffix(".cl") is OPENCL
    assert language_of_suffix(".py") is None


def test_an_unknown_backend_is_refused_by_name() -> None:
    with pytest.raises(UnknownBackendError, match="unknown backend 'hip' \\(expected opencl or cuda\\)"):
        get_backend("hip")
