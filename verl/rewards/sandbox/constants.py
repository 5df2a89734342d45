# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Expected values written as constant expressions (`2 ** 10`, `[0] * 4`, `math.sqrt(2)`, `[i * i for i in
range(3)]`, `'ab'.upper()`), evaluated in the trainer, as a case's suffix is readable by the program.
`ast.literal_eval` plus arithmetic, comparisons, subscripts, comprehensions over constants and a few pure calls and
str/bytes methods, sizes checked before each operation and the work of the whole expression counted, so
`2 ** 10 ** 12` or `[0 for i in range(10 ** 6) for j in range(10 ** 6)]` raises TooLarge instead of stalling the
trainer.
"""

import ast
import builtins
import math
import operator
from collections.abc import Callable, Mapping
from typing import Any


MAX_BITS = 1 << 20
"""The largest int a constant expression may make, in bits."""
MAX_ITEMS = 1 << 20
"""The longest str, bytes, list, tuple, set, dict or range a constant expression may make."""
MAX_DEPTH = 100
"""Expressions nested deeper than this are not evaluated."""
MAX_FACTORIAL = 10_000
"""The largest n of math.factorial, comb and perm (their results stay under MAX_BITS)."""
MAX_STEPS = 1 << 23
"""The most work one constant expression may take, summed over its operations: the items, bytes / 64 and int bits
/ 8 (and their square / 2**20) of what each operation reads and makes, LOOP_STEPS per comprehension item: a loop
repeats work that no single size check sees. About a second at most."""
LOOP_STEPS = 16
"""The work of one comprehension item, whatever its expression costs besides (binding names is most of it)."""


class NotConstant(Exception):
    """Not a constant expression this evaluator handles: it runs in the sandbox."""


class TooLarge(ValueError):
    """The expression is constant but its value would exceed MAX_BITS or MAX_ITEMS, or its work MAX_STEPS."""


class TooMany(TooLarge):
    """A comprehension's loops give more items than the caller's limit (`bindings`)."""


UNKNOWN = object()
"""An environment's value for a name that is not a constant (the program's function): using it is NotConstant, and it
hides a builtin of that name."""


def _ints(*values: Any) -> bool:
    return all(type(value) in (int, bool) for value in values)


def _sized(value: Any) -> Any:
    """`value`, once it is known to be within MAX_BITS and MAX_ITEMS."""
    if type(value) is int and value.bit_length() > MAX_BITS:
        raise TooLarge(f"an int of {value.bit_length()} bits")
    if isinstance(value, (str, bytes, list, tuple, set, frozenset, dict, range)) and len(value) > MAX_ITEMS:
        raise TooLarge(f"a {type(value).__name__} of {len(value)} items")
    return value


def weight(value: Any, cap: int) -> int:
    """The work of reading `value` whole (items, bytes / 64, int bits / 8, through containers and shared references
    alike), counted up to just past `cap`: the walk itself stays within what it charges."""
    total, stack = 0, [value]
    while stack and total <= cap:
        value = stack.pop()
        kind = type(value)
        total += 1
        if kind is int:
            bits = value.bit_length()
            total += (bits >> 3) + (bits >> 10) ** 2  # gcd and isqrt of large ints are quadratic
        elif kind in (str, bytes):
            total += len(value) >> 6
        elif kind is range:
            total += len(value)
        elif kind is dict:
            stack.extend(value.keys())
            stack.extend(value.values())
        elif kind in (list, tuple, set, frozenset):
            stack.extend(value)
    return total


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
_COMPARE: dict[type[ast.cmpop], Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda item, container: item in container,
    ast.NotIn: lambda item, container: item not in container,
    ast.Is: operator.is_,
    ast.IsNot: operator.is_not,
}
_SINGLETONS = (None, True, False)
_ITERABLE = (list, tuple, str, bytes, range, set, frozenset, dict)
"""What a comprehension over constants may loop over (a dict: its keys)."""


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


def _iterable(value: Any) -> Any:
    if type(value) not in _ITERABLE:
        raise NotConstant
    return value


def _round(number: Any, *digits: Any) -> Any:
    """round(); an int rounded to more digits than it has is 0, without the power of ten round() would make."""
    if digits and _ints(number, *digits) and -digits[0] > (abs(number).bit_length() + 1) // 3 + 1:
        return 0
    return round(number, *digits)


def _str(*args: Any) -> str:
    if not all(type(arg) in (int, bool, float, str) for arg in args):
        raise NotConstant
    return str(*args)


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
    **{name: getattr(builtins, name) for name in "float int complex bool abs min max sum len sorted".split()},
    **{name: getattr(builtins, name) for name in ("list", "tuple", "set", "frozenset", "dict", "chr", "ord")},
    "round": _round,
    "str": _str,
    "all": lambda items: all(_iterable(items)),
    "any": lambda items: any(_iterable(items)),
    "zip": lambda *iterables: list(zip(*map(_iterable, iterables))),
    "enumerate": lambda items, *start: list(enumerate(_iterable(items), *start)),
    "reversed": lambda items: list(reversed(_iterable(items))),
    "range": _range,
}
"""Builtins a constant expression may call on constants (looked up here, never in the program); zip, enumerate and
reversed make lists."""


def _replace(text: Any, old: Any, new: Any, count: Any = -1) -> Any:
    found = text.count(old)
    if _ints(count) and count >= 0:
        found = min(found, count)
    if len(text) + found * (len(new) - len(old)) > MAX_ITEMS:
        raise TooLarge(f"a {type(text).__name__} replace() of {found} places")
    return text.replace(old, new, count)


def _join(separator: Any, items: Any) -> Any:
    items = list(_iterable(items))
    if any(type(item) is not type(separator) for item in items):
        raise NotConstant
    if sum(map(len, items)) + len(separator) * max(len(items) - 1, 0) > MAX_ITEMS:
        raise TooLarge(f"a {type(separator).__name__} join() over MAX_ITEMS")
    return separator.join(items)


def _padded(name: str) -> Callable[..., Any]:
    def pad(text: Any, width: Any, *fill: Any) -> Any:
        if _ints(width) and width > MAX_ITEMS:
            raise TooLarge(f"{name}() to width {width}")
        return getattr(type(text), name)(text, width, *fill)

    return pad


STRING_METHODS = frozenset(
    "upper lower strip lstrip rstrip split rsplit splitlines join replace title capitalize swapcase casefold "
    "startswith endswith count find rfind index rindex zfill center ljust rjust partition rpartition removeprefix "
    "removesuffix isdigit isalpha isalnum isspace isupper islower istitle isdecimal isnumeric isidentifier isascii "
    "isprintable hex".split()
)
"""Methods of str and bytes a constant expression may call on constants (`'ab'.upper()`): pure, C-level, with no
argument that could run code, and none whose result can outgrow the size checks unseen (replace, join and the
padding ones are checked before they run; format, expandtabs and translate are not here)."""
_GROWING = {
    "replace": _replace,
    "join": _join,
    **{name: _padded(name) for name in ("zfill", "center", "ljust", "rjust")},
}


def _method(receiver: Any, name: str) -> Callable[..., Any]:
    """The str or bytes method `name` of the constant `receiver`'s type (the type's own, not an attribute lookup),
    called with the receiver first, so that its size is charged as an argument's."""
    kind = type(receiver)
    if kind not in (str, bytes) or name not in STRING_METHODS or not hasattr(kind, name):
        raise NotConstant
    return _GROWING.get(name) or getattr(kind, name)


def _bind(target: ast.expr, value: Any, env: dict[str, Any]) -> None:
    """Binds a comprehension's loop target (a name, or a tuple or list of targets) to `value` in `env`."""
    if isinstance(target, ast.Name):
        env[target.id] = value
        return
    if not isinstance(target, (ast.Tuple, ast.List)) or any(isinstance(item, ast.Starred) for item in target.elts):
        raise NotConstant
    items = list(_iterable(value))
    if len(items) != len(target.elts):
        raise NotConstant  # a ValueError when unpacking: the sandbox makes it a runtime error
    for item, part in zip(items, target.elts):
        _bind(part, item, env)


class _Evaluation:
    """One constant expression's evaluation: the names its comprehensions bound, and the work it has left."""

    def __init__(self, env: Mapping[str, Any] | None) -> None:
        self.env: dict[str, Any] = dict(env or {})
        self.steps = MAX_STEPS

    def charge(self, *values: Any) -> None:
        for value in values:
            self.steps -= weight(value, self.steps)
        if self.steps < 0:
            raise TooLarge(f"more than {MAX_STEPS} steps of work")

    def apply(self, function: Callable[..., Any], *args: Any, reads: bool = True) -> Any:
        """function(*args), its work charged and its result size-checked; an arithmetic error (1 / 0) is NotConstant:
        the sandbox then fails the case."""
        if reads:
            self.charge(*args)
        try:
            result = _sized(function(*args))
        except (TooLarge, NotConstant):
            raise
        except (ArithmeticError, ValueError, TypeError, IndexError, KeyError, MemoryError, RecursionError):
            raise NotConstant from None
        self.charge(result)
        return result

    def value(self, node: ast.expr, env: dict[str, Any], depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise NotConstant
        deeper = depth + 1
        if isinstance(node, ast.Constant):
            return _sized(node.value)
        if isinstance(node, ast.Name):
            value = env.get(node.id, UNKNOWN)
            if value is UNKNOWN:
                raise NotConstant
            return value
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            if any(isinstance(item, ast.Starred) for item in node.elts):
                raise NotConstant
            items = [self.value(item, env, deeper) for item in node.elts]
            return self.apply({ast.List: list, ast.Tuple: tuple, ast.Set: set}[type(node)], items, reads=False)
        if isinstance(node, ast.Dict):
            if any(key is None for key in node.keys):  # {**other}
                raise NotConstant
            pairs = [
                (self.value(key, env, deeper), self.value(item, env, deeper))
                for key, item in zip(node.keys, node.values)
            ]
            return self.apply(dict, pairs, reads=False)
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            return self.comprehension(node, env, deeper)
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            return self.apply(
                _BINARY[type(node.op)], self.value(node.left, env, deeper), self.value(node.right, env, deeper)
            )
        if isinstance(node, ast.UnaryOp):
            return self.apply(_UNARY[type(node.op)], self.value(node.operand, env, deeper))
        if isinstance(node, ast.BoolOp):
            result: Any = None
            for operand in node.values:  # short-circuits as Python does
                result = self.value(operand, env, deeper)
                if bool(result) != isinstance(node.op, ast.And):
                    break
            return result
        if isinstance(node, ast.IfExp):
            chosen = node.body if self.value(node.test, env, deeper) else node.orelse
            return self.value(chosen, env, deeper)
        if isinstance(node, ast.Compare):
            return self.compare(node, env, deeper)
        if isinstance(node, ast.Subscript):
            container, index = self.value(node.value, env, deeper), self.index(node.slice, env, deeper)
            return self.apply(operator.getitem, container, index, reads=False)  # the result is charged
        if isinstance(node, ast.Attribute) and self.is_math(node.value, env) and node.attr in MATH_CONSTANTS:
            return MATH_CONSTANTS[node.attr]
        if isinstance(node, ast.Call) and not node.keywords:
            if any(isinstance(arg, ast.Starred) for arg in node.args):
                raise NotConstant
            function, receiver = self.function(node.func, env, deeper)
            return self.apply(function, *receiver, *(self.value(arg, env, deeper) for arg in node.args))
        raise NotConstant

    def compare(self, node: ast.Compare, env: dict[str, Any], depth: int) -> bool:
        left = self.value(node.left, env, depth)
        for op, comparator in zip(node.ops, node.comparators):
            right = self.value(comparator, env, depth)
            if isinstance(op, (ast.Is, ast.IsNot)) and not any(
                side is singleton for side in (left, right) for singleton in _SINGLETONS
            ):
                raise NotConstant  # identity of two values made here says nothing of the assert's
            if not self.apply(_COMPARE[type(op)], left, right):
                return False
            left = right
        return True

    def comprehension(self, node: ast.expr, env: dict[str, Any], depth: int) -> Any:
        """A list, set, dict or generator comprehension (a generator as the list it would give)."""
        items = [
            (self.value(node.key, bound, depth), self.value(node.value, bound, depth))
            if isinstance(node, ast.DictComp)
            else self.value(node.elt, bound, depth)
            for bound in self.bindings(node.generators, env, MAX_ITEMS, depth)
        ]
        kind = {ast.SetComp: set, ast.DictComp: dict}.get(type(node), list)
        return self.apply(kind, items, reads=False)

    def bindings(
        self, generators: list[ast.comprehension], env: dict[str, Any], limit: int, depth: int
    ) -> list[dict[str, Any]]:
        """One environment per item of the loops `generators` (their `for`s nested, their `if`s applied), each
        `env` with the loop targets bound; TooMany past `limit` items."""
        found: list[dict[str, Any]] = []

        def loop(index: int, env: dict[str, Any]) -> None:
            if index == len(generators):
                found.append(env)
                if len(found) > limit:
                    raise TooMany(f"more than {limit} items")
                return
            generator = generators[index]
            if generator.is_async:
                raise NotConstant
            for item in _iterable(self.value(generator.iter, env, depth)):
                self.steps -= LOOP_STEPS
                if self.steps < 0:
                    raise TooLarge(f"more than {MAX_STEPS} steps of work")
                bound = dict(env)
                _bind(generator.target, item, bound)
                if all(self.value(condition, bound, depth) for condition in generator.ifs):
                    loop(index + 1, bound)

        loop(0, env)
        return found

    def index(self, node: ast.expr, env: dict[str, Any], depth: int) -> Any:
        if isinstance(node, ast.Slice):
            bounds = (node.lower, node.upper, node.step)
            return slice(*(None if part is None else self.value(part, env, depth) for part in bounds))
        return self.value(node, env, depth)

    def is_math(self, node: ast.expr, env: dict[str, Any]) -> bool:
        return isinstance(node, ast.Name) and node.id == "math" and "math" not in env

    def function(self, node: ast.expr, env: dict[str, Any], depth: int) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        """What a call calls, and the arguments that come before its own (a method's receiver)."""
        if isinstance(node, ast.Name) and node.id in BUILTINS and node.id not in env:
            return BUILTINS[node.id], ()
        if isinstance(node, ast.Attribute):
            if self.is_math(node.value, env):
                if node.attr in MATH_FUNCTIONS:
                    return MATH_FUNCTIONS[node.attr], ()
                raise NotConstant
            if node.attr in STRING_METHODS:
                receiver = self.value(node.value, env, depth)
                return _method(receiver, node.attr), (receiver,)
        raise NotConstant


def evaluate(node: ast.expr, env: Mapping[str, Any] | None = None) -> Any:
    """The value of the constant expression `node`, its names looked up in `env` (UNKNOWN hides a builtin);
    NotConstant when it is not one, TooLarge when it is too big or too much work."""
    evaluation = _Evaluation(env)
    return evaluation.value(node, evaluation.env, 0)


def bindings(
    generators: list[ast.comprehension], limit: int, env: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """The loop targets' values (one dict per item, `env` included) of a comprehension's `for`s over constants and
    its `if`s, in order: what the trainer unrolls `all(f(x) == y for x, y in zip(...))` over. TooMany past `limit`
    items, NotConstant when a loop or a filter is not constant."""
    evaluation = _Evaluation(env)
    return evaluation.bindings(generators, evaluation.env, limit, 0)
