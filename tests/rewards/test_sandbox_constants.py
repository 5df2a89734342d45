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
    started = time.monotonic()
    with pytest.raises(constants.TooLarge):
        _value(source)
    assert time.monotonic() - started < 1.0
    with pytest.raises(ValueError, match="too large to evaluate in the trainer"):
        judge.parse_assert(f"assert f(1) == {source}")


def test_only_the_expression_under_test_goes_to_the_sandbox() -> None:
    check = judge.parse_assert("assert f(3) == 2 ** 10 and g(1) != [0] * 4")
    assert check.expressions == ("f(3)", "g(1)")
    assert judge.evaluate(check.test, [1024, [0, 0, 0]]) is True
    assert judge.evaluate(check.test, [1023, [0, 0, 0]]) is False
