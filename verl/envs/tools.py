# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Tool use: the model calls plain Python functions with Qwen/Hermes `<tool_call>{"name": ..., "arguments": {...}}
</tool_call>` blocks and gets tool messages back. A function's JSON schema (from its signature and docstring) goes
into the prompt via `tool_schemas()`. README.md's "Multi-turn and tool-use rollouts" covers limits and concurrency.
"""

import json
import re
import threading
import uuid
from collections.abc import Callable
from typing import Any

from verl.envs.base import EnvStep, MultiTurnEnv


TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>|<tool_call>\s*(.*?)\s*$", re.DOTALL)
"""A closed `<tool_call>` block, or a final unclosed one (as vLLM's hermes parser reads it)."""
THINKING = re.compile(r"<think>.*?(?:</think>|$)", re.DOTALL)
"""A reasoning block (Qwen3, DeepSeek-R1), or an unclosed one to the end of the turn: calls written in it are not
made, as vLLM's tool parser reads only what its reasoning parser leaves."""
MAX_RESULT_CHARS = 2000
"""Longest tool result handed back to the model (a longer one is cut, with a note)."""


def parse_tool_calls(text: str) -> list[dict[str, Any] | str]:
    """The tool calls in a model turn: {"name", "arguments"} dicts, or an error string for a malformed block. A last
    call without `</tool_call>` counts when its JSON is complete (a call cut by the response budget is malformed)."""
    return [call for _, call in find_tool_calls(text)]


def find_tool_calls(text: str) -> list[tuple[tuple[int, int], dict[str, Any] | str]]:
    """parse_tool_calls with each block's (start, end) in `text`, for callers that keep the text around the calls.
    Blocks inside a `<think>` block are the model's reasoning, not calls."""
    thinking = [match.span() for match in THINKING.finditer(text)]
    return [
        (match.span(), _read_call(match.group(1) or match.group(2) or ""))
        for match in TOOL_CALL.finditer(text)
        if not any(start <= match.start() < end for start, end in thinking)
    ]


def _read_call(body: str) -> dict[str, Any] | str:
    try:
        call = json.loads(body)
    except ValueError as error:
        return f"the tool call is not valid JSON ({error})"
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return 'a tool call must be a JSON object with a "name" and "arguments"'
    arguments = call.get("arguments", {})
    if isinstance(arguments, str):  # some models write the arguments as a JSON string
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return "the tool call's arguments are not a JSON object"
    if not isinstance(arguments, dict):
        return "the tool call's arguments are not a JSON object"
    return {"name": call["name"], "arguments": arguments}


def python_tool(code: str) -> str:
    """Run a Python program and return what it prints (stdout), or its error.

    Args:
        code: the complete program; print the values you need.
    """
    from verl.rewards.sandbox import SandboxLimits, run_python

    result = run_python(code, limits=SandboxLimits(wall_s=5.0, cpu_s=3.0, memory_mb=512, output_kb=64))
    if result.status == "ok":
        return result.stdout
    return f"Error ({result.status}): {result.stderr.strip()[-500:] or 'no output'}"


class ToolEnv(MultiTurnEnv):
    """Calls the model's tools until a turn has no tool call; subclass it with `tools`, or pass them. A tool that
    raises returns "Error: ..."; each call runs in a thread of the worker, reported as timed out after
    `tool_timeout_s` (the thread cannot be stopped: run untrusted work in the sandbox)."""

    tools: tuple[Callable[..., Any], ...] = ()
    tool_timeout_s: float = 30.0
    """A plain tool call that has not returned by then is reported to the model as timed out."""
    concurrent_steps: int = 8

    def __init__(self, tools: list[Callable[..., Any]] | None = None, tool_timeout_s: float | None = None) -> None:
        self.tools = tuple(tools) if tools is not None else tuple(self.tools)
        if tool_timeout_s is not None:
            if not tool_timeout_s > 0:
                raise ValueError(f"ToolEnv: tool_timeout_s={tool_timeout_s} must be positive.")
            self.tool_timeout_s = float(tool_timeout_s)
        names = [tool.__name__ for tool in self.tools]
        if len(set(names)) != len(names):
            raise ValueError(f"ToolEnv: tool names must be unique, got {names}.")
        self._by_name = dict(zip(names, self.tools))

    def tool_schemas(self) -> list[dict[str, Any]]:
        """The JSON schemas of the tools, for the chat template's `tools` argument."""
        from transformers.utils import get_json_schema

        return [get_json_schema(tool) for tool in self.tools]

    def call(self, name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        """(result text, failed) of one call."""
        tool = self._by_name.get(name)
        if tool is None:
            return f"Error: there is no tool named {name!r}; the tools are {sorted(self._by_name)}.", True
        outcome: dict[str, Any] = {}

        def run() -> None:
            try:
                outcome["result"] = tool(**arguments)
            except BaseException as error:  # the model's call is untrusted input: any failure goes back as text
                outcome["error"] = error

        thread = threading.Thread(target=run, name=f"tool-{name}", daemon=True)
        thread.start()
        thread.join(self.tool_timeout_s)
        if thread.is_alive():
            return f"Error: {name} did not return within {self.tool_timeout_s:g} s.", True
        if "error" in outcome:
            error = outcome["error"]
            return f"Error: {name} raised {type(error).__name__}: {error}", True
        result = outcome["result"]
        text = result if isinstance(result, str) else json.dumps(result, default=str)
        if len(text) > MAX_RESULT_CHARS:
            text = text[:MAX_RESULT_CHARS] + f"\n[... {len(text) - MAX_RESULT_CHARS} more characters cut]"
        return text, text.startswith("Error")

    def step(self, state: dict[str, Any], response: str) -> EnvStep:
        calls = parse_tool_calls(response)
        if not calls:
            return EnvStep(messages=[], done=True)
        messages, errors = [], 0
        for call in calls:
            if isinstance(call, str):
                text, failed = f"Error: {call}.", True
            else:
                text, failed = self.call(call["name"], call["arguments"])
            errors += failed
            messages.append({"role": "tool", "content": text})
        return EnvStep(messages=messages, done=False, tool_calls=len(calls), tool_errors=errors)


def tool_call(name: str, arguments: str) -> dict[str, Any]:
    """One OpenAI `tool_calls` entry: a fresh `call_<hex>` id, the function's name and its JSON-string arguments."""
    return {
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def assistant_message(text: str, tools: bool) -> dict[str, Any]:
    """The OpenAI assistant message of a generated `text`. With `tools`, well-formed `<tool_call>` blocks become
    `tool_calls` and the content is the text around them (None if only whitespace); a malformed block stays in it,
    as vLLM's hermes parser leaves it."""
    calls, rest, end = [], [], 0
    for (start, stop), call in find_tool_calls(text) if tools else ():
        if isinstance(call, str):
            continue
        rest.append(text[end:start])
        end = stop
        calls.append(tool_call(call["name"], json.dumps(call["arguments"], ensure_ascii=False)))
    if not calls:
        return {"role": "assistant", "content": text}
    content = "".join(rest) + text[end:]
    return {"role": "assistant", "content": content if content.strip() else None, "tool_calls": calls}
