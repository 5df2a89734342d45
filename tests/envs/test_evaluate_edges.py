# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""`verl.envs.evaluate` at its edges, against stand-in replies: how a reply becomes the model's turn and the next
request, the --response-length budget at its boundaries, and what the summary line counts."""

import argparse
import json
import math
import time
import types

import pytest
from PIL import Image

from tests.envs.test_evaluate_messages import _budget_episode
from verl.envs.evaluate import (
    EndpointReplyError,
    EpisodeResult,
    EpisodeSetup,
    ResponseBudget,
    _completion,
    _json_object,
    _within,
    accuracy_keys,
    answered,
    as_written,
    budgeted,
    client_request,
    episode_record,
    load_scorer,
    main,
    prompt_message,
    read_rows,
    reply_turn,
    reward_sample,
    sent_back,
    summarize,
)


def reply(content="", calls=(), finish_reason="stop", prompt_tokens=1, completion_tokens=1):
    """A chat completion as the openai client reads it: `calls` are (id, name, JSON arguments)."""
    tool_calls = [
        types.SimpleNamespace(id=call_id, type="function", function=types.SimpleNamespace(name=name, arguments=args))
        for call_id, name, args in calls
    ]
    message = types.SimpleNamespace(role="assistant", content=content, tool_calls=tool_calls or None, reasoning=None)
    usage = types.SimpleNamespace(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)
    return types.SimpleNamespace(
        choices=[types.SimpleNamespace(message=message, finish_reason=finish_reason)], usage=usage
    )


def test_a_prompt_needs_one_marker_per_image_or_none():
    red = Image.new("RGB", (4, 4), (255, 0, 0))
    assert [part["type"] for part in prompt_message("a <image> b", [red])["content"]] == ["text", "image", "text"]
    with pytest.raises(ValueError, match="the prompt has 2 <image> markers but the row has 1 images"):
        prompt_message("a <image> b <image>", [red])


@pytest.mark.parametrize("finish_reason, truncated", [("length", True), ("stop", False), ("tool_calls", False)])
def test_only_a_turn_cut_at_its_length_is_truncated(finish_reason, truncated):
    counts = {"truncated": None}
    reply_turn(reply("x", finish_reason=finish_reason), counts)
    assert counts["truncated"] is truncated


def test_parsed_calls_go_back_into_the_turns_text_as_blocks():
    call = ("call_7", "add", '{"a": 1}')
    text, calls, tokens = reply_turn(reply("", [call], "tool_calls", completion_tokens=9), {})
    assert text == '<tool_call>\n{"name": "add", "arguments": {"a": 1}}\n</tool_call>' and tokens == 9
    assert calls == [{"name": "add", "arguments": {"a": 1}}]
    text, _, _ = reply_turn(reply("Let me add.", [call], "tool_calls"), {})
    assert text == 'Let me add.\n<tool_call>\n{"name": "add", "arguments": {"a": 1}}\n</tool_call>'


def test_the_next_request_carries_the_endpoints_call_ids_and_names_them_in_the_results():
    turn = sent_back(reply("", [("call_7", "add", '{"a": 1}'), (None, "add", '{"a": 2}')], "tool_calls"))
    assert [call["id"] for call in turn["tool_calls"]] == ["call_7", "call_1"]
    results = [{"role": "tool", "content": "1"}, {"role": "tool", "content": "2"}]
    assert [message["tool_call_id"] for message in answered(turn, results)] == ["call_7", "call_1"]
    # results that do not pair one to one with the calls are left as they are
    assert answered(turn, [*results, {"role": "tool", "content": "3"}]) == [*results, {"role": "tool", "content": "3"}]
    assert answered(turn, results[:1]) == results[:1]


def test_an_env_step_timeout_of_0_is_no_limit():
    def slow():
        time.sleep(0.2)
        return "done"

    assert _within(0, "late", slow) == "done"
    assert _within(-1, "late", slow) == "done"


def test_a_client_episode_that_hangs_between_its_requests_stops_at_the_env_step_timeout():
    """--env-step-timeout bounds a client-style episode's (a verifiers taskset's) work between two model requests, as
    worker.rollout.env_step_timeout_s does in training; waiting for the endpoint does not count. (It bounded step
    environments only: a hung tool of a verifiers episode hung evaluate for ever.)"""
    import asyncio
    import threading

    from verl.envs import ChatClientEnv
    from verl.envs.base import EnvStepTimeoutError
    from verl.envs.evaluate import run_client_episode

    class Hangs(ChatClientEnv):
        async def rollout(self, client, model, messages, state):
            await client.chat.completions.create(model=model, messages=messages)  # the endpoint takes its time
            state["asked"] = True
            await asyncio.Event().wait()  # a tool that never returns

    async def create(**request):
        await asyncio.sleep(0.6)  # longer than the limit: the endpoint's time is not the episode's
        return reply("a")

    client = types.SimpleNamespace(chat=types.SimpleNamespace(completions=types.SimpleNamespace(create=create)))
    setup = EpisodeSetup(row={}, prompt="p", images=[], model="m", max_turns=4, sampling={}, env_step_timeout_s=0.4)
    outcome = {}

    def run():
        try:
            outcome["result"] = run_client_episode(Hangs(), setup, lambda: client)
        except BaseException as error:
            outcome["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(30)
    assert not thread.is_alive(), "the hung episode was not stopped"
    assert isinstance(outcome.get("error"), EnvStepTimeoutError), outcome
    assert (
        "Hangs (--env): the episode did not ask the model again within --env-step-timeout 0.4 s after model turn 1"
        in str(outcome["error"])
    )


@pytest.mark.parametrize("hook", ["reset", "episode_info"])
@pytest.mark.parametrize("style", ["step", "client"])
def test_a_reset_or_episode_info_that_hangs_stops_at_the_env_step_timeout(style, hook):
    """An environment's `reset` (a container that never starts) or `episode_info` is bounded by --env-step-timeout, as
    training bounds them by worker.rollout.env_step_timeout_s (evaluate waited for them for ever)."""
    import threading

    from verl.envs import ChatClientEnv, MultiTurnEnv
    from verl.envs.base import EnvStepTimeoutError
    from verl.envs.evaluate import run_client_episode, run_episode

    gate = threading.Event()

    class Hung:
        def reset(self, row):
            if hook == "reset":
                gate.wait(60)
            return {}

        def episode_info(self, state):
            if hook == "episode_info":
                gate.wait(60)
            return {}

    class StepEnv(Hung, MultiTurnEnv):
        def env_response(self, state, response):
            return [], True

    class ClientEnv(Hung, ChatClientEnv):
        async def rollout(self, client, model, messages, state):
            await client.chat.completions.create(model=model, messages=messages)

    async def acreate(**request):
        return reply("a")

    setup = EpisodeSetup(row={}, prompt="p", images=[], model="m", max_turns=1, sampling={}, env_step_timeout_s=0.3)
    started = time.monotonic()
    try:
        with pytest.raises(EnvStepTimeoutError, match=f"the {hook} .* did not finish within --env-step-timeout 0.3 s"):
            if style == "step":
                client = types.SimpleNamespace(
                    chat=types.SimpleNamespace(completions=types.SimpleNamespace(create=lambda **request: reply("a")))
                )
                run_episode(StepEnv(), setup, client)
            else:
                client = types.SimpleNamespace(
                    chat=types.SimpleNamespace(completions=types.SimpleNamespace(create=acreate))
                )
                run_client_episode(ClientEnv(), setup, lambda: client)
    finally:
        gate.set()
    assert time.monotonic() - started < 30


def test_a_reset_that_returns_none_is_named_as_resets_error():
    """A `reset` without its `return` gave the episode the state None: the first `step` failed on it, named as the
    step's error after model turn 1 ("'NoneType' object is not subscriptable"). The rollout checks `reset`'s result
    with the same check (`checked_state`)."""
    from verl.envs import MultiTurnEnv
    from verl.envs.base import EnvCodeError
    from verl.envs.evaluate import run_episode

    class Forgot(MultiTurnEnv):
        def reset(self, row):
            {"target": 4}  # noqa: B018 (the `return` left out)

        def env_response(self, state, response):
            return [], response == str(state["target"])

    client = types.SimpleNamespace(
        chat=types.SimpleNamespace(completions=types.SimpleNamespace(create=lambda **request: reply("4")))
    )
    setup = EpisodeSetup(row={}, prompt="p", images=[], model="m", max_turns=2, sampling={})
    with pytest.raises(
        EnvCodeError, match=r"^Forgot \(--env\): reset raised TypeError for the row: reset returned None"
    ):
        run_episode(Forgot(), setup, client)


def test_a_reply_without_a_message_is_no_chat_completion():
    with pytest.raises(EndpointReplyError, match="the reply is no chat completion"):
        _completion(types.SimpleNamespace(choices=[types.SimpleNamespace(message=None)]))


def test_the_budget_bounds_each_request_and_ends_the_episode_where_the_messages_fill_it():
    budget = ResponseBudget(10)
    assert budget.limit(100) == 10 and budget.limit(4) == 4 and budget.limit(None) == 10
    asked = []

    def create(**request):
        asked.append(request["max_tokens"])
        return replies.pop(0)

    replies = [reply("w w w", prompt_tokens=5, completion_tokens=3)]
    assert budgeted(create, budget, {"max_tokens": 100}) is not None and asked == [10] and not budget.over
    assert budget.limit(100) == 7
    # the environment's answer took the 7 tokens left: no room for a model turn, the episode is over
    replies = [reply("w", prompt_tokens=15, completion_tokens=1)]
    assert budgeted(create, budget, {"max_tokens": 100}) is None


def test_a_turn_cut_where_max_tokens_and_the_budget_meet_ends_the_episode():
    """No environment step after it: training's budget is spent (its answer would be cut)."""
    result, endpoint = _budget_episode("step", budget=10, words=20, max_tokens=10)
    assert endpoint.asked == [10] and result.counts["turns"] == 1 and result.counts["truncated"]
    assert [message["role"] for message in result.messages] == ["user", "assistant"]


