"""Vectorized coarsening: the x-copies of a coarsened kernel become the lanes of OpenCL vectors.

With ``coarsen x4 ... vector`` copy j of a work-item handles x index ``gid * 4 + j``. Floating-point
variables that differ between the x-copies become ``float4`` variables, reads whose index advances by
one element per lane become ``vload4`` (contiguous) or a vector built from scalars (strided), and
stores become ``vstore4``. ``vloadn``/``vstoren`` need only element alignment, and a lane reads or
writes exactly what its original work-item did, so bounds are those of the original kernel; the jammed
fast path runs only when every copy's guard holds (see :mod:`kernelcast.agents.generate.transforms.coarsen`;
the jammer both build on is :mod:`kernelcast.agents.generate.transforms.jam`).
Whether an index advances by one element per lane is decided by evaluating the inlined index
expressions at random integer values (additions and products only; anything else is not vectorized).
"""

from __future__ import annotations

import random
import re

from clang import cindex as ci

from kernelcast.agents.generate.kernel_ast import (
    K,
    Span,
    children,
    decl_key,
    int_literal,
    modified_decls,
    operator,
    strip,
    value_type,
    walk,
)
from kernelcast.agents.generate.transforms import NotApplicable
from kernelcast.agents.generate.transforms.jam import Copy, Jammer, Key

VECTOR_WIDTHS = (2, 4, 8)
LANE_TYPES = ("float", "double")
_CAST = re.compile(r"\(\s*(?:const\s+)?(?:unsigned\s+)?(?:size_t|int|uint|long|ulong|short|ushort|char|uchar)\s*\)")
_ARITHMETIC = re.compile(r"^[\w\s+\-*()]+$")
_IDENT = re.compile(r"[A-Za-z_]\w*")


