"""Every fact about the kernel languages kernelcast reads (OpenCL C, CUDA C++), in one table.

Code that needs a language-specific word, flag or rule reads it here instead of comparing a name with a
string literal, so adding a language is one new row and an unknown name is refused instead of being read
as OpenCL.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal, get_args

from kernelcast.tools.core.errors import InputError

#: The language names a task file may declare (``language = "..."``); the keys of :data:`LANGUAGES`.
LanguageName = Literal["opencl", "cuda"]


class UnknownLanguageError(InputError, ValueError):
    """A language name that is not in :data:`LANGUAGES`."""


@dataclass(frozen=True)
class Language:
    """One kernel language: the words its kernels use and the rules the checks apply to it."""

    name: LanguageName
    title: str  # as written in prose and prompts
    suffixes: tuple[str, ...]  # kernel source files; the first is the one kernelcast writes
    backend: str  # the measurement backend that runs it (a key of the backend registry)
    kernel_words: frozenset[str]  # one of them qualifies an entry point
    entry_prefix: str  # regex for what comes before ``void <entry>(`` (a cheap finder, without preprocessing)
    local_memory_word: str  # work-group (OpenCL) or block (CUDA) shared memory
    barrier: str  # the call that synchronizes a work-group (block) on its shared memory
    restrict_word: str  # the pointer qualifier that promises no aliasing
    local_memory_args: bool  # the host sizes shared memory through ``__local`` pointer arguments
    # the words that give a file-scope declaration device storage; None: every file-scope variable is device memory
    device_storage_words: frozenset[str] | None
    # macros the compiler predefines, so the preprocessor the checks use sees the same code
    predefined_macros: MappingProxyType[str, str] = field(hash=False)
    # the build options a candidate may pass besides -D macros and fast-math flags (confinement's allowlist)
    build_flags: frozenset[str]
    build_flag_patterns: tuple[re.Pattern[str], ...]

    @property
    def suffix(self) -> str:
        """The suffix of the source files kernelcast writes."""
        return self.suffixes[0]

    def entry_pattern(self, entry: str) -> str:
        """A regex that matches the start of ``entry``'s definition up to its opening parenthesis."""
        return rf"{self.entry_prefix}{re.escape(entry)}\s*\("


OPENCL = Language(
    name="opencl",
    title="OpenCL",
    suffixes=(".cl",),
    backend="opencl",
    kernel_words=frozenset({"__kernel", "kernel"}),
    entry_prefix=r"(?:__kernel|kernel)\s+(?:__attribute__\s*\(\(.*?\)\)\s*)?void\s+",
    local_memory_word="__local",
    barrier="barrier(CLK_LOCAL_MEM_FENCE)",
    restrict_word="restrict",
    local_memory_args=True,
    device_storage_words=None,
    predefined_macros=MappingProxyType({
        "__OPENCL_VERSION__": "300", "__OPENCL_C_VERSION__": "300", "CL_VERSION_1_0": "100", "CL_VERSION_1_1": "110",
        "CL_VERSION_1_2": "120", "CL_VERSION_2_0": "200", "CL_VERSION_3_0": "300", "__ENDIAN_LITTLE__": "1",
        "__IMAGE_SUPPORT__": "1", "__OPENCL_C__": "1"}),
    build_flags=frozenset({
        "-cl-mad-enable", "-cl-no-signed-zeros", "-cl-single-precision-constant", "-cl-opt-disable",
        "-cl-fp32-correctly-rounded-divide-sqrt", "-cl-uniform-work-group-size", "-cl-no-subgroup-ifp",
        "-cl-kernel-arg-info", "-w", "-Werror"}),
    build_flag_patterns=(re.compile(r"-cl-std=CL(?:1\.[0-2]|2\.0|3\.0)"),),
)

CUDA = Language(
    name="cuda",
    title="CUDA",
    suffixes=(".cu", ".cuh"),
    backend="cuda",
    kernel_words=frozenset({"__global__"}),
    entry_prefix=r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+",
    local_memory_word="__shared__",
    barrier="__syncthreads()",
    restrict_word="__restrict__",
    local_memory_args=False,  # CUDA kernels size their shared memory themselves
    device_storage_words=frozenset({"__device__", "__managed__"}),  # anything else is host memory
    predefined_macros=MappingProxyType({"__CUDACC__": "1", "__NVCC__": "1", "__CUDA_ARCH__": "900"}),
    build_flags=frozenset({
        "--extra-device-vectorization", "-extra-device-vectorization", "--restrict", "-restrict", "-lineinfo",
        "--ftz=false", "-ftz=false", "--prec-div=true", "-prec-div=true", "--prec-sqrt=true", "-prec-sqrt=true",
        "--fmad=false", "-fmad=false", "-w", "-O0", "-O1", "-O2", "-O3", "-Xptxas=-v", "-Xptxas=-O0", "-Xptxas=-O1",
        "-Xptxas=-O2", "-Xptxas=-O3"}),
    build_flag_patterns=(re.compile(r"--?maxrregcount=\d{1,3}"), re.compile(r"-std=c\+\+(?:11|14|17|20)")),
)

#: Every language by name.
LANGUAGES: MappingProxyType[str, Language] = MappingProxyType({lang.name: lang for lang in (OPENCL, CUDA)})
assert set(LANGUAGES) == set(get_args(LanguageName)), "LanguageName and LANGUAGES name the same languages"


def language(name: str) -> Language:
    """The language called ``name``; :class:`UnknownLanguageError` for any other name (no fallback)."""
    found = LANGUAGES.get(name)
    if found is None:
        raise UnknownLanguageError(f"unknown kernel language {name!r} (known: {', '.join(LANGUAGES)})")
    return found


def language_of_source(source: str) -> Language:
    """The language a bare source is written in, where no task says it (a candidate does not carry its task's
    language): CUDA when it has a CUDA kernel qualifier, OpenCL otherwise (OpenCL C is the task format's default)."""
    return CUDA if any(word in source for word in CUDA.kernel_words) else OPENCL


def language_of_suffix(suffix: str) -> Language | None:
    """The language whose source files end in ``suffix`` (".cu"), or None."""
    return next((lang for lang in LANGUAGES.values() if suffix in lang.suffixes), None)


__all__ = ["CUDA", "LANGUAGES", "OPENCL", "Language", "LanguageName", "UnknownLanguageError", "language",
           "language_of_source", "language_of_suffix"]
