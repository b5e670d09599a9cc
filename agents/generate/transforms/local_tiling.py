"""Local-memory tiling of reused inputs in 2-D kernels: a work-group stages tiles of them in ``__local`` arrays.

In a naive GEMM, ``acc += A[row * K + k] * B[k * N + col]``: every work-item of a row of its group reads
the same ``A[row * K + k]`` and every work-item of a column the same ``B[k * N + col]``. With a T x T
work-group, the k loop is split into tiles of T steps; at the start of each tile the work-item
(lx, ly) loads one element of each staged buffer into a ``__local`` T x T array, the group waits at a
barrier, the T steps read the local copies, and a second barrier protects the tile from the next load.

Why it is legal (each point is checked on the AST, else :class:`NotApplicable` says which failed):

- the launch is 2-D, the global sizes are multiples of T at every size set, and the work-group is T x T;
- the loop is ``for (int k = 0; k < BOUND; ++k)`` with a uniform BOUND (kernel scalars and constants)
  whose value is a multiple of T at every size set, the counter is not written, no jumps in the body;
- a staged access reads a buffer the kernel never writes, unconditionally in the body, at an index that
  depends only on k, on values derived from ``get_global_id(1)`` (row-shared, staged as ``[ly][k]``) or
  only on ``get_global_id(0)`` (column-shared, staged as ``[k][lx]``), and on uniform values: the
  work-item that loads an element computes the same index as every work-item that reads it;
- every work-item reaches the barriers: no return anywhere, the loop is not inside another loop, and the
  conditions around it are ``gid < bound`` tests that hold for every work-item of the launch (the
  global size equals the bound); the kernel did not observe its work-group before.

Compositions: the tiled kernel observes its work-group, so a different work-group shape and coarsening
(which refuses such kernels) cannot follow it; scalar replacement, restrict/const and unrolling (of the
inner tile loop) can.
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
    ancestors,
    children,
    counted_loop,
    decl_key,
    has_jump,
    int_literal,
    modified_decls,
    observes_work_group,
    operator,
    readonly_pointers,
    referenced_decl,
    strip,
    value_type,
    walk,
)
from kernelcast.agents.generate.transforms import NotApplicable, Rewritten, checked, entry_of, fresh_name, rewritten
from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.expr import ExpressionError, evaluate_int
from kernelcast.tools.core.task import ScalarArg, Task

TILES = (8, 16, 32)
MAX_STAGED = 4  # local arrays per kernel (T*T elements each)
Key = tuple[str, int]
VARYING = frozenset({"varying"})  # a value that may differ between work-items in a way we do not track


@dataclass(frozen=True)
class Staged:
    """One staged access pattern: the buffer, the index text, how it is shared, and the accesses it covers."""

    buffer: str
    index: ci.Cursor
    shared: str  # "row" (independent of get_global_id(0)) or "col" (independent of get_global_id(1))
    accesses: tuple[ci.Cursor, ...]


class _Dependences:
    """Which work-item dimensions a value depends on: {0}, {1}, both, none (uniform) or ``varying``."""

    def __init__(self, ps: ParsedSource, kernel: ci.Cursor) -> None:
        self.ps = ps
        body = next(c for c in children(kernel) if c.kind == K.COMPOUND_STMT)
        assigned = modified_decls(ps, body, declarations=False)
        self.deps: dict[Key, frozenset[str]] = {}
        for p in kernel.get_arguments():
            self.deps[decl_key(p)] = VARYING if decl_key(p) in assigned else frozenset()
        for n in walk(body):  # declarations come before their uses
            if n.kind == K.VAR_DECL:
                init = [c for c in children(n) if c.kind != K.TYPE_REF]
                if decl_key(n) in assigned or not init:
                    self.deps[decl_key(n)] = VARYING
                else:
                    self.deps[decl_key(n)] = self.of(init[-1])

    def of(self, expr: ci.Cursor, counter: Key | None = None) -> frozenset[str]:
        """The dependences of ``expr``; the loop ``counter`` counts as "k"."""
        found: set[str] = set()
        for m in walk(expr):
            if m.kind == K.CALL_EXPR:
                if m.spelling == "get_global_id":
                    args = list(m.get_arguments())
                    dim = int_literal(self.ps, args[0]) if len(args) == 1 else None
                    found |= {str(dim)} if dim in (0, 1) else VARYING
                elif m.spelling in ("get_global_size", "get_global_offset", "get_work_dim"):
                    continue
                elif not m.spelling.startswith(PURE_CALL_PREFIXES) or m.spelling.startswith("get_"):
                    found |= VARYING
            elif m.kind == K.DECL_REF_EXPR and m.referenced is not None:
                key = decl_key(m.referenced)
                if key == counter:
                    found.add("k")
                elif m.referenced.kind in (K.VAR_DECL, K.PARM_DECL):
                    found |= self.deps.get(key, VARYING)
        return frozenset(found)


def _scalar_value(ps: ParsedSource, task: Task, kernel: ci.Cursor, expr: ci.Cursor, which: str) -> int | None:
    """The value of a literal or a scalar parameter of the kernel at a size set (None when unknown)."""
    literal = int_literal(ps, expr)
    if literal is not None:
        return literal
    decl = referenced_decl(expr)
    if decl is None or decl.kind != K.PARM_DECL:
        return None
    params = [decl_key(p) for p in kernel.get_arguments()]
    if decl_key(decl) not in params or len(params) != len(task.spec.args):
        return None
    arg = task.spec.args[params.index(decl_key(decl))]
    if not isinstance(arg, ScalarArg):
        return None
    try:
        return evaluate_int(arg.value, task.sizes(which))  # type: ignore[arg-type]
    except (ExpressionError, ZeroDivisionError, ValueError):
        return None


def _global_sizes(task: Task, candidate: Candidate) -> dict[str, list[int]]:
    out = {}
    for which in ("small", "full"):
        try:
            out[which] = [evaluate_int(e, task.sizes(which)) for e in candidate.global_size]
        except (ExpressionError, ZeroDivisionError, ValueError):
            raise NotApplicable(f"the global size does not evaluate at the {which} sizes") from None
    return out


class _Analysis:
    def __init__(self, task: Task, candidate: Candidate, tile: int) -> None:
        self.task, self.candidate, self.tile = task, candidate, tile
        language, entry = task.language, task.spec.entry
        if language != "opencl":
            raise NotApplicable("local tiling is implemented for OpenCL kernels")
        if len(candidate.global_size) != 2:
            raise NotApplicable(f"local tiling needs a 2-D kernel (this launch has {len(candidate.global_size)}-D)")
        self.ps, self.kernel = entry_of(candidate.source, language, entry)
        ps, kernel = self.ps, self.kernel
        if ps.uses_macros(kernel):
            raise NotApplicable("the entry kernel uses the file's macros")
        if observes_work_group(ps, kernel):
            raise NotApplicable("the kernel already observes its work-group (local ids, local memory or barriers)")
        if any(n.kind in (K.RETURN_STMT, K.GOTO_STMT) for n in walk(kernel)):
            raise NotApplicable("a return in the kernel: not every work-item would reach the barriers")
        self.globals = _global_sizes(task, candidate)
        if any(g % tile for sizes in self.globals.values() for g in sizes):
            raise NotApplicable(f"the global size is not a multiple of {tile} in both dimensions at every size set")
        self.deps = _Dependences(ps, kernel)
        self.readonly = readonly_pointers(ps, kernel)

    def find(self) -> tuple[ForLoop, list[Staged]]:
        """The first k loop with staged accesses whose barriers every work-item reaches."""
        reasons = []
        for n in walk(self.kernel):
            if n.kind != K.FOR_STMT:
                continue
            try:
                loop, staged = self._stageable(n)
                self._uniformly_reached(n)
                return loop, staged
            except NotApplicable as exc:
                reasons.append(str(exc))
        if not reasons:
            raise NotApplicable("no for-loop in the entry kernel")
        raise NotApplicable(reasons[0])

    def _stageable(self, n: ci.Cursor) -> tuple[ForLoop, list[Staged]]:
        ps, tile = self.ps, self.tile
        loop = counted_loop(ps, n)
        if loop is None or loop.step != 1 or loop.op != "<":
            raise NotApplicable("the loop is not of the form for (int k = 0; k < BOUND; ++k)")
        if loop.init.strip() != "0":
            raise NotApplicable(f"the loop starts at {loop.init}, not 0")
        if has_jump(loop.body) or loop.var_key in modified_decls(ps, loop.body):
            raise NotApplicable("the loop body jumps or writes its counter")
        if self.deps.of(loop.bound):
            raise NotApplicable("the loop bound may differ between work-items")
        for which in ("small", "full"):
            trips = _scalar_value(self.ps, self.task, self.kernel, loop.bound, which)
            if trips is None or trips % tile:
                raise NotApplicable(f"the trip count {ps.text(loop.bound)} is not known to be a multiple of {tile} "
                                    f"at the {which} sizes")
        body_decls = {decl_key(d) for d in walk(loop.body) if d.kind == K.VAR_DECL}
        unconditional = self._unconditional(loop.body)
        patterns: dict[tuple[str, str], list[ci.Cursor]] = {}
        for a in walk(loop.body):
            if a.kind != K.ARRAY_SUBSCRIPT_EXPR or a.extent.start.offset not in unconditional:
                continue
            base, index = children(a)
            decl = referenced_decl(base)
            if decl is None or decl_key(decl) not in self.readonly or decl.kind != K.PARM_DECL:
                continue
            if any(decl_key(r.referenced) in body_decls for r in walk(index)
                   if r.kind == K.DECL_REF_EXPR and r.referenced is not None):
                continue  # the index uses a value computed inside the body: not known at load time
            deps = self.deps.of(index, loop.var_key)
            if "k" not in deps or "varying" in deps or deps >= {"0", "1"}:
                continue
            key = (decl.spelling, " ".join(t.spelling for t in ps.tokens(index)))
            patterns.setdefault(key, []).append(a)
        if not patterns:
            raise NotApplicable("no read-only input of the loop is reused across the work-items of a group "
                                "(every index depends on both get_global_id(0) and get_global_id(1), or not on k)")
        staged = []
        for (buffer, _), accesses in list(patterns.items())[:MAX_STAGED]:
            index = children(accesses[0])[1]
            deps = self.deps.of(index, loop.var_key)
            staged.append(Staged(buffer, index, "row" if "0" not in deps else "col", tuple(accesses)))
        return loop, staged

    def _unconditional(self, body: ci.Cursor) -> set[int]:
        """Start offsets of the subscripts executed on every iteration (not under if, ?:, &&, || or a loop)."""
        out: set[int] = set()

        def visit(c: ci.Cursor) -> None:
            if c.kind in (K.IF_STMT, K.FOR_STMT, K.WHILE_STMT, K.DO_STMT, K.SWITCH_STMT, K.CONDITIONAL_OPERATOR):
                return
            if c.kind == K.BINARY_OPERATOR and operator(self.ps, c) in ("&&", "||"):
                return
            if c.kind == K.ARRAY_SUBSCRIPT_EXPR:
                out.add(c.extent.start.offset)
            for child in children(c):
                visit(child)

        visit(body)
        return out

    def _uniformly_reached(self, loop: ci.Cursor) -> None:
        """Every work-item of the launch executes the loop: only blocks and always-true guards around it."""
        chain = ancestors(self.kernel, loop)
        for parent, child in zip(chain[1:], [*chain[2:], loop], strict=True):
            if parent.kind == K.COMPOUND_STMT:
                continue
            if parent.kind == K.IF_STMT:
                kids = children(parent)
                if len(kids) < 2 or child != kids[1]:
                    raise NotApplicable("the loop is in the else branch or the condition of an if")
                if not self._always_true(kids[0]):
                    raise NotApplicable(f"the loop is under a condition ({self.ps.text(kids[0])}) that may differ "
                                        f"between the work-items of a group")
                continue
            raise NotApplicable("the loop is inside another loop or statement: the barriers would not be uniform")

    def _always_true(self, cond: ci.Cursor) -> bool:
        """``gid < bound`` (and conjunctions of them) where the global size in that dimension <= bound."""
        cond = strip(cond)
        if cond.kind == K.BINARY_OPERATOR and operator(self.ps, cond) == "&&":
            return all(self._always_true(c) for c in children(cond))
        if cond.kind != K.BINARY_OPERATOR or operator(self.ps, cond) not in ("<", ">"):
            return False
        lhs, rhs = children(cond)
        if operator(self.ps, cond) == ">":
            lhs, rhs = rhs, lhs
        dim = self._global_id_dim(lhs)
        if dim is None:
            return False
        for which, sizes in self.globals.items():
            bound = _scalar_value(self.ps, self.task, self.kernel, rhs, which)
            if bound is None or sizes[dim] > bound:
                return False
        return True

    def _global_id_dim(self, expr: ci.Cursor) -> int | None:
        """d when ``expr`` is ``get_global_id(d)`` or a never-assigned variable initialized to it."""
        expr = strip(expr)
        decl = referenced_decl(expr)
        if decl is not None and decl.kind == K.VAR_DECL and self.deps.deps.get(decl_key(decl)) != VARYING:
            init = [c for c in children(decl) if c.kind != K.TYPE_REF]
            expr = strip(init[-1]) if init else expr
        if expr.kind == K.CALL_EXPR and expr.spelling == "get_global_id":
            args = list(expr.get_arguments())
            dim = int_literal(self.ps, args[0]) if len(args) == 1 else None
            return dim if dim in (0, 1) else None
        return None


def local_tile(task: Task, candidate: Candidate, tile: int) -> Rewritten:
    """Stage the reused inputs of the entry kernel's k loop in ``__local`` tiles of ``tile`` x ``tile``."""
    if tile not in TILES:
        raise NotApplicable(f"tile size {tile} is not one of {', '.join(map(str, TILES))}")
    analysis = _Analysis(task, candidate, tile)
    loop, staged = analysis.find()
    ps, kernel, loop_cursor = analysis.ps, analysis.kernel, loop.cursor
    source = candidate.source
    k0, lx, ly = fresh_name(source, "kc_k"), fresh_name(source, "kc_lx"), fresh_name(source, "kc_ly")
    body = next(c for c in children(kernel) if c.kind == K.COMPOUND_STMT)
    indent = ps.line_indent(loop_cursor.extent.start.offset)
    declarations, loads, edits = [f"const int {lx} = get_local_id(0), {ly} = get_local_id(1);"], [], []
    used: set[str] = set()
    for s in staged:
        name = fresh_name(source + " ".join(used), f"kc_tile_{s.buffer}_")
        used.add(name)
        elem = value_type(s.accesses[0].type)
        declarations.append(f"__local {elem} {name}[{tile}][{tile}];")
        along = lx if s.shared == "row" else ly
        counter_refs = [r for r in walk(s.index) if r.kind == K.DECL_REF_EXPR and r.referenced is not None
                        and decl_key(r.referenced) == loop.var_key]
        index = ps.slice(*ps.span(s.index), [Span(*ps.span(r), f"({k0} + {along})") for r in counter_refs])
        loads.append(f"{name}[{ly}][{lx}] = {s.buffer}[{index}];")
        cell = f"[{ly}][{loop.var} - {k0}]" if s.shared == "row" else f"[{loop.var} - {k0}][{lx}]"
        edits += [Span(*ps.span(a), f"{name}{cell}") for a in s.accesses]
    inner_body = ps.render(loop.body, edits, statement=True)
    var_type = " ".join(w for w in loop.var_type.split() if w not in ("const", "__private", "private"))
    bound = ps.text(loop.bound)
    step = f"{indent}    "
    text = (f"for ({var_type} {k0} = 0; {k0} < {bound}; {k0} += {tile}) {{\n"
            + "".join(f"{step}{line}\n" for line in loads)
            + f"{step}barrier(CLK_LOCAL_MEM_FENCE);\n"
            + f"{step}for ({var_type} {loop.var} = {k0}; {loop.var} < {k0} + {tile}; ++{loop.var})\n"
            + f"{step}    {inner_body}\n"
            + f"{step}barrier(CLK_LOCAL_MEM_FENCE);\n{indent}}}")
    open_brace = body.extent.start.offset + 1
    head = "".join(f"\n    {d}" for d in declarations)
    new_source = ps.edited([Span(open_brace, open_brace, head), Span(*ps.stmt_span(loop_cursor), text)])
    names = ",".join(dict.fromkeys(s.buffer for s in staged))
    label = f"local-tile {tile}x{tile} {names}"
    local = [str(tile), str(tile)]
    return rewritten(checked(candidate, new_source, task.language, task.spec.entry, local_size=local), "local_tile",
                     label, tile=tile)
