# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""examples/reward_function/math_verify.py: whole responses scored in a batch, loaded as the trainer loads it.

The verdicts themselves are pinned by tests/rewards/test_math_grading.py; here the concern is the reward file: the
answer it extracts, the keys and values it returns (which the trainer checks), the timeout of one sample not
spoiling the batch, and the worker pool surviving from one call to the next.
"""

import logging
import os
import time
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest
from repo_files import REPO, load_repo_file

from verl.rewards import math_grading
from verl.rewards.function import check_scores, load_reward_function


SPEC = os.path.join(REPO, "examples", "reward_function", "math_verify.py:compute_score")
# An infinite series sympy tries to sum in closed form for far longer than any test waits (see test_math_grading).
SLOW_ANSWER = r"\sum_{n=1}^{\infty} \frac{\sin(n)}{n^{3}+\log(n)}"
KEYS = {"overall", "accuracy", "has_answer", "timeout"}


@pytest.fixture(scope="module")
def reward() -> Iterator[ModuleType]:
    """The example as a module; the shared pool it starts is closed when the module's tests are done."""
    logging.getLogger("verl.rewards.math_grading").setLevel(logging.ERROR)  # the expected timeout warnings
    yield load_repo_file("examples/reward_function/math_verify.py", "math_verify_reward_example")
    math_grading.close_shared_pool()


def sample(response: str, ground_truth: Any) -> dict[str, Any]:
    return {"response": response, "ground_truth": ground_truth, "response_length": 10, "prompt": "", "uid": None}


RESPONSES = [
    # (response, ground truth, accuracy, has_answer)
    ("<think>1/2 of it</think> The result is $\\boxed{\\dfrac{1}{2}}$.", "0.5", 1.0, 1.0),
    ("So the answer is \\boxed{3} -- no wait, \\boxed{4}.", "4", 1.0, 1.0),
    ("So the answer is \\boxed{3} -- no wait, \\boxed{4}.", "3", 0.0, 1.0),
    ("Working...\nAnswer: $x = 2$.", "2", 1.0, 1.0),
    ("The final answer is 1,000", "$1000$", 1.0, 1.0),
    ("Final Answer: The final answer is $5$. I hope it is correct.", "5", 1.0, 1.0),  # Minerva's closing line
    ("\\boxed{[1, 2)}", "\\left[1,2\\right)", 1.0, 1.0),
    ("\\boxed{2\\sqrt{2}}", "\\boxed{\\sqrt{8}}", 1.0, 1.0),
    ("\\boxed{50\\%}", "\\frac12", 1.0, 1.0),
    ("\\boxed{7}", 7, 1.0, 1.0),  # a numeric ground truth column
    ("\\boxed{0.00001}", 1e-05, 1.0, 1.0),  # a float answer: str() writes it "1e-05", math-verify reads e - 5
    ("\\boxed{10^{-5}}", [1e-05, 2.5e-05], 1.0, 1.0),  # in a list of accepted answers too
    ("\\boxed{0.000025}", "2.5e-05", 1.0, 1.0),  # and a ground truth written so
    ("\\boxed{30°}", "30", 1.0, 1.0),  # a degree sign without a superscript
    ("The roots are 2 and 3, so the answer is $2$ and $3$.", "2, 3", 1.0, 1.0),  # two answers joined by "and"
    ("Answer: x = 2 or x = 3", "3", 0.0, 1.0),  # both, where one was asked for
    ("I give up.", "7", 0.0, 0.0),
    ("\\boxed{\\frac{1}{", "7", 0.0, 0.0),  # cut off inside the box
]


def test_scores_whole_responses(reward: ModuleType) -> None:
    scores = reward.compute_score([sample(response, truth) for response, truth, _, _ in RESPONSES])
    expected = [
        {"overall": accuracy, "accuracy": accuracy, "has_answer": has_answer, "timeout": 0.0}
        for _, _, accuracy, has_answer in RESPONSES
    ]
    assert scores == expected


def test_a_hung_sample_times_out_alone(reward: ModuleType) -> None:
    reward.compute_score([sample("\\boxed{1}", "1")])  # workers up, so start-up is not timed below
    batch = [
        sample("\\boxed{1}", "1"),
        sample(f"Then \\boxed{{{SLOW_ANSWER}}}", "1"),
        sample("Answer: 2", "3"),
        sample("\\boxed{0.25}", "\\frac{1}{4}"),
    ]
    started = time.monotonic()
    scores = reward.compute_score(batch, timeout_s=1.0)
    assert time.monotonic() - started < 1.0 + 5.0
    assert [score["accuracy"] for score in scores] == [1.0, 0.0, 0.0, 1.0]
    assert [score["timeout"] for score in scores] == [0.0, 1.0, 0.0, 0.0]
    assert scores[1]["has_answer"] == 1.0
    # The next step's call reuses the pool, whose killed worker has been replaced.
    assert reward.compute_score([sample("\\boxed{3}", "3")])[0]["accuracy"] == 1.0


def test_pool_is_created_once_and_reused(reward: ModuleType) -> None:
    reward.compute_score([sample("\\boxed{1}", "1")], max_workers=2)
    pool = math_grading.get_shared_pool()
    pids = pool.worker_pids
    reward.compute_score([sample("\\boxed{2}", "2")], max_workers=2)
    assert math_grading.get_shared_pool() is pool and pool.worker_pids == pids


def test_format_weight(reward: ModuleType) -> None:
    batch = [sample("\\boxed{5}", "5"), sample("\\boxed{4}", "5"), sample("no answer", "5")]
    scores = reward.compute_score(batch, format_weight=0.25)
    assert [score["overall"] for score in scores] == [1.0, 0.25, 0.0]
    with pytest.raises(ValueError, match="format_weight"):
        reward.compute_score(batch, format_weight=1.5)


def test_loads_and_passes_the_trainers_checks(reward: ModuleType) -> None:
    """Loaded from its spec like the reward actor does: a batch function whose output check_scores accepts."""
    function = load_reward_function(SPEC, {"timeout_s": 5.0, "max_workers": 2, "format_weight": 0.1})
    assert (function.reward_type, function.reward_name) == ("batch", "math_verify")
    samples = [sample("\\boxed{5}", "5"), sample("nothing", "5"), sample(f"\\boxed{{{SLOW_ANSWER}}}", "5")]
    function.kwargs["timeout_s"] = 1.0
    columns = check_scores(function, function(samples), samples)
    assert set(columns) == KEYS
    assert columns["accuracy"] == [1.0, 0.0, 0.0]
    assert columns["timeout"] == [0.0, 0.0, 1.0]
    assert columns["overall"] == pytest.approx([1.0, 0.0, 0.1])


def test_empty_batch(reward: ModuleType) -> None:
    assert reward.compute_score([]) == []


def test_a_list_of_accepted_answers_matches_any_of_them(reward: ModuleType) -> None:
    samples = [
        {"response": r"\boxed{0.5}", "ground_truth": '["\\\\frac{1}{3}", "\\\\frac{1}{2}"]'},
        {"response": r"\boxed{0.25}", "ground_truth": ["1/3", "1/2"]},
        {"response": r"\boxed{[1, 2]}", "ground_truth": "[1, 2]"},  # an interval, not the answers 1 and 2
        {"response": r"\boxed{1}", "ground_truth": "[1, 2]"},
    ]
    scores = reward.compute_score([sample(s["response"], s["ground_truth"]) for s in samples])
    assert [score["accuracy"] for score in scores] == [1.0, 0.0, 1.0, 0.0]
    assert reward.acceptable_answers("[1, 2]") == ["[1, 2]"]