def test_the_runs_template_variables_win_over_a_requests_own():
    run = {"temperature": 0.0, "max_tokens": 64, "extra_body": {"chat_template_kwargs": {"enable_thinking": False}}}
    own = {"messages": [], "extra_body": {"top_k": 5, "chat_template_kwargs": {"enable_thinking": True}}}
    sent = client_request(own, run)
    assert sent["extra_body"] == {"top_k": 5, "chat_template_kwargs": {"enable_thinking": False}}


def test_a_reward_function_gets_the_episodes_counts_but_not_whether_it_was_done():
    setup = EpisodeSetup(
        row={"ground_truth": "4", "level": 2}, prompt="2+2?", images=[], model="m", max_turns=1, sampling={}
    )
    counts = {"turns": 1, "tool_calls": 0, "tool_errors": 0, "cut_tool_messages": 0, "truncated": False, "done": True}
    messages = [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]
    sample = reward_sample(0, setup, EpisodeResult(counts, {"score": 0.5}, messages, [], 3, "4"))
    env = {key: value for key, value in sample["extra_info"].items() if key.startswith("env_")}
    assert env == {
        "env_turns": 1.0,
        "env_tool_calls": 0.0,
        "env_tool_errors": 0.0,
        "env_cut_tool_messages": 0.0,
        "env_truncated": 0.0,
        "env_score": 0.5,
    }
    assert (sample["response"], sample["response_length"], sample["extra_info"]["level"]) == ("4", 3, 2)


