"""Whether a kernel depends on its work-group size, so that the task must fix it (``[launch] local``).

A kernel that indexes ``__local`` tiles by ``get_local_id``, strides by ``get_local_size``, or synchronizes
its work-group with ``barrier`` was written for one work-group shape. Launched with the runtime's choice
(no ``local`` in the task), it reads and writes past its tiles: the reference crashed with SIGSEGV and the
only hint was that the shapes might be too small (issue 64, item 5). ``kernelcast init`` and the task check
read this module and say what to set instead.

The scan reads the source as every device compiler could see it (:func:`preprocess_all_branches`: a use
behind ``#ifdef __clang__`` counts), with comments and literals blanked. It is advice, not a defence: a
kernel it misses keeps the harness's own checks.
"""

from __future__ import annotations

import re

from kernelcast.tools.core.preprocess import PreprocessError, blank_comments_and_literals, preprocess_all_branches

# per language: (pattern, its name in the message; None: the name is the function matched)
_OPENCL = (
    (re.compile(r"\b(?:__local|local)\b"), "__local memory"),
    (re.compile(r"\b(get_local_id|get_local_size|get_group_id|get_num_groups|get_enqueued_local_size)\s*\("), None),
    (re.compile(r"\b(barrier|work_group_barrier)\s*\("), None),
)
# get_group_id(d) * get_local_size(d) + get_local_id(d) is get_global_id(d) (minus its offset) at any work-group
# size (SHOC's md5hash indexes so): it ties nothing to one size, so it is read as get_global_id
_GLOBAL_ID = re.compile(
    r"\(?\s*(?:get_group_id\s*\(\s*(?P<d>\d)\s*\)\s*\*\s*get_local_size\s*\(\s*(?P=d)\s*\)"
    r"|get_local_size\s*\(\s*(?P<e>\d)\s*\)\s*\*\s*get_group_id\s*\(\s*(?P=e)\s*\))"
    r"\s*\)?\s*\+\s*get_local_id\s*\(\s*(?:(?P=d)|(?P=e))\s*\)")
_CUDA = (
    (re.compile(r"\b__shared__\b"), "__shared__ memory"),
    (re.compile(r"\b(__syncthreads\w*)\s*\("), None),
)


def workgroup_uses(source: str, language: str, build_options: tuple[str, ...] = ()) -> list[str]:
    """What in ``source`` ties it to a work-group size, e.g. ``["__local memory", "get_local_id", "barrier"]``
    (empty: nothing found, or the source cannot be preprocessed, which other checks report)."""
    try:
        code = blank_comments_and_literals(preprocess_all_branches(source, language, build_options))
    except PreprocessError:
        return []
    code = _GLOBAL_ID.sub("get_global_id(0)", code)
    found: list[str] = []
    for pattern, label in (_CUDA if language == "cuda" else _OPENCL):
        if label is not None:
            found += [label] if pattern.search(code) else []
        else:
            found += dict.fromkeys(m.group(1) for m in pattern.finditer(code))
    return found


def local_size_advice(uses: list[str], kernel: str) -> str:
    """The sentence that says why the task must set ``[launch] local`` and how."""
    return (f"kernel {kernel!r} depends on its work-group size (it uses {', '.join(uses[:4])}): set "
            "[launch] local to the work-group shape the kernel was written for, one entry per dimension of "
            "global (e.g. local = [\"16\", \"16\"] for 16 x 16 tiles); left to the runtime, it reads and writes "
            "past its tiles")
