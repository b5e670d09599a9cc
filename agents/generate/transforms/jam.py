"""The jammer of thread coarsening: one work-item's body rewritten as the jammed copies of FX x FY work-items.

:mod:`.coarsen` (the ``cyclic`` and ``block`` mappings) and :mod:`.vectorize` (the ``vector`` mapping, a jammer
whose x-copies are vector lanes) both build on :class:`Jammer`; it lives in a module of its own so neither of
them imports the other's internals (they imported each other before: a cycle).
"""

from __future__ import annotations

from dataclasses import dataclass

from clang import cindex as ci

from kernelcast.agents.generate.kernel_ast import (
    PURE_CALL_PREFIXES,
    K,
    ParsedSource,
    Span,
    calls,
    children,
    decl_key,
    declarators,
    has_jump,
    int_literal,
    loop_local_counters,
    modified_decls,
    pointer_roots,
    readonly_pointers,
    strip,
    used_decls,
    value_type,
    walk,
)
from kernelcast.agents.generate.transforms import NotApplicable

_UNCONDITIONAL_STOP = (K.CONDITIONAL_OPERATOR, K.IF_STMT, K.FOR_STMT, K.WHILE_STMT, K.DO_STMT, K.SWITCH_STMT)

Key = tuple[str, int]


@dataclass(frozen=True)
class Copy:
    """One of the original work-items a coarsened work-item stands for."""

    offsets: tuple[int, int]  # (cx, cy)
    suffix: str


# a private array or struct is written through its elements or members, or by a function it is passed to, none of
# which assigns the variable itself: each copy needs its own (a table-lookup kernel whose 16-byte state array the
# copies shared computed half its outputs wrong, caught by the harness: 17 of a run's 25 measurements)
_AGGREGATES = (ci.TypeKind.CONSTANTARRAY, ci.TypeKind.INCOMPLETEARRAY, ci.TypeKind.VARIABLEARRAY,
               ci.TypeKind.RECORD)