def test_the_summary_means_every_finite_number_but_the_row_and_the_reward():
    lines = [
        {"row": 0, "turns": 2, "reward": 1.0, "score": math.nan},
        {"row": 1, "turns": 1, "reward": 0.0, "score": 1.0},
    ]
    summary = summarize(lines, [])
    assert summary == {"episodes": 2, "turns/mean": 1.5, "score/mean": 1.0}


def test_the_summarys_accuracy_is_the_accuracy_key_or_the_share_that_scored_above_0():
    lines = [{"row": 0}, {"row": 1}, {"row": 2}]
    scores = [{"overall": 0.0}, {"overall": 1.0}, {"overall": -1.0}]
    summary = summarize(lines, scores)
    assert summary["accuracy"] == pytest.approx(1 / 3) and summary["reward/overall/mean"] == 0.0
    scores = [
        {"overall": 1.0, "accuracy": 1.0},
        {"overall": math.nan, "accuracy": 0.0},
        {"overall": 0.0, "accuracy": 0.0},
    ]
    summary = summarize(lines, scores)
    assert summary["accuracy"] == pytest.approx(1 / 3) and summary["reward/overall/mean"] == 0.5  # finite ones only
    assert accuracy_keys(["overall", "pass_accuracy"]) == [] and accuracy_keys(["overall", "a/accuracy"]) == [
        "a/accuracy"
    ]
    assert summarize(lines, [{"overall": 1.0, "pass_accuracy": 0.0}] * 3)["accuracy"] == 1.0


