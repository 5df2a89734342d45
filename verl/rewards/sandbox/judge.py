# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""A code sample's test cases: ground-truth forms parsed, the program found in the response, the suffix the sandbox
runs after it, and the comparison in the trainer (examples/reward_function/code.py; rules in docs/rewards.md).

The check is outside the program, which could fool one in its own process (an always-True __eq__, reading the
expected value from the caller's frame, exiting first): the sandbox only prints each tested expression's value,
serialised strictly through the builtin types' own methods (anything else fails the case), and the trainer compares.
Comprehensions over constants are unrolled item by item, so their comparisons are the trainer's too; an assert whose
verdict still depends on the program's process (`f(x) == g(y)`, `isinstance(f(x), list)`) is logged once and marked
(`Check.decided_in_sandbox`).
"""

import ast
import bisect
import builtins
import dataclasses
import functools
import json
import logging
import math
import operator
import re
import secrets
import textwrap
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from keyword import iskeyword
from typing import Any

from verl.rewards.sandbox import constants
from verl.rewards.sandbox.limits import SandboxResult


logger = logging.getLogger(__name__)

PYTHON_TAGS = frozenset({"", "python", "py", "python3"})
FAILURE_KEYS = (
    "num_timeout",
    "num_memory_limit",
    "num_output_limit",
    "num_process_limit",
    "num_runtime_error",
    "num_wrong_answer",
)
VALUE_MARKER = "@verl-values "
"""Starts the line on which the judge prints the values of a case's expressions under test, followed by the case's
secret (`Case.secret`): a program that printed the line itself and left before the judge ran passed."""
MAX_VALUE_DEPTH = 100
"""Values nested deeper than this (or cyclic ones) are not plain values."""

_FENCE_TAG = re.compile(r"[\w+#.-]*")
"""The language tag after an opening fence (matched at one place only: linear)."""
MAX_COLLISIONS = 32
"""A set or dict the sandbox printed whose keys share one hash this many times is refused (not decoded): building
it would take time quadratic in its size (ints that differ by multiples of 2**61 - 1 all hash alike)."""
_FAILURES = {
    "timeout": "num_timeout",
    "cpu_limit": "num_timeout",
    "memory_limit": "num_memory_limit",
    "output_limit": "num_output_limit",
    "process_limit": "num_process_limit",
}

# The value forms' case suffix: runs after the program, in its namespace, and prints VALUE_MARKER then a JSON list
# of one tagged value per expression. It reaches types through literals (not rebindable names), encodes iteratively
# with a node budget, writes with os.write and leaves with os._exit(0), so nothing of the program runs after the
# line. An iterator (a generator, a map object) is drawn into a list within the budget, running the program's code
# as list() would. This is best effort against a tampered interpreter; the judge is sound because no expected
# literal is here.
_JUDGE = """

def _verl_judge_factory(budget):
    try:
        write, leave = _verl_io  # taken before the program ran (bootstrap's _judge_namespace)
    except NameError:  # in one file with the program (sandbox_fusion: harness._one_file)
        import os
        write, leave = os.write, os._exit
    kind = (0).__class__.__class__
    none, boolean, integer, real, compound = None.__class__, True.__class__, (0).__class__, (0.0).__class__, (0j).__class__
    text, data, array, pair, table, group = "".__class__, b"".__class__, [].__class__, ().__class__, {}.__class__, {0}.__class__
    frozen = kind(frozenset())
    mro_of, module_of = kind.__dict__["__mro__"].__get__, kind.__dict__["__module__"].__get__
    attributes_of = kind.__dict__["__dict__"].__get__
    real_part, imaginary_part = compound.__dict__["real"].__get__, compound.__dict__["imag"].__get__
    plain = (none, boolean, integer, real, compound, text, data, array, pair, table, group, frozen)
    tags = ((array, '["list"'), (pair, '["tuple"'), (group, '["set"'), (frozen, '["frozenset"'))

    def base_of(t):
        for ancestor in mro_of(t):
            for builtin in plain:
                if ancestor is builtin:
                    return builtin
        return None

    def iterates(t):
        for ancestor in mro_of(t):
            if "__next__" in attributes_of(ancestor):
                return True
        return False

    def encode(value):
        out, stack, left = [], [(value, 0)], budget
        while stack:
            entry = stack.pop()
            if kind(entry) is text:
                out.append(entry)
                continue
            value, depth = entry
            left -= 1
            if left < 0:
                return '["toolarge"]'
            t = base_of(kind(value))
            if t is None and depth <= MAX_DEPTH:
                module = module_of(kind(value))
                if kind(module) is text and text.__eq__(module, "numpy"):  # a NumPy scalar: its Python value
                    stack.append((value.item(), depth + 1))
                    continue
                if iterates(kind(value)):  # an iterator: the items list() would draw from it, within the budget
                    items, count = array(), 0
                    try:
                        for item in value:
                            count += 1
                            if count > left:
                                return '["toolarge"]'
                            array.append(items, item)
                    except:
                        return '["error"]'
                    out.append('["iter"')
                    stack.append("]")
                    items.reverse()
                    for item in items:
                        stack.append((item, depth + 1))
                        stack.append(",")
                    continue
            if t is none:
                out.append("null")
            elif t is boolean:
                out.append("true" if value is True else "false")
            elif depth > MAX_DEPTH:
                out.append('["other"]')
            elif t is integer:
                out.append('["int","%x"]' % integer.__int__(value))
            elif t is real:
                out.append('["float","' + real.hex(value) + '"]')
            elif t is compound:
                out.append('["complex","' + real.hex(real_part(value)) + '","' + real.hex(imaginary_part(value)) + '"]')
            elif t is text:
                out.append('["str","' + data.hex(text.encode(value, "utf-8", "surrogatepass")) + '"]')
            elif t is data:
                out.append('["bytes","' + data.hex(value) + '"]')
            elif t is table:
                out.append('["dict"')
                stack.append("]")
                items = array(table.items(value))
                items.reverse()
                for key, item in items:
                    stack.append((item, depth + 1))
                    stack.append(",")
                    stack.append((key, depth + 1))
                    stack.append(",")
            else:
                for container, tag in tags:
                    if t is container:
                        out.append(tag)
                        stack.append("]")
                        items = array(container.__iter__(value))
                        items.reverse()
                        for item in items:
                            stack.append((item, depth + 1))
                            stack.append(",")
                        break
                else:
                    out.append('["other"]')
        return "".join(out)

    def judge(*expressions):
        parts = []
        for expression in expressions:
            try:
                value = expression()
            except:
                parts.append('["error"]')
                continue
            try:
                parts.append(encode(value))
            except:
                parts.append('["other"]')
        line = text.encode("\\n" + MARKER + "[" + ",".join(parts) + "]\\n", "ascii")
        while line:
            line = line[write(1, line):]
        leave(0)

    return judge

_verl_judge = _verl_judge_factory(BUDGET)
del _verl_judge_factory
""".replace("MAX_DEPTH", str(MAX_VALUE_DEPTH))


def _opening_fence(response: str, start: int, line_end: int) -> tuple[str, str] | None:
    """(the language tag, the rest of the line after it) where the line from `start` to `line_end` opens with a
    fence (indented is fine), else None."""
    indent = start
    while indent < line_end and response[indent] in " \t":
        indent += 1
    if not response.startswith("```", indent, line_end):
        return None
    info = indent + 3
    while info < line_end and response[info] in " \t":
        info += 1
    tag = _FENCE_TAG.match(response, info, line_end).group()
    return tag, response[info + len(tag) : line_end]


def _last_python_block(response: str) -> tuple[int, int] | None:
    """(start, end) of the last block whose opening fence names Python (a line of its own: "```python"), up to the
    next fence; None if there is none. Read apart from how the fences before it pair up: an example in an untagged
    fence after the program, or a fence opened mid-line in the reasoning, do not hide the program. Linear: the
    fences are found once, and each candidate's close by bisection."""
    fences, at = [], response.find("```")
    while at != -1:
        fences.append(at)
        at = response.find("```", at + 3)
    last, start = None, 0
    while (line_end := response.find("\n", start)) != -1:
        fence = _opening_fence(response, start, line_end)
        if fence is not None and fence[0] and fence[0].lower() in PYTHON_TAGS and not fence[1].strip():
            close = bisect.bisect_right(fences, line_end)
            last = (line_end + 1, fences[close]) if close < len(fences) else last
        start = line_end + 1
    return last


def extract_code(response: str) -> str | None:
    """The last fenced Python code block of the response (an opening fence that names Python wins over untagged
    ones, `_last_python_block`), else its last untagged block, dedented; None if there is none.

    An opening fence starts a line (indented is fine), may name the language and ends its line; the block ends at
    the next fence, even one after code on the same line. Linear in the response (untrusted: no backtracking regex)."""
    tagged = _last_python_block(response)
    if tagged is not None:
        code = textwrap.dedent(response[tagged[0] : tagged[1]])
        return code if code.strip() else None
    last = None
    start, end = 0, len(response)
    while start < end:
        line_end = response.find("\n", start)
        if line_end == -1:
            break  # an opening fence must end its line
        fence = _opening_fence(response, start, line_end)
        if fence is not None:
            close = response.find("```", line_end + 1)
            if close == -1:
                break  # unclosed: no fence follows, so no block either
            if fence[0].lower() in PYTHON_TAGS:
                last = (line_end + 1, close)
            start = response.find("\n", close + 3) + 1 or end  # the next line that may open a block
        else:
            start = line_end + 1
    if last is None:
        return None
    code = textwrap.dedent(response[last[0] : last[1]])
    return code if code.strip() else None


def normalize_output(text: str) -> str:
    """Output as compared: trailing whitespace of each line and trailing blank lines dropped."""
    return "\n".join(line.rstrip() for line in text.splitlines()).rstrip("\n")


def _normalize_bytes(output: bytes) -> bytes:
    """normalize_output on undecoded bytes (only ASCII whitespace and line breaks count); both sides compare so."""
    return b"\n".join(line.rstrip() for line in output.splitlines()).rstrip(b"\n")


# ---------------------------------------------------------------------------------------------------------------
# The check kept in the trainer: a small tree over literals and the values the sandbox printed.


class _Failed(Exception):
    """The case cannot pass; `key` is the failure it counts under."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


Node = Any
"""A node of the check (Literal, Value, Compare, BoolOp, Not, IsClose, AbsDifference, Builtin, Items); a plain alias,
as dataclasses look string annotations up in sys.modules, where a loaded reward file is not."""


@dataclass(frozen=True)
class Literal:
    """An expected value: an `ast.literal_eval` literal of an assert, or a call-based output. Never in the sandbox."""

    value: Any


@dataclass(frozen=True)
class Value:
    """The value of the index-th expression under test, as the sandbox printed it."""

    index: int


@dataclass(frozen=True)
class Compare:
    """A (chained) comparison; `loose`: lists and tuples compare elementwise (JSON expected values have no tuples)."""

    operands: tuple[Node, ...]
    ops: tuple[str, ...]
    loose: bool = False


@dataclass(frozen=True)
class BoolOp:
    """`and` (conjunction) or `or`, short-circuiting as Python does."""

    conjunction: bool
    operands: tuple[Node, ...]


@dataclass(frozen=True)
class Not:
    operand: Node


@dataclass(frozen=True)
class IsClose:
    """math.isclose(a, b, rel_tol=..., abs_tol=...), on numbers."""

    a: Node
    b: Node
    rel_tol: Node = Literal(1e-09)
    abs_tol: Node = Literal(0.0)


@dataclass(frozen=True)
class AbsDifference:
    """abs(a - b), on numbers: the left side of `abs(f(x) - 2.5) < 1e-6`."""

    a: Node
    b: Node


@dataclass(frozen=True)
class Builtin:
    """A builtin applied in the trainer to its arguments' values (TRAINER_BUILTINS): rebinding `set` changes nothing."""

    name: str
    args: tuple[Node, ...]


@dataclass(frozen=True)
class Items:
    """A list made in the trainer of its items' values: a comprehension over constants, unrolled (`[f(i) == i for i
    in range(3)]` is three comparisons here, none in the program's process)."""

    items: tuple[Node, ...]


class Iterated:
    """What the sandbox drew from an iterator the program made (a generator, a `map` object): list(), sorted(), sum(),
    set() ... in the trainer take its items, while, as the iterator, it equals only itself and has no len()."""

    __slots__ = ("items",)

    def __init__(self, items: Sequence[Any]) -> None:
        self.items = tuple(items)

    def __iter__(self) -> Any:
        return iter(self.items)

    def __repr__(self) -> str:
        return f"Iterated({list(self.items)!r:.200})"


_NUMBERS = (int, float, bool, complex)
_INNER_NODES = (Compare, BoolOp, Not, IsClose, AbsDifference, Builtin, Items)


def _hashed(kind: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """`kind` (set, frozenset) of an iterable whose items were first checked for hash collisions."""
    return lambda items: kind(_few_collisions(list(items)))


def _dict(pairs: Any) -> dict[Any, Any]:
    if type(pairs) is dict:
        return dict(pairs)
    pairs = [tuple(pair) for pair in pairs]
    if any(len(pair) != 2 for pair in pairs):
        raise ValueError("dict() takes pairs")
    return dict(zip(_few_collisions([key for key, _ in pairs]), (value for _, value in pairs)))


TRAINER_BUILTINS: dict[str, Callable[..., Any]] = {
    "set": _hashed(set),
    "frozenset": _hashed(frozenset),
    "dict": _dict,
    **{name: getattr(builtins, name) for name in "list tuple sorted len sum min max abs int float str bool".split()},
    "all": all,
    "any": any,
}
"""Builtins a test calls without keywords (`set(f(x))`), applied in the trainer, never looked up in the program."""


def _untuple(value: Any) -> Any:
    """Tuples as lists, through lists, tuples and dict values (not dict keys or set items, which stay hashable)."""
    if type(value) in (list, tuple):
        return [_untuple(item) for item in value]
    if type(value) is dict:
        return {key: _untuple(item) for key, item in value.items()}
    return value


_OPERATORS: dict[type[ast.cmpop], tuple[str, Callable[[Any, Any], bool]]] = {
    ast.Eq: ("==", operator.eq),
    ast.NotEq: ("!=", operator.ne),
    ast.Lt: ("<", operator.lt),
    ast.LtE: ("<=", operator.le),
    ast.Gt: (">", operator.gt),
    ast.GtE: (">=", operator.ge),
    ast.In: ("in", lambda item, container: item in container),
    ast.NotIn: ("not in", lambda item, container: item not in container),
    ast.Is: ("is", operator.is_),
    ast.IsNot: ("is not", operator.is_not),
}
_COMPARISONS = dict(_OPERATORS.values())


def _number(value: Any) -> Any:
    if type(value) not in _NUMBERS:
        raise _Failed("num_wrong_answer")
    return value


def evaluate(node: Node, values: Sequence[Any]) -> Any:
    """What `node` comes to over `values` (one per expression under test; a _Failed stands for one that failed)."""
    if isinstance(node, Literal):
        return node.value
    if isinstance(node, Value):
        value = values[node.index]
        if isinstance(value, _Failed):
            raise value
        return value
    try:
        if isinstance(node, Compare):
            left = evaluate(node.operands[0], values)
            for op, operand in zip(node.ops, node.operands[1:]):
                right = evaluate(operand, values)
                if node.loose:
                    left, right = _untuple(left), _untuple(right)
                if not _COMPARISONS[op](left, right):
                    return False
                left = right
            return True
        if isinstance(node, BoolOp):
            result: Any = None
            for operand in node.operands:
                result = evaluate(operand, values)
                if bool(result) != node.conjunction:
                    break
            return result
        if isinstance(node, Not):
            return not evaluate(node.operand, values)
        if isinstance(node, IsClose):
            a, b, rel_tol, abs_tol = (
                _number(evaluate(part, values)) for part in (node.a, node.b, node.rel_tol, node.abs_tol)
            )
            return math.isclose(a, b, rel_tol=rel_tol, abs_tol=abs_tol)
        if isinstance(node, AbsDifference):
            return abs(_number(evaluate(node.a, values)) - _number(evaluate(node.b, values)))
        if isinstance(node, Builtin):
            return TRAINER_BUILTINS[node.name](*(evaluate(argument, values) for argument in node.args))
        if isinstance(node, Items):
            return [evaluate(item, values) for item in node.items]
    except _Failed:
        raise
    except Exception:  # values that do not compare (None < 1, a negative tolerance, an int too large for a float)
        raise _Failed("num_wrong_answer") from None
    raise TypeError(f"not a check node: {node!r}")


@dataclass(frozen=True)
class Check:
    """A value-form case: the expressions the sandbox evaluates (source, in order) and the test over their values."""

    expressions: tuple[str, ...]
    test: Node
    source: str
    """The assert, or the call and expected output, it came from (for messages)."""
    fn_name: str = ""
    """The function under test: the program's, even where a builtin has its name."""
    decided_in_sandbox: bool = False
    """Its verdict still depends on what runs in the program's process (an expected side computed there, a comparison
    or a truth value made there: `_sandbox_verdict`), so a program can pass it without the right answer. Counted and
    logged, not refused."""


@dataclass(frozen=True)
class Case:
    """One run of the program: what it reads on stdin and what makes it pass."""

    stdin: str = ""
    expected_stdout: str | None = None
    """The stdin/stdout form's expected output."""
    check: Check | None = None
    """The call-based and assert forms' check: run the judge after the program, then test its values here."""
    secret: str = dataclasses.field(default_factory=lambda: secrets.token_hex(16), compare=False, repr=False)
    """On the judge's line after VALUE_MARKER (`judge_marker`): only the judge's code holds it (not in the program's
    source lines while it runs), so a program that prints the line and leaves before the judge must dig it out of its
    own process first, not print a line the public format gives. Best effort, as the rest of the judge's side."""


# ---------------------------------------------------------------------------------------------------------------
# From the ground truth to checks.

_BUILTIN_NAMES = frozenset(dir(builtins))
_NOT_LITERAL = object()
_SINGLETONS = (None, True, False)


def _literal(node: ast.expr, env: Mapping[str, Any] | None = None) -> Any:
    """The value of a literal or constant expression (constants.py, names looked up in `env`), else _NOT_LITERAL."""
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        pass
    try:
        return constants.evaluate(node, env)
    except constants.NotConstant:
        return _NOT_LITERAL


def _is_singleton(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and any(node.value is singleton for singleton in _SINGLETONS)


def _calls(node: ast.expr, name: str, module: str | None = None) -> bool:
    if not isinstance(node, ast.Call) or any(isinstance(arg, ast.Starred) for arg in node.args):
        return False
    if any(named.arg is None for named in node.keywords):  # **kwargs
        return False
    func = node.func
    if isinstance(func, ast.Name):
        return func.id == name
    return (
        module is not None
        and isinstance(func, ast.Attribute)
        and func.attr == name
        and isinstance(func.value, ast.Name)
        and func.value.id == module
    )


MAX_UNROLLED = 1024
"""The most items of a comprehension over constants the trainer unrolls (in `all(...)`/`any(...)`, as a trainer-side
builtin's argument, a list, set or dict comprehension): each item is one small expression under test."""
MAX_UNROLLED_WEIGHT = 1 << 20
"""The most a comprehension's loop values may weigh (constants.weight), summed over the items they are copied into."""
MAX_UNROLLED_OUTPUT = 1 << 18
"""The most bytes an unrolled check's values may print, judged by its expected values: a quarter of the default
`output_kb`, as each item is a value of its own on the judge's line."""
ITERATING_BUILTINS = frozenset("list tuple set frozenset dict sorted sum min max".split())
"""Trainer-side builtins that iterate their first argument: a generator there is sent as a list comprehension."""
MAX_WARNINGS = 100
"""The most asserts decided in the program's process that are logged (each once); later ones are only marked."""
_warned: set[str] = set()


def _substituted(node: Any, values: Mapping[str, ast.expr]) -> Any:
    """`node` with each name in `values` replaced by its value's expression; what does not change is shared, not
    copied (no tree is changed in place once parsed)."""
    if isinstance(node, ast.Name):
        return values.get(node.id, node)
    if not isinstance(node, ast.AST):
        return node
    fields, changed = {}, False
    for field, value in ast.iter_fields(node):
        if isinstance(value, list):
            new: Any = [_substituted(item, values) for item in value]
            changed = changed or any(old is not item for old, item in zip(value, new))
        else:
            new = _substituted(value, values)
            changed = changed or new is not value
        fields[field] = new
    return type(node)(**fields) if changed else node


@dataclass
class _Translation:
    """An assert being translated: the function under test, and what must run in the sandbox so far."""

    fn_name: str
    expressions: list[str]
    trees: list[ast.expr]

    @property
    def env(self) -> dict[str, Any]:
        """Constants see the function under test as no constant, even where it has a builtin's name."""
        return {self.fn_name: constants.UNKNOWN} if self.fn_name else {}

    def value(self, node: ast.expr) -> Value:
        self.expressions.append(ast.unparse(node))
        self.trees.append(node)
        return Value(len(self.expressions) - 1)

    def fits(self, check: Node, mark: int) -> bool:
        """Whether the values an unrolled check's expressions (those from `mark` on) print when right (as large as
        its expected values) stay within MAX_UNROLLED_OUTPUT; if not, they are taken back, and the whole runs in
        the sandbox as Python would run it, where its output is one value."""
        left = MAX_UNROLLED_OUTPUT - 16 * (len(self.expressions) - mark)
        stack = [check]
        while stack and left >= 0:
            node = stack.pop()
            if isinstance(node, Literal):
                left -= _printed_size(node.value, left)
            elif isinstance(node, _INNER_NODES):
                for part in vars(node).values():
                    stack.extend(
                        item for item in (part if isinstance(part, tuple) else (part,)) if hasattr(item, "__dict__")
                    )
        if left >= 0:
            return True
        del self.expressions[mark:], self.trees[mark:]
        return False


def _printed_size(value: Any, cap: int) -> int:
    """About how many bytes the judge prints for a value like `value`, counted up to just past `cap`."""
    total, stack = 0, [value]
    while stack and total <= cap:
        value = stack.pop()
        kind = type(value)
        if kind in (str, bytes):
            total += 12 + 2 * len(value)
        elif kind is int:
            total += 12 + value.bit_length() // 4
        elif kind is dict:
            total += 10
            stack.extend(value.keys())
            stack.extend(value.values())
        elif kind in (list, tuple, set, frozenset):
            total += 10
            stack.extend(value)
        else:
            total += 24
    return total


def _value_expression(value: Any) -> ast.expr | None:
    """`value` (a constant) as an expression to put in place of a loop variable; None where it has no source."""
    kind = type(value)
    if value is None or kind in (bool, str, bytes) or (kind is int and 0 <= value and value.bit_length() < 8192):
        return ast.Constant(value)
    if kind is float and math.isfinite(value) and math.copysign(1.0, value) > 0:
        return ast.Constant(value)
    source = _value_source(value)  # a negative number as a unary minus, which unparse puts in brackets as needed
    return None if source is None else ast.parse(source, mode="eval").body


def _value_source(value: Any) -> str | None:
    """Python source that makes `value` (a constant: builtin types only) where no name is rebound, else None."""
    kind = type(value)
    if value is None or kind in (bool, str, bytes):
        return repr(value)
    if kind is int:
        return repr(value) if value.bit_length() < 8192 else hex(value)  # repr stops at 4300 digits
    if kind is float:
        return _python_source(value)
    if kind is complex:
        return f"complex({_python_source(value.real)}, {_python_source(value.imag)})"
    if kind is range:
        return f"range({value.start}, {value.stop}, {value.step})"
    if kind is dict:
        pairs = [(_value_source(key), _value_source(item)) for key, item in value.items()]
        if any(part is None for pair in pairs for part in pair):
            return None
        return "{" + ", ".join(f"{key}: {item}" for key, item in pairs) + "}"
    if kind in (list, tuple, set, frozenset):
        items = [_value_source(item) for item in value]
        if None in items:
            return None
        inner = ", ".join(items)
        if kind is list:
            return f"[{inner}]"
        if kind is tuple:
            return f"({inner},)" if len(items) == 1 else f"({inner})"
        return ("{" + inner + "}" if items else "set()") if kind is set else f"frozenset({{{inner}}})"
    return None


def _scope_names(node: ast.expr) -> set[str] | None:
    """The names nested scopes in `node` bind (lambda parameters, comprehension targets); None where it assigns with
    `:=`, which unrolling would change."""
    names: set[str] = set()
    for inner in ast.walk(node):
        if isinstance(inner, ast.NamedExpr):
            return None
        if isinstance(inner, ast.Lambda):
            parameters = inner.args
            every = [*parameters.posonlyargs, *parameters.args, *parameters.kwonlyargs]
            every += [parameter for parameter in (parameters.vararg, parameters.kwarg) if parameter is not None]
            names.update(parameter.arg for parameter in every)
        elif isinstance(inner, ast.comprehension):
            names.update(target.id for target in ast.walk(inner.target) if isinstance(target, ast.Name))
    return names


def _expanded(node: ast.expr, translation: _Translation) -> list[list[ast.expr]] | None:
    """The items of a comprehension whose loops and filters are constants (several `for`s, tuple targets, `zip`,
    `enumerate`, `if`s decided here), each its element expressions (a dict comprehension's key and value) with the
    loop variables' values in place of their names; None for anything else, or past MAX_UNROLLED items."""
    if not isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
        return None
    elements = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
    targets = {name.id for loop in node.generators for name in ast.walk(loop.target) if isinstance(name, ast.Name)}
    for element in elements:
        inner = _scope_names(element)
        if inner is None or inner & targets:
            return None
    try:
        bound = constants.bindings(node.generators, MAX_UNROLLED, translation.env)
    except (constants.NotConstant, constants.TooLarge):  # more items or work than unrolling takes: the sandbox's
        return None
    items, size = [], 0
    for env in bound:
        values = {}
        for name in targets:
            expression = _value_expression(env[name])
            if expression is None:
                return None
            size += constants.weight(env[name], MAX_UNROLLED_WEIGHT)
            if size > MAX_UNROLLED_WEIGHT:
                return None
            values[name] = expression
        items.append([_substituted(element, values) for element in elements])
    return items


def _unrolled(node: ast.expr, translation: _Translation) -> tuple[bool, list[ast.expr]] | None:
    """`all(...)` or `any(...)` of a comprehension over constants (`_expanded`) or of a list or tuple display, as
    (conjunction, its items' expressions): its comparisons are then the trainer's, where the program's `all` or an
    object whose `==` is always true cannot decide them."""
    if not (_calls(node, "all") or _calls(node, "any")) or len(node.args) != 1 or node.keywords:
        return None
    conjunction = _calls(node, "all")
    if translation.fn_name == ("all" if conjunction else "any"):
        return None
    [argument] = node.args
    if isinstance(argument, (ast.List, ast.Tuple)):
        if any(isinstance(item, ast.Starred) for item in argument.elts):
            return None
        return conjunction, list(argument.elts)
    if isinstance(argument, ast.DictComp):
        return None
    items = _expanded(argument, translation)
    return None if items is None else (conjunction, [element for [element] in items])


def _comprehension(node: ast.expr, translation: _Translation) -> Node | None:
    """A list, set or dict comprehension over constants as the trainer-side container of its items' checks."""
    if not isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp)):
        return None
    items = _expanded(node, translation)
    if items is None:
        return None
    if isinstance(node, ast.DictComp):
        pairs = Items(tuple(Items(tuple(_translate(part, translation) for part in item)) for item in items))
        return Builtin("dict", (pairs,))
    listed = Items(tuple(_translate(element, translation) for [element] in items))
    return Builtin("set", (listed,)) if isinstance(node, ast.SetComp) else listed


def _argument(name: str, index: int, node: ast.expr, translation: _Translation) -> Node:
    """A trainer-side builtin's argument; a generator it iterates is translated as the list comprehension it would
    give (unrolled over constants, else one expression under test whose value is a list, not a generator)."""
    if index == 0 and name in ITERATING_BUILTINS and isinstance(node, ast.GeneratorExp):
        node = ast.ListComp(elt=node.elt, generators=node.generators)
    return _translate(node, translation)


def _translate(node: ast.expr, translation: _Translation) -> Node:
    """The trainer-side test of an assert's expression; what must run in the sandbox is added to `translation`."""
    value = _literal(node, translation.env)
    if value is not _NOT_LITERAL:
        return Literal(value)
    fn_name = translation.fn_name
    if isinstance(node, ast.Compare):
        operands = [node.left, *node.comparators]
        identities_of_singletons = all(
            _is_singleton(operands[index]) or _is_singleton(operands[index + 1])
            for index, op in enumerate(node.ops)
            if isinstance(op, (ast.Is, ast.IsNot))
        )
        if identities_of_singletons:  # `x is y` of two computed values means nothing once they are serialised
            return Compare(
                tuple(_translate(operand, translation) for operand in operands),
                tuple(_OPERATORS[type(op)][0] for op in node.ops),
            )
    elif isinstance(node, ast.BoolOp):
        return BoolOp(isinstance(node.op, ast.And), tuple(_translate(value, translation) for value in node.values))
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return Not(_translate(node.operand, translation))
    elif _calls(node, "isclose", module="math") and len(node.args) == 2:
        tolerances = {named.arg: named.value for named in node.keywords}
        if set(tolerances) <= {"rel_tol", "abs_tol"}:
            a, b = (_translate(arg, translation) for arg in node.args)
            named = {
                name: _translate(tolerances[name], translation)
                for name in ("rel_tol", "abs_tol")
                if name in tolerances
            }
            return IsClose(a, b, **named)
    elif _calls(node, "abs") and fn_name != "abs" and len(node.args) == 1 and not node.keywords:
        [argument] = node.args
        if isinstance(argument, ast.BinOp) and isinstance(argument.op, ast.Sub):
            return AbsDifference(_translate(argument.left, translation), _translate(argument.right, translation))
    mark = len(translation.expressions)
    unrolled = _unrolled(node, translation)
    if unrolled is not None:
        conjunction, parts = unrolled
        if not parts:
            return Literal(conjunction)
        check = Builtin("bool", (BoolOp(conjunction, tuple(_translate(part, translation) for part in parts)),))
        if translation.fits(check, mark):
            return check
    comprehension = _comprehension(node, translation)
    if comprehension is not None and translation.fits(comprehension, mark):
        return comprehension
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in TRAINER_BUILTINS
        and node.func.id != fn_name
        and not node.keywords
        and not any(isinstance(argument, ast.Starred) for argument in node.args)
        and not (node.func.id in ("all", "any") and any(isinstance(arg, ast.GeneratorExp) for arg in node.args))
    ):  # all()/any() of a generator not unrolled stop where Python's do: they run whole in the sandbox
        name = node.func.id
        return Builtin(name, tuple(_argument(name, index, arg, translation) for index, arg in enumerate(node.args)))
    return translation.value(node)


