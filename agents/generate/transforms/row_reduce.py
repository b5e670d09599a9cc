"""Work-group row reduction: T work-items share the loops of one work-item of the reference.

A kernel that gives each work-item a whole row (a row softmax, a row-per-work-item matrix-vector product, a
row sum) walks its row alone, and the neighbouring work-items that a device runs in lockstep walk other rows
N elements apart. Here a work-group of T work-items takes the row of one work-item of the reference: each
outermost loop over the row is split cyclically among them (``j = init + lane; j < bound; j += T``, so
neighbouring lanes touch neighbouring elements), and each scalar that a loop accumulates is combined across
the group in local memory (a tree of ``log2 T`` steps) and handed back to every lane. The launch becomes
``global = G * T, local = T`` and ``get_global_id(0)`` becomes ``get_group_id(0)``.

Why it is legal (each point is checked on the AST, else :class:`NotApplicable` says which failed):

- OpenCL, a 1-D launch, a kernel that does not observe its work-group: after the rewrite the group id is the
  reference's work-item id, and the lanes of a group run the reference's program for that id;
- every loop of the kernel lies inside a *row loop*: a counted ``for`` with a unit step and a counter at least
  as wide as int that is a statement of the kernel's body or of its if-branches (not of another loop), without
  break, continue, return or goto, whose header writes only its counter and reads nothing its body writes.
  Every value outside the row loops is then the same on every lane (the group's id, the kernel's scalars, the
  broadcast result of a reduction), so every lane takes the same branches and reaches every barrier, returns
  included;
- a row loop writes no variable declared outside it except its *accumulators*: a scalar (float, double, int
  or uint) written by exactly one statement of the loop body, ``acc += e``, ``acc -= e``, ``acc *= e``,
  ``acc = acc + e`` (or ``e + acc``), ``acc = acc * e``, or ``acc = f(acc, e)`` with f one of fmax, fmin,
  max, min, read nowhere else in the body, its address never taken, and (an integer one) fed no floating
  term, whose truncation at every step is not associative. Lanes other than 0 start the loop from the
  operation's identity, so lane 0 carries the value from before the loop and the combined result is the
  reference's (with the sum re-associated, as every vectorizing compiler may; the harness's tolerances judge it);
- the kernel calls only side-effect-free built-ins (no function of its file, no printf), and each pointer into
  global memory points into one buffer. A row loop stores to global memory only as ``p[idx] = ...``, at one
  place per buffer, with ``idx`` the counter plus a term named by variables nothing else in the kernel writes:
  distinct iterations, hence distinct lanes, write distinct elements;
- a statement outside the row loops that stores to global memory is run by lane 0 alone (T lanes would
  otherwise repeat an ``out[r] += s``); it must not hold a return, declare a variable, or write any variable
  (the other lanes would not see it, and could then branch apart around a barrier);
- a buffer the kernel writes is read only inside a row loop, at exactly the place that loop stores to
  (``y[j] = y[j] * s``), or by such a lane-0 statement where no row loop stores to it; row loops that store
  to one buffer start from the same value (named by variables nothing writes) and store at the same place, and
  no lane-0 statement stores to it. So each element is written and read back by one lane: no lane reads or
  overwrites what another lane wrote (the barriers order local memory only).

Compositions: the kernel then observes its work-group, so coarsening, local tiling and other work-group shapes
cannot follow it (the derived space refuses those points); scalar replacement and restrict/const can precede
it, and unrolling then applies to loops nested inside the row loops.
"""

from __future__ import annotations

from dataclasses import dataclass

from clang import cindex as ci

from kernelcast.agents.generate.kernel_ast import (
    PURE_CALL_PREFIXES,
    ForLoop,
    K,
    ParsedSource,
    Span,
    calls,
    children,
    counted_loop,
    decl_key,
    has_jump,
    header_parts,
    is_floating,
    is_global_pointer,
    modified_decls,
    operator,
    parents,
    pointer_roots,
    referenced_decl,
    strip,
    used_decls,
    walk,
    writes,
    written_roots,
)
from kernelcast.agents.generate.transforms import (
    NotApplicable,
    Rewritten,
    checked,
    fresh_name,
    rewritten,
    work_item_kernel,
)
from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.task import Task

