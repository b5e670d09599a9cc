"""A real parser for kernel sources: libclang on OpenCL C (and CUDA), with a small built-in header.

Transformations read the AST of the entry kernel and edit the original text at the byte ranges the AST
gives, so everything they do not touch (other kernels, macros, comments) stays as it was. The wheel of
libclang has no ``opencl-c-base.h``: the vector types, fence flags and a few constants come from our own
header; the built-in functions are declared by clang itself (``-fdeclare-opencl-builtins``). A parse with
an error is refused (:class:`KernelParseError`), so no transformation ever works on a misread kernel.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

from clang import cindex as ci

from kernelcast.tools.core.errors import InputError

K = ci.CursorKind
_FILE = "/kernelcast/kernel.cl"
_CUDA_FILE = "/kernelcast/kernel.cu"
_HEADER = "/kernelcast/kc_builtins.h"

_SCALARS = ("char", "uchar", "short", "ushort", "int", "uint", "long", "ulong", "float", "double")
_WIDTHS = (2, 3, 4, 8, 16)


def _opencl_header() -> str:
    """Types and constants of opencl-c-base.h that clang's declared built-ins do not bring."""
    lines = ["#define __opencl_c_named_address_space_builtins 1",
             "typedef unsigned char uchar; typedef unsigned short ushort; typedef unsigned int uint;",
             "typedef unsigned long ulong; typedef __SIZE_TYPE__ size_t; typedef __PTRDIFF_TYPE__ ptrdiff_t;",
             "typedef __INTPTR_TYPE__ intptr_t; typedef __UINTPTR_TYPE__ uintptr_t; typedef uint cl_mem_fence_flags;"]
    for base in _SCALARS:
        lines += [f"typedef {base} {base}{n} __attribute__((ext_vector_type({n})));" for n in _WIDTHS]
        lines += [f"#define as_{t}(x) __builtin_astype((x), {t})" for t in [base, *(f"{base}{n}" for n in _WIDTHS)]]
    lines += ["#define CLK_LOCAL_MEM_FENCE 0x01", "#define CLK_GLOBAL_MEM_FENCE 0x02",
              "#define INFINITY __builtin_inff()", "#define NAN __builtin_nanf(\"\")",
              "#define HUGE_VALF __builtin_huge_valf()",
              "#define MAXFLOAT 0x1.fffffep127f", "#define FLT_MAX 0x1.fffffep127f", "#define FLT_MIN 0x1.0p-126f",
              "#define FLT_EPSILON 0x1.0p-23f", "#define INT_MAX 2147483647", "#define INT_MIN (-2147483647-1)",
              "#define UINT_MAX 0xffffffffU", "#define M_PI_F 3.14159274101257f", "#define M_PI 3.141592653589793"]
    return "\n".join(lines) + "\n"


def _cuda_header() -> str:
    """Just enough of the CUDA runtime for device code: qualifiers, thread indices, common intrinsics."""
    return """
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __host__ __attribute__((host))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))
#define __align__(n) __attribute__((aligned(n)))
#define __restrict__ __restrict
typedef __SIZE_TYPE__ size_t;
struct uint3 { unsigned int x, y, z; }; struct dim3 { unsigned int x, y, z; };
extern const __device__ struct uint3 threadIdx; extern const __device__ struct uint3 blockIdx;
extern const __device__ struct dim3 blockDim; extern const __device__ struct dim3 gridDim;
extern const __device__ int warpSize;
struct float2 { float x, y; }; struct float4 { float x, y, z, w; };
__device__ void __syncthreads(void);
__device__ float expf(float); __device__ float sqrtf(float); __device__ float fmaxf(float, float);
__device__ float fminf(float, float); __device__ float fabsf(float); __device__ float rsqrtf(float);
__device__ float __expf(float); __device__ float logf(float); __device__ float tanhf(float);
__device__ float fmaf(float, float, float); __device__ int atomicAdd(int *, int);
__device__ unsigned int atomicAdd(unsigned int *, unsigned int); __device__ float atomicAdd(float *, float);
__device__ float __shfl_down_sync(unsigned int, float, int, int = 32);
__device__ float __shfl_xor_sync(unsigned int, float, int, int = 32);
#define INFINITY __builtin_inff()
"""


