# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Math graded by math-verify, with a hard time limit per sample: overall = (1 - w) * accuracy + w * has_answer.

math-verify (Hugging Face's maintained verifier) compares answers symbolically after parsing LaTeX, so "\\dfrac12",
"0.5", "1/2" and "50\\%" all match a ground truth of "\\frac{1}{2}"; see verl/rewards/math_grading.py and
docs/rewards.md for what it accepts. Sympy can hang on an adversarial answer, so every sample is verified in a
worker process that is killed when it takes longer than `timeout_s`; that sample scores 0 and the rest of the batch
is graded normally.

Use with examples/format_prompt/math.jinja (answer in \\boxed{}) or a DAPO-style prompt ("Answer: ..."):
    worker.reward.reward_function=examples/reward_function/math_verify.py:compute_score
    worker.reward.reward_function_kwargs='{timeout_s: 5.0, max_workers: 2}'

accuracy: 1.0 when the extracted answer equals the ground truth mathematically, else 0.0. The answer is the last
    \\boxed{...} (or \\fbox{...}) of the response, else what follows the last "Answer:" / "answer is" up to the end of
    its line, its sentence or the first word of prose ("Answer: 12 dollars" gives 12; "Answer: The area is 12." gives
    12), or the display math ("$$...$$", "\\[...\\]") that follows it, also on the next lines.
has_answer: 1.0 when an answer was extracted at all. `format_weight` (default 0) gives that share of `overall`.
timeout: 1.0 when verification ran out of time (accuracy is then 0.0); its mean is the share of such samples.

The worker pool (max_workers processes) lives in verl.rewards.math_grading: it starts on the first call and is reused
on every later step, by this file and any other that grades with it in the same process (train and validation).
"""

from typing import Any

from verl.rewards.math_grading import Verdict, acceptable_answers, extract_answer, verify_many


REWARD_NAME = "math_verify"
REWARD_TYPE = "batch"


def compute_score(
    reward_inputs: list[dict[str, Any]],
    timeout_s: float = 5.0,
    max_workers: int = 2,
    format_weight: float = 0.0,
) -> list[dict[str, float]]:
    """Score a batch: one verification per response, all in the shared pool, at most timeout_s seconds each."""
    if not 0.0 <= format_weight <= 1.0:
        raise ValueError(f"format_weight must lie in [0, 1], got {format_weight}.")
    answers = [extract_answer(reward_input["response"]) for reward_input in reward_inputs]
    golds = [acceptable_answers(reward_input["ground_truth"]) for reward_input in reward_inputs]
    pairs = [(answer, gold) for answer, row_golds in zip(answers, golds) for gold in row_golds]
    flat = iter(verify_many(pairs, timeout_s=timeout_s, max_workers=max_workers))
    scores = []
    for answer, row_golds in zip(answers, golds):
        row_verdicts = [next(flat) for _ in row_golds]
        correct = Verdict.CORRECT in row_verdicts
        verdict = Verdict.CORRECT if correct else (Verdict.TIMEOUT if Verdict.TIMEOUT in row_verdicts else None)
        accuracy = 1.0 if correct else 0.0
        has_answer = 0.0 if answer is None else 1.0
        scores.append(
            {
                "overall": (1.0 - format_weight) * accuracy + format_weight * has_answer,
                "accuracy": accuracy,
                "has_answer": has_answer,
                "timeout": 1.0 if verdict == Verdict.TIMEOUT else 0.0,
            }
        )
    return scores
