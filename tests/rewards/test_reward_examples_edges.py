# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The example reward functions: behaviour a mutation audit found unpinned by test_reward_examples.py,
test_dapo_reward.py and test_math_verify_reward.py. Every expected score is worked out by hand from the file's
rules."""

import os
import warnings

import pytest
from repo_files import load_repo_file

from verl.rewards import math_grading
from verl.rewards.function import load_reward_function


ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def example(name: str, **kwargs):
    return load_reward_function(os.path.join(ROOT, "examples", "reward_function", f"{name}.py:compute_score"), kwargs)


def sample(response: str, ground_truth, response_length: int = 10) -> dict:
    return {"response": response, "ground_truth": ground_truth, "response_length": response_length}


# ---------------------------------------------------------------------------------------------------- math.py


@pytest.mark.parametrize(
    "response, accuracy, fmt",
    [
        ("<Think>2 + 2 = 4</Think> \\boxed{4}", 1.0, 1.0),  # tags in any case
        ("\n<think>2 + 2 = 4</think> \\boxed{4}", 1.0, 1.0),  # white space before the reasoning block
        ("<think>a</think> b</think> \\boxed{4}", 1.0, 0.0),  # the block closed twice
        ("<think>a<think>b</think> \\boxed{4}", 1.0, 0.0),  # the block opened twice
        ("<think>So \\boxed{4}</think> The answer is 4.", 1.0, 0.0),  # the box must follow the reasoning
    ],
)
def test_math_format(response: str, accuracy: float, fmt: float) -> None:
    score = example("math")(sample(response, "4"))
    assert score == pytest.approx({"overall": 0.9 * accuracy + 0.1 * fmt, "format": fmt, "accuracy": accuracy})


# ---------------------------------------------------------------------------------------------------- r1v.py


@pytest.mark.parametrize(
    "response, accuracy, fmt",
    [
        ("<Think>Option B.</Think> <Answer>B</Answer>", 1.0, 1.0),  # tags in any case
        ("\n<think>Option B.</think> <answer>B</answer>\n", 1.0, 1.0),  # white space around the whole layout
        ("<think>Not <answer>A</answer> but B.</think> <answer>B</answer>", 1.0, 0.0),  # an answer tag in the thought
        ("<think>A or B?</think> <answer>A</answer><answer>B</answer>", 1.0, 0.0),  # two answer blocks
        ("<think>B.</think> <answer>B</answer> <answer>C", 1.0, 0.0),  # a second answer cut off: the closed one
    ],
)
def test_r1v_format_and_answer(response: str, accuracy: float, fmt: float) -> None:
    score = example("r1v")(sample(response, "B"))
    assert score == pytest.approx({"overall": 0.5 * accuracy + 0.5 * fmt, "format": fmt, "accuracy": accuracy})


def test_r1v_format_weight_weighs_accuracy_by_its_complement() -> None:
    score = example("r1v", format_weight=0.2)(sample("<think>B.</think> <answer>B</answer> and more", "B"))
    assert score == pytest.approx({"overall": 0.8, "format": 0.0, "accuracy": 1.0})


@pytest.mark.parametrize(
    "response, answer",
    [
        ("<answer> \\boxed{12} </answer>", "12"),  # spaces around the box
        ("<answer>\\boxed{ 12 }</answer>", "12"),  # spaces inside it
        ("<answer>\\boxed{\\frac{1}{2}}</answer>", "\\frac{1}{2}"),  # braces inside the box
        ("<answer>a<answer>b</answer>", "a<answer>b"),  # an <answer> is closed by the next </answer>
    ],
)
def test_r1v_extract_answer(response: str, answer: str) -> None:
    r1v = load_repo_file("examples/reward_function/r1v.py", "r1v_reward_audit")
    assert r1v.extract_answer(response) == answer


# ---------------------------------------------------------------------------------------------------- dapo.py


@pytest.mark.parametrize(
    "response, ground_truth, correct",
    [
        ("Answer : 42", "42", True),  # spaces before the colon, as the reference's answer\s*:
        ("Answer: x = y = 5", "5", True),  # what follows the last "=" only
        ("Answer: an octagon", "octagon", True),  # "an " is dropped
        ("Answer: 5\\ cm", "5", True),  # a TeX space goes, then the unit
        ("Answer: 7\\text{m}", "7", True),  # \text{m} becomes \text{}, which goes
        ("Answer: 5 km", "5", True),  # a unit of the list
        ("Answer: 5 \\text{ m}^2", "5", True),  # \text{}^2 goes whole
        ("Answer: \\sqrt x", "\\sqrt{x}", True),  # \sqrt shorthand of a letter
        ("Answer: 5\\mathrm{th}", "5", True),  # an ordinal suffix goes
        ("Answer: 42\r\n", "42", True),  # a CRLF line: the "\r" is stripped at the end
    ],
)
def test_dapo_reference_rules(response: str, ground_truth: str, correct: bool) -> None:
    score = example("dapo", max_response_length=100, overlong_buffer_len=20)(sample(response, ground_truth))
    reward = 1.0 if correct else -1.0
    assert score == {"overall": reward, "accuracy": float(correct), "accuracy_reward": reward, "overlong": 0.0}


def test_dapo_without_an_overlong_buffer_punishes_only_beyond_the_budget() -> None:
    function = example("dapo", max_response_length=100, overlong_buffer_len=0)
    assert function(sample("Answer: 7", "7", response_length=100))["overall"] == 1.0
    with pytest.warns(UserWarning, match="longer than max_response_length=100"):
        score = function(sample("Answer: 7", "7", response_length=101))
    assert (score["overlong"], score["overall"]) == (-1.0, 0.0)


def test_dapo_buffer_as_long_as_the_budget_is_accepted() -> None:
    score = example("dapo", max_response_length=100, overlong_buffer_len=100)(sample("Answer: 7", "7", 50))
    assert (score["overlong"], score["overall"]) == (-0.5, 0.5)


def test_dapo_default_penalty_factor_is_one() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        score = example("dapo", max_response_length=100, overlong_buffer_len=20)(sample("Answer: 7", "7", 90))
    assert (score["overlong"], score["overall"]) == (-0.5, 0.5)


# ---------------------------------------------------------------------------------------------------- math_verify.py


@pytest.fixture
def shared_pool_closed():
    """The math_verify example grades in the process-wide pool: closed when the test is done."""
    yield
    math_grading.close_shared_pool()


def test_math_verify_format_weight_one_scores_having_an_answer(shared_pool_closed) -> None:
    score = example("math_verify", format_weight=1.0)
    scores = score([sample("\\boxed{5}", "5"), sample("\\boxed{4}", "5"), sample("no answer", "5")])
    assert [score["overall"] for score in scores] == [1.0, 1.0, 0.0]
    assert [score["accuracy"] for score in scores] == [1.0, 0.0, 0.0]


def test_math_verify_reads_a_box_far_from_the_end(shared_pool_closed) -> None:
    response = "\\boxed{5}" + " Let me double-check the arithmetic once more." * 10
    assert len(response) > 400
    assert example("math_verify")([sample(response, "5")])[0]["accuracy"] == 1.0


# ---------------------------------------------------------------------------------------------------- tool_call.py

ADD = {"name": "add", "parameters": {"type": "object"}}


def _call(name: str, arguments: str) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {arguments}}}\n</tool_call>'


@pytest.mark.parametrize(
    "response, ground_truth",
    [
        (_call("add", '{"values": [2, 3]}'), [{"name": "add", "arguments": {"values": [2.0, 3.0]}}]),  # Parquet
        (_call("add", "{}"), [{"name": "add", "arguments": ""}]),  # empty arguments text: none
        (_call("add", "{}"), [{"name": "add"}]),  # no arguments key: none
        (
            _call("add", '{"a": 1}') + _call("add", '{"a": 2}'),
            [{"name": "add", "arguments": {"a": 1}}, {"name": "add", "arguments": {"a": 2}}],
        ),  # two expected calls of one tool, both made: names counts each
    ],
)
def test_tool_call_expected_call_forms(response: str, ground_truth) -> None:
    scores = example("tool_call")({**sample(response, ground_truth), "extra_info": {"tools": [ADD]}})
    assert (scores["accuracy"], scores["format"], scores["names"]) == (1.0, 1.0, 1.0)