OPENCL_ARGS = ["-x", "cl", "-cl-std=CL1.2", "-cl-no-stdinc", "-Xclang", "-fdeclare-opencl-builtins",
               "-include", _HEADER]
CUDA_ARGS = ["-x", "cuda", "--cuda-device-only", "-nocudainc", "-nocudalib", "--cuda-gpu-arch=sm_70",
             "-std=c++17", "-include", _HEADER]


class KernelParseError(InputError, ValueError):
    """The source does not parse cleanly, or has no such kernel."""


@lru_cache(maxsize=1)
def _index() -> ci.Index:
    return ci.Index.create()


@dataclass
class Span:
    """A byte range of the source with its replacement text."""

    start: int
    end: int
    text: str


class ParsedSource:
    """One translation unit: the AST plus byte-level access to the text it came from."""

    def __init__(self, source: str, language: str, tu: ci.TranslationUnit) -> None:
        self.source = source
        self.language = language
        self.data = source.encode()
        self.tu = tu
        self.file = _CUDA_FILE if language == "cuda" else _FILE
        self._macros: set[str] | None = None

    # ---- kernels ---------------------------------------------------------------------------------
    def kernels(self) -> list[ci.Cursor]:
        """Kernel definitions of the main file, in order."""
        out = []
        for c in self._top_level(self.tu.cursor):
            if c.kind == K.FUNCTION_DECL and c.is_definition() and self.in_main_file(c) and self._is_kernel(c):
                out.append(c)
        return out

    def kernel(self, entry: str) -> ci.Cursor:
        for c in self.kernels():
            if c.spelling == entry:
                return c
        names = ", ".join(c.spelling for c in self.kernels()) or "none"
        raise KernelParseError(f"kernel {entry!r} is not defined in the source (kernels: {names})")

    def _top_level(self, c: ci.Cursor) -> Iterator[ci.Cursor]:
        for child in children(c):
            if child.kind in (K.LINKAGE_SPEC, K.NAMESPACE, K.UNEXPOSED_DECL):
                yield from self._top_level(child)
            else:
                yield child

    def _is_kernel(self, c: ci.Cursor) -> bool:
        words = {t.spelling for t in itertools.islice(self.tokens(c), 12)}
        if self.language == "cuda":
            return "__global__" in words or any(a.kind == K.CUDAGLOBAL_ATTR for a in c.get_children())
        return bool(words & {"__kernel", "kernel"})

    # ---- text ------------------------------------------------------------------------------------
    def in_main_file(self, c: ci.Cursor) -> bool:
        loc = c.extent.start
        return loc.file is not None and loc.file.name == self.file

    def span(self, c: ci.Cursor) -> tuple[int, int]:
        return c.extent.start.offset, c.extent.end.offset

    def text(self, c: ci.Cursor) -> str:
        start, end = self.span(c)
        return self.data[start:end].decode()

    def stmt_span(self, c: ci.Cursor) -> tuple[int, int]:
        """The byte range of a statement including its closing ``;`` (clang's extents of expression
        statements, and of loops and ifs ending in one, stop before it)."""
        start, end = self.span(c)
        if self.data[start:end].rstrip().endswith((b"}", b";")):
            return start, end
        rest = self.data[end:]
        stripped = rest.lstrip()
        if stripped.startswith(b";"):
            return start, end + (len(rest) - len(stripped)) + 1
        return start, end

    def stmt_text(self, c: ci.Cursor) -> str:
        start, end = self.stmt_span(c)
        return self.data[start:end].decode()

    def render(self, c: ci.Cursor, edits: list[Span], statement: bool = False) -> str:
        """The text of ``c`` (a whole statement with ``statement``) with ``edits`` inside it applied."""
        start, end = self.stmt_span(c) if statement else self.span(c)
        return self.slice(start, end, edits)

    def slice(self, start: int, end: int, edits: list[Span]) -> str:
        out, pos = [], start
        for e in sorted((e for e in edits if start <= e.start and e.end <= end), key=lambda e: e.start):
            if e.start < pos:
                continue  # overlapping: the outer edit already covers it
            out.append(self.data[pos:e.start].decode())
            out.append(e.text)
            pos = e.end
        out.append(self.data[pos:end].decode())
        return "".join(out)

    def edited(self, edits: list[Span]) -> str:
        """The whole source with ``edits`` applied."""
        return self.slice(0, len(self.data), edits)

    def tokens(self, c: ci.Cursor) -> Iterator[ci.Token]:
        return iter(c.get_tokens())

    def line_indent(self, offset: int) -> str:
        line_start = self.data.rfind(b"\n", 0, offset) + 1
        prefix = self.data[line_start:offset].decode()
        return prefix[: len(prefix) - len(prefix.lstrip())]

    # ---- macros ----------------------------------------------------------------------------------
    def macros(self) -> set[str]:
        """Names of macros the main file defines (our header's constants are plain tokens and do not count)."""
        if self._macros is None:
            self._macros = {c.spelling for c in self.tu.cursor.get_children()
                            if c.kind == K.MACRO_DEFINITION and self.in_main_file(c)}
        return self._macros

    def uses_macros(self, c: ci.Cursor) -> bool:
        """True when the text of ``c`` names a macro of the file: its AST then does not map onto its text."""
        names = self.macros()
        return bool(names) and any(t.kind == ci.TokenKind.IDENTIFIER and t.spelling in names for t in self.tokens(c))


