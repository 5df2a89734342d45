# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""DAPO math reward: +1 / -1 on the "Answer:" line, plus the soft overlong punishment.

Follows the reward released with the DAPO paper (Yu et al. 2025, "DAPO: An Open-Source LLM Reinforcement Learning
System at Scale"; the `math_dapo` scorer of its verl recipe), whose answer check is the Minerva normalization of
Lewkowycz et al. 2022, "Solving Quantitative Reasoning Problems with Language Models", appendix. The rules below are
reproduced exactly, quirks included, so that scores match the reference on every input; no maintained library
ships this string rule (mathruler and math-verify grade symbolically, which is a different reward).

Use with examples/format_prompt/dapo.jinja and the response budget of the run:
    worker.reward.reward_function=examples/reward_function/dapo.py:compute_score
    worker.reward.reward_function_kwargs='{max_response_length: 20480, overlong_buffer_len: 4096}'

accuracy: only the last 300 characters of the response are read. The prediction is the text after the last
    "Answer:" there (any case, at least one character on the line; the literal "[INVALID]" when there is none).
    Prediction and ground truth both go through the Minerva normalization and must then be equal strings:
      1. keep what follows the last "=";
      2. fixed substitutions ("an " and "a " dropped, spaces dropped, \\mbox -> \\text, ...), then a fixed list
         of unit and filler words and TeX tokens deleted wherever they occur ("cm", "degrees", "\\ldots", ...);
      3. on a line with two or more "$", only the text between the first two is kept;
      4. \\text{..}, \\textbf{..}, \\overline{..} unwrapped up to the first "}", \\boxed{..} up to the last "}";
      5. shorthand \\frac12 -> \\frac{1}{2} and \\sqrt2 -> \\sqrt{2}; every "$" dropped;
      6. commas dropped when only digits remain without them; surrounding whitespace stripped.
    The accuracy reward is +1.0 when they match and -1.0 otherwise. A ground truth that is a list of accepted answers
    (or its JSON text, as verl-style datasets store them) matches any of them; None (no answer column) is an error. Note what is *not* done: no symbolic
    equivalence, "5." differs from "5", "\\dfrac{1}{2}" differs from "\\frac{1}{2}", "12.0" differs from "12".
overlong: 0 while the response fits in max_response_length - overlong_buffer_len tokens, then falling linearly
    to -1 at max_response_length (and -1 beyond), so truncated rambling is discouraged smoothly rather than by a
    cliff. overall = accuracy reward + overlong_penalty_factor * overlong.
"""

import re
import warnings
from typing import Any

from verl.rewards.math_grading import acceptable_answers


REWARD_NAME = "dapo"
REWARD_TYPE = "sequential"

# The reference reads only the tail of a response: the answer line is expected to be the last one.
ANSWER_WINDOW_CHARS = 300
# The prediction the reference scores when no "Answer:" line is found; it goes through normalization like any other.
NO_ANSWER = "[INVALID]"

_ANSWER_LINE = re.compile(r"answer\s*:\s*([^\n]+)", flags=re.IGNORECASE)

# Minerva normalization data (Lewkowycz et al. 2022, appendix), applied in this order; the order matters because
# each step runs on the output of the previous one.
_SUBSTITUTIONS: tuple[tuple[str, str], ...] = (
    ("an ", ""),
    ("a ", ""),
    (".$", "$"),
    ("\\$", ""),
    ("\\ ", ""),
    (" ", ""),
    ("mbox", "text"),
    (",\\text{and}", ","),
    ("\\text{and}", ","),
    ("\\text{m}", "\\text{}"),
)
_UNIT_AND_FILLER_WORDS: tuple[str, ...] = tuple(
    "square ways integers dollars mph inches hours km units \\ldots sue points feet minutes digits cents degrees cm "
    "gm pounds meters meals edges students childrentickets multiples".split()
)
# Empty or suffix \text{}, ordinals, degree signs, spacing, grouped commas, quotes, dots. Two entries hold a real
# newline ("\n"), as in the reference list.
_TEX_LEFTOVERS: tuple[str, ...] = (
    *("\\text{s}", "\\text{.}", "\\text{\ns}", "\\text{}^2", "\\text{}^3", "\\text{\n}", "\\text{}"),
    *("\\mathrm{th}", "^\\circ", "^{\\circ}", "\\;", ",\\!", "{,}", '"', "\\dots"),
)

# "." never crosses a newline in these patterns, so each rule works line by line.
_FIRST_DOLLAR_PAIR = re.compile(r"[^\n$]*\$([^\n$]*)\$[^\n]*")  # the whole line -> "$" + first math span + "$"
_UNTIL_FIRST_BRACE = tuple(re.compile(r"\\" + name + r"\{([^\n}]*)\}") for name in ("text", "textbf", "overline"))
_UNTIL_LAST_BRACE = re.compile(r"\\boxed\{([^\n]*)\}")
_FRAC_SHORTHAND = re.compile(r"frac([^{])([^\n])")
_SQRT_SHORTHAND = re.compile(r"sqrt([^{])")


def extract_answer(response: str) -> str | None:
    """The text after the last "Answer:" in the response's final 300 characters; None when there is none."""
    answers = _ANSWER_LINE.findall(response[-ANSWER_WINDOW_CHARS:])
    return answers[-1] if answers else None


def normalize_answer(answer: str) -> str:
    """The Minerva normal form of a final answer, so "x = $\\boxed{1,000}$" and "1000" compare equal."""
    text = answer.rsplit("=", 1)[-1]
    for old, new in _SUBSTITUTIONS:
        text = text.replace(old, new)
    for token in _UNIT_AND_FILLER_WORDS + _TEX_LEFTOVERS:  # deleted wherever they occur, even inside words
        text = text.replace(token, "")
    text = _FIRST_DOLLAR_PAIR.sub(r"$\1$", text)
    for wrapper in _UNTIL_FIRST_BRACE:
        text = wrapper.sub(r"\1", text)
    text = _UNTIL_LAST_BRACE.sub(r"\1", text)
    text = _FRAC_SHORTHAND.sub(r"frac{\1}{\2}", text)
    text = _SQRT_SHORTHAND.sub(r"sqrt{\1}", text)
    text = text.replace("$", "")
    if text.replace(",", "").isdigit():  # str.isdigit, as the reference: "1,2" also becomes "12"
        text = text.replace(",", "")
    return text.strip()


def soft_overlong_punishment(response_length: int, max_response_length: int, overlong_buffer_len: int) -> float:
    """0 up to max_response_length - overlong_buffer_len tokens, then linearly down to -1 at the maximum."""
    if overlong_buffer_len <= 0:
        return 0.0 if response_length <= max_response_length else -1.0
    expected_length = max_response_length - overlong_buffer_len
    if response_length <= expected_length:
        return 0.0
    return max(-1.0, (expected_length - response_length) / overlong_buffer_len)


def compute_score(
    reward_input: dict[str, Any],
    max_response_length: int,
    overlong_buffer_len: int,
    overlong_penalty_factor: float = 1.0,
) -> dict[str, float]:
    """Score one response; the length arguments are in tokens and must match the rollout's response budget."""
    if overlong_buffer_len > max_response_length:
        raise ValueError(
            f"overlong_buffer_len={overlong_buffer_len} exceeds max_response_length={max_response_length}; set "
            "worker.reward.reward_function_kwargs.overlong_buffer_len to a part of the response budget."
        )
    if reward_input["response_length"] > max_response_length:
        # Only a run whose data.max_response_length is larger than the budget given here gets such a response: every
        # one of them would be punished as overlong. Said once (the warnings filter keeps one per call site).
        warnings.warn(
            f"a response of {reward_input['response_length']} tokens is longer than max_response_length="
            f"{max_response_length} given to dapo.py; set worker.reward.reward_function_kwargs.max_response_length to "
            "the run's data.max_response_length, or every longer response is scored as overlong (-1).",
            stacklevel=2,
        )
    answer = extract_answer(reward_input["response"])
    prediction = normalize_answer(NO_ANSWER if answer is None else answer)
    # a list of accepted answers (or its JSON text) is each of them; None is refused: there is nothing to match
    golds = acceptable_answers(reward_input["ground_truth"])
    correct = any(prediction == normalize_answer(gold) for gold in golds)
    accuracy_reward = 1.0 if correct else -1.0
    overlong = soft_overlong_punishment(reward_input["response_length"], max_response_length, overlong_buffer_len)
    return {
        "overall": accuracy_reward + overlong_penalty_factor * overlong,
        "accuracy": 1.0 if correct else 0.0,
        "accuracy_reward": accuracy_reward,
        "overlong": overlong,
    }
