"""Loop unrolling with remainder on the innermost counted loops of the entry kernel.

``for (int j = a; j < n; ++j) body`` becomes a main loop stepping by U with U copies of the body
(``j``, ``j + 1``, ...) and a remainder loop for the last ``n - a mod U`` iterations, so it is exact for
any trip count. Preconditions: unit step, the counter is not written in the body, the bound does not
change inside the loop, no break/continue/return in the body.
"""

from __future__ import annotations

import re

from kernelcast.agents.generate.kernel_ast import (
    ForLoop,
    K,
    Span,
    calls,
    counted_loop,
    has_jump,
    modified_decls,
    used_decls,
    walk,
)
from kernelcast.agents.generate.transforms import NotApplicable, Rewritten, checked, entry_of, rewritten
from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.task import Task

FACTORS = (1, 2, 4, 8)
_LOOPS = (K.FOR_STMT, K.WHILE_STMT, K.DO_STMT)


def innermost_counted_loops(ps, kernel) -> list[ForLoop]:
    """Counted loops without loops inside that satisfy the unrolling preconditions."""
    out = []
    for n in walk(kernel):
        if n.kind != K.FOR_STMT or any(m.kind in _LOOPS for m in walk(n) if m != n):
            continue
        loop = counted_loop(ps, n)
        if loop is None or loop.step != 1 or has_jump(loop.body):
            continue
        changed = modified_decls(ps, loop.body)
        if loop.var_key in changed or used_decls(loop.bound) & changed:
            continue
        if any(not c.spelling.startswith("get_") for c in calls(loop.bound)):
            continue
        out.append(loop)
    return out


def unroll(task: Task, candidate: Candidate, factor: int) -> Rewritten:
    if factor <= 1:
        raise NotApplicable("unrolling by 1 is the identity")
    language, entry = task.language, task.spec.entry
    ps, kernel = entry_of(candidate.source, language, entry)
    if ps.uses_macros(kernel):
        raise NotApplicable("the entry kernel uses the file's macros")
    loops = innermost_counted_loops(ps, kernel)
    if not loops:
        raise NotApplicable("no innermost counted loop with a unit step and an invariant bound")
    edits = []
    for loop in loops:
        bound = ps.text(loop.bound)
        refs = [n for n in walk(loop.body) if n.kind == K.DECL_REF_EXPR and n.referenced is not None
                and (n.referenced.spelling, n.referenced.location.offset) == loop.var_key]
        copies = []
        for u in range(factor):
            shifted = ps.render(loop.body, [Span(*ps.span(r), f"({loop.var} + {u})") for r in refs] if u else [],
                                statement=True)
            copies.append("{ " + shifted + " }" if loop.body.kind != K.COMPOUND_STMT else shifted)
        var_type = " ".join(w for w in loop.var_type.split() if w not in ("const", "__private", "private"))
        remainder = ps.render(loop.body, [], statement=True)
        text = (f"{{ {var_type} {loop.var} = {loop.init};\n"
                f"for (; {loop.var} + {factor - 1} {loop.op} ({bound}); {loop.var} += {factor}) {{\n"
                + "\n".join(copies) + "\n}\n"
                f"for (; {loop.var} {loop.op} ({bound}); ++{loop.var}) {remainder}\n}}")
        edits.append(Span(*ps.stmt_span(loop.cursor), text))
    source = ps.edited(edits)
    names = ", ".join(dict.fromkeys(re.sub(r"_kc[0-9x]+$", "", loop.var) for loop in loops))  # coarsened copies
    return rewritten(checked(candidate, source, language, entry), "unroll", f"unroll {names} x{factor} + remainder",
                     factor=factor)
