# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""verl.envs.base and verl.envs.client_env without an engine: what a step or episode_info may return, how an
environment's own failure is named, the timeouts of a step and of `release`, and the chat-client helpers."""

import threading
import time
from types import SimpleNamespace

import pytest

import verl.envs.base as env_base
from verl.envs import ChatClientEnv, EnvStep, MultiTurnEnv, SingleTurnEnv, ToolEnv
from verl.envs.base import (
    EnvCodeError,
    EnvRowError,
    EnvStepTimeoutError,
    call_env,
    checked_info,
    checked_step,
    release_env,
)
from verl.envs.client_env import chat_completion, reply_reasoning


@pytest.mark.parametrize(
    "step, message",
    [
        (EnvStep(messages=({"role": "user", "content": "hi"},), done=False), "EnvStep.messages is a tuple"),
        (EnvStep(messages=["hi"], done=False), r"EnvStep.messages\[0\] is 'hi'; each is a dict with a role of"),
        (
            EnvStep(messages=[{"role": "assistant", "content": "I did"}], done=False),
            r"EnvStep.messages\[0\] is \{'role': 'assistant'.*role of user, tool, system",
        ),
        (EnvStep(messages=[{"role": "tool"}], done=False), r"messages\[0\]\['content'\] is a NoneType; give text"),
        (EnvStep(messages=[], done=1), "EnvStep.done is 1; give True or False"),
        (EnvStep(messages=[], done=True, tool_calls=True), "EnvStep.tool_calls is True; give a count"),
        (EnvStep(messages=[], done=True, tool_calls=-1), "EnvStep.tool_calls is -1; give a count"),
        (EnvStep(messages=[], done=True, tool_errors=1.0), "EnvStep.tool_errors is 1.0; give a count"),
    ],
)
def test_a_step_that_returns_the_wrong_thing_is_named(step, message):
    with pytest.raises(TypeError, match=message):
        checked_step(step)


def test_a_step_of_the_right_shape_passes_and_a_long_value_is_shortened():
    step = EnvStep(
        messages=[{"role": "tool", "content": "5"}, {"role": "user", "content": [{"type": "text", "text": "go"}]}],
        done=False,
        tool_calls=2,
        tool_errors=0,
    )
    assert checked_step(step) is step
    with pytest.raises(TypeError) as info:
        checked_step(("x" * 500, True))
    assert str(info.value) == f"step returned tuple {repr(('x' * 500, True))[:117]}...; return an EnvStep"


def test_episode_info_must_be_a_dict_of_numbers_and_leave_the_trainers_counters_alone():
    assert checked_info({"solved": True, "tool_errors": 1}) == {"solved": True, "tool_errors": 1}
    for info, message in (
        ([("solved", 1.0)], "episode_info returned list"),
        ({"solved": "yes"}, r"values must be numbers; \{'solved': 'yes'\} are not"),
        ({"solved": None}, "values must be numbers"),
        ({"cut_tool_messages": 0}, r"keys \['cut_tool_messages'\] are the trainer's own counters"),
    ):
        with pytest.raises(TypeError, match=message):
            checked_info(info)


def test_docs_metrics_md_defines_each_counter_the_trainer_logs():
    """Each of the trainer's own episode counters is logged as env/<counter>/mean; docs/metrics.md's generic
    `env/<name>/mean` row speaks of the environment's episode_info only, which may not even return these names."""
    import pathlib

    docs = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "metrics.md").read_text()
    assert not [name for name in env_base.EPISODE_COUNTERS if f"`env/{name}/mean`" not in docs]


class Hooks(MultiTurnEnv):
    """An environment whose hooks do what the test asks."""

    def reset(self, row):
        if row.get("exit"):
            raise SystemExit(3)
        if row.get("row_error"):
            raise EnvRowError("the row has no 'answer'; write it again")
        if row.get("sleep"):
            time.sleep(row["sleep"])
        return {"row": row}

    def env_response(self, state, response):
        return [{"role": "user", "content": "more"}], response == "stop"


def test_call_env_names_the_environment_the_hook_and_the_row():
    env = Hooks()
    assert call_env(env, "Hooks (env)", "reset", "for row 0", {"a": 1}) == {"row": {"a": 1}}
    assert call_env(env, "Hooks (env)", "reset", "for row 0", {"a": 1}, timeout_s=5) == {"row": {"a": 1}}
    with pytest.raises(EnvCodeError, match=r"^Hooks \(env\): reset raised SystemExit for row 2: 3\. Fix the env"):
        call_env(env, "Hooks (env)", "reset", "for row 2", {"exit": True})
    with pytest.raises(EnvCodeError, match=r"^Hooks \(env\): reset raised SystemExit for row 2: 3\. Fix the env"):
        call_env(env, "Hooks (env)", "reset", "for row 2", {"exit": True}, timeout_s=5)
    # the row's data is to fix: its message, without a traceback of the environment's code
    with pytest.raises(EnvCodeError) as info:
        call_env(env, "Hooks (env)", "reset", "for row 1", {"row_error": True})
    assert str(info.value) == (
        "Hooks (env): reset raised EnvRowError for row 1: the row has no 'answer'; write it again"
    )
    # a check refuses the result: named as the hook's error
    with pytest.raises(EnvCodeError, match=r"step raised TypeError after turn 1: step returned tuple"):
        call_env(env, "Hooks (env)", "step", "after turn 1", {}, "x", check=lambda result: checked_step(("x",)))