def parse(source: str, language: str = "opencl", defines: dict[str, object] | None = None) -> ParsedSource:
    """Parse ``source``; raise :class:`KernelParseError` with the first errors when it is not clean."""
    if language not in ("opencl", "cuda"):
        raise KernelParseError(f"cannot parse language {language!r} (opencl or cuda)")
    name = _CUDA_FILE if language == "cuda" else _FILE
    args = list(CUDA_ARGS if language == "cuda" else OPENCL_ARGS)
    args += [f"-D{k}={v}" for k, v in (defines or {}).items()]
    header = _cuda_header() if language == "cuda" else _opencl_header()
    try:
        tu = _index().parse(name, args=args, unsaved_files=[(name, source), (_HEADER, header)],
                            options=ci.TranslationUnit.PARSE_DETAILED_PROCESSING_RECORD)
    except ci.TranslationUnitLoadError as exc:
        raise KernelParseError(f"libclang could not parse the source: {exc}") from None
    errors = [d for d in tu.diagnostics if d.severity >= ci.Diagnostic.Error]
    if errors:
        shown = "; ".join(f"line {d.location.line}: {d.spelling}" for d in errors[:3])
        raise KernelParseError(f"the source does not parse cleanly ({len(errors)} error(s)): {shown}")
    return ParsedSource(source, language, tu)


# ---- AST helpers shared by the transformations ----------------------------------------------------
def walk(c: ci.Cursor) -> Iterator[ci.Cursor]:
    """Pre-order, ``c`` included."""
    yield c
    for child in children(c):
        yield from walk(child)


def children(c: ci.Cursor) -> list[ci.Cursor]:
    """The cursor's children, listed once per parse: libclang builds every child list through a Python
    callback (about 6 us a child), and the transformations walk the same subtrees many times (coarsening renders
    each statement once per copy; unrolling scans every loop for inner loops)."""
    tu = getattr(c, "_tu", None)  # libclang sets it on every cursor it hands out
    if tu is None:
        return list(c.get_children())
    listed: dict[ci.Cursor, list[ci.Cursor]] | None = getattr(tu, "_kernelcast_children", None)
    if listed is None:
        listed = {}
        tu._kernelcast_children = listed
    kids = listed.get(c)
    if kids is None:
        kids = listed[c] = list(c.get_children())
    return list(kids)  # a copy: callers may edit their list


