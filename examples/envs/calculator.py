# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Tool use: arithmetic with a calculator and a sandboxed Python tool, in the chat template's tool-call format.

    worker.rollout.env=examples/envs/calculator.py:Calculator worker.rollout.max_turns=4
    worker.reward.reward_function=examples/envs/calculator.py:compute_score

The tools' schemas go into every prompt (the chat template's `tools`); the model calls them with
<tool_call>{"name": "multiply", "arguments": {"a": 6, "b": 7}}</tool_call>, reads the results as tool messages, and
answers in a turn without a tool call. The reward is 1 when the last number of the model's final turn
(extra_info["last_turn"]) is the row's answer, with a small bonus for using a tool without errors.
"""

import re
from typing import Any

from verl.envs import ToolEnv, python_tool


REWARD_TYPE = "sequential"


def add(a: float, b: float) -> float:
    """Add two numbers.

    Args:
        a: the first number
        b: the second number
    """
    return a + b


def multiply(a: float, b: float) -> float:
    """Multiply two numbers.

    Args:
        a: the first number
        b: the second number
    """
    return a * b


class Calculator(ToolEnv):
    tools = (add, multiply, python_tool)


class Multiplier(ToolEnv):
    """Only the multiply tool: a short tool description in every prompt, for the tiny CPU model (examples/cpu_tools)."""

    tools = (multiply,)


NUMBER = re.compile(r"-?\d{1,3}(?:,\d{3})+(?!\d)(?:\.\d+)?|-?\d+(?:\.\d+)?")
"""A number as a model writes it: 42, -3.5, or with thousands separators (56,088: a product's usual spelling)."""


def compute_score(sample: dict[str, Any]) -> dict[str, float]:
    numbers = NUMBER.findall(sample["extra_info"]["last_turn"])  # the model's final answer: its last number
    correct = float(bool(numbers) and float(numbers[-1].replace(",", "")) == float(sample["ground_truth"]))
    info = sample["extra_info"]
    clean_tool_use = float(info.get("env_tool_calls", 0) > 0 and info.get("env_tool_errors", 0) == 0)
    return {"overall": correct + 0.1 * clean_tool_use, "accuracy": correct, "tool_use": clean_tool_use}
