# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Expected sides written as constant expressions, evaluated in the trainer (verl/rewards/sandbox/constants.py)."""

import ast
import math
import time

import pytest

from verl.rewards.sandbox import constants, judge


def _value(source: str) -> object:
    return constants.evaluate(ast.parse(source, mode="eval").body)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("2 ** 10", 1024),
        ("10 ** 9 + 7", 1_000_000_007),
        ("[0] * 4", [0, 0, 0, 0]),
        ("1 / 3", 1 / 3),
        ("-(3 // 2) % 5", 4),
        ("(1 << 40) | 1", 2**40 + 1),
        ("'ab' * 2 + 'c'", "ababc"),
        ("[[0] * 2] * 2", [[0, 0], [0, 0]]),
        ("{'a': 2 ** 3, (1, 2): [1 / 2]}", {"a": 8, (1, 2): [0.5]}),
        ("list(range(1, 10, 3))", [1, 4, 7]),
        ("sorted({3, 1, 2})[::-1]", [3, 2, 1]),
        ("math.sqrt(2) * math.pi", math.sqrt(2) * math.pi),
        ("math.factorial(20) % (10 ** 9 + 7)", math.factorial(20) % (10**9 + 7)),
        ("float('inf')", math.inf),
        ("not 0", True),
    ],
)
def test_constant_expressions_are_evaluated_in_the_trainer(source: str, expected: object) -> None:
    assert _value(source) == expected


@pytest.mark.parametrize(
    "source", ["f(2)", "x + 1", "g() * 2", "[*a]", "{**d}", "'%5d' % 3", "1 / 0", "os.getcwd()", "math.foo(1)"]
)
def test_what_names_the_program_or_fails_is_not_constant(source: str) -> None:
    with pytest.raises(constants.NotConstant):
        _value(source)


@pytest.mark.parametrize(
    "source",
    ["2 ** 10 ** 12", "[0] * 10 ** 9", "'x' * 2 ** 40", "1 << 10 ** 10", "math.factorial(10 ** 6)", "range(10 ** 12)"],
)
def test_a_constant_too_large_is_refused_before_it_is_computed(source: str) -> None:
    started = time.process_time()  # the work done: a busy machine stretches the wall time
    with pytest.raises(constants.TooLarge):
        _value(source)
    assert time.process_time() - started < 1.0
    with pytest.raises(ValueError, match="too large to evaluate in the trainer"):
        judge.parse_assert(f"assert f(1) == {source}")


def test_only_the_expression_under_test_goes_to_the_sandbox() -> None:
    check = judge.parse_assert("assert f(3) == 2 ** 10 and g(1) != [0] * 4")
    assert check.expressions == ("f(3)", "g(1)")
    assert judge.evaluate(check.test, [1024, [0, 0, 0]]) is True
    assert judge.evaluate(check.test, [1023, [0, 0, 0]]) is False


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("[i * i for i in range(3)]", [0, 1, 4]),
        ("(i for i in 'ab')", ["a", "b"]),  # a generator as the list it gives
        ("{i % 2 for i in range(5)}", {0, 1}),
        ("{k: v for k, v in [('a', 1), ('b', 2)]}", {"a": 1, "b": 2}),
        ("[x + y for x, (y, _) in zip([1, 2], [(10, 0), (20, 0)])]", [11, 22]),
        ("[(i, j) for i in range(3) for j in range(i) if i + j > 1]", [(2, 0), (2, 1)]),
        ("[[j for j in range(i)] for i in range(3)]", [[], [0], [0, 1]]),
        ("sum(i for i in range(10) if i % 2 == 0 and i)", 20),
        ("list(enumerate('ab', 1))", [(1, "a"), (2, "b")]),
        ("reversed(range(3))", [2, 1, 0]),
        ("zip([1, 2], 'abc')", [(1, "a"), (2, "b")]),
        ("'ab'.upper() + ' x '.strip() + 'A'.lower()", "ABxa"),
        ("'a,b,,c'.split(',')", ["a", "b", "", "c"]),
        ("'-'.join(str(i) for i in range(3))", "0-1-2"),
        ("'hello world'.title().replace('World', 'there')", "Hello there"),
        ("['7'.zfill(3), 'ab'.center(4, '*'), 'x'.rjust(2)]", ["007", "*ab*", " x"]),
        ("[s.isdigit() for s in ('12', 'a1')]", [True, False]),
        ("b'abc'.upper().startswith(b'AB')", True),
        ("'abcabc'.count('b') + 'abc'.find('c')", 4),
        ("1 < 2 <= 2 != 3 and 'a' in 'abc' and None is None", True),
        ("0 or [] or 'x'", "x"),
        ("'yes' if 2 > 1 else 'no'", "yes"),
        ("all(x > 0 for x in [1, 2]) and not any([])", True),
        ("[chr(ord('a') + i) for i in range(3)]", ["a", "b", "c"]),
        ("round(5, -10 ** 9)", 0),
    ],
)
def test_comprehensions_and_str_methods_of_constants_are_evaluated_in_the_trainer(
    source: str, expected: object
) -> None:
    assert _value(source) == expected


