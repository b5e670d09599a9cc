"""Safe, bounded evaluation of the small integer expressions used in task files.

Problem sizes, buffer shapes, launch geometry and template constraints are
written as expressions of named sizes and parameters ("N / VEC", "M * N",
"ceil_div(N, TILE) * TILE"). They come from user files (and, over MCP, from
anyone), so they are parsed with :mod:`ast`, only arithmetic on names and
numbers is allowed, and every step is bounded: the text's length, the tree's
depth and size, exponents and the size of every intermediate integer. A bomb
such as ``9**9**9**9`` is an :class:`ExpressionError` in microseconds, never a
frozen interpreter, a RecursionError or a MemoryError.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Mapping
from functools import lru_cache

from kernelcast.tools.core.errors import InputError

MAX_LENGTH = 1000  # characters of one expression; task expressions are a few dozen
MAX_DEPTH = 40  # nesting of the syntax tree
MAX_NODES = 400  # nodes of the syntax tree
MAX_EXPONENT = 64
MAX_INT_BITS = 64  # every intermediate integer fits in 64 bits (the widest kernel argument)

Number = int | float

_BINOPS: dict[type[ast.operator], Callable[[Number, Number], Number]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_CMPOPS: dict[type[ast.cmpop], Callable[[Number, Number], bool]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}
_FUNCS: dict[str, tuple[Callable[..., Number], int | None]] = {  # name: (function, arity or None = 1+)
    "min": (min, None),
    "max": (max, None),
    "ceil_div": (lambda a, b: -(-a // b), 2),
    "round_up": (lambda a, b: -(-a // b) * b, 2),
    "sqrt": (math.sqrt, 1),
    "int": (int, 1),
    "float": (float, 1),
}


class ExpressionError(InputError, ValueError):
    """An expression is malformed, too large, or names something that is not defined."""


def evaluate(expr: str | int | float, names: Mapping[str, int | float]) -> int | float:
    """Evaluate ``expr`` with ``names`` bound; ``/`` on integers that divide exactly stays an int."""
    if isinstance(expr, bool):
        raise ExpressionError(f"expected a number or expression, got {expr!r}")
    if isinstance(expr, (int, float)):
        return _checked(expr, _shown(str(expr)))
    tree, src = parse(str(expr))
    return _eval(tree, names, src)


def evaluate_int(expr: str | int | float, names: Mapping[str, int | float]) -> int:
    """Evaluate an expression that must produce a whole number (sizes, geometry)."""
    value = evaluate(expr, names)
    if isinstance(value, float):
        if not value.is_integer():
            raise ExpressionError(f"expression {_shown(str(expr))!r} is not a whole number ({value})")
        value = int(value)
    return int(value)


def names_in(expr: str | int | float) -> set[str]:
    """The free names an expression refers to (function names excluded)."""
    if isinstance(expr, (int, float)):
        return set()
    tree, _ = parse(str(expr))
    called = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - called


@lru_cache(maxsize=4096)
def parse(expr: str) -> tuple[ast.expr, str]:
    """The checked syntax tree of ``expr`` and the text to quote in errors (cached: template spaces
    evaluate the same few constraints for every point)."""
    src = _shown(expr)
    text = expr.strip()
    if len(text) > MAX_LENGTH:
        raise ExpressionError(f"expression {src!r} is {len(text)} characters long; the limit is {MAX_LENGTH}")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise ExpressionError(f"cannot parse expression {src!r}: {exc.msg}") from None
    except (RecursionError, MemoryError):
        raise ExpressionError(f"expression {src!r} is nested too deeply") from None
    _check_shape(tree.body, src)
    return tree.body, src


def _shown(expr: str, limit: int = 80) -> str:
    """The expression as quoted in an error message: long ones are cut, never echoed whole."""
    return expr if len(expr) <= limit else expr[:limit] + f"... ({len(expr)} characters)"


def _check_shape(root: ast.AST, src: str) -> None:
    """Depth and size limits, checked iteratively (no recursion on untrusted trees)."""
    stack: list[tuple[ast.AST, int]] = [(root, 1)]
    count = 0
    while stack:
        node, depth = stack.pop()
        count += 1
        if depth > MAX_DEPTH:
            raise ExpressionError(f"expression {src!r} is nested more than {MAX_DEPTH} levels deep")
        if count > MAX_NODES:
            raise ExpressionError(f"expression {src!r} has more than {MAX_NODES} terms")
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))


def _checked(value: Number, src: str) -> Number:
    """Refuse integers beyond 64 bits and non-finite floats (they only come from mistakes or bombs)."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        if value.bit_length() > MAX_INT_BITS:
            raise ExpressionError(f"expression {src!r} produces an integer of 2**{MAX_INT_BITS} or more")
        return value
    if isinstance(value, float) and not math.isfinite(value):
        raise ExpressionError(f"expression {src!r} produces {value}")
    if isinstance(value, complex):
        raise ExpressionError(f"expression {src!r} produces a complex number")
    return value


