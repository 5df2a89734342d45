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
"""DAPO-style math reward: +1 / -1 on the "Answer:" line, plus the soft overlong punishment.

Use with examples/format_prompt/dapo.jinja and the response budget of the run:
    worker.reward.reward_function=examples/reward_function/dapo.py:compute_score
    worker.reward.reward_function_kwargs='{max_response_length: 20480, overlong_buffer_len: 4096}'

accuracy: the text after the last "Answer:" is normalized (boxes, \text{}, $, spacing commands, thousands
    separators, "x = " prefixes, \\dfrac, \frac12) and compared as a string with the normalized ground truth.
    The accuracy reward is +1.0 when they match and -1.0 otherwise, as in DAPO.
overlong: 0 while the response fits in max_response_length - overlong_buffer_len tokens, then falling linearly
    to -1 at max_response_length (and -1 beyond), so truncated rambling is discouraged smoothly rather than by a
    cliff. overall = accuracy reward + overlong_penalty_factor * overlong.
"""

import re
from typing import Any


REWARD_NAME = "dapo"
REWARD_TYPE = "sequential"

_ANSWER_LINE = re.compile(r"answer\s*:\s*([^\n]*)", flags=re.IGNORECASE)
_WRAPPERS = re.compile(r"\\(?:text|textbf|textrm|mathrm|mathbf|mbox|operatorname)\{([^{}]*)\}")
_DROPPED = ("\\!", "\\,", "\\;", "\\:", "\\ ", "\\left", "\\right", "\\$", "$", "^\\circ", "^{\\circ}", "\\%", "%")
_UNITS = re.compile(
    r"(?<=\d)(?:units?|cm|km|kg|m|g|degrees?|dollars?|cents?|inches|inch|feet|foot|meters?|minutes?|hours?|"
    r"seconds?|days?|years?)$"
)


def extract_answer(response: str) -> str | None:
    """The text after the last "Answer:" on its line; None when there is no such line or it is empty."""
    answers = _ANSWER_LINE.findall(response)
    return (answers[-1].strip() or None) if answers else None


def _unbox(text: str) -> str:
    """The content of a \\boxed{...} that wraps the answer (balanced braces); the text itself otherwise."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return text
    depth, begin = 1, start + len("\\boxed{")
    for position in range(begin, len(text)):
        depth += {"{": 1, "}": -1}.get(text[position], 0)
        if depth == 0:
            return text[begin:position]
    return text


def normalize_answer(answer: str) -> str:
    """A canonical string for a final answer, so "$\\boxed{1,000}$." and "1000" compare equal."""
    text = _unbox(answer.strip())
    text = _WRAPPERS.sub(r"\1", text)
    for token in _DROPPED:
        text = text.replace(token, "")
    text = text.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    text = "".join(text.split()).rstrip(".")
    if "=" in text and not re.search(r"[<>]|\\[lg]eq?", text):  # "x=5" -> "5"; inequalities stay whole
        text = text.rsplit("=", 1)[1]
    text = re.sub(r"\\frac(\d)(\d)", r"\\frac{\1}{\2}", text)  # \frac12 -> \frac{1}{2}
    text = re.sub(r"\\frac\{([^{}]*)\}(\d)", r"\\frac{\1}{\2}", text)  # \frac{1}2 -> \frac{1}{2}
    text = re.sub(r"\\sqrt(\w)", r"\\sqrt{\1}", text)  # \sqrt2 -> \sqrt{2}
    text = _UNITS.sub("", text)
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", text):  # thousands separators, not tuples like "1,2"
        text = text.replace(",", "")
    if re.fullmatch(r"-?\d+\.0*", text):  # "12.0" -> "12"
        text = text.split(".")[0]
    return text


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
    answer = extract_answer(reward_input["response"])
    correct = answer is not None and normalize_answer(answer) == normalize_answer(str(reward_input["ground_truth"]))
    accuracy_reward = 1.0 if correct else -1.0
    overlong = soft_overlong_punishment(reward_input["response_length"], max_response_length, overlong_buffer_len)
    return {
        "overall": accuracy_reward + overlong_penalty_factor * overlong,
        "accuracy": 1.0 if correct else 0.0,
        "accuracy_reward": accuracy_reward,
        "overlong": overlong,
    }