THREADS = (4, 16, 64, 256)  # work-items per row: powers of two (the combining tree halves them)
Key = tuple[str, int]
_LOOPS = (K.FOR_STMT, K.WHILE_STMT, K.DO_STMT)
_COMBINE = {"+": "{a} + {b}", "*": "{a} * {b}", "fmax": "fmax({a}, {b})", "fmin": "fmin({a}, {b})",
            "max": "max({a}, {b})", "min": "min({a}, {b})"}
_IDENTITY = {  # (operation, type) -> the value a lane other than 0 starts its share from
    **{("+", t): "0" for t in ("float", "double", "int", "uint")},
    **{("*", t): "1" for t in ("float", "double", "int", "uint")},
    **{(op, t): "-INFINITY" for op in ("fmax", "max") for t in ("float", "double")},
    **{(op, t): "INFINITY" for op in ("fmin", "min") for t in ("float", "double")},
    ("max", "int"): "INT_MIN", ("min", "int"): "INT_MAX", ("max", "uint"): "0u", ("min", "uint"): "UINT_MAX",
}


_SCALAR_KINDS = {ci.TypeKind.FLOAT: "float", ci.TypeKind.DOUBLE: "double", ci.TypeKind.INT: "int",
                 ci.TypeKind.UINT: "uint"}
_COUNTER_KINDS = (ci.TypeKind.INT, ci.TypeKind.UINT, ci.TypeKind.LONG, ci.TypeKind.ULONG)  # j += T cannot wrap early


@dataclass(frozen=True)
class Accumulator:
    """One scalar a row loop reduces: its declaration, name, type and the combining operation."""

    key: Key
    name: str
    type: str
    op: str  # a key of _COMBINE


@dataclass(frozen=True)
class Place:
    """Where ``p[i]`` stores or reads: its text and the variables it names (two block-scoped pointers of one name
    are two places)."""

    text: str
    names: frozenset[Key]


@dataclass(frozen=True)
class RowLoop:
    """An outermost loop split among the lanes, with the scalars it reduces."""

    loop: ForLoop
    accumulators: tuple[Accumulator, ...]
    branch: bool  # the whole then- or else-branch of an if: what is added around it needs braces