def declarators(ps: ParsedSource, stmt: ci.Cursor) -> tuple[str, list[tuple[int, int]]] | None:
    """A declaration statement's shared specifiers and each declarator's byte range: for
    ``int x = get_global_id(0), *p = a;`` it is ``"int"`` and the ranges of ``x = get_global_id(0)`` and
    ``*p = a``, so each declarator can stand as a declaration of its own. None when the statement declares
    anything but variables, or when the specifiers cannot be told apart from the first declarator (a
    qualified pointer such as ``float * const p``)."""
    decls = children(stmt)
    if not decls or any(d.kind != K.VAR_DECL for d in decls):
        return None
    start, spec_end = ps.span(stmt)[0], decls[0].location.offset
    while spec_end > start and ps.data[spec_end - 1:spec_end] in (b" ", b"\t", b"\n", b"\r", b"*"):
        spec_end -= 1
    spec = ps.data[start:spec_end]
    if not spec.strip() or b"*" in spec:
        return None
    ranges = [(spec_end, ps.span(decls[0])[1])]
    for before, decl in zip(decls, decls[1:]):
        ranges.append((ps.data.index(b",", ps.span(before)[1]) + 1, ps.span(decl)[1]))
    return spec.decode(), ranges


def strip(c: ci.Cursor) -> ci.Cursor:
    """Through implicit casts and parentheses to the expression that matters."""
    while c.kind in (K.UNEXPOSED_EXPR, K.PAREN_EXPR, K.CSTYLE_CAST_EXPR) and children(c):
        if c.kind == K.CSTYLE_CAST_EXPR:
            break
        c = children(c)[-1]
    return c


def operator(ps: ParsedSource, c: ci.Cursor) -> str:
    """The operator spelling of a binary, compound-assignment or unary operator cursor."""
    kids = children(c)
    toks = list(ps.tokens(c))
    if c.kind in (K.BINARY_OPERATOR, K.COMPOUND_ASSIGNMENT_OPERATOR) and kids:
        end = kids[0].extent.end.offset
        for t in toks:
            if t.extent.start.offset >= end:
                return t.spelling
        return ""
    if c.kind == K.UNARY_OPERATOR and kids and toks:
        if toks[0].extent.start.offset < kids[0].extent.start.offset:
            return toks[0].spelling
        return "post" + toks[-1].spelling
    return ""


def referenced_decl(c: ci.Cursor) -> ci.Cursor | None:
    c = strip(c)
    if c.kind == K.DECL_REF_EXPR and c.referenced is not None:
        return c.referenced
    return None


def decl_key(d: ci.Cursor) -> tuple[str, int]:
    """A stable identity of a declaration inside one parse (its name and position)."""
    return d.spelling, d.location.offset


def writes(ps: ParsedSource, node: ci.Cursor) -> bool:
    """An assignment, compound assignment, increment/decrement or address-of (its first child is written)."""
    if node.kind == K.COMPOUND_ASSIGNMENT_OPERATOR:
        return True
    if node.kind == K.BINARY_OPERATOR:
        return operator(ps, node) == "="
    return node.kind == K.UNARY_OPERATOR and operator(ps, node) in ("++", "--", "post++", "post--", "&")


PURE_CALL_PREFIXES = ("get_", "mad", "fma", "fmax", "fmin", "max", "min", "exp", "log", "sqrt", "rsqrt", "fabs",
                      "native_", "half_", "clamp", "convert_", "select", "isnan", "isinf", "sin", "cos", "tanh",
                      "pow", "floor", "ceil", "__builtin_", "vload")  # built-ins without side effects


def modified_decls(ps: ParsedSource, c: ci.Cursor, declarations: bool = True) -> set[tuple[str, int]]:
    """Variables written inside ``c``: assigned, compound-assigned, incremented, or address taken
    (and, with ``declarations``, those declared inside ``c``)."""
    out: set[tuple[str, int]] = set()
    for node in walk(c):
        if writes(ps, node):
            d = referenced_decl(children(node)[0])
            if d is not None:
                out.add(decl_key(d))
        if node.kind == K.VAR_DECL and declarations:
            out.add(decl_key(node))
    return out


def used_decls(c: ci.Cursor) -> set[tuple[str, int]]:
    return {decl_key(n.referenced) for n in walk(c) if n.kind == K.DECL_REF_EXPR and n.referenced is not None
            and n.referenced.kind in (K.VAR_DECL, K.PARM_DECL)}