@pytest.mark.parametrize(
    "options, message",
    [
        (["--max-turns", "0"], "--max-turns must be at least 1, got 0."),
        (["--max-tokens", "0"], "--max-tokens must be at least 1, got 0."),
        (["--limit", "0"], "--limit must be at least 1, got 0."),
        (["--timeout", "0"], "--timeout must be positive and --max-retries at least 0, got 0.0 and 2."),
        (["--max-retries", "-1"], "--timeout must be positive and --max-retries at least 0, got 300.0 and -1."),
        (["--env-kwargs", '{"a": 1}'], "--env-kwargs is given without --env."),
        (["--chat-template-kwargs", "[1]"], "--chat-template-kwargs must be a JSON object, got [1]."),
    ],
)
def test_bad_options_stop_evaluate_before_any_request(tmp_path, options, message):
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"prompt": "a", "answer": "1"}) + "\n")
    with pytest.raises(SystemExit) as error:
        main(["--data", str(data), "--base-url", "http://127.0.0.1:9/v1", *options])
    assert str(error.value) == f"evaluate: {message}"


def test_reward_kwargs_without_a_reward_and_json_that_is_no_object_are_refused():
    args = argparse.Namespace(rubric=None, reward=None, reward_kwargs='{"x": 1}', answer_key="answer")
    with pytest.raises(ValueError, match="--reward-kwargs is given without --reward"):
        load_scorer(args)
    for text in ("[1]", "3", '"a"'):
        with pytest.raises(ValueError, match="--opt must be a JSON object"):
            _json_object(text, "--opt")


def test_rows_without_a_prompt_or_an_answer_are_named(tmp_path):
    data = tmp_path / "rows.jsonl"
    data.write_text(
        json.dumps({"prompt": "a", "answer": "1"}) + "\n" + json.dumps({"prompt": None, "answer": "2"}) + "\n"
    )
    with pytest.raises(ValueError, match=r"no 'prompt' value \(--prompt-key\)"):
        read_rows(str(data), "prompt", None)
    data.write_text(
        json.dumps({"prompt": "a", "answer": "1"}) + "\n" + json.dumps({"prompt": "b", "answer": None}) + "\n"
    )
    with pytest.raises(ValueError, match=r"no 'answer' value \(--answer-key\)"):
        read_rows(str(data), "prompt", None)
    assert [row["ground_truth"] for row in read_rows(str(data), "prompt", None, None)] == [None, None]
    assert [row["ground_truth"] for row in read_rows(str(data), "prompt", 1)] == ["1"]


def test_each_turn_is_asked_for_256_tokens_unless_the_run_says_otherwise(monkeypatch, tmp_path, capsys):
    from tests.envs.test_evaluate_messages import run_evaluate

    rows = [{"prompt": "a", "answer": "1"}]
    _, summary, client = run_evaluate(monkeypatch, tmp_path, capsys, {"a": ["1"]}, rows)
    assert client.requests[0][1]["max_tokens"] == 256 and summary["episodes"] == 1
    _, _, client = run_evaluate(monkeypatch, tmp_path, capsys, {"a": ["1"]}, rows, "--max-tokens", "9")
    assert client.requests[0][1]["max_tokens"] == 9
    _, _, client = run_evaluate(monkeypatch, tmp_path, capsys, {"a": ["1"]}, rows, "--response-length", "50")
    assert client.requests[0][1]["max_tokens"] == 50  # the budget alone bounds the turn


def test_environment_messages_the_budget_leaves_no_room_for_are_cut_and_counted():
    from verl.envs import MultiTurnEnv
    from verl.envs.evaluate import run_episode

    class Tool(MultiTurnEnv):
        def env_response(self, state, response):
            return [{"role": "tool", "content": "e e e e e e e e"}], False

    prompts = iter([1, 9])  # the tool's answer takes 8 tokens of the 5 left
    create = lambda **request: reply("w w w w w", prompt_tokens=next(prompts), completion_tokens=5)  # noqa: E731
    client = types.SimpleNamespace(chat=types.SimpleNamespace(completions=types.SimpleNamespace(create=create)))
    setup = EpisodeSetup(row={}, prompt="p", images=[], model="m", max_turns=4, sampling={}, response_length=10)
    result = run_episode(Tool(), setup, client)
    assert result.counts["cut_tool_messages"] == 1 and result.counts["truncated"] and result.counts["turns"] == 1
    assert result.messages[-1] == {"role": "tool", "content": "e e e e e e e e", "cut": True}


