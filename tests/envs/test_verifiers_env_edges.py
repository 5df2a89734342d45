# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""verl.envs.verifiers_env's pieces without an episode: the bridge's relay of a harness request to the episode's
client (the fields it passes on, tool calls written as text or parsed by the endpoint, the reasoning, few-shot
turns), the reasoning split, message texts, a task's opening messages and the taskset block's check."""

import asyncio
import json
import os
import re
import sys

import pytest


vf = pytest.importorskip("verifiers.v1", reason="verifiers is not installed (pip install -e '.[verifiers]')")

from verl.envs import load_environment  # noqa: E402
from verl.envs.base import EnvRowError  # noqa: E402
from verl.envs.client_env import chat_client, chat_completion  # noqa: E402
from verl.envs.loader import EnvironmentLoadError  # noqa: E402
from verl.envs.verifiers_env import (  # noqa: E402
    TASK_COLUMN,
    Bridge,
    _text,
    load_verifiers_environment,
    split_reasoning,
    task_messages,
    task_row,
)


ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
    },
}
CALL = '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>'


def scripted(replies):
    """A bridge whose client answers with `replies` (message dicts) in turn, and the requests it was sent."""
    sent = []

    async def create(**request):
        sent.append(request)
        message = replies[len(sent) - 1]
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        return chat_completion({"role": "assistant", **message}, finish, request.get("model") or "m", 5, 2)

    return Bridge(chat_client(create)), sent


def test_the_bridge_passes_on_the_sampling_fields_and_tools_a_harness_sets_and_no_other():
    bridge, sent = scripted([{"content": "5"}])
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "2 + 3?"}],
        "max_tokens": 16,
        "temperature": 0.5,
        "seed": 1,
        "tool_choice": "auto",
        "tools": [ADD],
        "logprobs": True,
        "n": 3,
    }
    reply = asyncio.run(bridge.ask(body))
    assert reply["choices"][0]["message"] == {"role": "assistant", "content": "5"}
    assert reply["usage"]["total_tokens"] == 7
    assert {key: value for key, value in sent[0].items() if key != "messages"} == {
        "model": "m",
        "max_tokens": 16,
        "temperature": 0.5,
        "seed": 1,
        "tool_choice": "auto",
        "tools": [ADD],
    }


def test_a_tool_call_written_as_text_reaches_the_harness_as_a_call_unless_tools_are_off():
    bridge, _ = scripted([{"content": f"I add. {CALL}"}, {"content": CALL}])
    asked = {"model": "m", "messages": [{"role": "user", "content": "2 + 3?"}], "tools": [ADD]}
    choice = asyncio.run(bridge.ask(asked))["choices"][0]
    (call,) = choice["message"]["tool_calls"]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] == "I add. "
    assert call["function"]["name"] == "add" and json.loads(call["function"]["arguments"]) == {"a": 2, "b": 3}
    # tool_choice "none": the text as it is, a plain stop
    choice = asyncio.run(bridge.ask({**asked, "tool_choice": "none"}))["choices"][0]
    assert choice == {"index": 0, "message": {"role": "assistant", "content": CALL}, "finish_reason": "stop"}
    assert bridge.turns == [
        {"role": "assistant", "content": f"I add. {CALL}"},
        {"role": "assistant", "content": CALL},
    ]


def test_calls_the_endpoint_parsed_are_kept_in_the_turn_the_next_request_repeats():
    parsed = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}
    bridge, sent = scripted([{"content": None, "tool_calls": [parsed]}, {"content": "5"}])
    first = [{"role": "user", "content": "2 + 3?"}]
    choice = asyncio.run(bridge.ask({"model": "m", "messages": first, "tools": [ADD]}))["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["tool_calls"] == [parsed]
    assert bridge.turns == [{"role": "assistant", "content": "", "tool_calls": [parsed]}]
    # the harness resends the turn as it got it; the client gets the turn as it gave it
    again = [*first, choice["message"], {"role": "tool", "tool_call_id": "call_1", "content": "5"}]
    asyncio.run(bridge.ask({"model": "m", "messages": again, "tools": [ADD]}))
    assert sent[1]["messages"][1] == {"role": "assistant", "content": "", "tool_calls": [parsed]}


def test_the_reasoning_the_endpoint_separated_goes_to_the_harness_as_it_came():
    bridge, _ = scripted([{"content": "<answer>5</answer>", "reasoning_content": "2 + 3 is 5"}])
    reply = asyncio.run(bridge.ask({"model": "m", "messages": [{"role": "user", "content": "2 + 3?"}]}))
    assert reply["choices"][0]["message"] == {
        "role": "assistant",
        "content": "<answer>5</answer>",
        "reasoning_content": "2 + 3 is 5",
    }


def test_the_prompts_few_shot_turns_go_as_they_are_and_a_turn_the_model_did_not_write_is_refused():
    bridge, _ = scripted([])
    bridge.given = 1
    shots = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "1 + "}, {"type": "text", "text": "1?"}]},
        {"role": "assistant", "content": "2"},
        {"role": "user", "content": "2 + 2?"},
    ]
    assert bridge.client_messages(shots) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "1 + 1?"},
        {"role": "assistant", "content": "2"},
        {"role": "user", "content": "2 + 2?"},
    ]
    edited = [*shots, {"role": "assistant", "content": "4"}, {"role": "user", "content": "sure?"}]
    with pytest.raises(ValueError, match="message 4 of the harness's request is an assistant turn the model did not"):
        bridge.client_messages(edited)


def test_the_reasoning_ends_at_the_first_end_of_thinking_and_message_texts():
    assert split_reasoning("<think>a</think>b</think>c") == ("a", "b</think>c")
    assert split_reasoning("plan\n</think>\n\nanswer") == ("plan", "answer")
    assert split_reasoning("no reasoning") == (None, "no reasoning")
    assert _text(None, "m") == "" and _text("x", "m") == "x"
    assert _text([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}], "m") == "ab"


def test_a_task_without_a_system_prompt_opens_with_the_users_message():
    assert task_messages(vf.TaskData(idx=1, prompt="2 + 3?")) == [{"role": "user", "content": "2 + 3?"}]
    assert task_messages(vf.TaskData(idx=1, prompt="2 + 3?", system_prompt="")) == [
        {"role": "user", "content": "2 + 3?"}
    ]


def test_a_tasks_row_has_a_number_answer_as_text():
    class Data(vf.TaskData):
        answer: int = 0

    row = task_row(type("Task", (), {"data": Data(idx=0, prompt="2 + 3?", answer=5)})())
    assert row["prompt"] == "2 + 3?" and row["answer"] == "5"
    assert json.loads(row[TASK_COLUMN])["answer"] == 5


def test_a_taskset_block_that_is_not_a_mapping_is_refused():
    with pytest.raises(ValueError, match=r"verifiers:x: env_kwargs.taskset must be the taskset's config block, got 5"):
        load_verifiers_environment("x", {"taskset": 5})


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SUM = os.path.join(REPO, "examples", "envs", "verifiers_sum.py") + ":SumTaskset"


@pytest.fixture(scope="module")
def sum_env():
    return load_environment(SUM)


def test_an_episode_starts_from_the_users_message_and_a_system_message_of_its_own_stays_in_the_prompt(sum_env):
    """An episode's messages that are not the task's opening (another system message than the task's, as a rewritten
    dataset holds) become the task's prompt, the task's own system prompt dropped: the model is sent what it was
    given."""
    task = {"idx": 0, "prompt": "Add 20 and 3 with the tool.", "answer": "23"}
    user = {"role": "user", "content": "Add 20 and 3 with the tool."}
    assert sum_env.episode_data(task, [user]).prompt == "Add 20 and 3 with the tool."
    data = sum_env.episode_data(
        {**task, "system_prompt": "Be brief."}, [{"role": "system", "content": "Be terse."}, user]
    )
    assert data.system_prompt is None
    assert [(message.role, message.content) for message in data.prompt] == [
        ("system", "Be terse."),
        ("user", "Add 20 and 3 with the tool."),
    ]
    data = sum_env.episode_data(
        {**task, "system_prompt": "Be brief."}, [{"role": "system", "content": "Be brief."}, user]
    )
    assert (data.system_prompt, data.prompt) == ("Be brief.", "Add 20 and 3 with the tool.")
    with pytest.raises(ValueError, match="an episode starts from messages that end with the user's"):
        sum_env.episode_data(task, [user, {"role": "assistant", "content": "23"}])
    with pytest.raises(ValueError, match=r"message 0 of the prompt has no chat role \('bot'\)"):
        sum_env.episode_data(task, [{"role": "bot", "content": "hi"}, user])


def test_the_fix_for_a_row_without_task_data_repeats_the_env_kwargs(sum_env):
    with pytest.raises(EnvRowError, match=r"--env /.*/verifiers_sum.py:SumTaskset --output FILE`\.$"):
        sum_env.reset({"prompt": "Add 20 and 3 with the tool."})
    configured = load_environment(SUM, {"taskset": {"task": {}}})
    with pytest.raises(EnvRowError, match=r"--output FILE` \(with the same --env-kwargs\)\.$"):
        configured.reset({"prompt": "Add 20 and 3 with the tool."})


def test_a_taskset_file_named_as_a_module_imported_already_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    (tmp_path / "json.py").write_text(
        "import verifiers.v1 as vf\n\n\nclass JsonTaskset(vf.Taskset):\n    pass\n\n\n__all__ = ['JsonTaskset']\n"
    )
    with pytest.raises(EnvironmentLoadError, match=r"another module named 'json' \(.*\) is imported already; rename"):
        load_environment(f"{tmp_path / 'json.py'}:JsonTaskset")


@pytest.mark.parametrize("raw, what", [("{not json", "is not JSON"), ("[1, 2]", "is [1, 2]"), ("5", "is 5")])
def test_a_corrupt_task_column_is_the_data_s_fault_naming_the_column(raw, what):
    """It was an EnvCodeError blaming the environment's code, with a traceback."""
    from verl.envs.base import EnvCodeError, call_env

    env = load_environment("examples/envs/verifiers_sum.py:SumTaskset")
    with pytest.raises(EnvCodeError, match=rf"EnvRowError for row 3: .*'{TASK_COLUMN}' {re.escape(what)}.*export"):
        call_env(env, "E", "reset", "for row 3", {TASK_COLUMN: raw})


def test_a_task_with_an_empty_prompt_is_refused_saying_why():
    """An empty list of messages raised IndexError (a traceback from `export`)."""
    with pytest.raises(NotImplementedError, match=r"task 0: a prompt of messages \[\] cannot be a dataset prompt"):
        task_messages(vf.TaskData(idx=0, prompt=[]))