def _decides(tree: ast.expr, fn_name: str) -> bool:
    """Whether an expression under test makes a verdict of its own: a comparison, or a call of all() or any(),
    outside a lambda it passes as an argument (a sort key is the function's input, not a verdict)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Compare):
            return True
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name) and node.func.id in ("all", "any") and node.func.id != fn_name:
                return True
            stack.append(node.func)
            stack.extend(part for part in node.args if not isinstance(part, ast.Lambda))
            stack.extend(named.value for named in node.keywords if not isinstance(named.value, ast.Lambda))
        else:
            stack.extend(ast.iter_child_nodes(node))
    return False


def _sandbox_verdict(node: Node, translation: _Translation, truth: bool = True) -> str:
    """Why the check's verdict depends on what runs in the program's process ('' where it does not): an expression
    under test that compares (or calls all/any) itself, one that does not call the function under test (expected
    data computed there), or one whose truth is the verdict and that is more than a call of that function."""
    if isinstance(node, Value):
        tree, source = translation.trees[node.index], translation.expressions[node.index]
        fn_name = translation.fn_name
        if _decides(tree, fn_name):
            return f"`{source:.200}` compares in the program's process"
        if fn_name and not any(isinstance(name, ast.Name) and name.id == fn_name for name in ast.walk(tree)):
            return f"`{source:.200}` does not call {fn_name}(): it is data computed in the program's process"
        called = (
            isinstance(tree, ast.Call)
            and isinstance(tree.func, ast.Name)
            and tree.func.id == (fn_name or tree.func.id)
        )
        if truth and not called:
            return f"the truth of `{source:.200}` is computed in the program's process"
        return ""
    if isinstance(node, BoolOp):
        parts, truth_of_parts = node.operands, truth
    elif isinstance(node, Not):
        parts, truth_of_parts = (node.operand,), True
    elif isinstance(node, Builtin):
        parts, truth_of_parts = node.args, node.name in ("bool", "all", "any") and truth
    elif isinstance(node, Compare):
        parts, truth_of_parts = node.operands, False
    elif isinstance(node, Items):
        parts, truth_of_parts = node.items, False
    elif isinstance(node, (IsClose, AbsDifference)):
        parts, truth_of_parts = tuple(vars(node).values()), False
    else:
        return ""
    for part in parts:
        reason = _sandbox_verdict(part, translation, truth_of_parts)
        if reason:
            return reason
    return ""


def _warn(assertion: str, reason: str) -> None:
    """Logs an assert decided in the program's process, once per assert text, at most MAX_WARNINGS of them."""
    if assertion in _warned or len(_warned) > MAX_WARNINGS:
        return
    _warned.add(assertion)
    if len(_warned) > MAX_WARNINGS:
        logger.warning(
            "More asserts are decided in the program's process; they are not logged (Check.decided_in_sandbox)."
        )
        return
    logger.warning(
        "The assert %r is decided in the program's process (%s): a wrong program can pass it (an object whose == "
        "is always true, reading the judge's frame, forging its line). Compare the function's result with a "
        "constant the trainer evaluates (`assert f(3) == 9`, `assert f(3) == [i * i for i in range(3)]`), or use "
        "all()/any() over loops of constants (at most %d items, whose expected values print within %d KiB); "
        "docs/rewards.md, 'How a case is judged'.",
        f"{assertion:.300}",
        reason,
        MAX_UNROLLED,
        MAX_UNROLLED_OUTPUT // 1024,
    )