def test_a_client_environments_few_shot_turns_stay_as_they_are():
    few_shot = {"role": "assistant", "content": "an example"}
    parsed = {"role": "assistant", "content": "", "tool_calls": [{"id": "c"}]}
    written = [{"role": "assistant", "content": "<tool_call>...</tool_call>"}]
    messages = [{"role": "user", "content": "q1"}, few_shot, {"role": "user", "content": "q2"}, parsed]
    assert as_written(messages, written) == [*messages[:3], written[0]]
    assert as_written(messages, []) == messages


def test_cut_messages_are_not_in_the_response_and_a_reward_that_is_no_number_is_null(tmp_path):
    setup = EpisodeSetup(row={"ground_truth": "4"}, prompt="2+2?", images=[], model="m", max_turns=1, sampling={})
    messages = [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"},
        {"role": "tool", "content": "never seen", "cut": True},
    ]
    counts = {"turns": 1, "tool_calls": 0, "tool_errors": 0, "cut_tool_messages": 1, "truncated": False, "done": False}
    result = EpisodeResult(counts, {}, messages, [], 1, "4")
    assert reward_sample(0, setup, result)["response"] == "4"
    record = episode_record(0, setup, result, {"overall": math.nan, "accuracy": 1.0}, str(tmp_path / "out.jsonl"))
    assert record["reward"] is None and record["scores"] == {"overall": None, "accuracy": 1.0}
    json.dumps(record, allow_nan=False)


def test_a_row_with_videos_is_refused_before_any_request(tmp_path):
    """Journey: an EasyR1 / verl video dataset (a `videos` column, `<video>` in the prompt) trained with GRPO (the
    trainer reads the clips at data.video_fps), then evaluated with `python -m verl.envs.evaluate --data` on the same
    rows, which the README says it reads "as the trainer reads data.val_files". evaluate sends images only: it asked the
    endpoint with the literal text "<video>..." and no video, and scored that reply as the model's answer about the clip
    (checked by hand against `python -m verl.serve` of a tiny Qwen2.5-VL: exit 0, a reward per row, the record's first
    message the bare text). A row with videos must be refused, naming it, before any request.

    No endpoint is needed to tell: with --model given, the rows are checked before the first request, and the
    original code went on to ask a port nothing listens on (its error then is the connection's)."""
    import socket

    from media_files import write_video

    write_video(str(tmp_path / "clip.mp4"), num_frames=8, rate=4, size=(56, 56))
    data = tmp_path / "val.jsonl"
    rows = [
        {"prompt": "What is 1 + 1?", "answer": "2"},
        {"prompt": "<video>Is the clip getting brighter? Answer yes or no.", "answer": "yes", "videos": ["clip.mp4"]},
    ]
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        nobody = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    from verl.envs.evaluate import main

    with pytest.raises(SystemExit) as error:
        main(["--data", str(data), "--model", "m", "--base-url", nobody, "--max-retries", "0"])
    message = str(error.value)
    assert message.startswith(f"evaluate: --data {data}, row 1: it has videos (--video-key videos)"), message
    # the rows of a dataset without videos still run (here: up to the endpoint that is not there)
    data.write_text(json.dumps(rows[0]) + "\n" + json.dumps({**rows[1], "videos": []}) + "\n")
    with pytest.raises(SystemExit, match="row 0: the endpoint --base-url .* failed: Connection error"):
        main(["--data", str(data), "--model", "m", "--base-url", nobody, "--max-retries", "0"])


def test_the_pixel_and_sampling_defaults_are_trainings():
    """evaluate's --min-pixels / --max-pixels defaults and the sampling it sends in place of a model's generation
    config are the trainer's defaults (data.min_pixels / max_pixels, worker.rollout.top_p / top_k): a change there
    must reach evaluate, or the served model is asked otherwise than training asked it."""
    from verl.envs.evaluate import MAX_PIXELS, MIN_PIXELS, TRAINING_SAMPLING
    from verl.trainer.config import DataConfig
    from verl.workers.rollout.config import RolloutConfig

    assert (MIN_PIXELS, MAX_PIXELS) == (DataConfig.min_pixels, DataConfig.max_pixels)
    assert (TRAINING_SAMPLING["top_p"], TRAINING_SAMPLING["top_k"]) == (RolloutConfig.top_p, RolloutConfig.top_k)