def test_call_env_stops_a_hook_that_runs_past_its_timeout_and_none_waits():
    env = Hooks()
    start = time.monotonic()
    with pytest.raises(EnvStepTimeoutError, match=r"Hooks: reset for row 0 did not return within .*=0.2 s"):
        call_env(env, "Hooks", "reset", "for row 0", {"sleep": 1.5}, timeout_s=0.2)
    assert time.monotonic() - start < 1.2
    # timeout_s 0: no thread, no limit
    assert call_env(env, "Hooks", "reset", "for row 0", {"sleep": 0.3}, timeout_s=0) == {"row": {"sleep": 0.3}}


def test_release_env_survives_an_exit_and_leaves_a_hung_release(monkeypatch, caplog):
    release = threading.Event()

    class Exits(SingleTurnEnv):
        def release(self):
            raise SystemExit(1)

    class Hangs(SingleTurnEnv):
        def release(self):
            release.wait(30)

    release_env(Exits(), "Exits (env)")
    assert "Exits (env).release did not finish cleanly: SystemExit: 1" in caplog.text
    monkeypatch.setattr(env_base, "RELEASE_TIMEOUT_S", 0.2)
    caller = threading.Thread(target=release_env, args=(Hangs(), "Hangs (env)"), daemon=True)
    caller.start()
    caller.join(10)
    try:
        assert not caller.is_alive()
        assert "Hangs (env).release did not return within 0.2 s; it is left running." in caplog.text
    finally:
        release.set()


def test_the_base_environments_steps():
    assert Hooks().step({}, "again") == EnvStep(messages=[{"role": "user", "content": "more"}], done=False)
    assert Hooks().step({}, "stop") == EnvStep(messages=[], done=True)  # a done step adds nothing

    class Truthy(MultiTurnEnv):
        def env_response(self, state, response):
            return [], 1

    step = Truthy().step({}, "x")
    assert step.done is True and checked_step(step) is step
    assert SingleTurnEnv().step({}, "x") == EnvStep(messages=[], done=True)
    assert SingleTurnEnv().reset({"prompt": "p"}) == {"row": {"prompt": "p"}}
    # one step at a time unless the environment says its steps may overlap (ToolEnv's calls wait in threads)
    assert Hooks.concurrent_steps == 1 and SingleTurnEnv.concurrent_steps == 1 and ToolEnv.concurrent_steps == 8


def test_chat_client_helpers():
    reply = chat_completion({"role": "assistant", "content": "hi"}, "length", "m", 7, 3)
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens, reply.usage.total_tokens) == (7, 3, 10)
    assert reply.choices[0].finish_reason == "length" and reply.choices[0].message.content == "hi"
    assert reply_reasoning(SimpleNamespace(reasoning="a", reasoning_content="b")) == "a"
    assert reply_reasoning(SimpleNamespace(reasoning_content="b")) == "b"
    assert reply_reasoning(SimpleNamespace(content="c")) is None

    class Client(ChatClientEnv):
        pass

    with pytest.raises(TypeError, match="Client is a ChatClientEnv: its episodes run through `rollout`"):
        Client().step({}, "x")


def test_numpy_booleans_are_booleans():
    """numpy 2 names its bool type `bool`, so the check for numpy's `bool_` refused `done=np.all(...)`: the rollout
    stopped; `episode_info`'s numpy booleans were refused while Python's pass."""
    import numpy as np

    step = checked_step(EnvStep(messages=[], done=np.all([True, True])))
    assert step.done is True
    assert checked_step(EnvStep(messages=[{"role": "user", "content": "go on"}], done=np.False_)).done is False
    assert checked_info({"solved": np.True_, "score": np.float64(0.5)}) == {"solved": 1.0, "score": 0.5}


def test_an_infinite_step_timeout_waits_forever():
    """worker.rollout.env_step_timeout_s=inf (or evaluate's --env-step-timeout inf) passed validation, then every
    call raised OverflowError from the thread's join: the run stopped at the first reset."""
    state = call_env(SingleTurnEnv(), "E", "reset", "for row 0", {"prompt": "hi"}, timeout_s=float("inf"))
    assert state == call_env(SingleTurnEnv(), "E", "reset", "for row 0", {"prompt": "hi"})
