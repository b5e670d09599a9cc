"""``restrict`` on the entry kernel's global buffers and ``const`` on those it never writes.

The harness passes a separate buffer for every argument and the kernel reaches each buffer only
through pointers derived from its own parameter (:func:`kernelcast.agents.generate.kernel_ast.pointer_roots`),
so no two parameters alias: the promise ``restrict`` makes holds, and it lets the compiler keep loads in
registers across stores. The signature check ignores both qualifiers.
"""

from __future__ import annotations

from kernelcast.agents.generate.kernel_ast import (
    Span,
    decl_key,
    is_global_pointer,
    readonly_pointers,
)
from kernelcast.agents.generate.transforms import NotApplicable, Rewritten, checked, entry_of, rewritten
from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.task import Task


def restrict_const(task: Task, candidate: Candidate) -> Rewritten:
    language, entry = task.language, task.spec.entry
    ps, kernel = entry_of(candidate.source, language, entry)
    readonly = readonly_pointers(ps, kernel)
    keyword = "__restrict__" if language == "cuda" else "restrict"
    edits, restricted, consts = [], [], []
    for param in kernel.get_arguments():  # type: ignore[attr-defined]  # entry_of returns libclang's untyped Cursor
        if not is_global_pointer(param.type, language):
            continue
        tokens = list(ps.tokens(param))
        words = {t.spelling for t in tokens}
        star = next((t for t in reversed(tokens) if t.spelling == "*"), None)
        if star is None:
            continue  # the pointer type comes from a typedef: leave it alone
        if not words & {"restrict", "__restrict", "__restrict__"}:
            end = star.extent.end.offset
            edits.append(Span(end, end, f" {keyword} "))
            restricted.append(param.spelling)
        if decl_key(param) in readonly and "const" not in words:
            start = param.extent.start.offset
            edits.append(Span(start, start, "const "))
            consts.append(param.spelling)
    if not edits:
        raise NotApplicable("every global buffer is already restrict (and const where read-only)")
    source = ps.edited(edits)
    label = ", ".join(filter(None, [f"restrict on {', '.join(restricted)}" if restricted else "",
                                    f"const on {', '.join(consts)}" if consts else ""]))
    return rewritten(checked(candidate, source, language, entry), "restrict", label)