@functools.lru_cache(maxsize=4096)
def parse_assert(assertion: str, fn_name: str = "") -> Check:
    """The check of one assert string (one or more assert statements) testing `fn_name`; ValueError when it is
    anything else. One whose verdict still depends on the program's process is logged and marked, not refused.
    Cached: a group's samples share their asserts, and unrolling 1024 items takes tens of milliseconds (checks are
    never changed once made)."""
    try:
        statements = ast.parse(assertion, mode="exec").body
    except SyntaxError as error:
        raise ValueError(f"is not valid Python ({error.msg})") from None
    if not statements or not all(isinstance(statement, ast.Assert) for statement in statements):
        raise ValueError("is not an assert statement (or several)")
    translation = _Translation(fn_name, [], [])
    try:
        tests = [_translate(statement.test, translation) for statement in statements]
    except constants.TooLarge as error:
        raise ValueError(f"computes a constant too large to evaluate in the trainer ({error})") from None
    test = tests[0] if len(tests) == 1 else BoolOp(True, tuple(tests))
    reason = _sandbox_verdict(test, translation)
    if reason:
        _warn(assertion, reason)
    return Check(tuple(translation.expressions), test, assertion, fn_name, decided_in_sandbox=bool(reason))


def _python_source(value: Any) -> str:
    """Python source of a JSON value (repr, but inf and nan as expressions that need no name)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "(1e999-1e999)" if math.isnan(value) else ("-1e999" if value < 0 else "1e999")
    if isinstance(value, list):
        return "[" + ", ".join(map(_python_source, value)) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key!r}: {_python_source(item)}" for key, item in value.items()) + "}"
    return repr(value)


def _call_source(fn_name: str, arguments: list[Any]) -> str:
    try:
        json.dumps(arguments, allow_nan=False)  # the common case, checked at C speed: repr is valid Python
    except ValueError:
        return f"{fn_name}({', '.join(map(_python_source, arguments))})"
    return f"{fn_name}({repr(arguments)[1:-1]})"


def _string_list(value: Any, key: str, where: str) -> list[str]:
    if not isinstance(value, list) or not value or not all(isinstance(item, str) for item in value):
        raise ValueError(f"{where}: ground_truth[{key!r}] must be a non-empty list of strings, got {value!r:.200}.")
    return value


def _function_name(ground_truth: Mapping[str, Any], where: str) -> str:
    fn_name = ground_truth.get("fn_name")
    if not isinstance(fn_name, str) or not fn_name.isidentifier() or iskeyword(fn_name):
        raise ValueError(f"{where}: ground_truth['fn_name'] must name a Python function, got {fn_name!r}.")
    return fn_name


def parse_test_cases(ground_truth: Any, where: str) -> list[Case]:
    """The test cases of one sample's ground truth; ValueError naming `where` (the sample) when it is malformed."""
    forms = (
        'one of {"inputs": [...], "outputs": [...]} (stdin/stdout pairs), {"fn_name": "f", "inputs": [[1, 2], ...], '
        '"outputs": [3, ...]} (call-based) or {"fn_name": "f", "asserts": ["assert f(1) == 2", ...]}'
    )
    if isinstance(ground_truth, str):
        try:
            ground_truth = json.loads(ground_truth)
        except json.JSONDecodeError as error:
            raise ValueError(
                f"{where}: ground_truth is a string but not JSON ({error}); it must be {forms}."
            ) from None
    if not isinstance(ground_truth, Mapping):
        raise ValueError(f"{where}: ground_truth is a {type(ground_truth).__name__}; it must be {forms}.")
    # a key set to null (or an empty fn_name) is absent: stdin tests of APPS/TACO-style data carry "fn_name": null or
    # "", and a dict column of mixed forms read from Parquet gives every row every key (null where the row has none)
    ground_truth = {
        key: value for key, value in ground_truth.items() if value is not None and (key != "fn_name" or value != "")
    }
    if "asserts" in ground_truth:
        fn_name = _function_name(ground_truth, where)
        cases = []
        for index, assertion in enumerate(_string_list(ground_truth["asserts"], "asserts", where)):
            try:
                cases.append(Case(check=parse_assert(assertion, fn_name)))
            except ValueError as error:
                raise ValueError(f"{where}: ground_truth['asserts'][{index}] {error}: {assertion!r:.200}") from None
        return cases
    if "fn_name" in ground_truth and ("inputs" in ground_truth or "outputs" in ground_truth):
        fn_name = _function_name(ground_truth, where)
        inputs, outputs = ground_truth.get("inputs"), ground_truth.get("outputs")
        if not isinstance(inputs, list) or not inputs or not all(isinstance(arguments, list) for arguments in inputs):
            raise ValueError(
                f"{where}: ground_truth['inputs'] of call-based tests must be a non-empty list of argument lists, "
                f"got {inputs!r:.200}."
            )
        if not isinstance(outputs, list) or len(outputs) != len(inputs):
            raise ValueError(
                f"{where}: ground_truth has {len(inputs)} inputs but "
                f"{len(outputs) if isinstance(outputs, list) else repr(outputs)[:200]} outputs."
            )
        calls = [_call_source(fn_name, arguments) for arguments in inputs]
        return [
            Case(
                check=Check(
                    (call,), Compare((Value(0), Literal(expected)), ("==",), loose=True), f"{call} == ...", fn_name
                )
            )
            for call, expected in zip(calls, outputs)
        ]
    if "inputs" in ground_truth or "outputs" in ground_truth:
        inputs = _string_list(ground_truth.get("inputs"), "inputs", where)
        outputs = _string_list(ground_truth.get("outputs"), "outputs", where)
        if len(inputs) != len(outputs):
            raise ValueError(f"{where}: ground_truth has {len(inputs)} inputs but {len(outputs)} outputs.")
        return [Case(stdin=stdin, expected_stdout=stdout) for stdin, stdout in zip(inputs, outputs)]
    raise ValueError(f"{where}: ground_truth has keys {sorted(map(str, ground_truth))}; it must be {forms}.")