def calls(c: ci.Cursor) -> list[ci.Cursor]:
    return [n for n in walk(c) if n.kind == K.CALL_EXPR]


def int_literal(ps: ParsedSource, c: ci.Cursor) -> int | None:
    c = strip(c)
    if c.kind == K.INTEGER_LITERAL:
        try:
            return int(ps.text(c).rstrip("uUlL"), 0)
        except ValueError:
            return None
    return None


def is_global_pointer(t: ci.Type, language: str) -> bool:
    """A pointer into global memory (OpenCL ``__global``; in CUDA any pointer not into ``__shared__``)."""
    t = t.get_canonical()
    if t.kind != ci.TypeKind.POINTER:
        return False
    pointee = t.get_pointee().spelling
    return "__global" in pointee if language == "opencl" else "__shared" not in pointee


def value_type(t: ci.Type) -> str:
    """The spelling of a value's type without address space and cv qualifiers (``__global const float`` -> float)."""
    words = [w for w in t.spelling.split()
             if w not in ("__global", "__local", "__constant", "__private", "const", "volatile", "restrict",
                          "__generic")]
    return " ".join(words)


@dataclass(frozen=True)
class ForLoop:
    """A counted for-loop ``for (T v = init; v < bound; ++v)`` (or <=, v++, v += 1)."""

    cursor: ci.Cursor
    var: str
    var_key: tuple[str, int]
    var_type: str
    init: str
    op: str  # "<" or "<="
    bound: ci.Cursor
    step: int
    body: ci.Cursor
    header_end: int  # byte offset of the ')' closing the header


def header_parts(ps: ParsedSource, loop: ci.Cursor) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int], int]:
    """Byte ranges of a for-statement's init, condition and increment, and the offset of its ')'."""
    toks = list(ps.tokens(loop))
    depth, semis, close = 0, [], -1
    open_at = toks[1].extent.end.offset
    for t in toks[1:]:
        s = t.spelling
        if s == "(":
            depth += 1
        elif s == ")":
            depth -= 1
            if depth == 0:
                close = t.extent.start.offset
                break
        elif s == ";" and depth == 1:
            semis.append(t.extent.start.offset)
    if len(semis) != 2 or close < 0:
        raise KernelParseError("unexpected for-loop header")
    return (open_at, semis[0]), (semis[0] + 1, semis[1]), (semis[1] + 1, close), close


def counted_loop(ps: ParsedSource, loop: ci.Cursor) -> ForLoop | None:
    """The loop's counter, bounds and body when it has the counted form; else None."""
    if loop.kind != K.FOR_STMT:
        return None
    try:
        (i0, i1), (c0, c1), (s0, s1), close = header_parts(ps, loop)
    except KernelParseError:
        return None
    kids = children(loop)

    def inside(k: ci.Cursor, a: int, b: int) -> bool:
        return a <= k.extent.start.offset and k.extent.end.offset <= b + 1

    init = next((k for k in kids if inside(k, i0, i1)), None)
    cond = next((k for k in kids if inside(k, c0, c1)), None)
    inc = next((k for k in kids if inside(k, s0, s1)), None)
    body = kids[-1] if kids and kids[-1].extent.start.offset > close else None
    if init is None or cond is None or inc is None or body is None or init.kind != K.DECL_STMT:
        return None
    decls = children(init)
    if len(decls) != 1 or decls[0].kind != K.VAR_DECL:
        return None
    var = decls[0]
    init_expr = [k for k in children(var) if k.kind not in (K.TYPE_REF,)]
    if not init_expr:
        return None
    cond = strip(cond)
    if cond.kind != K.BINARY_OPERATOR or operator(ps, cond) not in ("<", "<="):
        return None
    lhs, rhs = children(cond)
    d = referenced_decl(lhs)
    if d is None or decl_key(d) != decl_key(var):
        return None
    step = _unit_step(ps, strip(inc), decl_key(var))
    if step is None:
        return None
    return ForLoop(loop, var.spelling, decl_key(var), var.type.spelling, ps.text(init_expr[-1]),
                   operator(ps, cond), rhs, step, body, close)