def row_reduce(task: Task, candidate: Candidate, threads: int) -> Rewritten:
    """Give the row of each work-item of ``candidate`` to a work-group of ``threads`` work-items."""
    if threads not in THREADS:
        raise NotApplicable(f"{threads} work-items per row is not one of {', '.join(map(str, THREADS))}")
    language, entry = task.language, task.spec.entry
    if len(candidate.global_size) != 1:
        raise NotApplicable("row reduction needs a 1-D launch (one work-item per row)")
    ps, kernel = work_item_kernel(candidate, language, entry, "row reduction")
    body = next((c for c in children(kernel) if c.kind == K.COMPOUND_STMT), None)
    if body is None:
        raise NotApplicable("the kernel has no body")
    rows = _row_loops(ps, kernel, body)
    roots = _global_roots(ps, kernel)
    lane_zero = _lane_zero_statements(ps, roots, body, rows)
    _check_global_memory(ps, kernel, body, rows, roots, lane_zero)
    lane = fresh_name(candidate.source, "kc_lane")
    edits = [*_work_item_queries(ps, kernel), _required_size(ps, kernel, threads)]
    red, step = fresh_name(candidate.source, "kc_red"), fresh_name(candidate.source, "kc_step")
    locals_: list[str] = []
    for row in rows:
        loop = row.loop
        first = _initial_value(loop)
        edits += [Span(first.extent.start.offset, first.extent.start.offset, "("),
                  Span(first.extent.end.offset, first.extent.end.offset, f") + {lane}"),
                  Span(*header_parts(ps, loop.cursor)[2], f" {loop.var} += {threads}")]
        start, end = ps.stmt_span(loop.cursor)
        indent = ps.line_indent(start)
        before, after = [], []
        for acc in row.accumulators:
            array = f"{red}_{len(locals_)}"
            locals_.append(f"__local {acc.type} {array}[{threads}];")
            before.append(f"if ({lane} != 0) {acc.name} = {_IDENTITY[(acc.op, acc.type)]};")
            combined = _COMBINE[acc.op].format(a=f"{array}[{lane}]", b=f"{array}[{lane} + {step}]")
            after.append(f"{array}[{lane}] = {acc.name};\n"
                         f"{indent}barrier(CLK_LOCAL_MEM_FENCE);\n"
                         f"{indent}for (int {step} = {threads // 2}; {step} > 0; {step} >>= 1) {{\n"
                         f"{indent}    if ({lane} < {step}) {array}[{lane}] = {combined};\n"
                         f"{indent}    barrier(CLK_LOCAL_MEM_FENCE);\n"
                         f"{indent}}}\n"
                         f"{indent}{acc.name} = {array}[0];\n"
                         f"{indent}barrier(CLK_LOCAL_MEM_FENCE);")
        edits += [Span(start, start, ("{ " if row.branch else "") + "".join(f"{b}\n{indent}" for b in before)),
                  Span(end, end, "".join(f"\n{indent}{a}" for a in after) + (" }" if row.branch else ""))]
    for stmt in lane_zero:  # braced: an if-branch made of the statement keeps its else
        start, end = ps.stmt_span(stmt)
        edits += [Span(start, start, f"{{ if ({lane} == 0) "), Span(end, end, " }")]
    open_brace = body.extent.start.offset + 1
    edits.append(Span(open_brace, open_brace, f"\n    const int {lane} = (int)get_local_id(0);\n"
                                              + "".join(f"    {d}\n" for d in locals_)))
    source = ps.edited(edits)
    glob = [f"({candidate.global_size[0]}) * {threads}"]
    ops = sorted({a.op for r in rows for a in r.accumulators})
    label = f"row reduce x{threads}" + (f" ({', '.join(ops)})" if ops else "")
    return rewritten(checked(candidate, source, language, entry, global_size=glob, local_size=[str(threads)]),
                     "row_reduce", label, threads=threads)


def _initial_value(loop: ForLoop) -> ci.Cursor:
    """The expression the loop's counter starts from (``0`` in ``for (int j = 0; ...)``)."""
    decl = next(n for n in walk(loop.cursor) if n.kind == K.VAR_DECL and decl_key(n) == loop.var_key)
    return [k for k in children(decl) if k.kind != K.TYPE_REF][-1]


def _row_loops(ps: ParsedSource, kernel: ci.Cursor, body: ci.Cursor) -> list[RowLoop]:
    """The kernel's outermost loops, each checked to be a row loop, with its accumulators (module docstring)."""
    parent_of = parents(kernel)
    rows = []
    for n in walk(body):
        if n.kind not in _LOOPS:
            continue
        chain = _statements_above(parent_of, body, n)
        if any(a.kind in _LOOPS for a in chain):
            continue  # inside a loop that is checked itself
        loop = counted_loop(ps, n)
        if loop is None or loop.step != 1 or any(a.kind not in (K.COMPOUND_STMT, K.IF_STMT) for a in chain):
            raise NotApplicable("an outermost loop is not a counted loop with a unit step in the kernel's "
                                "statements and branches")
        rows.append(RowLoop(loop, _accumulators(ps, kernel, loop), bool(chain) and chain[0].kind == K.IF_STMT))
    if not rows:
        raise NotApplicable("the kernel has no loop over its row")
    return rows


