# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""examples/reward_function/code.py: programs run against the three ground-truth forms, through the real sandbox;
reward hacks that fooled a check run inside the program's own process score 0."""

import json
from types import ModuleType
from typing import Any

import pytest
from repo_files import REPO, load_repo_file

from verl.rewards.function import check_scores, load_reward_function


ADD_STDIN = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
ADD_FUNCTION = "Here it is:\n```python\ndef add(a, b):\n    return a + b\n```\nDone."
STDIN_CASES = {"inputs": ["1 2\n", "3 4\n"], "outputs": ["3\n", "7"]}
ASSERT_CASES = {"fn_name": "add", "asserts": ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"]}
KEYS = {
    "overall",
    "pass_rate",
    "all_passed",
    "has_code",
    "num_timeout",
    "num_memory_limit",
    "num_output_limit",
    "num_process_limit",
    "num_runtime_error",
    "num_wrong_answer",
}


@pytest.fixture(scope="module")
def code() -> ModuleType:
    return load_repo_file("examples/reward_function/code.py", "code_reward_example")


def sample(response: str, ground_truth: Any, uid: str = "u0") -> dict[str, Any]:
    return {"response": response, "ground_truth": ground_truth, "uid": uid, "response_length": 10, "prompt": ""}


def failures(score: dict[str, float]) -> dict[str, float]:
    return {key: value for key, value in score.items() if key.startswith("num_") and value}


def test_stdin_stdout_correct_partly_correct_and_wrong(code: ModuleType) -> None:
    partly = "```python\na, b = map(int, input().split())\nprint(a + b if a < 3 else 0)\n```"
    wrong = "```\nprint(0)\n```"  # an untagged block counts as Python
    samples = [sample(ADD_STDIN, STDIN_CASES), sample(partly, STDIN_CASES), sample(wrong, json.dumps(STDIN_CASES))]
    correct, half, none = code.compute_score(samples)
    assert set(correct) == KEYS
    assert correct["overall"] == correct["pass_rate"] == correct["all_passed"] == correct["has_code"] == 1.0
    assert failures(correct) == {}
    assert (half["overall"], half["all_passed"], failures(half)) == (0.5, 0.0, {"num_wrong_answer": 1.0})
    assert (none["overall"], none["has_code"], failures(none)) == (0.0, 1.0, {"num_wrong_answer": 2.0})
    strict = code.compute_score(samples[:2], all_or_nothing=True)
    assert [score["overall"] for score in strict] == [1.0, 0.0]


def test_keys_set_to_null_count_as_absent(code: ModuleType) -> None:
    """Stdin tests of APPS/TACO-style data carry "fn_name": null (APPS's and verl's graders read it as stdin/stdout)
    or "" (examples/recipes/prepare_or1_data.py drops it), and a dict column of mixed forms read from Parquet gives
    every row every key, null where the row has none: such rows were refused ("ground_truth['fn_name'] must name a
    Python function, got None")."""
    apps = json.dumps({**STDIN_CASES, "fn_name": None})
    empty = json.dumps({**STDIN_CASES, "fn_name": ""})
    parquet_stdin = {**STDIN_CASES, "fn_name": None, "asserts": None}
    parquet_asserts = {**ASSERT_CASES, "inputs": None, "outputs": None}
    samples = [sample(ADD_STDIN, truth) for truth in (apps, empty, parquet_stdin)]
    samples.append(sample(ADD_FUNCTION, parquet_asserts))
    assert [score["overall"] for score in code.compute_score(samples)] == [1.0] * 4
    with pytest.raises(ValueError, match="ground_truth\\['fn_name'\\] must name a Python function, got None"):
        code.compute_score([sample(ADD_FUNCTION, {"fn_name": None, "asserts": ["assert add(1, 2) == 3"]})])


def test_output_comparison_ignores_only_trailing_whitespace(code: ModuleType) -> None:
    cases = {"inputs": [""], "outputs": ["a b\nc\n"]}
    trailing = code.compute_score([sample("```python\nprint('a b   ')\nprint('c')\nprint()\nprint()\n```", cases)])
    leading = code.compute_score([sample("```python\nprint(' a b')\nprint('c')\n```", cases)])
    assert trailing[0]["overall"] == 1.0 and leading[0]["overall"] == 0.0


def test_assert_form(code: ModuleType) -> None:
    off_by_one = "```python\ndef add(a, b):\n    return a + b + (a < 0)\n```"
    scores = code.compute_score([sample(ADD_FUNCTION, ASSERT_CASES), sample(off_by_one, ASSERT_CASES)])
    assert scores[0]["overall"] == 1.0 and failures(scores[0]) == {}
    assert scores[1]["overall"] == 0.5 and failures(scores[1]) == {"num_wrong_answer": 1.0}


def test_exiting_early_cannot_fake_a_pass(code: ModuleType) -> None:
    cheats = [
        "```python\nimport os\ndef add(a, b):\n    return 7\nos._exit(0)\n```",
        "```python\nimport sys\ndef add(a, b):\n    return 7\nsys.exit(0)\n```",
        "```python\nimport atexit, os\natexit.register(lambda: os._exit(0))\ndef add(a, b):\n    return 7\n```",
    ]
    for score in code.compute_score([sample(cheat, ASSERT_CASES) for cheat in cheats]):
        assert score["overall"] == 0.0 and score["has_code"] == 1.0


def test_printing_the_judge_s_line_and_leaving_cannot_fake_a_pass(code: ModuleType) -> None:
    """The judge's line was a fixed, public format: a program that printed it with the values the asserts want and
    left before the judge ran scored 1.0 (a case's secret is on the line now)."""
    forged = 'import os\ndef f(x):\n    return 0\nos.write(1, b\'\\n@verl-values [["int","4"]]\\n\')\nos._exit(0)\n'
    honest = "def f(x):\n    return 2 * x\n"
    for cases in (
        {"fn_name": "f", "asserts": ["assert f(2) == 4"]},
        {"fn_name": "f", "inputs": [[2]], "outputs": [4]},
    ):
        scores = code.compute_score([sample(f"```python\n{program}```", cases) for program in (forged, honest)])
        assert [score["overall"] for score in scores] == [0.0, 1.0], scores
        assert failures(scores[0]) == {"num_wrong_answer": 1.0}


def test_no_code_block(code: ModuleType) -> None:
    responses = ["The answer is a + b.", "```python\nprint(1)\n", "```cpp\nint main() {}\n```", "```python\n\n```"]
    for score in code.compute_score([sample(response, STDIN_CASES) for response in responses]):
        assert score == dict.fromkeys(KEYS, 0.0)


def test_the_last_python_block_is_the_program(code: ModuleType) -> None:
    response = f"First try:\n```python\nprint(0)\n```\nBetter:\n{ADD_STDIN}\nExample run:\n```text\n3\n```"
    assert code.extract_code(response) == "a, b = map(int, input().split())\nprint(a + b)\n"
    assert code.extract_code("  ```python\n  print(1)\n  ```") == "print(1)\n"
    assert code.extract_code("```python\nprint(1)```") == "print(1)"  # closed on the code's last line
    # the program is the last block a fence names Python, however the fences before it pair up: an example in an
    # untagged fence after it ran as the program; a fence opened mid-line in the reasoning hid it
    program = "a, b = map(int, input().split())\nprint(a + b)\n"
    for response in (
        f"{ADD_STDIN}\nExample:\n```\n1 2\n```\n",
        f"<think>```python\nprint(0)\n```</think>\n{ADD_STDIN}",
        f"Here is a draft: ```python\nprint(0)\n```\n{ADD_STDIN}",
        f"<think>```python\nprint(0)\n```\n</think>\n{ADD_STDIN}",
    ):
        assert code.extract_code(response) == program, response
    assert code.extract_code("```\nprint(2)\n```") == "print(2)\n"  # untagged, where no block names Python


def test_failures_are_counted_by_kind(code: ModuleType) -> None:
    cases = {"inputs": ["loop", "boom", "mem", "flood", "fork", "1 2"], "outputs": ["", "", "", "", "", "3"]}
    program = (
        "```python\nimport os\ns = input()\nif s == 'loop':\n    while True: pass\nif s == 'boom':\n    1 / 0\n"
        "if s == 'mem':\n    x = bytearray(10 * 2**30)\nif s == 'flood':\n    while True: print('x' * 100)\n"
        "if s == 'fork':\n    while True: os.fork()\n"
        "a, b = map(int, s.split())\nprint(a + b)\n```"
    )
    [score] = code.compute_score([sample(program, cases)], wall_s=2.0, cpu_s=5.0, output_kb=16)
    assert score["pass_rate"] == pytest.approx(1 / 6)
    assert failures(score) == {
        "num_timeout": 1.0,
        "num_runtime_error": 1.0,
        "num_memory_limit": 1.0,
        "num_output_limit": 1.0,
        "num_process_limit": 1.0,
    }


@pytest.mark.parametrize(
    ("ground_truth", "message"),
    [
        ("not json", "ground_truth is a string but not JSON"),
        (42, "ground_truth is a int"),
        ({"tests": []}, "ground_truth has keys ['tests']"),
        ({"inputs": ["1"], "outputs": []}, "ground_truth['outputs'] must be a non-empty list of strings"),
        ({"inputs": ["1", "2"], "outputs": ["1"]}, "ground_truth has 2 inputs but 1 outputs"),
        ({"inputs": [1], "outputs": ["1"]}, "ground_truth['inputs'] must be a non-empty list of strings"),
        ({"fn_name": "f", "inputs": [1], "outputs": [1]}, "must be a non-empty list of argument lists"),
        ({"fn_name": "f", "inputs": [[1]], "outputs": [1, 2]}, "ground_truth has 1 inputs but 2 outputs"),
        ({"fn_name": "f", "asserts": ["assert f(1) =="]}, "ground_truth['asserts'][0] is not valid Python"),
        ({"fn_name": "f", "asserts": ["assert f(1)", "print(f(1))"]}, "['asserts'][1] is not an assert statement"),
        ({"fn_name": "f", "asserts": ["x = f(1)\nassert x"]}, "['asserts'][0] is not an assert statement"),
        ({"fn_name": "f(x)", "asserts": ["assert f(1)"]}, "ground_truth['fn_name'] must name a Python function"),
        ({"fn_name": "f", "asserts": "assert f(1)"}, "ground_truth['asserts'] must be a non-empty list"),
    ],
)
def test_malformed_ground_truth_names_the_sample(code: ModuleType, ground_truth: Any, message: str) -> None:
    samples = [sample(ADD_STDIN, STDIN_CASES), sample(ADD_STDIN, ground_truth, uid="prompt-7")]
    with pytest.raises(ValueError, match="sample 1 \\(uid prompt-7\\)") as raised:
        code.compute_score(samples)
    assert message in str(raised.value)


def test_loaded_as_a_batch_reward_function_with_valid_scores() -> None:
    function = load_reward_function(f"{REPO}/examples/reward_function/code.py:compute_score", {"max_workers": 2})
    assert (function.reward_type, function.reward_name) == ("batch", "code")
    samples = [sample(ADD_STDIN, STDIN_CASES), sample("no code", ASSERT_CASES, uid="u1")]
    columns = check_scores(function, function(samples), samples)
    assert columns["overall"] == [1.0, 0.0] and set(columns) == KEYS


def program(source: str) -> str:
    return f"```python\n{source}```"


CALL_CASES = {"fn_name": "add", "inputs": [[1, 2], [-1, 1]], "outputs": [3, 0]}


def test_an_always_equal_object_scores_zero(code: ModuleType) -> None:
    """Returned objects whose __eq__ says yes: an assert run in the program's process passed them."""
    cheats = [
        "class Anything:\n    def __eq__(self, other):\n        return True\n    def __ne__(self, other):\n"
        "        return False\n    __hash__ = object.__hash__\ndef add(a, b):\n    return Anything()\n",
        "class Yes(int):\n    def __eq__(self, other):\n        return True\n    __hash__ = int.__hash__\n"
        "def add(a, b):\n    return Yes(5)\n",  # a subclass of int is judged by the int it holds (5)
        "class Anything:\n    __eq__ = lambda self, other: True\ndef add(a, b):\n    return [Anything()][0]\n",
    ]
    samples = [sample(program(cheat), cases) for cheat in cheats for cases in (ASSERT_CASES, CALL_CASES)]
    for score in code.compute_score(samples):
        assert (score["overall"], score["has_code"]) == (0.0, 1.0)
        assert failures(score) == {"num_wrong_answer": 2.0}


def test_subclasses_of_builtin_types_are_judged_by_what_they_hold(code: ModuleType) -> None:
    """Counter, OrderedDict, defaultdict, IntEnum, str and list subclasses compare as Python compares them; a
    subclass's own __iter__ or __eq__ is never asked, and a NumPy-like scalar is its item()."""
    functions = (
        "import collections, enum\n"
        "class Colour(enum.IntEnum):\n    RED = 2\n"
        "class Tidy(str):\n    pass\n"
        "class Liar(list):\n    def __iter__(self):\n        return iter([1, 2, 3])\n"
        "class Fake:\n    __module__ = 'numpy'\n    def item(self):\n        return 7\n"
        "def count(s):\n    return collections.Counter(s)\n"
        "def ordered():\n    return collections.OrderedDict([('b', 1), ('a', [2])])\n"
        "def grouped():\n    table = collections.defaultdict(list)\n    table[1].append('x')\n    return table\n"
        "def colour():\n    return Colour.RED\n"
        "def tidy():\n    return Tidy('ok')\n"
        "def liar():\n    return Liar([9])\n"
        "def scalar():\n    return Fake()\n"
    )
    passing = [
        "assert count('aab') == {'a': 2, 'b': 1}",
        "assert ordered() == {'a': [2], 'b': 1}",
        "assert grouped() == {1: ['x']}",
        "assert colour() == 2",
        "assert tidy() == 'ok'",
        "assert liar() == [9]",  # what the list holds, not what its __iter__ makes up
        "assert scalar() == 7",
    ]
    failing = ["assert liar() == [1, 2, 3]", "assert colour() == 3", "assert count('aab') == {'a': 2}"]
    [score] = code.compute_score([sample(program(functions), {"fn_name": "count", "asserts": passing + failing})])
    assert score["pass_rate"] == pytest.approx(len(passing) / (len(passing) + len(failing)))
    assert failures(score) == {"num_wrong_answer": float(len(failing))}


def test_reading_the_check_from_the_callers_frame_or_source_scores_zero(code: ModuleType) -> None:
    """The secret token or the expected value read from the calling code: neither is in the program's process."""
    cheats = [
        # the nonce among the caller's code constants, printed, then an exit before the assert can fail
        "import os, sys\ndef add(a, b):\n    for const in sys._getframe(1).f_code.co_consts:\n"
        "        if isinstance(const, str) and len(const) == 32:\n            print(const, flush=True)\n"
        "    os._exit(0)\n",
        # the expected value: the last int among the caller's code constants (`add(1, 2) == 3`: 1, 2, 3)
        "import sys\ndef add(a, b):\n    return [c for c in sys._getframe(1).f_code.co_consts if type(c) is int][-1]\n",
        # the expected value read from __main__'s source (the program plus what runs after it)
        "import linecache, re, sys\ndef add(a, b):\n"
        "    source = ''.join(linecache.getlines(sys.modules['__main__'].__file__))\n"
        "    for x, y, expected in re.findall(r'add\\((-?\\d+), (-?\\d+)\\) == (-?\\d+)', source):\n"
        "        if (int(x), int(y)) == (a, b):\n            return int(expected)\n",
    ]
    for score in code.compute_score([sample(program(cheat), ASSERT_CASES) for cheat in cheats]):
        assert (score["overall"], score["has_code"]) == (0.0, 1.0)


def test_exiting_at_import_after_printing_what_follows_the_program_scores_zero(code: ModuleType) -> None:
    """At import the program's source (linecache) holds what runs after it; printing its tokens, then leaving."""
    leak = (
        "import linecache, re, sys\n"
        "for token in re.findall(r'[0-9a-f]{32}', ''.join(linecache.getlines(sys.modules['__main__'].__file__))):\n"
        "    print(token, flush=True)\n"
    )
    cheats = [leak + "import os\nos._exit(0)\n", leak + "sys.exit(0)\n"]
    for score in code.compute_score([sample(program(cheat), ASSERT_CASES) for cheat in cheats]):
        assert (score["overall"], score["has_code"]) == (0.0, 1.0)
        assert failures(score) == {"num_wrong_answer": 2.0}


FUNCTIONS = (
    "import math\n"
    "def add(a, b):\n    return a + b\n"
    "def half(x):\n    return x / 2\n"
    "def pair(a, b):\n    return (a, b)\n"
    "def nothing():\n    return None\n"
    "def is_even(n):\n    return n % 2 == 0\n"
    "def words(s):\n    return s.split()\n"
    "def counts(s):\n    return {c: s.count(c) for c in sorted(set(s))}\n"
    "def uniq(xs):\n    return set(xs)\n"
    "def frozen(xs):\n    return frozenset(xs)\n"
    "def inf():\n    return float('inf')\n"
    "def text():\n    return 'h\\u00e9llo\\n'\n"
    "def raw():\n    return b'\\x00\\xff'\n"
    "def nested():\n    return {'a': [1, (2.5, None)], 'b': {3: 'x'}}\n"
    "def boom():\n    raise ValueError('no')\n"
)
EVERY_FORM = [
    "assert add(1, 2) == 3",
    "assert 3 == add(1, 2)",
    "assert add(-2, -3) == -5",
    "assert pair(1, 'a') == (1, 'a')",
    "assert words('a b') == ['a', 'b']",
    "assert counts('aab') == {'a': 2, 'b': 1}",
    "assert uniq([1, 1, 2]) == {1, 2}",
    "assert uniq([]) == set()",
    "assert frozen([1]) == frozenset({1})",
    "assert nested() == {'a': [1, (2.5, None)], 'b': {3: 'x'}}",
    "assert text() == 'h\\u00e9llo\\n'",
    "assert raw() == b'\\x00\\xff'",
    "assert add(1j, 1) == 1 + 1j",
    "assert inf() == float('inf')",
    "assert add(1, 1) != 3",
    "assert nothing() is None",
    "assert add(1, 2) is not None",
    "assert is_even(2) is True",
    "assert is_even(3) is False",
    "assert is_even(2) == 1",  # bool against int as Python's == has it
    "assert is_even(4)",
    "assert not is_even(5)",
    "assert math.isclose(half(1), 0.5)",
    "assert math.isclose(half(1), 0.5000001, rel_tol=1e-3)",
    "assert math.isclose(half(0), 1e-12, abs_tol=1e-9)",
    "assert abs(half(1) - 0.5000001) < 1e-6",
    "assert abs(0.5 - half(1)) <= 0",
    "assert add(1, 2) == add(2, 1)",  # no literal side: both sides are values from the sandbox
    "assert 2 < add(1, 2) < 4",
    "assert add(1, 2) in (3, 4)",
    "assert 'a' in words('a b')",
    "assert add(1, 2) == 3 and not is_even(3)",
    "assert add(1, 2) == 4 or add(1, 2) == 3",
    "assert nothing() is None or boom() == 1",  # short-circuits past the failing call, as the assert would
    "assert add(1, 2) == 3, 'with a message'",
    "assert add(1, 2) == 3\nassert add(2, 2) == 4",
]


def test_every_supported_assert_form_passes_a_correct_program(code: ModuleType) -> None:
    [score] = code.compute_score([sample(program(FUNCTIONS), {"fn_name": "add", "asserts": EVERY_FORM})])
    assert failures(score) == {} and score["overall"] == 1.0


def test_every_assert_form_fails_a_wrong_value(code: ModuleType) -> None:
    wrong = (
        "def add(a, b):\n    return a - b\n"
        "def half(x):\n    return x / 2 + 1e-3\n"
        "def pair(a, b):\n    return [a, b]\n"  # a list is not the tuple an assert compares with
        "def nothing():\n    return 0\n"
        "def is_even(n):\n    return n % 2\n"
    )
    asserts = [
        "assert add(1, 2) == 3",
        "assert 3 == add(1, 2)",
        "assert pair(1, 'a') == (1, 'a')",
        "assert add(2, 2) != 0",
        "assert nothing() is None",
        "assert is_even(2) is False",  # 0 is not False
        "assert is_even(4)",
        "assert not is_even(2) and is_even(4)",
        "assert math.isclose(half(1), 0.5)",
        "assert abs(half(1) - 0.5) < 1e-6",
        "assert add(1, 2) == add(2, 1)",
        "assert 2 < add(1, 2) < 4",
        "assert add(1, 2) in (3, 4)",
        "assert add(1, 2) < 'x'",  # values that do not compare
    ]
    [score] = code.compute_score([sample(program(wrong), {"fn_name": "add", "asserts": asserts})])
    assert score["overall"] == 0.0 and failures(score) == {"num_wrong_answer": float(len(asserts))}


def test_failures_of_the_expressions_under_test(code: ModuleType) -> None:
    functions = (
        "def boom():\n    raise ValueError('no')\n"
        "def leave():\n    import sys\n    sys.exit(0)\n"
        "def cycle():\n    x = []\n    x.append(x)\n    return x\n"
        "def huge():\n    x = [0]\n    for _ in range(60):\n        x = [x, x]\n    return x\n"
        "def mine():\n    class Mine:\n        pass\n    return Mine()\n"
    )
    asserts = [
        "assert boom() == 1",  # an exception in the expression under test
        "assert undefined() == 1",
        "assert leave() is None",  # SystemExit in the expression: a runtime error, not an early exit that passes
        "assert cycle() == []",  # cyclic: nested past MAX_VALUE_DEPTH, not a plain value
        "assert mine() is not None",  # not a plain value, whatever it is compared with
        "assert huge() == []",  # 2**60 nodes: too large to print
    ]
    [score] = code.compute_score([sample(program(functions), {"fn_name": "boom", "asserts": asserts})])
    assert failures(score) == {"num_runtime_error": 3.0, "num_wrong_answer": 2.0, "num_output_limit": 1.0}


def test_call_based_form(code: ModuleType) -> None:
    functions = (
        "def add(a, b):\n    return a + b\n"
        "def spread(x, xs):\n    return (x, *xs)\n"  # a tuple matches the JSON list
        "def table(key, value):\n    return {key: (value, [value])}\n"
        "def positive(x):\n    return x > 0\n"
        "def finite(x):\n    return x not in (float('inf'), float('-inf')) and x == x\n"
    )
    cases = [
        CALL_CASES,
        {"fn_name": "spread", "inputs": [[1, [2, 3]], [0, []]], "outputs": [[1, 2, 3], [0]]},
        {"fn_name": "table", "inputs": [["k", 1.5]], "outputs": [{"k": [1.5, [1.5]]}]},
        json.dumps({"fn_name": "positive", "inputs": [[1], [-1]], "outputs": [True, False]}),
        json.dumps(
            {"fn_name": "finite", "inputs": [[float("inf")], [float("nan")], [1.0]], "outputs": [False] * 2 + [1]}
        ),
    ]
    scores = code.compute_score([sample(program(functions), case) for case in cases])
    assert [score["overall"] for score in scores] == [1.0] * len(cases)
    wrong = "def add(a, b):\n    return str(a + b)\ndef spread(x, xs):\n    return {x, *xs}\n"
    scores = code.compute_score([sample(program(wrong), case) for case in cases[:2]])
    assert [failures(score) for score in scores] == [{"num_wrong_answer": 2.0}] * 2


MAIN_BLOCK = (  # how LLM solutions often end: a demo under the guard, reading the input it would be run on
    "def add(a, b):\n    return a + b\n"
    "def name():\n    return __name__\n"
    "if __name__ == '__main__':\n    a, b = map(int, input().split())\n    print(add(a, b))\n"
)


@pytest.mark.parametrize("isolation", ["bwrap", "namespaces"])
def test_a_main_block_does_not_run_in_call_based_and_assert_tests(code: ModuleType, isolation: str) -> None:
    """A correct add() whose program ends with an `if __name__ == "__main__":` block calling input() scored 0 on
    call-based and assert tests: the program ran as __main__, and input() on the empty stdin raised EOFError before
    the judge ran (a runtime error). APPS/TACO's grader, verl's prime grader and HumanEval's harness import the
    solution under another name there; it is the module `solution` now. Stdin tests still run it as __main__."""
    name = {"fn_name": "name", "asserts": ["assert name() == 'solution'"]}
    cases = [CALL_CASES, ASSERT_CASES, name, STDIN_CASES]
    scores = code.compute_score([sample(program(MAIN_BLOCK), case) for case in cases], isolation=isolation)
    assert [(score["overall"], failures(score)) for score in scores] == [(1.0, {})] * len(cases), scores


ITERATORS = (
    "def f(x):\n    return x * x\n"
    "def squares(n):\n    for i in range(n):\n        yield i * i\n"
    "def endless():\n    while True:\n        yield 1\n"
    "def broken():\n    yield 1\n    raise ValueError('no')\n"
)
OVER_ITERATORS = {  # correct programs scored 0 on the first three: the generator or map object was no plain value
    "f": [
        "assert sum(f(i) == i * i for i in range(5)) == 5",
        "assert sorted(f(i) for i in (3, 1, 2)) == [1, 4, 9]",
        "assert list(map(f, [1, 2])) == [1, 4]",
        "assert [f(i) for i in range(3)] == [0, 1, 4]",
        "assert {k: f(k) for k in range(3)} == {0: 0, 1: 1, 2: 4}",
        "assert {f(i) for i in (-1, 1)} == {1}",
        "assert all(f(x) == y for x, y in enumerate([0, 1, 4]))",
        "assert any(f(i) == 9 for i in range(5) if i % 2)",
        "assert all(f(i) == i * i for i in range(1000))",
        "assert all(f(a) + f(b) == c for a in range(3) for b in range(a) for c in [a * a + b * b])",
    ],
    "squares": [
        "assert list(squares(3)) == [0, 1, 4]",
        "assert sum(squares(4)) == 14 and max(squares(4)) == 9",
        "assert set(squares(3)) == {0, 1, 4}",
        "assert sorted(x for x in squares(3)) == [0, 1, 4]",
        "assert tuple(zip(squares(2), 'ab')) == ((0, 'a'), (1, 'b'))",
        "assert squares(3) != [0, 1, 4]",  # a generator is not the list it makes, as in Python
        "assert 4 in squares(3)",
    ],
}


def test_builtins_over_generators_and_comprehensions_pass_a_correct_program(code: ModuleType) -> None:
    """A trainer-side builtin over a generator, a map object or a generator function's result, and comprehensions
    over constants unrolled item by item, pass a correct program and fail a wrong one; an endless generator is too
    large to print, and one that raises is a runtime error."""
    truths = [{"fn_name": name, "asserts": asserts} for name, asserts in OVER_ITERATORS.items()]
    wrong = "def f(x):\n    return x + x\ndef squares(n):\n    yield from range(n)\n"
    samples = [sample(program(source), truth) for source in (ITERATORS, wrong) for truth in truths]
    samples += [
        sample(program(ITERATORS), {"fn_name": name, "asserts": [f"assert list({name}()) == [1]"]})
        for name in ("endless", "broken")
    ]
    *scores, endless, broken = code.compute_score(samples)
    assert [score["overall"] for score in scores[:2]] == [1.0, 1.0], scores
    assert [failures(score) for score in scores[2:]] == [
        {"num_wrong_answer": 10.0},
        {"num_wrong_answer": 5.0},  # `!=` and `in` hold
    ]
    assert failures(endless) == {"num_output_limit": 1.0} and failures(broken) == {"num_runtime_error": 1.0}


def test_prepared_or1_call_based_rows_score_as_the_original_tests() -> None:
    """prepare_or1_data keeps call-based tests as they are: a JSON true stays True (as an assert it was a NameError)."""
    prepare = load_repo_file("examples/recipes/prepare_or1_data.py", "prepare_or1_data")
    tests = json.dumps({"fn_name": "is_odd", "inputs": [[1], [2], [[3]]], "outputs": [True, False, None]})
    answer = prepare.code_tests(tests)
    assert json.loads(answer) == json.loads(tests)
    function = load_reward_function(f"{REPO}/examples/reward_function/code.py:compute_score", {"max_workers": 1})
    response = program("def is_odd(x):\n    return x % 2 == 1 if isinstance(x, int) else None\n")
    assert function([sample(response, answer)])[0]["overall"] == 1.0


def test_the_sandbox_is_checked_before_training(monkeypatch: pytest.MonkeyPatch) -> None:
    """check_setup runs with the reward kwargs before Ray starts: a missing bubblewrap stops the run with the install
    line, unless the weaker mode is named; bad limits are named too."""
    from verl.rewards.function import RewardFunctionLoadError, check_reward_function
    from verl.rewards.sandbox import runner

    spec = f"{REPO}/examples/reward_function/code.py:compute_score"
    check_reward_function(spec, {"wall_s": 5.0})
    monkeypatch.setenv("VERL_BWRAP", "/nonexistent/bwrap")
    monkeypatch.setattr(runner, "_ISOLATIONS", {})
    with pytest.raises(RewardFunctionLoadError, match=r"cannot run on this machine: .*apt-get install bubblewrap"):
        check_reward_function(spec, {"wall_s": 5.0})
    check_reward_function(spec, {"isolation": "namespaces"})
    with pytest.raises(RewardFunctionLoadError, match="SandboxLimits.wall_s must be a positive"):
        check_reward_function(spec, {"wall_s": 0, "isolation": "namespaces"})
    with pytest.raises(RewardFunctionLoadError, match="SandboxLimits.endpoint must be the http"):
        check_reward_function(spec, {"isolation": "sandbox_fusion"})


def test_max_workers_is_checked_before_training() -> None:
    """max_workers: 0 passed the check before Ray started and stopped the run at its first reward step instead
    (run_many_cases refused it there)."""
    from verl.rewards.function import RewardFunctionLoadError, check_reward_function

    spec = f"{REPO}/examples/reward_function/code.py:compute_score"
    for max_workers in (0, -2, 1.5, True):
        with pytest.raises(RewardFunctionLoadError, match="max_workers must be a positive integer"):
            check_reward_function(spec, {"max_workers": max_workers})
    check_reward_function(spec, {"max_workers": 2})