def loop_local_counters(ps: ParsedSource, body: ci.Cursor) -> dict[tuple[str, int], list[ci.Cursor]]:
    """Counters declared before the loops that use them (``int k; ... for (k = 0; k < n; k++)``), with those
    loops: every loop's header assigns the counter with ``=`` in its init part, nothing else writes it but the
    headers' condition and increment parts, and every read lies inside such a loop. Each loop starts the counter
    afresh, so it behaves as ``for (int k = 0; ...)`` would: its value depends only on the headers' operands."""
    loops: dict[tuple[str, int], list[ci.Cursor]] = {}
    for loop in walk(body):
        if loop.kind != K.FOR_STMT:
            continue
        try:
            (i0, i1), _, _, close = header_parts(ps, loop)
        except KernelParseError:
            continue
        init = next((k for k in children(loop) if i0 <= k.extent.start.offset and k.extent.end.offset <= i1 + 1), None)
        if init is None or init.kind != K.BINARY_OPERATOR or operator(ps, init) != "=":
            continue
        d = referenced_decl(children(init)[0])
        loop_body = children(loop)[-1]
        if d is None or d.kind != K.VAR_DECL or loop_body.extent.start.offset <= close:
            continue
        key = decl_key(d)
        if key in modified_decls(ps, loop_body, declarations=False):
            continue  # written in the body (a nested loop on the same counter, or a jump ahead): not afresh
        loops.setdefault(key, []).append(loop)
    out = {}
    for key, found in loops.items():
        spans = [(lp.extent.start.offset, lp.extent.end.offset) for lp in found]
        refs = [n for n in walk(body) if n.kind == K.DECL_REF_EXPR and n.referenced is not None
                and decl_key(n.referenced) == key]
        if all(any(a <= r.extent.start.offset < b for a, b in spans) for r in refs):
            out[key] = found
    return out


def _unit_step(ps: ParsedSource, inc: ci.Cursor, key: tuple[str, int]) -> int | None:
    if inc.kind == K.UNARY_OPERATOR and operator(ps, inc) in ("++", "post++"):
        d = referenced_decl(children(inc)[0])
        return 1 if d is not None and decl_key(d) == key else None
    if inc.kind == K.COMPOUND_ASSIGNMENT_OPERATOR and operator(ps, inc) == "+=":
        target, amount = children(inc)
        d = referenced_decl(target)
        value = int_literal(ps, amount)
        return value if d is not None and decl_key(d) == key and value is not None and value > 0 else None
    return None


def has_jump(c: ci.Cursor, kinds: tuple[ci.CursorKind, ...] = (K.BREAK_STMT, K.CONTINUE_STMT, K.RETURN_STMT,
                                                                 K.GOTO_STMT)) -> bool:
    return any(n.kind in kinds for n in walk(c))


def global_id_calls(ps: ParsedSource, c: ci.Cursor, names: tuple[str, ...] = ("get_global_id",)) -> list[
        tuple[ci.Cursor, str, int]]:
    """(call, function, dimension) of work-item query calls with a literal dimension inside ``c``."""
    out = []
    for n in calls(c):
        if n.spelling in names:
            args = list(n.get_arguments())
            dim = int_literal(ps, args[0]) if len(args) == 1 else None
            if dim is None:
                raise KernelParseError(f"{n.spelling} with a non-literal dimension")
            out.append((n, n.spelling, dim))
    return out


def pointer_roots(ps: ParsedSource, kernel: ci.Cursor) -> dict[tuple[str, int], tuple[str, int]]:
    """Pointer variables and parameters of ``kernel`` -> the parameter they point into (``x = X + row * N``).

    A pointer whose initializer mixes several pointers, or that is reassigned, maps to itself and
    makes :func:`readonly_pointers` conservative.
    """
    roots: dict[tuple[str, int], tuple[str, int]] = {}
    for p in kernel.get_arguments():
        if p.type.get_canonical().kind == ci.TypeKind.POINTER:
            roots[decl_key(p)] = decl_key(p)
    for n in walk(kernel):
        if n.kind == K.VAR_DECL and n.type.get_canonical().kind == ci.TypeKind.POINTER:
            sources = {roots[decl_key(r.referenced)] for r in walk(n) if r.kind == K.DECL_REF_EXPR
                       and r.referenced is not None and decl_key(r.referenced) in roots}
            roots[decl_key(n)] = sources.pop() if len(sources) == 1 else decl_key(n)
    return roots


