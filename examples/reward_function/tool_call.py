# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Single-turn function calling: the calls the model writes against the row's expected calls (none are run).
overall = 0.1 * format + 0.9 * accuracy.

Rows: the prompt, the tools' schemas in `data.tools_key` (default `tools`; the chat template describes them in the
prompt) and the expected calls as the answer, a list of {"name", "arguments"} ([] when the right answer is to call
nothing; one call, OpenAI's {"type": "function", "function": {...}} form, arguments as JSON text and the JSON text of
the whole list are read too):
    {"prompt": "Weather in Paris tomorrow?", "tools": [{"type": "function", "function": {"name": "get_weather",
     ...}}], "answer": [{"name": "get_weather", "arguments": {"city": "Paris", "day": 1}}]}
    worker.reward.reward_function=examples/reward_function/tool_call.py:compute_score

Calls are read as Hermes `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks (Qwen2.5, Qwen3 and
Hermes-style templates), or, given the `tokenizer` keyword (worker.reward.reward_function_kwargs='{tokenizer:
<model folder or id>}'), in the format its chat template writes (Qwen3.5's XML, GLM-4.5's tags: read by vLLM's tool
parser, the arguments typed by the row's schemas), as a tool environment reads them. Calls inside a `<think>` block
do not count.
format: the response calls (only tools the row describes) where calls are expected, none where none are, and has
    no malformed block. 1.0 or 0.0.
accuracy: the calls equal the expected ones, in any order (arguments compared as JSON values, 21.0 as 21, a null
    argument as one not given: Parquet gives each call the arguments other rows' calls have, as nulls, and a field
    any row holds a float in as floats). 1.0 or 0.0.
names: the share of expected calls whose tool is called (logged, not in overall).
"""

import functools
import json
from collections import Counter
from typing import Any

from verl.data.sources import tool_schemas, without_nulls
from verl.envs.tools import HERMES, ToolCallFormat, tool_call_format
from verl.rewards.function import model_turn
from verl.utils.numbers import plain_number


REWARD_NAME = "tool_call"
REWARD_TYPE = "sequential"


def _plain(value: Any) -> Any:
    """`value` with every integral float as an int: Parquet stores a field as double once any row's is a float, so
    an expected 21 arrives as 21.0 and must still equal the model's 21."""
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return plain_number(value) if isinstance(value, float) else value


def expected_calls(ground_truth: Any) -> list[dict[str, Any]]:
    """The row's expected calls as {"name", "arguments"} dicts: a list of calls, one call, or the JSON text of
    either; each call plain or in OpenAI's form ({"type": "function", "function": {...}}), its arguments an object or
    the JSON text of one (as OpenAI's messages hold them). A ValueError names what cannot be read."""
    calls = ground_truth
    if isinstance(calls, str):
        try:
            calls = json.loads(calls)
        except ValueError as error:
            raise ValueError(f"the expected calls {ground_truth[:200]!r} are not JSON ({error}).") from None
    calls = [calls] if isinstance(calls, dict) else calls
    if not isinstance(calls, list):
        raise ValueError(f"the expected calls must be a list of calls, got {type(calls).__name__}: {calls!r:.200}.")
    plain = []
    for call in calls:
        call = call.get("function", call) if isinstance(call, dict) else call
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            raise ValueError(f"an expected call is no {{'name', 'arguments'}} object: {call!r:.200}.")
        arguments = call.get("arguments", {})
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except ValueError as error:
                raise ValueError(
                    f"the arguments of the expected call {call['name']!r} are not JSON ({error})."
                ) from None
        plain.append({"name": call["name"], "arguments": arguments})
    return plain


def _key(call: dict[str, Any]) -> str:
    return json.dumps([call["name"], _plain(without_nulls(call.get("arguments", {})))], sort_keys=True)


@functools.cache
def _format(tokenizer: str | None) -> ToolCallFormat:
    """The call format of `tokenizer`'s chat template (probed once per process), or Hermes."""
    if tokenizer is None:
        return HERMES
    from transformers import AutoTokenizer

    return tool_call_format(AutoTokenizer.from_pretrained(tokenizer), None)


@functools.lru_cache(maxsize=1024)
def _reader(tokenizer: str | None, tools: str) -> ToolCallFormat:
    """`_format` for a row's tools (JSON text): a vLLM parser is built once per tool set, not once per response."""
    return _format(tokenizer).for_tools(json.loads(tools))


def compute_score(
    reward_input: dict[str, Any], format_weight: float = 0.1, tools_key: str = "tools", tokenizer: str | None = None
) -> dict[str, float]:
    """Score one response; `format_weight` is the share of the format check in `overall`, `tools_key` the column of
    the row's tools (data.tools_key), `tokenizer` the model whose chat template's call format is read."""
    expected = expected_calls(reward_input["ground_truth"])
    if tools_key not in reward_input["extra_info"]:  # else every call would miss its tool: format 0, silently
        raise KeyError(
            f"the row has no column {tools_key!r} (this function's tools_key): set reward_function_kwargs.tools_key "
            "to data.tools_key's column."
        )
    tools = tool_schemas(reward_input["extra_info"][tools_key]) or []
    _, calls = _reader(tokenizer, json.dumps(tools, sort_keys=True)).read(model_turn(reward_input))
    made = [call for call in calls if isinstance(call, dict)]
    names = {tool.get("function", tool)["name"] for tool in tools}
    fmt = float(len(made) == len(calls) and bool(made) == bool(expected) and all(c["name"] in names for c in made))
    accuracy = float(len(made) == len(calls) and Counter(map(_key, made)) == Counter(map(_key, expected)))
    called = Counter(call["name"] for call in made)
    found = sum((Counter(call["name"] for call in expected) & called).values()) / max(len(expected), 1)
    return {
        "overall": (1 - format_weight) * accuracy + format_weight * fmt,
        "format": fmt,
        "accuracy": accuracy,
        "names": found if expected else float(not made),
    }