def _statements_above(parent_of: dict[ci.Cursor, ci.Cursor], body: ci.Cursor, node: ci.Cursor) -> list[ci.Cursor]:
    """The cursors between the kernel's body and ``node`` (both excluded)."""
    chain = []
    c = parent_of.get(node)
    while c is not None and c != body:
        chain.append(c)
        c = parent_of.get(c)
    return chain


def _contains(outer: ci.Cursor, inner: ci.Cursor) -> bool:
    return (outer.extent.start.offset <= inner.extent.start.offset
            and inner.extent.end.offset <= outer.extent.end.offset)


def _accumulators(ps: ParsedSource, kernel: ci.Cursor, loop: ForLoop) -> tuple[Accumulator, ...]:
    body = loop.body
    if has_jump(body):
        raise NotApplicable(f"the loop over {loop.var} has a break, continue, return or goto")
    inner = {decl_key(n) for n in walk(body) if n.kind == K.VAR_DECL}
    written = modified_decls(ps, body, declarations=False)
    if loop.var_key in written:
        raise NotApplicable(f"the loop's counter {loop.var} is written in its body")
    header = used_decls(loop.bound) | {decl_key(n.referenced) for n in walk(loop.cursor)
                                       if n.kind == K.DECL_REF_EXPR and n.referenced is not None
                                       and not _contains(body, n)}
    if header & (written - {loop.var_key}):
        raise NotApplicable(f"the header of the loop over {loop.var} reads what its body writes")
    for n in walk(loop.cursor):
        if not _contains(body, n) and writes(ps, n) and ((d := referenced_decl(children(n)[0])) is None
                                                          or decl_key(d) != loop.var_key):
            raise NotApplicable(f"the header of the loop over {loop.var} writes something other than its counter")
    counter = next(n for n in walk(loop.cursor) if n.kind == K.VAR_DECL and decl_key(n) == loop.var_key)
    if counter.type.get_canonical().kind not in _COUNTER_KINDS:
        raise NotApplicable(f"the counter {loop.var} is narrower than int (stepping by T could wrap it)")
    statements = children(body) if body.kind == K.COMPOUND_STMT else [body]
    found: list[Accumulator] = []
    for key in sorted(written - inner - {loop.var_key}):
        writers = [s for s in statements if key in modified_decls(ps, s, declarations=False)]
        acc = _accumulation(ps, writers[0], key) if len(writers) == 1 else None
        if acc is None:
            raise NotApplicable(f"{key[0]} is written in the loop over {loop.var} but not as an accumulator "
                                "(acc += e, acc = fmax(acc, e), ...)")
        if any(n.kind == K.UNARY_OPERATOR and operator(ps, n) == "&" and (d := referenced_decl(children(n)[0]))
               is not None and decl_key(d) == key for n in walk(kernel)):
            raise NotApplicable(f"the accumulator {acc.name} has its address taken")
        reads = [n for n in walk(body) if n.kind == K.DECL_REF_EXPR and n.referenced is not None
                 and decl_key(n.referenced) == key]
        if len(reads) != (1 if _is_compound(ps, writers[0]) else 2):
            raise NotApplicable(f"the accumulator {acc.name} is read elsewhere in its loop")
        found.append(acc)
    return tuple(found)


def _is_compound(ps: ParsedSource, stmt: ci.Cursor) -> bool:
    return strip(stmt).kind == K.COMPOUND_ASSIGNMENT_OPERATOR


def _accumulation(ps: ParsedSource, stmt: ci.Cursor, key: Key) -> Accumulator | None:
    """``stmt`` as an accumulation into the scalar ``key`` (module docstring), or None."""
    node = strip(stmt)
    if node.kind not in (K.COMPOUND_ASSIGNMENT_OPERATOR, K.BINARY_OPERATOR):
        return None
    target, value = children(node)
    decl = referenced_decl(target)
    if decl is None or decl_key(decl) != key or decl.kind not in (K.VAR_DECL, K.PARM_DECL):
        return None
    kind = _SCALAR_KINDS.get(decl.type.get_canonical().kind)
    if kind in ("int", "uint") and any(is_floating(n.type) for n in walk(node)):
        return None  # an integer sum of floating terms truncates at every step: not associative
    op = operator(ps, node)
    combine: str | None = None
    if op in ("+=", "-=", "*="):
        combine = "*" if op == "*=" else "+"
    elif op == "=":
        combine = _combining_form(ps, strip(value), key)
    if combine is None or kind is None or (combine, kind) not in _IDENTITY:
        return None
    return Accumulator(key, decl.spelling, kind, combine)