class VectorJammer(Jammer):
    """A jammer whose x-copies are lanes: x uses the block mapping, y the cyclic one."""

    def __init__(self, ps, kernel, factors: dict[int, int]) -> None:  # noqa: ANN001 - kernel_ast types
        super().__init__(ps, kernel, factors, "block")
        self.width = factors.get(0, 1)
        if self.width not in VECTOR_WIDTHS:
            raise NotApplicable(f"vector width {self.width} (2, 4 or 8)")
        assigned = modified_decls(ps, self.body, declarations=False)
        self.lanes = {decl_key(n) for n in walk(self.body) if n.kind == K.VAR_DECL
                      and 0 in self.deps.get(decl_key(n), frozenset()) and value_type(n.type) in LANE_TYPES}
        self.decls = {decl_key(n): n for n in walk(self.body) if n.kind == K.VAR_DECL}
        self.constant_ints = {k for k, n in self.decls.items() if k not in assigned and k not in self.lanes}
        self.vectorized = 0

    def _id(self, fn: str, dim: int, copy: Copy) -> str:
        if dim == 1 and fn == "get_global_id":  # rows stay cyclic: neighbouring work-items, neighbouring rows
            c = copy.offsets[1]
            return "get_global_id(1)" if c == 0 else f"(get_global_id(1) + {c} * get_global_size(1))"
        return super()._id(fn, dim, copy)

    # ---- which statements are vector statements -----------------------------------------------------
    def _lane_refs(self, s: ci.Cursor) -> set[Key]:
        return {decl_key(n.referenced) for n in walk(s) if n.kind == K.DECL_REF_EXPR and n.referenced is not None
                and decl_key(n.referenced) in self.lanes}

    def _declared(self, s: ci.Cursor) -> set[Key]:
        return {decl_key(n) for n in walk(s) if n.kind == K.VAR_DECL}

    def per_copy(self, s: ci.Cursor, shared: set[Key], loads: dict[str, str] | None = None,
                 hoistable: set[tuple[int, int]] | None = None) -> str:
        refs, declared = self._lane_refs(s), self._declared(s)
        simple = s.kind in (K.DECL_STMT, K.BINARY_OPERATOR, K.COMPOUND_ASSIGNMENT_OPERATOR, K.UNARY_OPERATOR,
                            K.CALL_EXPR)
        if simple and (refs or declared & self.lanes or self._lane_store(s, shared)):
            groups = [c for c in self.copies if c.offsets[0] == 0]
            self.vectorized += 1
            return "\n".join(self.vector_statement(s, c, shared, loads, hoistable or set()) for c in groups)
        if refs - declared:
            raise NotApplicable("a statement that cannot be vectorized uses a lane variable declared outside it")
        return super().per_copy(s, shared, loads, hoistable)

    def emit_if(self, s: ci.Cursor, shared: set[Key]) -> str:
        if self._lane_refs(children(s)[0]):
            raise NotApplicable("a branch on a lane value")
        return super().emit_if(s, shared)

    # ---- rendering one vector statement -------------------------------------------------------------------
    def _vname(self, decl: ci.Cursor, copy: Copy) -> str:
        dep = self.deps[decl_key(decl)]
        tag = "v" + ((str(copy.offsets[1]) if 1 in dep else "x") if 1 in self.factors else "")
        return f"{decl.spelling}_kc{tag}"

    def _vtype(self, decl_or_type: str) -> str:
        return f"{decl_or_type}{self.width}"

    def vector_statement(self, s: ci.Cursor, copy: Copy, shared: set[Key], loads: dict[str, str] | None,
                         hoistable: set[tuple[int, int]]) -> str:
        ps = self.ps
        if s.kind == K.DECL_STMT:
            out = []
            for var in children(s):
                if var.kind != K.VAR_DECL:
                    raise NotApplicable("an unusual declaration")
                init = [k for k in children(var) if k.kind != K.TYPE_REF]
                if decl_key(var) in self.lanes:
                    vtype = self._vtype(value_type(var.type))
                    value = f" = ({vtype})({self.vexpr(init[-1], copy, shared, loads, hoistable)})" if init else ""
                    out.append(f"{vtype} {self._vname(var, copy)}{value};")
                else:
                    raise NotApplicable("a declaration mixing lane and scalar variables")
            return "\n".join(out)
        target = strip(children(s)[0]) if s.kind in (K.BINARY_OPERATOR, K.COMPOUND_ASSIGNMENT_OPERATOR) else None
        op = operator(ps, s) if target is not None else ""
        if target is not None and (op == "=" or s.kind == K.COMPOUND_ASSIGNMENT_OPERATOR):
            if target.kind == K.ARRAY_SUBSCRIPT_EXPR and self._x_dependent(target, shared):
                return self._store(target, op, children(s)[1], copy, shared, loads, hoistable)
            d = target.referenced if target.kind == K.DECL_REF_EXPR else None
            if d is None or decl_key(d) not in self.lanes:
                raise NotApplicable("a lane value flows into a scalar (a reduction across lanes)")
        return self.vexpr(s, copy, shared, loads, hoistable, statement=True)

    def _store(self, target: ci.Cursor, op: str, rhs: ci.Cursor, copy: Copy, shared: set[Key],
               loads: dict[str, str] | None, hoistable: set[tuple[int, int]]) -> str:
        base, index = children(target)
        elem = value_type(target.type)
        if elem not in LANE_TYPES:
            raise NotApplicable(f"a vector store of {elem}")
        vtype, w = self._vtype(elem), self.width
        pointer = self.render(base, copy, shared, statement=False)
        value = f"({vtype})({self.vexpr(rhs, copy, shared, loads, hoistable)})"
        lanes = None if self._x_dependent(base, shared) else self._lane_indices(index, copy, shared)
        if lanes is not None and lanes[1]:
            start = lanes[0]
            if op != "=":
                value = f"vload{w}(0, {pointer} + ({start})) {op[:-1]} {value}"
            return f"vstore{w}({value}, 0, {pointer} + ({start}));"
        targets = [self.render(target, c, shared, statement=False) for c in self._lane_copies(copy)]
        name = f"kc_vs{self._temp}"
        self._temp += 1
        stores = " ".join(f"{t} {op} {name}.s{j:x};" for j, t in enumerate(targets))
        return f"{{ const {vtype} {name} = {value}; {stores} }}"

    def _lane_store(self, s: ci.Cursor, shared: set[Key]) -> bool:
        """A plain store of a floating value to an element that differs between the x-copies."""
        if not (s.kind == K.COMPOUND_ASSIGNMENT_OPERATOR
                or (s.kind == K.BINARY_OPERATOR and operator(self.ps, s) == "=")):
            return False
        target = strip(children(s)[0])
        return (target.kind == K.ARRAY_SUBSCRIPT_EXPR and value_type(target.type) in LANE_TYPES
                and self._x_dependent(target, shared))

    def _lane_copies(self, copy: Copy) -> list[Copy]:
        return [c for c in self.copies if c.offsets[1] == copy.offsets[1]]

    def _x_dependent(self, c: ci.Cursor, shared: set[Key]) -> bool:
        for n in walk(c):
            if n.kind == K.CALL_EXPR and n.spelling in ("get_global_id", "get_global_size"):
                args = list(n.get_arguments())
                if len(args) == 1 and int_literal(self.ps, args[0]) == 0:
                    return True
            if n.kind == K.DECL_REF_EXPR and n.referenced is not None and self._x_var(decl_key(n.referenced), shared):
                return True
        return False

    def _x_var(self, key: Key, shared: set[Key]) -> bool:
        """A variable whose value differs between the x-copies (a jammed loop's counter is shared)."""
        return key not in shared and 0 in self.deps.get(key, frozenset())

    def vexpr(self, c: ci.Cursor, copy: Copy, shared: set[Key], loads: dict[str, str] | None,
              hoistable: set[tuple[int, int]], statement: bool = False) -> str:
        """``c`` for lane group ``copy`` (x offset 0): lane variables as vectors, reads as vector loads."""
        ps, edits = self.ps, []

        def visit(n: ci.Cursor) -> None:
            if n.kind == K.ARRAY_SUBSCRIPT_EXPR:
                text = self._read(n, copy, shared)
                if loads is not None and ps.span(n) in hoistable:
                    if text not in loads:
                        loads[text] = f"kc_ld{self._temp}"
                        self._temp += 1
                        self._types[loads[text]] = (self._vtype(value_type(n.type))
                                                    if self._x_dependent(n, shared) else value_type(n.type))
                    text = loads[text]
                edits.append(Span(*ps.span(n), text))
                return
            if n.kind == K.CALL_EXPR and n.spelling in ("get_global_id", "get_global_size"):
                args = list(n.get_arguments())
                if len(args) == 1 and int_literal(ps, args[0]) == 0:
                    raise NotApplicable("the x index itself in vector arithmetic")
                edits.extend(self._edits(n, copy, shared, None, set()))
                return
            if n.kind == K.DECL_REF_EXPR and n.referenced is not None:
                key = decl_key(n.referenced)
                if key in self.lanes:
                    edits.append(Span(*ps.span(n), self._vname(n.referenced, copy)))
                elif self._x_var(key, shared):
                    raise NotApplicable(f"the x-dependent integer {n.spelling} in vector arithmetic")
                else:
                    edits.extend(self._edits(n, copy, shared, None, set()))
                return
            for child in children(n):
                visit(child)

        visit(c)
        return ps.render(c, edits, statement)

    def _read(self, n: ci.Cursor, copy: Copy, shared: set[Key]) -> str:
        base, index = children(n)
        if not self._x_dependent(n, shared):
            return self.render(n, copy, shared, statement=False)
        elem = value_type(n.type)
        if elem not in LANE_TYPES:
            raise NotApplicable(f"a vector read of {elem}")
        pointer = self.render(base, copy, shared, statement=False)
        lanes = None if self._x_dependent(base, shared) else self._lane_indices(index, copy, shared)
        if lanes is not None and lanes[1]:
            return f"vload{self.width}(0, {pointer} + ({lanes[0]}))"
        scalars = [self.render(n, c, shared, statement=False) for c in self._lane_copies(copy)]
        return f"({self._vtype(elem)})({', '.join(scalars)})"

    # ---- is an index contiguous across the lanes? -------------------------------------------------------
    def _lane_indices(self, index: ci.Cursor, copy: Copy, shared: set[Key]) -> tuple[str, bool] | None:
        """(index of lane 0, whether lane j reads index + j), or None when that cannot be decided."""
        texts = [self._inline(index, c) for c in self._lane_copies(copy)]
        converted = [self._python(t) for t in texts]
        python = [p for p in converted if p is not None]
        if len(python) != len(converted):
            return None
        names = sorted({name for p in python for name in _IDENT.findall(p)})
        rng = random.Random(0)
        for _ in range(4):
            values = {name: rng.randint(1, 10_000) for name in names}
            try:
                results = [eval(p, {"__builtins__": {}}, values) for p in python]  # noqa: S307 - checked arithmetic
            except Exception:  # noqa: BLE001 - anything odd: not contiguous
                return None
            if any(r - results[0] != j for j, r in enumerate(results)):
                return self.render(index, copy, shared, statement=False), False
        return self.render(index, copy, shared, statement=False), True

    def _inline(self, c: ci.Cursor, copy: Copy) -> str:
        """``c`` for ``copy`` with never-reassigned integer variables replaced by their initializers."""
        ps, edits = self.ps, []

        def visit(n: ci.Cursor) -> None:
            if n.kind == K.CALL_EXPR and n.spelling in ("get_global_id", "get_global_size"):
                edits.extend(self._edits(n, copy, set(), None, set()))
                return
            if n.kind == K.DECL_REF_EXPR and n.referenced is not None:
                key = decl_key(n.referenced)
                decl = self.decls.get(key)
                if decl is not None and key in self.constant_ints:
                    init = [k for k in children(decl) if k.kind != K.TYPE_REF]
                    if init:
                        edits.append(Span(*ps.span(n), f"({self._inline(init[-1], copy)})"))
                        return
                return
            for child in children(n):
                visit(child)

        visit(c)
        return ps.render(c, edits)

    @staticmethod
    def _python(text: str) -> str | None:
        text = _CAST.sub("", text)
        text = re.sub(r"get_global_id\s*\(\s*(\d)\s*\)", r"gid\1", text)
        text = re.sub(r"get_global_size\s*\(\s*(\d)\s*\)", r"gsz\1", text)
        text = re.sub(r"\b(\d+)[uUlL]+\b", r"\1", text)
        return text if _ARITHMETIC.match(text) else None
