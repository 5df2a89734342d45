# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Expected values written as constant expressions (`2 ** 10`, `[0] * 4`, `math.sqrt(2)`), evaluated in the trainer,
as a case's suffix is readable by the program. `ast.literal_eval` plus arithmetic, subscripts and a few pure calls,
sizes checked before each operation, so `2 ** 10 ** 12` raises TooLarge instead of stalling the trainer.
"""

import ast
import builtins
import math
import operator
from collections.abc import Callable
from typing import Any


MAX_BITS = 1 << 20
"""The largest int a constant expression may make, in bits."""
MAX_ITEMS = 1 << 20
"""The longest str, bytes, list, tuple, set, dict or range a constant expression may make."""
MAX_DEPTH = 100
"""Expressions nested deeper than this are not evaluated."""
MAX_FACTORIAL = 10_000
"""The largest n of math.factorial, comb and perm (their results stay under MAX_BITS)."""


class NotConstant(Exception):
    """Not a constant expression this evaluator handles: it runs in the sandbox."""


class TooLarge(ValueError):
    """The expression is constant but its value would exceed MAX_BITS or MAX_ITEMS."""


def _ints(*values: Any) -> bool:
    return all(type(value) in (int, bool) for value in values)


def _sized(value: Any) -> Any:
    """`value`, once it is known to be within MAX_BITS and MAX_ITEMS."""
    if type(value) is int and value.bit_length() > MAX_BITS:
        raise TooLarge(f"an int of {value.bit_length()} bits")
    if isinstance(value, (str, bytes, list, tuple, set, frozenset, dict, range)) and len(value) > MAX_ITEMS:
        raise TooLarge(f"a {type(value).__name__} of {len(value)} items")
    return value


def _power(base: Any, exponent: Any) -> Any:
    if _ints(base, exponent) and exponent > 0 and abs(base) > 1 and abs(base).bit_length() * exponent > MAX_BITS:
        raise TooLarge(f"{base} ** {exponent}")
    return base**exponent


def _multiply(left: Any, right: Any) -> Any:
    if _ints(left, right):
        if abs(left).bit_length() + abs(right).bit_length() > MAX_BITS:
            raise TooLarge("a product over MAX_BITS")
    else:
        for sequence, count in ((left, right), (right, left)):
            if isinstance(sequence, (str, bytes, list, tuple)) and _ints(count) and len(sequence) * count > MAX_ITEMS:
                raise TooLarge(f"a {type(sequence).__name__} repeated {count} times")
    return left * right


def _shift(value: Any, count: Any) -> Any:
    if _ints(value, count) and count > 0 and abs(value).bit_length() + count > MAX_BITS:
        raise TooLarge(f"{value} << {count}")
    return value << count


def _modulo(left: Any, right: Any) -> Any:
    if isinstance(left, (str, bytes)):  # %-formatting can pad to any width
        raise NotConstant
    return left % right


_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: _multiply,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: _modulo,
    ast.Pow: _power,
    ast.LShift: _shift,
    ast.RShift: operator.rshift,
    ast.BitAnd: operator.and_,
    ast.BitOr: operator.or_,
    ast.BitXor: operator.xor,
}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert, ast.Not: operator.not_}


def _bounded(function: Callable[..., Any]) -> Callable[..., Any]:
    """`function` of ints (factorial, comb, perm) refused past MAX_FACTORIAL."""

    def call(*args: Any) -> Any:
        if any(type(arg) is int and arg > MAX_FACTORIAL for arg in args):
            raise TooLarge(f"{function.__name__} of an argument over {MAX_FACTORIAL}")
        return function(*args)

    return call


def _range(*args: Any) -> range:
    if not _ints(*args):
        raise NotConstant
    return _sized(range(*args))


MATH_CONSTANTS = {name: getattr(math, name) for name in ("pi", "e", "tau", "inf", "nan")}
MATH_FUNCTIONS: dict[str, Callable[..., Any]] = {
    **{
        name: getattr(math, name)
        for name in "sqrt exp log log2 log10 sin cos tan asin acos atan atan2 hypot floor ceil fabs isqrt gcd lcm trunc "
        "degrees radians".split()
    },
    **{name: _bounded(getattr(math, name)) for name in ("factorial", "comb", "perm")},
}
"""Pure math functions a constant expression may call on constants (`math.sqrt(2)`)."""
BUILTINS: dict[str, Callable[..., Any]] = {
    **{name: getattr(builtins, name) for name in "float int complex bool abs round min max sum len sorted".split()},
    **{name: getattr(builtins, name) for name in ("list", "tuple", "set", "frozenset")},
    "range": _range,
}
"""Builtins a constant expression may call on constants (looked up here, never in the program)."""


def evaluate(node: ast.expr, depth: int = 0) -> Any:
    """The value of the constant expression `node`; NotConstant when it is not one, TooLarge when it is too big."""
    if depth > MAX_DEPTH:
        raise NotConstant
    deeper = depth + 1
    if isinstance(node, ast.Constant):
        return _sized(node.value)
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        if any(isinstance(item, ast.Starred) for item in node.elts):
            raise NotConstant
        items = [evaluate(item, deeper) for item in node.elts]
        return _apply({ast.List: list, ast.Tuple: tuple, ast.Set: set}[type(node)], items)
    if isinstance(node, ast.Dict):
        if any(key is None for key in node.keys):  # {**other}
            raise NotConstant
        pairs = [(evaluate(key, deeper), evaluate(value, deeper)) for key, value in zip(node.keys, node.values)]
        return _apply(dict, pairs)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return _apply(_BINARY[type(node.op)], evaluate(node.left, deeper), evaluate(node.right, deeper))
    if isinstance(node, ast.UnaryOp):
        return _apply(_UNARY[type(node.op)], evaluate(node.operand, deeper))
    if isinstance(node, ast.Subscript):
        return _apply(operator.getitem, evaluate(node.value, deeper), _index(node.slice, deeper))
    if isinstance(node, ast.Attribute) and _is_math(node.value) and node.attr in MATH_CONSTANTS:
        return MATH_CONSTANTS[node.attr]
    if isinstance(node, ast.Call) and not node.keywords:
        function = _function(node.func)
        if any(isinstance(arg, ast.Starred) for arg in node.args):
            raise NotConstant
        return _apply(function, *(evaluate(arg, deeper) for arg in node.args))
    raise NotConstant


def _is_math(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == "math"


def _function(node: ast.expr) -> Callable[..., Any]:
    if isinstance(node, ast.Name) and node.id in BUILTINS:
        return BUILTINS[node.id]
    if isinstance(node, ast.Attribute) and _is_math(node.value) and node.attr in MATH_FUNCTIONS:
        return MATH_FUNCTIONS[node.attr]
    raise NotConstant


def _index(node: ast.expr, depth: int) -> Any:
    if isinstance(node, ast.Slice):
        bounds = (node.lower, node.upper, node.step)
        return slice(*(None if part is None else evaluate(part, depth) for part in bounds))
    return evaluate(node, depth)


def _apply(function: Callable[..., Any], *args: Any) -> Any:
    """function(*args), size-checked; an arithmetic error (1 / 0) is NotConstant: the sandbox then fails the case."""
    try:
        return _sized(function(*args))
    except (TooLarge, NotConstant):
        raise
    except (ArithmeticError, ValueError, TypeError, IndexError, KeyError, MemoryError, RecursionError):
        raise NotConstant from None