def _combining_form(ps: ParsedSource, value: ci.Cursor, key: Key) -> str | None:
    """The operation of ``acc + e``, ``e + acc``, ``acc * e``, ``e * acc`` or ``f(acc, e)``, ``f(e, acc)``."""
    if value.kind == K.BINARY_OPERATOR and operator(ps, value) in ("+", "*"):
        operands = children(value)
    elif value.kind == K.CALL_EXPR and value.spelling in ("fmax", "fmin", "max", "min"):
        operands = list(value.get_arguments())
    else:
        return None
    if len(operands) != 2:
        return None
    mine = [o for o in operands if (d := referenced_decl(o)) is not None and decl_key(d) == key]
    if len(mine) != 1:
        return None
    return operator(ps, value) if value.kind == K.BINARY_OPERATOR else value.spelling


def _stores(ps: ParsedSource, c: ci.Cursor) -> list[ci.Cursor]:
    """The left-hand sides of the assignments inside ``c`` (stripped), increments and decrements included."""
    out = []
    for n in walk(c):
        if n.kind == K.COMPOUND_ASSIGNMENT_OPERATOR or (n.kind == K.BINARY_OPERATOR and operator(ps, n) == "="):
            out.append(strip(children(n)[0]))
        elif n.kind == K.UNARY_OPERATOR and operator(ps, n) in ("++", "--", "post++", "post--"):
            out.append(strip(children(n)[0]))
    return out


def _root_of(roots: dict[Key, Key], base: ci.Cursor) -> Key | None:
    decl = referenced_decl(base)
    return roots.get(decl_key(decl)) if decl is not None else None


def _lane_zero_statements(ps: ParsedSource, roots: dict[Key, Key], stmt: ci.Cursor,
                          rows: list[RowLoop]) -> list[ci.Cursor]:
    """The statements outside the row loops that store to global memory (each the smallest that holds no row
    loop): lane 0 runs them alone."""
    if any(stmt == r.loop.cursor for r in rows):
        return []
    if any(_contains(stmt, r.loop.cursor) for r in rows):
        kids = children(stmt)
        if stmt.kind == K.IF_STMT:
            if _stores_global(ps, roots, kids[0]):
                raise NotApplicable("a branch condition around a row loop stores to global memory")
            kids = kids[1:]
        return [found for kid in kids for found in _lane_zero_statements(ps, roots, kid, rows)]
    if not _stores_global(ps, roots, stmt):
        return []
    if has_jump(stmt, (K.RETURN_STMT, K.GOTO_STMT)):
        raise NotApplicable("a statement that stores to global memory outside the row loops returns")
    return [stmt]


def _global_roots(ps: ParsedSource, kernel: ci.Cursor) -> dict[Key, Key]:
    """Pointers of the kernel -> the global buffer parameter they point into (only those)."""
    params = {decl_key(p) for p in kernel.get_arguments() if is_global_pointer(p.type, ps.language)}
    return {key: root for key, root in pointer_roots(ps, kernel).items() if root in params}


def _global_access(roots: dict[Key, Key], target: ci.Cursor) -> ci.Cursor | None:
    """The global-memory element a store target writes (``p[i]``, ``p[i].x``), or None for a private one."""
    node = target
    while node.kind == K.MEMBER_REF_EXPR and children(node):
        node = strip(children(node)[0])
    if node.kind == K.ARRAY_SUBSCRIPT_EXPR and _root_of(roots, strip(children(node)[0])) is not None:
        return node
    return None