def _power(left: Number, right: Number, src: str) -> Number:
    """``left ** right`` after checking that the result can be small (decided before computing it)."""
    if abs(right) > MAX_EXPONENT and abs(left) not in (0, 1):
        raise ExpressionError(f"exponent {right} in {src!r} exceeds the limit of {MAX_EXPONENT}")
    if isinstance(left, int) and isinstance(right, int) and right > 0 and \
            (abs(left).bit_length() - 1) * right > MAX_INT_BITS:
        raise ExpressionError(f"expression {src!r} produces an integer of 2**{MAX_INT_BITS} or more")
    if left == 0 and right < 0:
        raise ExpressionError(f"division by zero in {src!r}")
    return left ** right


def _eval(node: ast.AST, names: Mapping[str, int | float], src: str) -> int | float:
    try:
        return _checked(_eval_node(node, names, src), src)
    except (OverflowError, ZeroDivisionError, ValueError, TypeError) as exc:
        if isinstance(exc, ExpressionError):
            raise
        raise ExpressionError(f"cannot evaluate {src!r}: {exc}") from None


def _eval_node(node: ast.AST, names: Mapping[str, int | float], src: str) -> int | float:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in names:
            raise ExpressionError(f"unknown name {node.id!r} in expression {src!r}")
        return names[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _eval(node.operand, names, src)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left, names, src), _eval(node.right, names, src)
        if isinstance(node.op, ast.Div):
            if right == 0:
                raise ExpressionError(f"division by zero in {src!r}")
            if isinstance(left, int) and isinstance(right, int) and left % right == 0:
                return left // right
            return left / right
        if isinstance(node.op, ast.Pow):
            return _power(left, right, src)
        op = _BINOPS.get(type(node.op))
        if op is None:
            raise ExpressionError(f"operator not allowed in {src!r}")
        if isinstance(node.op, (ast.FloorDiv, ast.Mod)) and right == 0:
            raise ExpressionError(f"division by zero in {src!r}")
        return op(left, right)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, names, src)
        for op_node, comp in zip(node.ops, node.comparators, strict=True):
            right = _eval(comp, names, src)
            cmp = _CMPOPS.get(type(op_node))
            if cmp is None:
                raise ExpressionError(f"comparison not allowed in {src!r}")
            if not cmp(left, right):
                return 0
            left = right
        return 1
    if isinstance(node, ast.BoolOp):
        values = [_eval(v, names, src) for v in node.values]
        return int(all(values)) if isinstance(node.op, ast.And) else int(any(values))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS and not node.keywords:
        fn, arity = _FUNCS[node.func.id]
        args = [_eval(a, names, src) for a in node.args]
        if (arity is None and not args) or (arity is not None and len(args) != arity):
            raise ExpressionError(f"{node.func.id}() takes {arity or 'at least one'} argument(s) in {src!r}")
        return fn(*args)
    raise ExpressionError(f"unsupported syntax in expression {src!r}")
