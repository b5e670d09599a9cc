"""Static estimates of the work and traffic of one kernel launch, from its source and geometry.

The roofline prior (:mod:`kernelcast.agents.forecast.prior`) needs numbers a
performance model can use: floating-point operations, global-memory bytes
(split by access pattern across neighbouring work-items: contiguous, uniform or
strided), local-memory accesses, barriers, vector width and launch geometry.
They come from a small statement walker over the preprocessed kernel body
(``pcpp`` expands the template's ``#define``s and ``#if`` branches), which
multiplies each statement's operations by the trip counts of the loops around
it, evaluated with the task's sizes and scalar arguments.

It is an estimate, not a compiler: unknown trip counts count once (and make
the estimate ``uncertain``), both branches of an ``if`` count, and types are
read from declarations only. The point is the order of magnitude and the
direction of an edit (vectorizing, tiling, coarsening), cheaply.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from kernelcast.agents.forecast.features import resolve_geometry
from kernelcast.tools.core.candidate import Candidate, SignatureError, entry_parameters
from kernelcast.tools.core.expr import ExpressionError, evaluate
from kernelcast.tools.core.preprocess import PreprocessError
from kernelcast.tools.core.preprocess import preprocess as confined_preprocess
from kernelcast.tools.core.task import BufferArg, ScalarArg, Task

_TOKEN = re.compile(r"[A-Za-z_]\w*|\d+\.\d*(?:[eE][-+]?\d+)?[fF]?|\.\d+(?:[eE][-+]?\d+)?[fF]?|\d+[uUlLfF]*"
                    r"|<<=|>>=|\+\+|--|->|&&|\|\||[-+*/%&|^<>!=]=|<<|>>|\S")
_SCALAR_BYTES = {"float": 4, "double": 8, "half": 2, "int": 4, "uint": 4, "long": 8, "ulong": 8, "short": 2,
                 "ushort": 2, "char": 1, "uchar": 1, "size_t": 8, "bool": 1, "unsigned": 4}
_INT_TYPES = {"int", "uint", "long", "ulong", "short", "ushort", "char", "uchar", "size_t", "unsigned", "bool",
              "int2", "int4", "int8", "uint2", "uint4"}
_TYPE_WORD = re.compile(r"^(float|double|half|u?int|u?long|u?short|u?char|size_t|bool|unsigned)(2|3|4|8|16)?$")
_QUALIFIERS = {"const", "volatile", "restrict", "__restrict", "__restrict__", "static", "register", "private",
               "__private", "unsigned", "signed"}
_GLOBAL_SPACES = {"__global", "global", "__constant", "constant"}
_LOCAL_SPACES = {"__local", "local", "__shared__"}
_X_IDS = {"get_global_id", "get_local_id"}  # a work-group's items share its group id: not a neighbour's offset
_ID_CALL = re.compile(r"\b(get_global_id|get_local_id|get_group_id|get_global_size|get_local_size|get_num_groups)"
                      r" \( (\d) \)")
_ATOMIC = re.compile(r"^(?:atomic_\w+|atom_\w+|atomic\w*|atomicAdd|atomicInc|atomicMax|atomicMin)$")
_CUDA_X = {"threadIdx"}
_MUL_OPS = {"*", "/", "%", "<<", ">>"}
_VLOAD = re.compile(r"^vload(2|3|4|8|16)$")
_VSTORE = re.compile(r"^vstore(2|3|4|8|16)$")
_FMA = {"fma", "mad", "fmaf", "__fmaf_rn"}
_MATH = {"sqrt", "rsqrt", "exp", "exp2", "log", "log2", "sin", "cos", "tan", "pow", "powr", "tanh", "erf",
         "native_exp", "native_log", "native_sqrt", "native_rsqrt", "native_divide", "native_recip", "expf",
         "logf", "sqrtf", "rsqrtf", "__expf", "__logf", "fmax", "fmin", "max", "min"}
_ARITH = {"+", "-", "*", "/"}
_COMPOUND = {"+=", "-=", "*=", "/="}
_UNARY_BEFORE = {"(", "=", ",", "[", "return", "?", ":"}  # an operator after these is unary, not arithmetic
UNKNOWN_WHILE_TRIPS = 1  # a loop whose trip count cannot be read counts once (and flags the estimate)


@dataclass
class KernelWork:
    """Operations of a whole launch (all work-items), as estimated statically."""

    flops: float = 0.0
    special_ops: float = 0.0  # sqrt, exp, ... (counted apart: they cost several flops)
    global_load_bytes: float = 0.0
    global_store_bytes: float = 0.0
    contiguous_bytes: float = 0.0  # neighbouring work-items touch neighbouring addresses
    uniform_bytes: float = 0.0  # every work-item of a row reads the same address (a broadcast)
    strided_bytes: float = 0.0  # neighbouring work-items are far apart (gathers, uncoalesced)
    strided_store_bytes: float = 0.0  # ... of them stored (scatters: the costly kind in a CPU's vector code)
    local_accesses: float = 0.0
    barriers: float = 0.0  # barrier calls executed per work-item
    global_atomics: float = 0.0
    local_atomics: float = 0.0
    vector_width: int = 1
    work_items: int = 1
    work_group: int | None = None  # None: chosen by the runtime
    work_group_x: int | None = None
    uncertain: list[str] = field(default_factory=list)

    @property
    def global_bytes(self) -> float:
        return self.global_load_bytes + self.global_store_bytes

    @property
    def work_groups(self) -> float:
        return self.work_items / self.work_group if self.work_group else self.work_items / 64.0


# ---- preprocessing ---------------------------------------------------------------------------
def preprocess(source: str, language: str = "opencl") -> str:
    """The source with macros expanded and inactive ``#if`` branches removed, by the harness's preprocessor
    (cached there, so the candidate's hash and its work estimate share one pass); the source itself if the
    preprocessor refuses it (then macros stay unexpanded and counts are rougher)."""
    try:
        return confined_preprocess(source, language)
    except PreprocessError:
        return source


def _body(source: str, entry: str, language: str) -> str | None:
    """The text between the entry kernel's braces (the first definition, not a prototype)."""
    for match in re.finditer(rf"\b{re.escape(entry)}\s*\(", source):
        depth, i = 1, match.end()
        while i < len(source) and depth:
            depth += {"(": 1, ")": -1}.get(source[i], 0)
            i += 1
        if not source[i:].lstrip().startswith("{"):
            continue
        start = source.index("{", i)
        depth = 0
        for j in range(start, len(source)):
            depth += {"{": 1, "}": -1}.get(source[j], 0)
            if depth == 0:
                return source[start + 1:j]
        return None
    return None


_PAREN_NAME = re.compile(r"\(\s*([A-Za-z_]\w*)\s*\)\s*(?=\[)")


def _strip(text: str) -> str:
    """Comments and directives removed; ``(p)[i]`` (what macros expand to) read as ``p[i]``."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = re.sub(r"^[ \t]*#[^\n]*", " ", text, flags=re.M)  # pragmas and leftovers
    return _PAREN_NAME.sub(r"\1", text)


# ---- the walker -------------------------------------------------------------------------------
@dataclass
class _Var:
    width: int = 1
    elem_bytes: int = 4
    integer: bool = False
    space: str = "private"  # private | global | local
    x_factor: bool = False  # derived from the work-item's dimension-0 index
    base_pattern: str = ""  # a pointer into a buffer: how its base moves across work-items; an index: how it does


class _Walker:
    def __init__(self, tokens: list[str], names: dict[str, float], variables: dict[str, _Var], cuda: bool,
                 global_dims: tuple[int, ...] = (), local_dims: tuple[int, ...] = ()) -> None:
        self.global_dims = global_dims
        self.local_dims = local_dims
        self.t = tokens
        self.i = 0
        self.names = dict(names)
        self.vars = variables
        self.cuda = cuda
        self.per_item = KernelWork()

    # -- token helpers
    def peek(self, k: int = 0) -> str:
        j = self.i + k
        return self.t[j] if j < len(self.t) else ""

    def _until_matching(self, open_: str, close: str) -> list[str]:
        """Tokens after an opening bracket (at self.i) up to its match; self.i moves past the match."""
        assert self.t[self.i] == open_
        depth, start = 0, self.i
        while self.i < len(self.t):
            tok = self.t[self.i]
            depth += (tok == open_) - (tok == close)
            self.i += 1
            if depth == 0:
                return self.t[start + 1:self.i - 1]
        return self.t[start + 1:]

    # -- statements
    def block(self, weight: float) -> None:
        while self.i < len(self.t) and self.peek() != "}":
            self.statement(weight)

    def statement(self, weight: float) -> None:
        tok = self.peek()
        if tok == "{":
            self.i += 1
            self.block(weight)
            self.i += 1
        elif tok == "for" and self.peek(1) == "(":
            self.i += 1
            header = self._until_matching("(", ")")
            trips = self._for_trips(header)
            self.statement(weight * trips)
        elif tok in ("while", "switch") and self.peek(1) == "(":
            self.i += 1
            self._count(self._until_matching("(", ")"), weight)
            if tok == "while":
                self.per_item.uncertain.append("while loop")
            self.statement(weight * UNKNOWN_WHILE_TRIPS)
        elif tok == "do":
            self.i += 1
            self.per_item.uncertain.append("do loop")
            self.statement(weight)
            if self.peek() == "while":
                self.i += 1
                self._count(self._until_matching("(", ")"), weight)
            if self.peek() == ";":
                self.i += 1
        elif tok == "if" and self.peek(1) == "(":
            self.i += 1
            self._count(self._until_matching("(", ")"), weight)
            self.statement(weight)
            if self.peek() == "else":
                self.i += 1
                self.statement(weight)
        elif tok in ("case", "default"):
            while self.i < len(self.t) and self.t[self.i] != ":":
                self.i += 1
            self.i += 1
        elif tok == ";":
            self.i += 1
        elif tok == "}":  # stray close: stop this level
            return
        else:
            start = self.i
            depth = 0
            while self.i < len(self.t):
                cur = self.t[self.i]
                depth += (cur in "([{") - (cur in ")]}")
                if depth < 0 or (cur == ";" and depth == 0):
                    break
                self.i += 1
            stmt = self.t[start:self.i]
            if self.peek() == ";":
                self.i += 1
            elif depth < 0 and self.i == start:
                self.i += 1
            self._simple(stmt, weight)

    # -- loops
    def _value(self, toks: list[str]) -> float | None:
        """The expression's value with sizes, scalars and constants; work-item ids read as their mean."""
        text = " ".join(toks).replace("( size_t )", "").replace("( int )", "").replace("( uint )", "")
        text = _ID_CALL.sub(lambda m: self._id_value(m.group(1), int(m.group(2))), text)
        text = re.sub(r"(\d+)[uUlL]+\b", r"\1", text)
        text = text.replace("&&", " and ").replace("||", " or ").replace("/", "//")
        try:
            return float(evaluate(text, self.names))
        except (ExpressionError, ZeroDivisionError, ValueError, TypeError, OverflowError):
            return None

    def _id_value(self, fn: str, dim: int) -> str:
        g = self.global_dims[dim] if dim < len(self.global_dims) else 1
        loc = self.local_dims[dim] if dim < len(self.local_dims) else min(g, 16)
        value = {"get_global_id": g / 2, "get_local_id": loc / 2, "get_group_id": g / max(loc, 1) / 2,
                 "get_global_size": g, "get_local_size": loc, "get_num_groups": g / max(loc, 1)}.get(fn)
        return "?" if value is None else str(int(max(value, 0)))

    def _for_trips(self, header: list[str]) -> float:
        parts: list[list[str]] = [[]]
        depth = 0
        for tok in header:
            depth += (tok == "(") - (tok == ")")
            if tok == ";" and depth == 0:
                parts.append([])
            else:
                parts[-1].append(tok)
        if len(parts) != 3:
            self.per_item.uncertain.append("for header")
            return 1.0
        init, cond, step = parts
        if "," in step:  # ``++c, i += gsz``: the part that moves the loop variable
            pieces: list[list[str]] = [[]]
            for tok in step:
                pieces.append([]) if tok == "," else pieces[-1].append(tok)
            step = next((p for p in pieces if cond and cond[0] in p), pieces[0])
        var, start = self._loop_start(init)
        trips = self._trip_count(var, start, cond, step)
        if trips is None:
            self.per_item.uncertain.append("loop bound")
            return 1.0
        return max(trips, 0.0)

    def _loop_start(self, init: list[str]) -> tuple[str | None, float]:
        if "=" not in init:
            return None, 0.0
        eq = init.index("=")
        var = init[eq - 1] if eq else None
        if var is not None:
            self._declare(init[:eq], var)
            if var in self.vars:  # ``for (v = lid; ...; v += WG)``: the loop walks with the work-item's index
                self.vars[var].x_factor = self._x_derived(init[eq + 1:])
        start = self._value(init[eq + 1:])
        return var, start if start is not None else 0.0  # an id-dependent start: this work-item's share

    def _trip_count(self, var: str | None, start: float, cond: list[str], step: list[str]) -> float | None:
        if var is None or len(cond) < 3 or cond[0] != var or cond[1] not in ("<", "<=", ">", ">=", "!="):
            return None
        bound = self._value(cond[2:])
        if bound is None:
            return None
        op = cond[1]
        text = " ".join(step)
        inc = None
        geometric = None
        if re.fullmatch(rf"(\+\+ {var}|{var} \+\+)", text):
            inc = 1.0
        elif re.fullmatch(rf"(-- {var}|{var} --)", text):
            inc = -1.0
        elif step[:2] in ([var, "+="], [var, "-="]):
            amount = self._value(step[2:])
            if amount is None or amount == 0:
                return None
            inc = amount if step[1] == "+=" else -amount
        elif step[:2] in ([var, "*="], [var, "<<="], [var, "/="], [var, ">>="]):
            amount = self._value(step[2:])
            if amount is None:
                return None
            factor = amount if step[1] in ("*=", "/=") else 2.0 ** amount
            geometric = factor if step[1] in ("*=", "<<=") else 1.0 / factor
        if inc is not None:
            span = bound - start + (1 if op in ("<=", ">=") else 0) * math.copysign(1, inc)
            return max(0.0, math.ceil(span / inc))
        if geometric is not None and geometric > 0 and geometric != 1 and start > 0 and bound > 0:
            return max(0.0, math.ceil(math.log(bound / start) / math.log(geometric)) + (op in ("<=", ">=")))
        return None

    # -- declarations and simple statements
    def _declare(self, decl: list[str], name: str) -> None:
        """Register a variable from the type words before its name (``const float4 v``, ``__local float t``)."""
        words = [w for w in decl if w not in ("*", "const")]
        space = "global" if any(w in _GLOBAL_SPACES for w in words) else \
            "local" if any(w in _LOCAL_SPACES for w in words) else "private"
        for w in words:
            m = _TYPE_WORD.match(w)
            if m:
                self.vars[name] = _Var(width=int(m.group(2) or 1), elem_bytes=_SCALAR_BYTES.get(m.group(1), 4),
                                       integer=w in _INT_TYPES or m.group(1) in _INT_TYPES, space=space)
                return
        if space != "private":
            self.vars[name] = _Var(space=space)

    def _simple(self, stmt: list[str], weight: float) -> None:
        if not stmt:
            return
        # a declaration: type words, then a name, then '=' / '[' / ',' / end
        lhs_int = False
        j = 0
        while j < len(stmt) and (stmt[j] in _QUALIFIERS or stmt[j] in _GLOBAL_SPACES or stmt[j] in _LOCAL_SPACES
                                 or _TYPE_WORD.match(stmt[j]) or stmt[j] == "*"):
            j += 1
        declares = any(_TYPE_WORD.match(w) for w in stmt[:j])
        if 0 < j < len(stmt) and re.match(r"[A-Za-z_]\w*$", stmt[j]) and declares:
            for name, init in self._declarators(stmt, j):
                self._declare(stmt[:j], name)
                var = self.vars.get(name)
                if var is not None and init:
                    var.x_factor = self._x_derived(init)
                    if var.integer and var.space == "private":
                        value = self._value(init)
                        if value is not None:
                            self.names[name] = value
                        if var.x_factor:  # ``j = i * S``: an index with a stride carries it into ``B[j]``
                            var.base_pattern = self._pattern(init)
                    if "*" in stmt[:j + 1]:  # a pointer into a buffer: inherit its space and base movement
                        base = next((self.vars[t] for t in init if t in self.vars and self.vars[t].space != "private"),
                                    None)
                        if base is not None:
                            var.space, var.width, var.elem_bytes = base.space, base.width, base.elem_bytes
                            var.base_pattern = self._pattern(init) if var.x_factor else ""
            lhs_int = bool(self.vars.get(stmt[j])) and self.vars[stmt[j]].integer
            self._count(stmt[j:], weight, lhs_int)
            return
        target = self.vars.get(stmt[0])
        lhs_int = target is not None and target.integer and target.space == "private"
        self._count(stmt, weight, lhs_int)

    @staticmethod
    def _declarators(stmt: list[str], j: int) -> list[tuple[str, list[str]]]:
        out: list[tuple[str, list[str]]] = []
        init: list[str] = []
        depth, name, k, seen_eq = 0, None, j, False
        while k < len(stmt):
            tok = stmt[k]
            depth += (tok in "([{") - (tok in ")]}")
            if depth == 0 and tok == ",":
                if name:
                    out.append((name, init))
                name, init, seen_eq = None, [], False
            elif name is None and re.match(r"[A-Za-z_]\w*$", tok) and depth == 0:
                name = tok
            elif depth == 0 and tok == "=" and not seen_eq:
                seen_eq = True
            elif seen_eq:
                init.append(tok)
            k += 1
        if name:
            out.append((name, init))
        return out

    def _x_derived(self, toks: list[str]) -> bool:
        for k, tok in enumerate(toks):
            if tok in _X_IDS and k + 2 < len(toks) and toks[k + 1] == "(" and toks[k + 2] == "0":
                return True
            if self.cuda and tok in _CUDA_X and k + 2 < len(toks) and toks[k + 2] == "x":
                return True
            var = self.vars.get(tok)
            if var is not None and var.x_factor:
                return True
        return False

    def _pattern(self, index: list[str]) -> str:
        """contiguous / uniform / strided across neighbouring work-items (dimension 0), from the index."""
        if not self._x_derived(index):
            return "uniform"
        for k, tok in enumerate(index):
            call = tok in _X_IDS | _CUDA_X and self._x_derived(index[k:k + 3])  # get_global_id ( 0 ), threadIdx . x
            var = self.vars.get(tok)
            if var is not None and var.x_factor and var.space == "private" and var.base_pattern == "strided":
                return "strided"
            end = k + (3 if tok in _X_IDS else 2) if call else k  # the call's last token: ")" or "x"
            if (call or (var is not None and var.x_factor)) and self._scaled(index, k, end):
                return "strided"
        return "contiguous"

    def _scaled(self, index: list[str], lo: int, hi: int) -> bool:
        """Whether the term ``index[lo:hi + 1]`` is multiplied by more than 1 (``*``, ``<<``), directly or through
        the parentheses around it: ``(c0 + tx) * M`` moves M elements per work-item as surely as ``tx * M``.
        ``/`` and ``%`` scale nothing: ``gid % W`` keeps the work-items' order, ``gid / 4`` packs them closer."""
        while True:
            for op, operand in self._factors(index, lo, hi):
                if op in ("*", "<<"):
                    value = self._value(operand)
                    if value is None or (2.0 ** value if op == "<<" else value) > 1:
                        return True
            opening = self._enclosing(index, lo)
            if opening is None:
                return False
            lo, hi = opening, self._match(index, opening, "(", ")")

    def _factors(self, index: list[str], lo: int, hi: int) -> list[tuple[str, list[str]]]:
        """The multiplicative operators chained onto ``index[lo:hi + 1]`` at its own depth, with their operands
        (a token or a parenthesized group): ``M * tx % W << 2`` gives ("*", M), ("%", W), ("<<", 2)."""
        out: list[tuple[str, list[str]]] = []
        k = hi + 1
        while k + 1 < len(index) and index[k] in _MUL_OPS:
            end = self._match(index, k + 1, "(", ")") if index[k + 1] == "(" else k + 1
            out.append((index[k], index[k + 1:end + 1]))
            k = end + 1
        k = lo - 1
        while k >= 1 and index[k] in _MUL_OPS:
            start = (self._enclosing(index, k - 1) or 0) if index[k - 1] == ")" else k - 1  # the group's "("
            out.append((index[k], index[start:k]))
            k = start - 1
        return out

    @staticmethod
    def _enclosing(index: list[str], k: int) -> int | None:
        """Position of the innermost "(" still open at ``index[k]``; None at the top level."""
        depth = 0
        for j in range(k - 1, -1, -1):
            depth += (index[j] == ")") - (index[j] == "(")
            if depth < 0:
                return j
        return None

    def _count(self, stmt: list[str], weight: float, lhs_int: bool = False) -> None:  # noqa: C901 - one branch per C construct counted
        w = self.per_item
        widths = [self.vars[t].width for t in stmt if t in self.vars and self.vars[t].space == "private"]
        width = max(widths, default=1)
        w.vector_width = max(w.vector_width, width)
        depth_sq = 0
        k = 0
        while k < len(stmt):
            tok = stmt[k]
            nxt = stmt[k + 1] if k + 1 < len(stmt) else ""
            var = self.vars.get(tok)
            if tok in ("barrier", "work_group_barrier", "__syncthreads") and (nxt == "(" or tok == "__syncthreads"):
                w.barriers += weight
            elif _ATOMIC.match(tok) and nxt == "(":
                target = next((self.vars[t] for t in (self._args(stmt, k + 1) or [[]])[0]
                               if t in self.vars and self.vars[t].space != "private"), None)
                if target is not None and target.space == "local":
                    w.local_atomics += weight
                else:
                    w.global_atomics += weight
            elif _VLOAD.match(tok) or _VSTORE.match(tok):
                n = int((_VLOAD.match(tok) or _VSTORE.match(tok)).group(1))  # type: ignore[union-attr]
                args = self._args(stmt, k + 1)
                ptr_args = args[-1] if args else []
                ptr = next((self.vars[t] for t in ptr_args if t in self.vars and self.vars[t].space != "private"), None)
                w.vector_width = max(w.vector_width, n)
                if ptr is not None and ptr.space == "global":
                    nbytes = n * ptr.elem_bytes * weight
                    offset = [t for a in args[:-1] for t in a] if _VLOAD.match(tok) else \
                        [t for a in args[1:-1] for t in a]
                    self._traffic(nbytes, self._pattern(offset + ptr_args), store=bool(_VSTORE.match(tok)))
                elif ptr is not None:
                    w.local_accesses += weight
                if _VSTORE.match(tok) and args:
                    self._count(args[0], weight, lhs_int)  # the stored value's arithmetic; offsets are addresses
                k = self._match(stmt, k + 1, "(", ")") + 1
                continue
            elif var is not None and var.space != "private" and nxt == "[":
                end = self._match(stmt, k + 1, "[", "]")
                index = stmt[k + 2:end]
                after = stmt[end + 1] if end + 1 < len(stmt) else ""
                while after == "[":  # 2-D local arrays: a[i][j]
                    end2 = self._match(stmt, end + 1, "[", "]")
                    index = index + ["+"] + stmt[end + 2:end2]
                    end = end2
                    after = stmt[end + 1] if end + 1 < len(stmt) else ""
                store = after == "="
                rmw = after in _COMPOUND
                if var.space == "global":
                    nbytes = var.width * var.elem_bytes * weight
                    pattern = self._pattern(index)
                    if var.base_pattern == "strided" or (var.base_pattern and pattern == "uniform"):
                        pattern = var.base_pattern
                    if not store:
                        self._traffic(nbytes, pattern, store=False)
                    if store or rmw:
                        self._traffic(nbytes, pattern, store=True)
                else:
                    w.local_accesses += weight * (1 + rmw)
                depth_sq += 0
                if not (var.integer and var.space == "private"):
                    k = end  # the index expression is integer address arithmetic: not flops
                    k += 1
                    continue
            elif tok == "*" and nxt == "(" and (k == 0 or stmt[k - 1] in ("=", "(", ",", "+", "-", "*", "/", "return")):
                end = self._match(stmt, k + 1, "(", ")")
                inner = stmt[k + 2:end]
                ptr = next((self.vars[t] for t in inner if t in self.vars and self.vars[t].space != "private"), None)
                if ptr is not None and ptr.space == "global":
                    after = stmt[end + 1] if end + 1 < len(stmt) else ""
                    self._traffic(ptr.width * ptr.elem_bytes * weight, self._pattern(inner), store=after == "=")
                    k = end + 1
                    continue
            elif tok in _FMA and nxt == "(":
                w.flops += 2 * width * weight
            elif tok in _MATH and nxt == "(":
                w.special_ops += width * weight
            elif not lhs_int and (tok in _COMPOUND or (tok in _ARITH and k > 0 and stmt[k - 1] not in _UNARY_BEFORE
                                                       and stmt[k - 1] not in _ARITH)):
                if not self._integer_operands(stmt, k):
                    w.flops += width * weight
            k += 1

    def _integer_operands(self, stmt: list[str], k: int) -> bool:
        """True when both neighbours of an operator are integer variables or integer literals."""
        def integer(tok: str) -> bool:
            if re.fullmatch(r"\d+[uUlL]*", tok):
                return True
            var = self.vars.get(tok)
            return var is not None and var.integer and var.space == "private" or tok in self.names
        left = stmt[k - 1] if k else ""
        right = stmt[k + 1] if k + 1 < len(stmt) else ""
        return integer(left) and (integer(right) or right == "(")

    def _traffic(self, nbytes: float, pattern: str, store: bool) -> None:
        w = self.per_item
        if store:
            w.global_store_bytes += nbytes
        else:
            w.global_load_bytes += nbytes
        if pattern == "contiguous":
            w.contiguous_bytes += nbytes
        elif pattern == "uniform":
            w.uniform_bytes += nbytes
        else:
            w.strided_bytes += nbytes
            w.strided_store_bytes += nbytes if store else 0.0

    def _match(self, stmt: list[str], start: int, open_: str, close: str) -> int:
        depth = 0
        for k in range(start, len(stmt)):
            depth += (stmt[k] == open_) - (stmt[k] == close)
            if depth == 0:
                return k
        return len(stmt) - 1

    def _args(self, stmt: list[str], start: int) -> list[list[str]]:
        if start >= len(stmt) or stmt[start] != "(":
            return []
        end = self._match(stmt, start, "(", ")")
        args: list[list[str]] = [[]]
        depth = 0
        for tok in stmt[start + 1:end]:
            depth += (tok in "([") - (tok in ")]")
            if tok == "," and depth == 0:
                args.append([])
            else:
                args[-1].append(tok)
        return args


def _parameters(source: str, entry: str, language: str) -> dict[str, _Var]:
    try:
        params = entry_parameters(source, entry, language)
    except SignatureError:
        return {}
    out: dict[str, _Var] = {}
    for raw in params.split(","):
        words = re.findall(r"[A-Za-z_]\w*|\*", raw)
        names = [w for w in words if w != "*"]
        if not names:
            continue
        name = names[-1]
        is_ptr = "*" in words
        type_word = next((w for w in names[:-1] if _TYPE_WORD.match(w)), "float")
        m = _TYPE_WORD.match(type_word)
        assert m is not None
        space = "local" if any(w in _LOCAL_SPACES for w in names) else "global" if is_ptr else "private"
        out[name] = _Var(width=int(m.group(2) or 1), elem_bytes=_SCALAR_BYTES.get(m.group(1), 4),
                         integer=type_word in _INT_TYPES or m.group(1) in _INT_TYPES, space=space)
    return out


def scalar_values(task: Task, sizes: Mapping[str, int]) -> dict[str, float]:
    """Sizes plus the values of the task's scalar arguments (trip counts are written in their names)."""
    names: dict[str, float] = {k: float(v) for k, v in sizes.items()}
    for arg in task.spec.args:
        if isinstance(arg, ScalarArg):
            try:
                names[arg.name] = float(evaluate(arg.value, dict(sizes)))
            except (ExpressionError, ZeroDivisionError, TypeError):
                continue
    return names


@functools.lru_cache(maxsize=4096)
def _per_item(source: str, entry: str, language: str, names: tuple[tuple[str, float], ...],
              global_dims: tuple[int, ...], local_dims: tuple[int, ...]) -> KernelWork:
    text = preprocess(source, language)
    body = _body(_strip(text), entry, language)
    if body is None:
        return KernelWork(uncertain=["kernel body not found"])
    walker = _Walker(_TOKEN.findall(body), dict(names), _parameters(text, entry, language), language == "cuda",
                     global_dims, local_dims)
    walker.block(1.0)
    return walker.per_item


def estimate(task: Task, candidate: Candidate, sizes: Mapping[str, int]) -> KernelWork:
    """Work and traffic of launching ``candidate`` at ``sizes`` (all work-items together)."""
    names = scalar_values(task, sizes)
    for key, value in (candidate.params or {}).items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            names.setdefault(key, float(value))
    global_dims = tuple(resolve_geometry([e], sizes) or 1 for e in candidate.global_size)
    local_dims = tuple(resolve_geometry([e], sizes) or 1 for e in candidate.local_size or [])
    per = _per_item(candidate.source, task.spec.entry, task.language, tuple(sorted(names.items())),
                    global_dims, local_dims)
    items = resolve_geometry(candidate.global_size, sizes) or 1
    group = resolve_geometry(candidate.local_size, sizes)
    group_x = resolve_geometry(candidate.local_size[:1], sizes) if candidate.local_size else None
    if task.language == "cuda" and group:  # CUDA geometry is (grid, block): work-items = grid * block
        items = items * group
    scale = float(items)
    return KernelWork(
        flops=per.flops * scale, special_ops=per.special_ops * scale,
        global_load_bytes=per.global_load_bytes * scale, global_store_bytes=per.global_store_bytes * scale,
        contiguous_bytes=per.contiguous_bytes * scale, uniform_bytes=per.uniform_bytes * scale,
        strided_bytes=per.strided_bytes * scale, strided_store_bytes=per.strided_store_bytes * scale,
        local_accesses=per.local_accesses * scale,
        global_atomics=per.global_atomics * scale, local_atomics=per.local_atomics * scale,
        barriers=per.barriers, vector_width=per.vector_width, work_items=int(items), work_group=group,
        work_group_x=group_x, uncertain=list(dict.fromkeys(per.uncertain)))


def compulsory_bytes(task: Task, sizes: Mapping[str, int]) -> float:
    """Bytes any correct kernel must move: the task's ``bytes`` expression, else every buffer once
    (twice for inout)."""
    if task.spec.bytes:
        try:
            return float(evaluate(task.spec.bytes, dict(sizes)))
        except (ExpressionError, ZeroDivisionError):
            pass
    total = 0.0
    for arg in task.spec.args:
        if isinstance(arg, BufferArg):
            try:
                count = math.prod(float(evaluate(s, dict(sizes))) for s in arg.shape)
            except (ExpressionError, ZeroDivisionError):
                continue
            dtype_bytes = int(re.sub(r"\D", "", arg.dtype) or 8) // 8
            total += count * dtype_bytes * (2 if arg.direction == "inout" else 1)
    return total


__all__ = ["KernelWork", "compulsory_bytes", "estimate", "preprocess", "scalar_values"]
