# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Visual reasoning in the R1-V style: overall = 0.5 * accuracy + 0.5 * format.

Use with examples/format_prompt/r1v.jinja:
    worker.reward.reward_function=examples/reward_function/r1v.py:compute_score

format: the whole response is "<think>...</think> <answer>...</answer>" (whitespace around the tags allowed; a
    <think> that the chat template's generation prompt opened counts as the response's: model_turn).
accuracy: the content of the last <answer> tag (unwrapped from \boxed{} if the model boxed it) graded against the
    ground truth by mathruler, which also matches plain strings such as option letters and words. A ground truth
    that is a list (or a JSON list of strings) holds the acceptable answers: any of them counts.
"""

import re
from typing import Any

from verl.rewards.function import model_turn
from verl.rewards.math_grading import acceptable_answers, matches_any


REWARD_NAME = "r1v"
REWARD_TYPE = "sequential"

_SPACED_TAG = re.compile(r"<\s*(/\s*)?(think|answer)\s*>", re.IGNORECASE)
_LAYOUT = re.compile(
    r"\s*<think>(?:(?!</?think>|</?answer>).)*</think>\s*<answer>(?:(?!</?answer>).)*</answer>\s*", flags=re.DOTALL
)
_BOXED = re.compile(r"^\\boxed\{(.*)\}$", flags=re.DOTALL)


def normalize_tags(text: str) -> str:
    """Rewrite "< / Answer >" and friends as "</answer>"."""
    return _SPACED_TAG.sub(lambda match: f"<{'/' if match.group(1) else ''}{match.group(2).lower()}>", text)


def format_score(response: str) -> float:
    """1.0 when the response is exactly one think block followed by one answer block, else 0.0."""
    return 1.0 if _LAYOUT.fullmatch(response) else 0.0


def extract_answer(response: str) -> str | None:
    """The text of the last <answer>...</answer> (pairs read left to right, each <answer> closed by the next
    </answer>), without a surrounding \\boxed{}; None if there is no tag. One pass: a regex's lazy scan from each
    unclosed <answer> was quadratic in them."""
    last, position = None, 0
    while (start := response.find("<answer>", position)) >= 0:
        end = response.find("</answer>", start + len("<answer>"))
        if end < 0:
            break
        last, position = response[start + len("<answer>") : end], end + len("</answer>")
    if last is None:
        return None
    answer = last.strip()
    boxed = _BOXED.match(answer)
    return boxed.group(1).strip() if boxed else answer


def accuracy_score(response: str, ground_truths: list[str], timeout_s: float = 5.0) -> float:
    """1.0 when the tagged answer equals one of the ground truths (as text or mathematically), else 0.0 (also when
    grading takes longer than `timeout_s`: mathruler grades in the killable workers of verl.rewards.math_grading)."""
    answer = extract_answer(response)
    return 1.0 if matches_any(answer, ground_truths, timeout_s, grader="mathruler") else 0.0


def compute_score(
    reward_input: dict[str, Any], format_weight: float = 0.5, timeout_s: float = 5.0
) -> dict[str, float]:
    """Score one response; `format_weight` is the share of the format check in `overall`, `timeout_s` the longest
    its grading may take."""
    response = normalize_tags(model_turn(reward_input))
    fmt = format_score(response)
    accuracy = accuracy_score(response, acceptable_answers(reward_input["ground_truth"]), timeout_s)
    return {"overall": (1.0 - format_weight) * accuracy + format_weight * fmt, "format": fmt, "accuracy": accuracy}