# ---------------------------------------------------------------------------------------------------------------
# Running and judging.


def case_suffix(case: Case, node_budget: int) -> str:
    """What runs after the program in this case: nothing, or the judge printing the expressions' values."""
    if case.check is None:
        return ""
    thunks = ", ".join(f"lambda: ({expression}\n)" for expression in case.check.expressions)
    name = case.check.fn_name
    own = f"if '_verl_program' in globals(): {name} = _verl_program.get({name!r})\n" if name in _BUILTIN_NAMES else ""
    judge = _JUDGE.replace("BUDGET", str(node_budget)).replace("MARKER", repr(judge_marker(case)))
    return f"{judge}{own}_verl_judge({thunks})\n"


def judge_marker(case: Case) -> str:
    """What starts the judge's line in `case`'s output: VALUE_MARKER, the case's secret and a space."""
    return f"{VALUE_MARKER}{case.secret} "


def _decode(item: Any, depth: int = 0) -> Any:
    """A value from the judge's tagged JSON; _Failed for the marker of a value that is not plain."""
    if item is None or item is True or item is False:
        return item
    if type(item) is not list or not item or depth > MAX_VALUE_DEPTH + 1:
        raise ValueError("not a tagged value")
    tag, *rest = item
    if tag == "other" and not rest:
        raise _Failed("num_wrong_answer")
    if tag in ("int", "float", "str", "bytes") and len(rest) == 1 and type(rest[0]) is str:
        if tag == "int":
            return int(rest[0], 16)
        if tag == "float":
            return float.fromhex(rest[0])
        raw = bytes.fromhex(rest[0])
        return raw.decode("utf-8", "surrogatepass") if tag == "str" else raw
    if tag == "complex" and len(rest) == 2 and all(type(part) is str for part in rest):
        return complex(float.fromhex(rest[0]), float.fromhex(rest[1]))
    if tag == "iter":
        return Iterated([_decode(part, depth + 1) for part in rest])
    containers = {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}
    if tag in containers:
        parts = [_decode(part, depth + 1) for part in rest]
        return containers[tag](_few_collisions(parts) if tag in ("set", "frozenset") else parts)
    if tag == "dict" and len(rest) % 2 == 0:
        parts = [_decode(part, depth + 1) for part in rest]
        return dict(zip(_few_collisions(parts[::2]), parts[1::2]))
    raise ValueError(f"unknown tag {tag!r:.40}")