def _stores_global(ps: ParsedSource, roots: dict[Key, Key], stmt: ci.Cursor) -> bool:
    return any(_global_access(roots, t) is not None for t in _stores(ps, stmt))


def _check_global_memory(ps: ParsedSource, kernel: ci.Cursor, body: ci.Cursor, rows: list[RowLoop],
                         roots: dict[Key, Key], lane_zero: list[ci.Cursor]) -> None:
    """Stores in row loops go to distinct elements per iteration; what the kernel writes, no lane reads
    where another lane writes it; nothing else writes memory (module docstring). ``roots``: :func:`_global_roots`."""
    _check_calls_and_pointers(ps, kernel, roots)
    for target in _stores(ps, body):
        if _global_access(roots, target) is None and target.kind != K.DECL_REF_EXPR and not (
                target.kind == K.ARRAY_SUBSCRIPT_EXPR and _private_array(roots, target)):
            raise NotApplicable(f"a store to {ps.text(target)} is not to a variable, a private array or p[index]")
    assigned = modified_decls(ps, body, declarations=False)
    stored_at = {row.loop.cursor: _loop_stores(ps, roots, row, assigned) for row in rows}
    _same_lanes_per_element(ps, rows, stored_at)
    loop_roots = {root for places in stored_at.values() for root in places}
    for stmt in lane_zero:
        _check_lane_zero(ps, roots, stmt, loop_roots)
    written = written_roots(ps, kernel)
    parent_of = parents(kernel)
    for n in walk(body):
        if n.kind == K.DECL_REF_EXPR and n.referenced is not None and roots.get(decl_key(n.referenced)) in written:
            if not _indexed_or_derived(ps, parent_of, n):
                raise NotApplicable(f"a buffer the kernel writes is used through {n.spelling} other than as "
                                    "p[index]")
        if n.kind != K.ARRAY_SUBSCRIPT_EXPR or (root := _root_of(roots, strip(children(n)[0]))) not in written:
            continue
        base, index = children(n)
        home_row = next((r for r in rows if _contains(r.loop.body, n)), None)
        home = None if home_row is None else home_row.loop.cursor
        place = _place(ps, base, index, None if home_row is None else home_row.loop.var_key)
        if home is None and not _is_plain_store(ps, body, n) and not (
                any(_contains(c, n) for c in lane_zero) and root not in loop_roots):
            raise NotApplicable("a buffer the kernel writes is read outside its row loops, other than by lane 0 "
                                "where no row loop stores to it")
        if home is not None and place not in stored_at[home].get(root, set()):
            raise NotApplicable(f"{place.text} reads a buffer the kernel writes, not where its loop stores")


def _check_calls_and_pointers(ps: ParsedSource, kernel: ci.Cursor, roots: dict[Key, Key]) -> None:
    """Only side-effect-free built-ins are called (a function of the file, or printf, would run on every lane
    unseen), and every pointer into global memory has one buffer it points into."""
    own = {c.spelling for c in children(ps.tu.cursor) if c.kind == K.FUNCTION_DECL and ps.in_main_file(c)}
    for c in calls(kernel):
        if c.spelling in own or not c.spelling.startswith(PURE_CALL_PREFIXES):
            raise NotApplicable(f"the kernel calls {c.spelling}, which may have side effects or run per lane")
    for n in walk(kernel):
        if n.kind == K.VAR_DECL and is_global_pointer(n.type, ps.language) and decl_key(n) not in roots:
            raise NotApplicable(f"the pointer {n.spelling} mixes buffers or is reassigned")


