"""Scalar replacement: a global location read and written inside a loop lives in a private register.

``for (j...) y[i] += A[j * M + i] * x[j];`` reads and writes ``y[i]`` in global memory on every
iteration. When the index is loop-invariant and the loop touches that buffer only at that index, the
value is loaded once before the loop, accumulated in a private variable and stored once after it.
"""

from __future__ import annotations

from clang import cindex as ci

from kernelcast.agents.generate.kernel_ast import (
    PURE_CALL_PREFIXES,
    K,
    ParsedSource,
    Span,
    calls,
    children,
    decl_key,
    modified_decls,
    pointer_roots,
    strip,
    used_decls,
    value_type,
    walk,
    writes,
)
from kernelcast.agents.generate.transforms import (
    NotApplicable,
    Rewritten,
    checked,
    entry_of,
    fresh_name,
    rewritten,
)
from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.task import Task

MAX_REPLACEMENTS = 4
_LOOPS = (K.FOR_STMT, K.WHILE_STMT, K.DO_STMT)


def _is_write(ps: ParsedSource, access: ci.Cursor, loop: ci.Cursor) -> bool:
    return any(writes(ps, n) and strip(children(n)[0]) == access for n in walk(loop))


def _index_key(ps: ParsedSource, index: ci.Cursor) -> str:
    return " ".join(t.spelling for t in ps.tokens(index))


def _find(ps: ParsedSource, kernel: ci.Cursor, roots: dict) -> tuple[ci.Cursor, ci.Cursor, list[ci.Cursor]] | None:
    """(loop, one access, every access of that location in the loop) for the outermost replaceable case."""
    loops = [n for n in walk(kernel) if n.kind in _LOOPS]
    for loop in loops:  # pre-order: outer loops first
        if any(c.spelling in ("barrier", "mem_fence", "work_group_barrier") or c.spelling.startswith("atom")
               for c in calls(loop)):
            continue
        if any(c.referenced is not None and c.referenced.is_definition() and ps.in_main_file(c.referenced)
               for c in calls(loop)):
            continue  # a call into a function of the file may touch the buffer
        modified = modified_decls(ps, loop)
        accesses = [n for n in walk(loop) if n.kind == K.ARRAY_SUBSCRIPT_EXPR]
        by_root: dict[tuple[str, int], list[ci.Cursor]] = {}
        others: dict[tuple[str, int], int] = {}
        for a in accesses:
            base = strip(children(a)[0])
            if base.kind != K.DECL_REF_EXPR or base.referenced is None or decl_key(base.referenced) not in roots:
                continue
            by_root.setdefault(roots[decl_key(base.referenced)], []).append(a)
        for n in walk(loop):  # pointer uses other than as a subscript base (pointer arithmetic, calls)
            if n.kind == K.DECL_REF_EXPR and n.referenced is not None and decl_key(n.referenced) in roots:
                others[roots[decl_key(n.referenced)]] = others.get(roots[decl_key(n.referenced)], 0) + 1
        for root, group in by_root.items():
            if others.get(root, 0) != len(group):
                continue  # the buffer is also used another way (a derived pointer, a call)
            bases = {decl_key(strip(children(a)[0]).referenced) for a in group}
            keys = {_index_key(ps, children(a)[1]) for a in group}
            if len(bases) != 1 or len(keys) != 1:
                continue
            index = children(group[0])[1]
            if used_decls(index) & modified:
                continue
            if any(not c.spelling.startswith(PURE_CALL_PREFIXES) for c in calls(index)):
                continue
            if not any(_is_write(ps, a, loop) for a in group):
                continue  # read-only in the loop: the compiler may keep it in a register anyway
            return loop, group[0], group
    return None


def scalar_replace(task: Task, candidate: Candidate) -> Rewritten:
    """Replace every (up to 4) global accumulator of the entry kernel; NotApplicable when there is none."""
    source, labels = candidate.source, []
    language, entry = task.language, task.spec.entry
    for _ in range(MAX_REPLACEMENTS):
        ps, kernel = entry_of(source, language, entry)
        if ps.uses_macros(kernel):
            raise NotApplicable("the entry kernel uses the file's macros")
        found = _find(ps, kernel, pointer_roots(ps, kernel))
        if found is None:
            break
        loop, access, group = found
        name = fresh_name(source, "kc_acc")
        text = ps.text(access)
        elem = value_type(access.type)
        body = ps.render(loop, [Span(*ps.span(a), name) for a in group], statement=True)
        indent = ps.line_indent(loop.extent.start.offset)
        block = (f"{{\n{indent}    {elem} {name} = {text};\n{indent}    {body}\n"
                 f"{indent}    {text} = {name};\n{indent}}}")
        source = ps.edited([Span(*ps.stmt_span(loop), block)])
        labels.append(f"scalar-replace {text}")
    if not labels:
        raise NotApplicable("no global location is read and written at a loop-invariant index inside a loop")
    return rewritten(checked(candidate, source, language, entry), "scalar_replace", "; ".join(labels),
                     accesses=len(labels))