@pytest.mark.parametrize(
    "source",
    [
        "[f(i) for i in range(3)]",
        "[i for i in range(3) if f(i)]",
        "[x for x in data]",
        "'{}'.format(1)",  # format, expandtabs, translate, encode: not among the methods
        "'a\\tb'.expandtabs(4)",
        "'ab'.encode()",
        "x.upper()",
        "[1].count(1)",  # only str and bytes methods
        "[x for x, y in [(1, 2, 3)]]",  # unpacking fails: the sandbox's runtime error
        "[x for *x, y in [(1, 2)]]",
        "(1, 2) is (1, 2)",  # identity of values made here: not the assert's
        "str([1])",
    ],
)
def test_comprehensions_over_what_is_not_constant_are_not_constant(source: str) -> None:
    with pytest.raises(constants.NotConstant):
        _value(source)


def test_a_name_the_environment_binds_hides_a_builtin_and_unknown_is_no_constant() -> None:
    """Comprehensions read their loop variables from the environment; the function under test (UNKNOWN there) is
    the program's even where a builtin has its name, so `sum([1, 2])` with fn_name 'sum' is not the trainer's."""
    assert constants.evaluate(ast.parse("x * 2", mode="eval").body, {"x": 3}) == 6
    with pytest.raises(constants.NotConstant):
        constants.evaluate(ast.parse("sum([1, 2])", mode="eval").body, {"sum": constants.UNKNOWN})
    check = judge.parse_assert("assert sum([1, 2]) == 4", "sum")
    assert check.expressions == ("sum([1, 2])",)
    loops = ast.parse("[0 for x, y in zip(range(5), 'abcde') if x % 2]", mode="eval").body.generators
    assert constants.bindings(loops, 10) == [{"x": 1, "y": "b"}, {"x": 3, "y": "d"}]
    with pytest.raises(constants.TooMany):
        constants.bindings(loops, 1)


@pytest.mark.parametrize(
    "source",
    [
        "[i for i in range(10 ** 9)]",
        "[0 for i in range(10 ** 6) for j in range(10 ** 6)]",
        "sum(i * j for i in range(10 ** 5) for j in range(10 ** 5))",
        "[sorted(range(10 ** 5)) for i in range(1000)]",
        "[math.gcd(4 ** 2 ** 18 - 1, 5 ** 2 ** 17) for i in range(100)]",
        "[s.count('b') for s in ['a' * 10 ** 6] for i in range(10 ** 5)]",  # the receiver is read each time
        "('a' * 10 ** 6).replace('a', 'aa')",
        "','.join(['ab'] * 10 ** 6)",
        "'x'.center(10 ** 9)",
        "'7'.zfill(2 ** 40)",
    ],
)
def test_a_comprehension_or_method_too_large_is_refused_without_a_stall(source: str) -> None:
    """Sizes are checked before replace, join and padding run, and the work of loops is counted: each of these
    raises TooLarge in about a second at most instead of holding the trainer."""
    started = time.process_time()  # the work done: a busy machine stretches the wall time
    with pytest.raises(constants.TooLarge):
        _value(source)
    assert time.process_time() - started < 2.5