def _loop_stores(ps: ParsedSource, roots: dict[Key, Key], row: RowLoop, assigned: set[Key]) -> dict[Key, set[Place]]:
    """The one place per buffer at which a row loop stores: the counter plus a term nothing in the kernel moves."""
    loop = row.loop
    places: dict[Key, set[Place]] = {}
    inner = {decl_key(n) for n in walk(loop.body) if n.kind == K.VAR_DECL}
    for target in _stores(ps, loop.body):
        access = _global_access(roots, target)
        if access is None:
            decl = referenced_decl(_array_base(target))
            if target.kind != K.DECL_REF_EXPR and (decl is None or decl_key(decl) not in inner):
                raise NotApplicable(f"the loop over {loop.var} writes an array declared outside it")
            continue
        if access != target:
            raise NotApplicable(f"the loop over {loop.var} stores to a part of an element")
        base, index = children(access)
        if not _distinct_per_iteration(ps, loop, index) or _varies_in(ps, loop, base):
            raise NotApplicable(f"a store of the loop over {loop.var} is not at the counter plus a term the loop "
                                "does not change")
        root = _root_of(roots, strip(base))
        assert root is not None  # a global access has a root
        place = _place(ps, base, index, loop.var_key)
        if place.names & assigned:
            raise NotApplicable(f"a store of the loop over {loop.var} is at a place a variable written elsewhere "
                                "in the kernel moves")
        places.setdefault(root, set()).add(place)
        if len(places[root]) > 1:
            raise NotApplicable(f"the loop over {loop.var} stores to {root[0]} at two places: their lanes would "
                                "race")
    if places and used_decls(_initial_value(loop)) & assigned:
        raise NotApplicable(f"the loop over {loop.var} stores from a start a variable written elsewhere moves")
    return places


def _check_lane_zero(ps: ParsedSource, roots: dict[Key, Key], stmt: ci.Cursor, loop_roots: set[Key]) -> None:
    """A statement lane 0 runs alone writes global memory only, and no buffer a row loop stores to."""
    if stmt.kind == K.DECL_STMT:
        raise NotApplicable("a declaration stores to global memory outside the row loops")
    inner = {decl_key(n) for n in walk(stmt) if n.kind == K.VAR_DECL}
    if private := modified_decls(ps, stmt, declarations=False) - inner:
        raise NotApplicable(f"a statement run by lane 0 alone also writes {sorted(private)[0][0]}, which the other "
                            "lanes would not see")
    for target in _stores(ps, stmt):
        if (access := _global_access(roots, target)) is not None and \
                _root_of(roots, strip(children(access)[0])) in loop_roots:
            raise NotApplicable("a buffer a row loop stores to is also stored to outside the row loops")


def _place(ps: ParsedSource, base: ci.Cursor, index: ci.Cursor, counter: Key | None) -> Place:
    """``base[index]`` as a place; the loop's ``counter`` is not among its names (each loop declares its own)."""
    return Place(f"{ps.text(strip(base))}[{ps.text(strip(index))}]",
                 frozenset((used_decls(base) | used_decls(index)) - {counter}))


def _same_lanes_per_element(ps: ParsedSource, rows: list[RowLoop],
                            stored_at: dict[ci.Cursor, dict[Key, set[Place]]]) -> None:
    """Row loops that store to one buffer start at the same value and store at the same places, so each element
    is written (and read back) by the same lane in every loop: nothing orders one lane's global stores before
    another lane's loads or stores (the barriers fence local memory only)."""
    seen: dict[Key, tuple[str, frozenset[Place]]] = {}
    for row in rows:
        for root, places in stored_at[row.loop.cursor].items():
            mine = (ps.text(_initial_value(row.loop)), frozenset(places))
            if seen.setdefault(root, mine) != mine:
                raise NotApplicable(f"two row loops store to {root[0]} at different places or from different "
                                    "starts: their lanes would race")


def _array_base(target: ci.Cursor) -> ci.Cursor:
    node = target
    while node.kind in (K.ARRAY_SUBSCRIPT_EXPR, K.MEMBER_REF_EXPR) and children(node):
        node = strip(children(node)[0])
    return node


def _private_array(roots: dict[Key, Key], target: ci.Cursor) -> bool:
    decl = referenced_decl(_array_base(target))
    return decl is not None and decl.kind == K.VAR_DECL and decl_key(decl) not in roots and \
        decl.type.get_canonical().kind == ci.TypeKind.CONSTANTARRAY