_READING_CALLS = ("vload", "prefetch")


def written_roots(ps: ParsedSource, kernel: ci.Cursor) -> set[tuple[str, int]]:
    """Parameters (roots) that the kernel may write through: stores, atomics, vstore, unknown uses."""
    roots = pointer_roots(ps, kernel)
    written: set[tuple[str, int]] = set()
    parent_of = parents(kernel)  # once: a chain per pointer use is then a walk up, not a search of the kernel
    for n in walk(kernel):
        if n.kind != K.DECL_REF_EXPR or n.referenced is None or decl_key(n.referenced) not in roots:
            continue
        root = roots[decl_key(n.referenced)]
        if not _only_read(ps, ancestors(kernel, n, parent_of), n):
            written.add(root)
    # a pointer variable reassigned inside the kernel may point anywhere: treat as written
    for key, root in roots.items():
        if root == key and key not in {decl_key(p) for p in kernel.get_arguments()}:
            written.add(key)
    return written


def parents(root: ci.Cursor) -> dict[ci.Cursor, ci.Cursor]:
    """Every cursor below ``root`` -> its parent (one walk; libclang cursors hash and compare by identity)."""
    out: dict[ci.Cursor, ci.Cursor] = {}
    stack = [root]
    while stack:
        c = stack.pop()
        for child in c.get_children():
            out[child] = c
            stack.append(child)
    return out


def ancestors(kernel: ci.Cursor, target: ci.Cursor,
              parent_of: dict[ci.Cursor, ci.Cursor] | None = None) -> list[ci.Cursor]:
    """The chain of cursors from ``kernel`` down to ``target`` (exclusive of target); pass ``parent_of``
    (:func:`parents` of ``kernel``) when asking for many targets."""
    parent_of = parents(kernel) if parent_of is None else parent_of
    chain: list[ci.Cursor] = []
    c = parent_of.get(target)
    while c is not None and c != kernel:
        chain.append(c)
        c = parent_of.get(c)
    return [kernel, *reversed(chain)]


def _only_read(ps: ParsedSource, chain: list[ci.Cursor], ref: ci.Cursor) -> bool:
    """True when this use of a pointer (``chain``: its ancestors) only reads through it (a subscript read, a
    vload, a pointer init)."""
    node = ref
    for parent in reversed(chain):
        if parent.kind in (K.UNEXPOSED_EXPR, K.PAREN_EXPR):
            node = parent
            continue
        if parent.kind == K.BINARY_OPERATOR and operator(ps, parent) in ("+", "-"):
            node = parent  # pointer arithmetic: keep following
            continue
        if parent.kind == K.ARRAY_SUBSCRIPT_EXPR:
            if children(parent)[0] != node:
                return True  # used as an index
            return not _is_store_target(ps, chain, parent)
        if parent.kind == K.UNARY_OPERATOR and operator(ps, parent) == "*":
            return not _is_store_target(ps, chain, parent)
        if parent.kind == K.CALL_EXPR:
            return parent.spelling.startswith(_READING_CALLS)
        if parent.kind == K.VAR_DECL:
            return True  # a derived pointer: its own uses are checked through its root
        return parent.kind == K.BINARY_OPERATOR and operator(ps, parent) in ("<", ">", "<=", ">=", "==", "!=")
    return False