def _few_collisions(keys: list[Any]) -> list[Any]:
    """`keys` if at most MAX_COLLISIONS of them share a hash, else _Failed. Counting hashes is linear (a hash hashes
    to itself), unlike building a set or dict of colliding keys."""
    if len(keys) > MAX_COLLISIONS:
        counts = Counter(map(hash, keys))
        if max(counts.values()) > MAX_COLLISIONS:
            raise _Failed("num_wrong_answer")
    return keys


def _judge_line(stdout: bytes, marker_text: str) -> bytes | None:
    """The judge's line: the only line of `stdout` holding `marker_text` (`judge_marker`), which must end the output
    (the judge leaves right after it); None otherwise, as the line then may not be the judge's alone."""
    marker = marker_text.encode("ascii")
    if stdout.count(marker) != 1:
        return None
    at = stdout.find(b"\n" + marker)
    if at == -1 or not stdout.endswith(b"\n") or stdout.find(b"\n", at + 1) != len(stdout) - 1:
        return None
    return stdout[at + 1 + len(marker) : -1]


def read_values(stdout: bytes | str, count: int, marker: str) -> list[Any] | None:
    """The values on the judge's line of `stdout` (see _judge_line; `marker`: its case's `judge_marker`), a _Failed
    for each that failed; None without a valid line."""
    line = _judge_line(stdout if isinstance(stdout, bytes) else stdout.encode("utf-8", "surrogatepass"), marker)
    if line is None:
        return None
    try:
        items = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if type(items) is not list or len(items) != count:
        return None
    values: list[Any] = []
    for item in items:
        if item == ["error"]:
            values.append(_Failed("num_runtime_error"))
        elif item == ["toolarge"]:
            values.append(_Failed("num_output_limit"))
        else:
            try:
                values.append(_decode(item))
            except _Failed as failed:
                values.append(failed)
            except (ValueError, TypeError, RecursionError, OverflowError, MemoryError):
                return None  # not what the judge prints: the program forged it
    return values


def outcome(case: Case, result: SandboxResult) -> str | None:
    """None when the case passed, else the failure key it counts under."""
    if result.status != "ok":
        return _FAILURES.get(result.status, "num_runtime_error")
    if case.check is None:
        expected = (case.expected_stdout or "").encode("utf-8", "surrogatepass")
        passed = _normalize_bytes(result.stdout_bytes) == _normalize_bytes(expected)
    else:
        values = read_values(result.stdout_bytes, len(case.check.expressions), judge_marker(case))
        if values is None:  # the program exited before the judge ran (or printed a line the judge would not)
            return "num_wrong_answer"
        try:
            passed = bool(evaluate(case.check.test, values))
        except _Failed as failed:
            return failed.key
        except Exception:
            return "num_wrong_answer"
    return None if passed else "num_wrong_answer"
