# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Math with the final answer in \boxed{}: overall = 0.9 * accuracy + 0.1 * format.

The scheme follows EasyR1's math reward (format weight 0.1, answer in the last \boxed{}, graded by mathruler).

Use with examples/format_prompt/math.jinja:
    worker.reward.reward_function=examples/reward_function/math.py:compute_score

accuracy: the last complete \boxed{...} of the response (`\boxed {5}` and `\fbox{5}` too, and a box before an
    unclosed one: mathruler's extraction, which EasyR1's uses, read none of them), graded against the ground truth
    by mathruler (string normalization first, then symbolic equivalence with sympy). 1.0 or 0.0. A ground truth
    that is a list (or a JSON list of strings) holds the acceptable answers: any of them counts.
format: the response opens with <think>, closes it once, and puts a \boxed{} answer after </think>. 1.0 or 0.0. A
    chat template whose generation prompt opens <think> itself (DeepSeek-R1 distills, QwQ, Qwen3.5 thinking) counts
    as the response's opening (verl.rewards.function.model_turn).
"""

import re
from typing import Any

from verl.rewards.function import model_turn
from verl.rewards.math_grading import acceptable_answers, last_boxed, matches_any


REWARD_NAME = "math"
REWARD_TYPE = "sequential"

# Some models write "< think >" or "</ think>"; the tag is meant, so spaces inside it are not held against them.
_SPACED_TAG = re.compile(r"<\s*(/\s*)?(think|answer)\s*>", re.IGNORECASE)


def normalize_tags(text: str) -> str:
    """Rewrite "< / Think >" and friends as "</think>"."""
    return _SPACED_TAG.sub(lambda match: f"<{'/' if match.group(1) else ''}{match.group(2).lower()}>", text)


def format_score(response: str) -> float:
    """1.0 for "<think>reasoning</think> ... \\boxed{answer} ...", else 0.0."""
    match = re.fullmatch(r"\s*<think>(.*?)</think>(.*)", response, flags=re.DOTALL)
    if match is None or "<think>" in match.group(1) or "</think>" in match.group(2):
        return 0.0
    return 1.0 if last_boxed(match.group(2)) is not None else 0.0


def accuracy_score(response: str, ground_truths: list[str], timeout_s: float = 5.0) -> float:
    """1.0 when the last boxed answer equals one of the ground truths mathematically, else 0.0 (also when grading
    takes longer than `timeout_s`: sympy can run for ever on an answer such as 9**9**9, so mathruler grades in the
    killable workers of verl.rewards.math_grading)."""
    answer = last_boxed(response)
    return 1.0 if matches_any(answer, ground_truths, timeout_s, grader="mathruler") else 0.0


def compute_score(
    reward_input: dict[str, Any], format_weight: float = 0.1, timeout_s: float = 5.0
) -> dict[str, float]:
    """Score one response; `format_weight` is the share of the format check in `overall`, `timeout_s` the longest
    its grading may take."""
    response = normalize_tags(model_turn(reward_input))
    fmt = format_score(response)
    accuracy = accuracy_score(response, acceptable_answers(reward_input["ground_truth"]), timeout_s)
    return {"overall": (1.0 - format_weight) * accuracy + format_weight * fmt, "format": fmt, "accuracy": accuracy}