def _is_store_target(ps: ParsedSource, chain: list[ci.Cursor], access: ci.Cursor) -> bool:
    idx = next(i for i, c in enumerate(chain) if c == access) if access in chain else len(chain)
    node = access
    for parent in reversed(chain[:idx]):
        if parent.kind in (K.UNEXPOSED_EXPR, K.PAREN_EXPR):
            node = parent
            continue
        if parent.kind == K.COMPOUND_ASSIGNMENT_OPERATOR or (
                parent.kind == K.BINARY_OPERATOR and operator(ps, parent) == "="):
            return children(parent)[0] == node
        if parent.kind == K.UNARY_OPERATOR and operator(ps, parent) in ("++", "--", "post++", "post--", "&"):
            return True
        if parent.kind == K.MEMBER_REF_EXPR:  # a vector lane or struct field of the element
            node = parent
            continue
        return False
    return False


def readonly_pointers(ps: ParsedSource, kernel: ci.Cursor) -> set[tuple[str, int]]:
    """Pointer parameters and variables the kernel never writes through (directly or via a derived pointer)."""
    roots = pointer_roots(ps, kernel)
    written = written_roots(ps, kernel)
    return {key for key, root in roots.items() if root not in written and key not in written}


_GROUP_QUERIES = ("get_local_id", "get_local_size", "get_group_id", "get_num_groups", "get_enqueued_local_size",
                  "get_local_linear_id", "barrier", "work_group_barrier", "mem_fence", "read_mem_fence",
                  "write_mem_fence", "async_work_group_copy", "async_work_group_strided_copy", "wait_group_events")


def observes_work_group(ps: ParsedSource, kernel: ci.Cursor) -> bool:
    """True when the kernel's results may depend on its work-group: group queries, barriers, local memory,
    group or sub-group functions, or a required work-group size."""
    if any(c.spelling in _GROUP_QUERIES or c.spelling.startswith(("work_group_", "sub_group_", "get_sub_group"))
           for c in calls(kernel)):
        return True
    words = {t.spelling for t in ps.tokens(kernel)}
    if words & {"__local", "local", "reqd_work_group_size", "work_group_size_hint"}:
        return True
    return any(n.kind == K.VAR_DECL and "__local" in n.type.spelling for n in walk(kernel))


_FLOATING = (ci.TypeKind.FLOAT, ci.TypeKind.DOUBLE, ci.TypeKind.LONGDOUBLE, ci.TypeKind.FLOAT128, ci.TypeKind.HALF)
_MOVES = ("vload", "vstore", "as_", "__builtin_astype", "get_")  # calls that move bits: no arithmetic on them
_NOT_ARITHMETIC = ("=", "&", "*", ",")  # assignment, address-of, dereference, comma: moves, not float math


def is_floating(t: ci.Type) -> bool:
    """A floating-point scalar or a vector of them (``float``, ``half4``, ``double2``)."""
    t = t.get_canonical()
    if t.kind in (ci.TypeKind.VECTOR, ci.TypeKind.EXTVECTOR):
        t = t.element_type.get_canonical()
    return t.kind in _FLOATING


def does_float_math(ps: ParsedSource, kernel: ci.Cursor) -> bool:
    """True when the kernel (or a function of the source it calls) computes on floating-point values: an
    arithmetic or comparison operator with a floating operand, or a call with a floating argument or result
    (math built-ins). A kernel that only moves floats (a transpose, a gather) is not changed by floating-point
    build options such as ``-cl-mad-enable``: measuring such a variant spends a measurement on the same
    kernel."""
    seen: set[tuple[str, int]] = set()
    todo = [kernel]
    while todo:
        function = todo.pop()
        for node in walk(function):
            if node.kind in (K.BINARY_OPERATOR, K.COMPOUND_ASSIGNMENT_OPERATOR, K.UNARY_OPERATOR):
                if operator(ps, node) not in _NOT_ARITHMETIC and (
                        is_floating(node.type) or any(is_floating(k.type) for k in children(node))):
                    return True
            elif node.kind == K.CALL_EXPR:
                target = node.referenced
                if target is not None and target.is_definition() and ps.in_main_file(target):
                    if decl_key(target) not in seen:
                        seen.add(decl_key(target))
                        todo.append(target)
                elif not node.spelling.startswith(_MOVES) and (
                        is_floating(node.type) or any(is_floating(a.type) for a in node.get_arguments())):
                    return True
    return False
