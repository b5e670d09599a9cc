"""Safe evaluation of the small integer expressions used in task files.

Problem sizes, buffer shapes, launch geometry and template constraints are
written as expressions of named sizes and parameters ("N / VEC", "M * N",
"ceil_div(N, TILE) * TILE"). They come from user files, so they are parsed
with :mod:`ast` and only arithmetic on names and numbers is allowed.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Mapping

_BINOPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_CMPOPS = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}
_FUNCS = {
    "min": min,
    "max": max,
    "ceil_div": lambda a, b: -(-a // b),
    "round_up": lambda a, b: -(-a // b) * b,
    "sqrt": math.sqrt,
    "int": int,
    "float": float,
}


class ExpressionError(ValueError):
    """An expression is malformed or names something that is not defined."""


def evaluate(expr: str | int | float, names: Mapping[str, int | float]) -> int | float:
    """Evaluate ``expr`` with ``names`` bound; ``/`` on integers that divide exactly stays an int."""
    if isinstance(expr, bool):
        raise ExpressionError(f"expected a number or expression, got {expr!r}")
    if isinstance(expr, (int, float)):
        return expr
    try:
        tree = ast.parse(str(expr).strip(), mode="eval")
    except SyntaxError as exc:
        raise ExpressionError(f"cannot parse expression {expr!r}: {exc.msg}") from None
    return _eval(tree.body, names, str(expr))


def evaluate_int(expr: str | int, names: Mapping[str, int | float]) -> int:
    """Evaluate an expression that must produce a whole number (sizes, geometry)."""
    value = evaluate(expr, names)
    if isinstance(value, float):
        if not value.is_integer():
            raise ExpressionError(f"expression {expr!r} is not a whole number ({value})")
        value = int(value)
    return int(value)


def names_in(expr: str | int | float) -> set[str]:
    """The free names an expression refers to (function names excluded)."""
    if isinstance(expr, (int, float)):
        return set()
    try:
        tree = ast.parse(str(expr).strip(), mode="eval")
    except SyntaxError as exc:
        raise ExpressionError(f"cannot parse expression {expr!r}: {exc.msg}") from None
    called = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - called


def _eval(node: ast.AST, names: Mapping[str, int | float], src: str) -> int | float:
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
        op = _BINOPS.get(type(node.op))
        if op is None:
            raise ExpressionError(f"operator not allowed in {src!r}")
        if isinstance(node.op, (ast.FloorDiv, ast.Mod)) and right == 0:
            raise ExpressionError(f"division by zero in {src!r}")
        return op(left, right)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, names, src)
        for op_node, comp in zip(node.ops, node.comparators):
            right = _eval(comp, names, src)
            op = _CMPOPS.get(type(op_node))
            if op is None:
                raise ExpressionError(f"comparison not allowed in {src!r}")
            if not op(left, right):
                return 0
            left = right
        return 1
    if isinstance(node, ast.BoolOp):
        values = [_eval(v, names, src) for v in node.values]
        return int(all(values)) if isinstance(node.op, ast.And) else int(any(values))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS and not node.keywords:
        return _FUNCS[node.func.id](*(_eval(a, names, src) for a in node.args))
    raise ExpressionError(f"unsupported syntax in expression {src!r}")