class Jammer:
    def __init__(self, ps: ParsedSource, kernel: ci.Cursor, factors: dict[int, int], mapping: str) -> None:
        self.ps, self.kernel, self.mapping = ps, kernel, mapping
        self.factors = {d: f for d, f in factors.items() if f > 1}
        fx, fy = factors.get(0, 1), factors.get(1, 1)
        self.copies = [Copy((cx, cy), f"_kc{cx}{cy}") for cy in range(fy) for cx in range(fx)]
        self.body = next(c for c in children(kernel) if c.kind == K.COMPOUND_STMT)
        self.body_vars = {decl_key(n) for n in walk(self.body) if n.kind == K.VAR_DECL}
        self.deps = self._dependences()
        roots = pointer_roots(ps, kernel)
        readonly = readonly_pointers(ps, kernel)
        self.readonly = {k for k in roots if k in readonly}
        self.shared_loads = 0
        self.loads_total = 0
        self._temp = 0
        self._types: dict[str, str] = {}  # hoisted load name -> its value type

    def _dependences(self) -> dict[Key, frozenset[int]]:
        """Per variable, the coarsened dimensions its value depends on. A variable assigned after its
        declaration, and every private array or struct, depends on all of them (no control-flow analysis),
        except a loop-local counter (:func:`loop_local_counters`), which depends on its loops' headers; the others
        on their initializer.
        Counters start uniform and the pass repeats until their dependences settle (they only grow)."""
        counters = loop_local_counters(self.ps, self.body)
        counter_deps = dict.fromkeys(counters, frozenset[int]())
        while True:
            deps = self._dependences_given(counter_deps)
            settled = {key: frozenset().union(*(self._uses(loop_header, deps, key) for loop in loops
                                                for loop_header in children(loop)[:-1]))
                       for key, loops in counters.items()}
            if settled == counter_deps:
                return deps
            counter_deps = {key: settled[key] | counter_deps[key] for key in counters}

    def _dependences_given(self, counter_deps: dict[Key, frozenset[int]]) -> dict[Key, frozenset[int]]:
        every = frozenset(self.factors)
        assigned = modified_decls(self.ps, self.body, declarations=False)
        deps: dict[Key, frozenset[int]] = {}
        for n in walk(self.body):  # declarations come before their uses
            if n.kind != K.VAR_DECL:
                continue
            key = decl_key(n)
            if key in counter_deps:
                deps[key] = counter_deps[key]
            elif key in assigned or n.type.get_canonical().kind in _AGGREGATES:
                deps[key] = every
            else:
                deps[key] = self._uses(n, deps)
        return deps

    def _uses(self, node: ci.Cursor, deps: dict[Key, frozenset[int]], skip: Key | None = None) -> frozenset[int]:
        """The coarsened dimensions the value of ``node`` depends on, given the variables' ``deps``."""
        every = frozenset(self.factors)
        found: set[int] = set()
        for m in walk(node):
            if m.kind == K.CALL_EXPR and m.spelling in ("get_global_id", "get_global_size"):
                args = list(m.get_arguments())
                dim = int_literal(self.ps, args[0]) if len(args) == 1 else None
                found |= {dim} if dim in self.factors else (set() if dim is not None else set(every))
            elif m.kind == K.DECL_REF_EXPR and m.referenced is not None and decl_key(m.referenced) != skip:
                found |= deps.get(decl_key(m.referenced), frozenset())
        return frozenset(found)

    def _name(self, decl: ci.Cursor, copy: Copy) -> str | None:
        """The copy's name of a body variable (None: the same for every copy, not renamed)."""
        dep = self.deps.get(decl_key(decl), frozenset(self.factors))
        if not dep:
            return None
        tags = "".join(str(copy.offsets[d]) if d in dep else "x" for d in sorted(self.factors))
        return f"{decl.spelling}_kc{tags}"

    # ---- rendering one copy --------------------------------------------------------------------------
    def _id(self, fn: str, dim: int, copy: Copy) -> str:
        f, c = self.factors[dim], copy.offsets[dim]
        if fn == "get_global_size":
            return f"(get_global_size({dim}) * {f})"
        if self.mapping == "block":
            return f"(get_global_id({dim}) * {f} + {c})"
        return f"get_global_id({dim})" if c == 0 else f"(get_global_id({dim}) + {c} * get_global_size({dim}))"

    def _edits(self, cursor: ci.Cursor, copy: Copy, shared: set[Key], loads: dict[str, str] | None,
               hoistable: set[tuple[int, int]]) -> list[Span]:
        ps, edits = self.ps, []

        def visit(n: ci.Cursor) -> None:
            if n.kind == K.CALL_EXPR and n.spelling in ("get_global_id", "get_global_size"):
                args = list(n.get_arguments())
                dim = int_literal(ps, args[0]) if len(args) == 1 else None
                if dim is None:
                    raise NotApplicable(f"{n.spelling} with a non-literal dimension")
                if dim in self.factors:
                    edits.append(Span(*ps.span(n), self._id(n.spelling, dim, copy)))
                return
            if loads is not None and n.kind == K.ARRAY_SUBSCRIPT_EXPR and ps.span(n) in hoistable:
                text = ps.render(n, self._edits(n, copy, shared, None, set()))
                self.loads_total += 1
                if text not in loads:
                    loads[text] = f"kc_ld{self._temp}"
                    self._temp += 1
                    self._types[loads[text]] = value_type(n.type)
                else:
                    self.shared_loads += 1
                edits.append(Span(*ps.span(n), loads[text]))
                return
            if n.kind == K.DECL_REF_EXPR and n.referenced is not None:
                key = decl_key(n.referenced)
                name = self._name(n.referenced, copy) if key in self.body_vars and key not in shared else None
                if name is not None:
                    edits.append(Span(*ps.span(n), name))
                return
            if n.kind == K.VAR_DECL and decl_key(n) in self.body_vars and decl_key(n) not in shared:
                name = self._name(n, copy)
                if name is not None:
                    at = n.location.offset
                    edits.append(Span(at, at + len(n.spelling.encode()), name))
            for child in children(n):
                visit(child)

        visit(cursor)
        return edits

    def render(self, cursor: ci.Cursor, copy: Copy, shared: set[Key], statement: bool = True,
               loads: dict[str, str] | None = None, hoistable: set[tuple[int, int]] | None = None) -> str:
        return self.ps.render(cursor, self._edits(cursor, copy, shared, loads, hoistable or set()), statement)

    def render_range(self, cursor: ci.Cursor, start: int, end: int, copy: Copy, shared: set[Key]) -> str:
        return self.ps.slice(start, end, self._edits(cursor, copy, shared, None, set()))

    # ---- jamming ---------------------------------------------------------------------------------------
    def kernel_body(self) -> str:
        return "{\n" + self.emit_list(children(self.body), set(), top=True) + "\n}"

    @staticmethod
    def _guard_return(s: ci.Cursor) -> ci.Cursor | None:
        """The condition of ``if (cond) return;`` (no else), else None."""
        if s.kind != K.IF_STMT:
            return None
        kids = children(s)
        if len(kids) != 2:
            return None
        then = kids[1]
        if then.kind == K.COMPOUND_STMT and len(children(then)) == 1:
            then = children(then)[0]
        return kids[0] if then.kind == K.RETURN_STMT and not children(then) else None

    def _pure(self, cond: ci.Cursor) -> None:
        if modified_decls(self.ps, cond, declarations=False) or any(
                not c.spelling.startswith(PURE_CALL_PREFIXES) for c in calls(cond)):
            raise NotApplicable("a branch condition or shared declaration has side effects")

    def emit_list(self, stmts: list[ci.Cursor], shared: set[Key], top: bool = False,
                  loads: dict[str, str] | None = None, hoistable: set[tuple[int, int]] | None = None) -> str:
        out: list[str] = []
        for i, s in enumerate(stmts):
            cond = self._guard_return(s)
            if cond is not None:
                if not top:
                    raise NotApplicable("an early return below the top level of the kernel")
                self._pure(cond)
                conds = [self.render(cond, c, shared, statement=False) for c in self.copies]
                if len(set(conds)) == 1:
                    out.append(f"if ({conds[0]}) return;")
                    continue
                rest = stmts[i + 1:]
                fallback = "\n".join(f"if (!({cc})) {{\n{self.emit_single(rest, copy, shared)}\n}}"
                                     for cc, copy in zip(conds, self.copies, strict=True))
                out.append(f"if ({' || '.join(f'({cc})' for cc in conds)}) {{\n{fallback}\nreturn;\n}}")
                continue
            if s.kind == K.RETURN_STMT:
                if not top or i != len(stmts) - 1 or children(s):
                    raise NotApplicable("a return that is not the kernel's last statement")
                out.append("return;")
                continue
            out.append(self.emit(s, shared, loads, hoistable))
        return "\n".join(out)

    def emit_single(self, stmts: list[ci.Cursor], copy: Copy, shared: set[Key]) -> str:
        """The statements for one copy alone; early returns become nested conditions."""
        out: list[str] = []
        for i, s in enumerate(stmts):
            cond = self._guard_return(s)
            if cond is not None:
                rest = self.emit_single(stmts[i + 1:], copy, shared)
                out.append(f"if (!({self.render(cond, copy, shared, statement=False)})) {{\n{rest}\n}}")
                break
            if s.kind == K.RETURN_STMT and i == len(stmts) - 1:
                break
            if has_jump(s, (K.RETURN_STMT, K.GOTO_STMT)):
                raise NotApplicable("a return inside a nested statement")
            out.append(self.render(s, copy, shared))
        return "\n".join(out)

    def per_copy(self, s: ci.Cursor, shared: set[Key], loads: dict[str, str] | None = None,
                 hoistable: set[tuple[int, int]] | None = None) -> str:
        if has_jump(s, (K.RETURN_STMT, K.GOTO_STMT)):
            raise NotApplicable("a return inside a nested statement")
        edits = [self._edits(s, c, shared, loads, hoistable or set()) for c in self.copies]
        split = declarators(self.ps, s) if s.kind == K.DECL_STMT else None
        if split is None or len(split[1]) == 1:
            return self._once_if_shared(s, [self.ps.render(s, e, statement=True) for e in edits])
        # one declaration per declarator: in ``int x = get_global_id(0), y = get_global_id(1);`` coarsened in
        # x, each copy has its own x but all share y, which must be declared once
        spec, ranges = split
        return "\n".join(self._once_if_shared(s, [f"{spec} {self.ps.slice(start, end, e).strip()};" for e in edits])
                         for start, end in ranges)

    def _once_if_shared(self, s: ci.Cursor, texts: list[str]) -> str:
        """The copies' texts of a statement; a declaration the copies share is made once."""
        if s.kind == K.DECL_STMT and len(set(texts)) < len(texts):
            self._pure(s)
            texts = list(dict.fromkeys(texts))
        return "\n".join(texts)

    def block(self, s: ci.Cursor, shared: set[Key]) -> str:
        inner = children(s) if s.kind == K.COMPOUND_STMT else [s]
        return "{\n" + self.emit_list(inner, shared) + "\n}"

    def emit(self, s: ci.Cursor, shared: set[Key], loads: dict[str, str] | None = None,
             hoistable: set[tuple[int, int]] | None = None) -> str:
        if s.kind == K.COMPOUND_STMT:
            return self.block(s, shared)
        if s.kind == K.IF_STMT:
            return self.emit_if(s, shared)
        if s.kind == K.FOR_STMT:
            return self.emit_for(s, shared)
        return self.per_copy(s, shared, loads, hoistable)

    def emit_if(self, s: ci.Cursor, shared: set[Key]) -> str:
        kids = children(s)
        if len(kids) not in (2, 3) or kids[0].kind == K.DECL_STMT:
            return self.per_copy(s, shared)
        cond, then, other = kids[0], kids[1], kids[2] if len(kids) == 3 else None
        if has_jump(s, (K.RETURN_STMT, K.GOTO_STMT)):
            raise NotApplicable("a return inside a conditional")
        self._pure(cond)
        conds = [self.render(cond, c, shared, statement=False) for c in self.copies]
        if len(set(conds)) == 1:
            text = f"if ({conds[0]}) {self.block(then, shared)}"
            return text + (f" else {self.block(other, shared)}" if other is not None else "")
        conds = list(dict.fromkeys(conds))
        all_true = " && ".join(f"({cc})" for cc in conds)
        text = f"if ({all_true}) {self.block(then, shared)}"
        if other is not None:
            text += f" else if ({' && '.join(f'!({cc})' for cc in conds)}) {self.block(other, shared)}"
        return text + f" else {{\n{self.per_copy(s, shared)}\n}}"

    def emit_for(self, s: ci.Cursor, shared: set[Key]) -> str:
        ps = self.ps
        body = children(s)[-1]
        header_vars = {decl_key(n) for c in children(s)[:-1] if c.kind == K.DECL_STMT for n in children(c)
                       if n.kind == K.VAR_DECL}
        inner_shared = shared | header_vars
        close = _header_close(ps, s)
        headers = [self.render_range(s, s.extent.start.offset, close + 1, c, inner_shared) for c in self.copies]
        jammable = (len(set(headers)) == 1 and not has_jump(body) and not (header_vars & modified_decls(ps, body))
                    and not any(self._per_copy_vars(used_decls(c)) - inner_shared for c in children(s)[:-1]))
        if not jammable:
            return self.per_copy(s, shared)
        stmts = children(body) if body.kind == K.COMPOUND_STMT else [body]
        loads: dict[str, str] = {}
        hoistable = self._hoistable(stmts, body)
        inner = self.emit_list(stmts, inner_shared, loads=loads, hoistable=hoistable)
        decls = "\n".join(f"const {self._types[name]} {name} = {text};" for text, name in loads.items())
        return f"{headers[0]} {{\n{decls}\n{inner}\n}}"

    def _per_copy_vars(self, keys: set[Key]) -> set[Key]:
        """The body variables among ``keys`` whose value differs between copies (renamed per copy)."""
        return {k for k in keys & self.body_vars if self.deps.get(k, frozenset(self.factors))}

    def _hoistable(self, stmts: list[ci.Cursor], body: ci.Cursor) -> set[tuple[int, int]]:
        """Reads of read-only buffers executed unconditionally at the top level of a jammed loop body, whose
        index does not change inside the body: they can be loaded once at the top of the body."""
        ps = self.ps
        changed = modified_decls(ps, body)
        out: set[tuple[int, int]] = set()

        def visit(n: ci.Cursor) -> None:
            if n.kind in _UNCONDITIONAL_STOP:
                return
            if n.kind == K.BINARY_OPERATOR and _logical(ps, n):
                return
            if n.kind == K.ARRAY_SUBSCRIPT_EXPR:
                base, index = children(n)
                base = strip(base)
                if (base.kind == K.DECL_REF_EXPR and base.referenced is not None
                        and decl_key(base.referenced) in self.readonly and not (used_decls(index) & changed)
                        and all(c.spelling.startswith("get_") for c in calls(index))):
                    out.add(ps.span(n))
                    return
            for child in children(n):
                visit(child)

        for s in stmts:
            if s.kind in (K.DECL_STMT, K.BINARY_OPERATOR, K.COMPOUND_ASSIGNMENT_OPERATOR, K.CALL_EXPR,
                          K.UNARY_OPERATOR):
                visit(s)
        return out


def _logical(ps: ParsedSource, n: ci.Cursor) -> bool:
    from kernelcast.agents.generate.kernel_ast import operator

    return operator(ps, n) in ("&&", "||")


def _header_close(ps: ParsedSource, loop: ci.Cursor) -> int:
    from kernelcast.agents.generate.kernel_ast import header_parts

    return header_parts(ps, loop)[3]

