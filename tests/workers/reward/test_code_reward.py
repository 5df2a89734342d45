# Copyright 2026 The verl-compact Authors. All rights reserved.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
"""examples/reward_function/code.py: programs run against both ground-truth forms, through the real sandbox."""

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
        "```python\nimport os\ndef add(a, b):\n    return 0\nos._exit(0)\n```",
        "```python\nimport sys\ndef add(a, b):\n    return 0\nsys.exit(0)\n```",
        "```python\nimport atexit, os\natexit.register(lambda: os._exit(0))\ndef add(a, b):\n    return 0\n```",
    ]
    for score in code.compute_score([sample(cheat, ASSERT_CASES) for cheat in cheats]):
        assert score["overall"] == 0.0 and score["has_code"] == 1.0


def test_no_code_block(code: ModuleType) -> None:
    responses = ["The answer is a + b.", "```python\nprint(1)\n", "```cpp\nint main() {}\n```", "```python\n\n```"]
    for score in code.compute_score([sample(response, STDIN_CASES) for response in responses]):
        assert score == dict.fromkeys(KEYS, 0.0)


def test_the_last_python_block_is_the_program(code: ModuleType) -> None:
    response = f"First try:\n```python\nprint(0)\n```\nBetter:\n{ADD_STDIN}\nExample run:\n```text\n3\n```"
    assert code.extract_code(response) == "a, b = map(int, input().split())\nprint(a + b)\n"
    assert code.extract_code("  ```python\n  print(1)\n  ```") == "print(1)\n"
    assert code.extract_code("```python\nprint(1)```") == "print(1)"  # closed on the code's last line


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
        ({"fn_name": "f", "inputs": [[1]], "outputs": [1]}, "call-based tests"),
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
