# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""examples/reward_function/dapo.py against the rules of the DAPO paper's released reward (Minerva normalization).

Every expected value in the table was worked out by hand from the reference's rules (last 300 characters, last
"Answer:" line, then the normalization steps in order); the comment on a row names the rule it pins down.
"""

import warnings
from types import ModuleType

import pytest
from repo_files import load_repo_file


@pytest.fixture(scope="module")
def dapo() -> ModuleType:
    return load_repo_file("examples/reward_function/dapo.py", "dapo_reward_example")


REFERENCE_TABLE = [
    # the answer line
    ("Adding gives 1000.\nAnswer: 1000", "1000", True),
    ("ANSWER:42", "42", True),  # any case, no space needed
    ("Answer:\n42", "42", True),  # the spaces after the colon may include a line break
    ("Answer: 4\nAnswer:", "4", True),  # an empty "Answer:" does not count, the earlier line does
    ("Answer: 3 at first.\nAfter checking:\nAnswer: 4", "4", True),  # the last line counts
    ("Answer: 4\nActually, Answer: 5", "4", False),
    ("Answer:\nAnswer: 5", "5", False),  # the line break is swallowed, so the prediction is "Answer: 5"
    ("The result is 1000.", "1000", False),  # no Answer line
    ("So the answer is \\boxed{1000}.", "1000", False),  # no fallback to a box without an Answer line
    ("Answer: 7\n" + "x" * 300, "7", False),  # the Answer line lies before the last 300 characters
    ("x" * 5000 + "\nAnswer: 7", "7", True),
    # "=": only what follows the last one is kept, inequalities included
    ("Answer: x = 5", "5", True),
    ("Answer: y >= 3", "3", True),
    ("Answer: 5", "x = 5", True),  # the ground truth goes through the same normalization
    # units and filler words, deleted wherever they occur
    ("Answer: 12 cm", "12", True),
    ("Answer: 5 square units", "5", True),
    ("Answer: 30^\\circ", "30", True),
    ("Answer: 3 \\mbox{ inches}", "3", True),  # \mbox becomes \text, "inches" goes, then the empty \text{}
    ("Answer: 10 seconds", "10", False),  # not on the list
    ("Answer: 7 m", "7", False),  # a bare "m" is not on the list either
    ("Answer: a triangle", "triangle", True),  # "a " is dropped
    # \boxed{}: from the first "\boxed{" to the last "}" of the line
    ("Answer: \\boxed{4}", "4", True),
    ("Answer: \\boxed{\\frac{1}{2}}", "\\frac{1}{2}", True),
    ("Answer: \\boxed{4} apples", "4", False),  # text beside the box stays
    ("Answer: \\boxed{x = 4}", "4", False),  # "=" is split first, leaving "4}"
    ("Answer: 1000", "\\boxed{1{,}000}", True),
    # \text{}: unwrapped up to the first "}"
    ("Answer: \\text{(B)}", "(B)", True),
    ("Answer: \\text{\\frac{1}{2}}", "\\frac{1}{2}", False),  # becomes "\frac{1{2}}"
    ("Answer: 1 \\text{and} 2", "1, 2", True),  # \text{and} is a comma, then the commas go
    # \frac and \sqrt shorthand
    ("Answer: \\frac12", "\\frac{1}{2}", True),
    ("Answer: \\dfrac12", "\\dfrac{1}{2}", True),
    ("Answer: \\dfrac{1}{2}", "\\frac{1}{2}", False),  # \dfrac is not \frac
    ("Answer: \\frac{1}2", "\\frac{1}{2}", False),  # only "frac" followed by two characters, the first not "{"
    ("Answer: 3\\sqrt2", "3\\sqrt{2}", True),
    ("Answer: \\sqrt23", "\\sqrt{23}", False),  # one character only: "\sqrt{2}3"
    # thousands separators: all commas go when only digits remain
    ("Answer: 1,000,000", "1000000", True),
    ("Answer: 1,2", "12", True),
    ("Answer: -1,000", "-1000", False),  # a sign keeps the commas
    ("Answer: 1,000.5", "1000.5", False),  # so does a decimal point
    ("Answer: 1,000\r\n", "1000", False),  # the "\r" is stripped only after the digit check
    # "$": the first math span of the line, then every "$" goes
    ("Answer: $\\frac{3}{4}$", "\\frac{3}{4}", True),
    ("Answer: The total is $12$ dollars.", "12", True),
    ("Answer: $3$ or $4$", "3", True),
    ("Answer: \\$5", "5", True),
    ("Answer: $5", "5", True),
    ("So the total is\nAnswer: $\\boxed{1,000}$.", "1000", True),
    # trailing period and decimals
    ("Answer: 5.", "5", False),
    ("Answer: $5.$", "5", True),  # ".$" becomes "$"
    ("Answer: 12.0", "12", False),
    ("no answer line", "[INVALID]", True),  # the reference scores a missing answer as the text "[INVALID]"
    # a float answer (a JSON number: the reference's parquet holds text) as written, not as Python writes it
    ("Answer: 0.00001", 1e-05, True),
    ("Answer: 0.000025", [2.5e-05, 0.5], True),
    ("Answer: 1e-05", 1e-05, False),
]


@pytest.mark.parametrize("response, ground_truth, correct", REFERENCE_TABLE)
def test_matches_the_reference_rules(dapo: ModuleType, response: str, ground_truth: str, correct: bool) -> None:
    sample = {"response": response, "ground_truth": ground_truth, "response_length": 10}
    score = dapo.compute_score(sample, max_response_length=100, overlong_buffer_len=20)
    reward = 1.0 if correct else -1.0
    assert score == {"overall": reward, "accuracy": float(correct), "accuracy_reward": reward, "overlong": 0.0}


@pytest.mark.parametrize(
    "response, answer",
    [
        ("Answer: 4\nAnswer:", "4"),
        ("Answer:   \\boxed{4}  ", "\\boxed{4}  "),  # leading spaces belong to the separator, trailing ones stay
        ("Answer: 4\n" + "y" * 293, None),  # the 300-character window starts inside "Answer"
        ("No final line.", None),
    ],
)
def test_extract_answer(dapo: ModuleType, response: str, answer: str | None) -> None:
    assert dapo.extract_answer(response) == answer


@pytest.mark.parametrize(
    "answer, normalized",
    [
        ("x = $\\boxed{1,000}$", "1000"),
        ("\\textbf{5}\\overline{3}", "53"),
        ("5\\text{s}", "5"),
        ("10 \\ldots", "10"),
        ("pursued", "purd"),  # "sue" goes even inside a word
    ],
)
def test_normalize_answer(dapo: ModuleType, answer: str, normalized: str) -> None:
    assert dapo.normalize_answer(answer) == normalized


def test_module_attributes(dapo: ModuleType) -> None:
    assert (dapo.REWARD_NAME, dapo.REWARD_TYPE) == ("dapo", "sequential")


def test_a_response_longer_than_the_budget_given_is_warned_about(dapo: ModuleType) -> None:
    """A run whose data.max_response_length exceeds the reward's max_response_length (a recipe's kwargs left at
    2048 while the budget was raised) would score every longer response as overlong; the reward says so."""
    within = {"response": "Answer: 4", "response_length": 100, "ground_truth": "4"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert dapo.compute_score(within, max_response_length=2048, overlong_buffer_len=512)["overall"] == 1.0
    beyond = {**within, "response_length": 3000}
    with pytest.warns(UserWarning, match="data.max_response_length"):
        score = dapo.compute_score(beyond, max_response_length=2048, overlong_buffer_len=512)
    assert score["overlong"] == -1.0