def _indexed_or_derived(ps: ParsedSource, parent_of: dict[ci.Cursor, ci.Cursor], ref: ci.Cursor) -> bool:
    """True when a use of a pointer is the base of ``p[index]`` or the start of a derived pointer's value."""
    node, parent = ref, parent_of.get(ref)
    while parent is not None and (parent.kind in (K.UNEXPOSED_EXPR, K.PAREN_EXPR, K.CSTYLE_CAST_EXPR) or (
            parent.kind == K.BINARY_OPERATOR and operator(ps, parent) in ("+", "-"))):
        if parent.kind == K.BINARY_OPERATOR and node != children(parent)[0]:
            return False  # the pointer on the right of a subtraction, or an index
        node, parent = parent, parent_of.get(parent)
    if parent is None:
        return False
    if parent.kind == K.VAR_DECL:
        return True
    return parent.kind == K.ARRAY_SUBSCRIPT_EXPR and children(parent)[0] == node


def _is_plain_store(ps: ParsedSource, body: ci.Cursor, access: ci.Cursor) -> bool:
    """True when ``access`` is the target of a plain ``=`` (written, not read)."""
    return any(n.kind == K.BINARY_OPERATOR and operator(ps, n) == "=" and strip(children(n)[0]) == access
               for n in walk(body))


def _varies_in(ps: ParsedSource, loop: ForLoop, expr: ci.Cursor) -> bool:
    """True when ``expr`` reads the counter or a variable the loop writes or declares."""
    changing = modified_decls(ps, loop.body) | {loop.var_key}
    return bool(used_decls(expr) & changing) or any(not c.spelling.startswith(PURE_CALL_PREFIXES)
                                                    for c in calls(expr))


def _distinct_per_iteration(ps: ParsedSource, loop: ForLoop, index: ci.Cursor) -> bool:
    """``index`` is the counter, or the counter plus (minus) a term the loop does not change."""
    index = strip(index)
    if (d := referenced_decl(index)) is not None and decl_key(d) == loop.var_key:
        return True
    if index.kind != K.BINARY_OPERATOR or operator(ps, index) not in ("+", "-"):
        return False
    left, right = children(index)
    if (d := referenced_decl(left)) is not None and decl_key(d) == loop.var_key:
        return not _varies_in(ps, loop, right)
    if operator(ps, index) == "+" and (d := referenced_decl(right)) is not None and decl_key(d) == loop.var_key:
        return not _varies_in(ps, loop, left)
    return False


def _work_item_queries(ps: ParsedSource, kernel: ci.Cursor) -> list[Span]:
    """``get_global_id(0)`` -> ``get_group_id(0)`` and ``get_global_size(0)`` -> ``get_num_groups(0)``."""
    edits = []
    for c in calls(kernel):
        if c.spelling in ("get_global_id", "get_global_size"):
            args = list(c.get_arguments())
            if len(args) != 1 or ps.text(strip(args[0])) != "0":
                raise NotApplicable(f"{c.spelling} with a dimension other than 0")
            name = "get_group_id" if c.spelling == "get_global_id" else "get_num_groups"
            edits.append(Span(*ps.span(c), f"{name}(0)"))
        elif c.spelling in ("get_global_offset", "get_global_linear_id", "get_work_dim"):
            raise NotApplicable(f"the kernel calls {c.spelling}")
    return edits


def _required_size(ps: ParsedSource, kernel: ci.Cursor, threads: int) -> Span:
    """The ``reqd_work_group_size`` attribute after the kernel's ``__kernel`` keyword."""
    token = next((t for t in ps.tokens(kernel) if t.spelling in ("__kernel", "kernel")), None)
    if token is None:
        raise NotApplicable("the kernel's __kernel keyword is not in its text")
    end = token.extent.end.offset
    return Span(end, end, f" __attribute__((reqd_work_group_size({threads}, 1, 1)))")
