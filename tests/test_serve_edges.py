# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""`verl.serve`'s request handling at its edges, without an engine: a chat or completions request goes through the
server's own `_submit` against a stand-in vLLM (it records the SamplingParams it is given and replays scripted
deltas), so the token budget, the usage counts, streamed chunks, logprobs and tool calls are checked in a second."""

import json
import math
import re
from types import SimpleNamespace

import pytest
from vllm.logprobs import Logprob

from verl.envs.tools import HERMES
from verl.serve import ChatEngine, Reply, RequestError, check_request, completions, forced_tool_calls
from verl.serve.chat import forced_tool_message, token_logprob
from verl.serve.completions import Completion, check_completion, logprobs_object
from verl.serve.request_checks import context_budget, ranked
from verl.serve.responses import check_response
from verl.serve.server import error_body


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
        },
    }
]


def call(a, b):
    return f'<tool_call>\n{{"name": "add", "arguments": {{"a": {a}, "b": {b}}}}}\n</tool_call>'


def request(**fields):
    return {"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], **fields}


def delta(text, index=0, finish_reason=None, stop_reason=None, token_ids=None, logprobs=None):
    """A vLLM CompletionOutput delta: one step's new text of a choice (one token unless `token_ids` says)."""
    token_ids = [len(text)] if token_ids is None else token_ids
    return SimpleNamespace(
        index=index,
        text=text,
        token_ids=token_ids,
        finish_reason=finish_reason,
        stop_reason=stop_reason,
        logprobs=logprobs,
    )


def step_logprobs(token_id, logprob):
    """One position's vLLM logprobs: the sampled token (ranked 1) and a runner-up."""
    return {token_id: Logprob(logprob, 1, f"t{token_id}"), token_id + 1: Logprob(logprob - 1.0, 2, f"t{token_id + 1}")}


class StandIn:
    """A vLLM LLM and engine loop for ChatEngine._submit and completions._submit: prompts of `prompt_tokens` tokens,
    each added request recorded as (id, prompt, SamplingParams), then `steps` (lists of deltas) replayed."""

    def __init__(self, steps=(), prompt_tokens=7):
        self.steps, self.prompt_tokens, self.added = list(steps), prompt_tokens, []
        self.llm_engine = self

    def _preprocess_chat_one(self, messages, tools=None, chat_template_kwargs=None):
        return {"prompt_token_ids": list(range(self.prompt_tokens))}

    def add_request(self, request_id, prompt, params):
        self.added.append((request_id, prompt, params))

    def abort_request(self, ids):
        pass

    def get_tokenizer(self):
        return SimpleNamespace(
            encode=lambda text: [ord(c) for c in text],
            decode=lambda ids: "".join(chr(i) for i in ids),
            max_chars_per_token=2,
        )

    def submit(self, add):
        ids, value = add()

        def outputs():
            for step in self.steps:
                yield SimpleNamespace(request_id=ids[0], prompt_token_ids=None, prompt_logprobs=None, outputs=step)

        return value, outputs()


def chat_engine(steps=(), prompt_tokens=7, tool_format=HERMES, defaults=None):
    engine = object.__new__(ChatEngine)
    engine.name, engine.max_model_len, engine.defaults = "tiny", 512, defaults or {}
    engine.tool_format, engine.tool_error = tool_format, "no parser reads this template's calls"
    engine.llm = engine.loop = StandIn(steps, prompt_tokens)
    return engine


def sampling(engine, **fields):
    """The SamplingParams the engine is given for a chat request with `fields`."""
    engine._submit(check_request(request(**fields), "tiny"))
    return engine.llm.added[-1][2]


# ------------------------------------------------------------------------------------------------ request checks


@pytest.mark.parametrize("body", [[], "Hi", 5, None])
def test_a_body_that_is_no_json_object_is_a_400_on_every_endpoint(body):
    """A JSON array or scalar body was read with dict methods: an AttributeError, which the server makes a 500."""
    for check in (check_request, check_completion, check_response):
        with pytest.raises(RequestError, match="the request body must be a JSON object") as error:
            check(body, "tiny")
        assert error_body(error.value)[0] == 400


def test_an_unknown_model_is_vllms_not_found_error():
    with pytest.raises(RequestError) as error:
        check_request(request(model="gpt-4"), "tiny")
    status, body = error_body(error.value)
    assert status == body["error"]["code"] == 404 and body["error"]["type"] == "NotFoundError"


def test_a_bad_value_is_shown_up_to_80_characters():
    shown = "x" * 78  # its repr is 80 characters
    with pytest.raises(RequestError) as error:
        check_request(request(messages=[shown]), "tiny")
    assert str(error.value) == f"'messages[0]': Input should be a valid dictionary, got {shown!r}."
    with pytest.raises(RequestError) as error:
        check_request(request(messages=[shown + "x"]), "tiny")
    assert str(error.value) == "'messages[0]': Input should be a valid dictionary."


def test_logit_bias_takes_the_whole_range_of_minus_100_to_100():
    checked = check_request(request(logit_bias={"5": 100, "6": -100, "7": 0.5}), "tiny")
    assert checked.to_sampling_params(4, {}).logit_bias == {5: 100.0, 6: -100.0, 7: 0.5}
    for value in (100.5, -100.5):
        with pytest.raises(RequestError, match=re.escape("'logit_bias[5]' must be a number between -100 and 100")):
            check_request(request(logit_bias={"5": value}), "tiny")


@pytest.mark.parametrize(
    "wanted, room, defaults, budget",
    [
        (512, 100, {}, 100),  # the whole context is no more than the whole context: cut to the room left
        (64, 7, {}, 7),  # cut to what the prompt leaves
        (5, 100, {"max_tokens": 20}, 5),  # the request's own
        (None, 100, {"max_tokens": 20}, 20),  # else the model's generation-config default
        (None, 7, {"max_tokens": 20}, 7),
        (None, 100, {}, 100),  # else the rest of the context
    ],
)
def test_the_token_budget_is_the_requests_the_models_default_or_the_rest_of_the_context(
    wanted, room, defaults, budget
):
    assert context_budget(wanted, room, 512, defaults) == budget


def test_a_budget_past_the_whole_context_is_refused():
    with pytest.raises(RequestError, match=r"maximum context length is 512 tokens .* max_tokens=513 cannot be"):
        context_budget(513, 100, 512, {})


def test_a_budget_past_the_whole_context_is_refused_naming_the_key_the_client_sent():
    """It said max_tokens=600 to a client that sent max_completion_tokens or the Responses API's max_output_tokens."""
    from verl.serve import responses

    for fields, key in (
        ({"max_completion_tokens": 600}, "max_completion_tokens"),
        ({"max_tokens": 600}, "max_tokens"),
    ):
        with pytest.raises(RequestError, match=rf"maximum context length is 512 tokens .*; {key}=600 cannot be"):
            chat_engine()._submit(check_request(request(**fields), "tiny"))
    for answer in (responses.complete, lambda *args: next(responses.stream(*args))):
        checked = check_response({"model": "tiny", "input": "Hi", "max_output_tokens": 600}, "tiny")
        with pytest.raises(RequestError, match=r"context length is 512 tokens .*; max_output_tokens=600 cannot be"):
            answer(chat_engine(), *checked)


def test_the_top_logprobs_are_the_best_ranked_best_first():
    """vLLM's dict holds the sampled token first, whatever its rank (at temperature > 0, often not the best)."""
    alternatives = {7: Logprob(-2.0, 2, "b"), 3: Logprob(-0.5, 1, "a"), 9: Logprob(-3.0, 3, "c")}
    assert ranked(alternatives, 2) == [(3, alternatives[3]), (7, alternatives[7])]
    assert ranked(alternatives, 3) == [(3, alternatives[3]), (7, alternatives[7]), (9, alternatives[9])]
    assert ranked(alternatives, 0) == []


def test_a_logprob_of_minus_infinity_is_sent_as_a_number():
    """JSON has no -Infinity (the server's JSON response refuses it); OpenAI's and vLLM's servers send -9999.0."""
    entry = token_logprob(Logprob(-math.inf, 5, "é"))
    assert entry == {"token": "é", "logprob": -9999.0, "bytes": [195, 169]}
    completion = Completion([([1, 2], "ab", "a")], 1, False, 1)
    (choice,) = completion.choices
    choice.add(delta("x", token_ids=[4], logprobs=[{4: Logprob(-math.inf, 9, "x"), 5: Logprob(-0.1, 1, "y")}]))
    logprobs = completion.choice_object(choice)["logprobs"]
    assert logprobs["token_logprobs"] == [-9999.0] and logprobs["top_logprobs"] == [{"x": -9999.0, "y": -0.1}]
    json.dumps(logprobs, allow_nan=False)


# ------------------------------------------------------------------------------------------------ forced tool calls


def test_a_forced_tool_without_parameters_is_held_to_an_empty_object():
    tools = [{"type": "function", "function": {"name": "ping"}}]
    empty = {"type": "object", "properties": {}}
    named = {"type": "function", "function": {"name": "ping"}}
    assert forced_tool_calls(check_request(request(tools=tools, tool_choice=named), "tiny")) == ("ping", empty)
    _, schema = forced_tool_calls(check_request(request(tools=tools, tool_choice="required"), "tiny"))
    assert schema["items"]["anyOf"][0]["properties"]["parameters"] == empty


def test_parallel_tool_calls_null_is_its_default():
    checked = check_request(request(tools=TOOLS, tool_choice="required", parallel_tool_calls=None), "tiny")
    assert "maxItems" not in forced_tool_calls(checked)[1]


def test_tools_that_define_the_same_def_differently_cannot_be_required_together():
    tools = [
        {"type": "function", "function": {"name": name, "parameters": {"$defs": {"n": {"type": kind}}}}}
        for name, kind in (("one", "integer"), ("two", "string"))
    ]
    with pytest.raises(RequestError, match=re.escape("tools define '$defs/n' differently")):
        forced_tool_calls(check_request(request(tools=tools, tool_choice="required"), "tiny"))


def test_a_forced_reply_without_a_usable_call_has_none():
    for text in ("", "  \n"):  # a named function's arguments cut off before the first token
        message, finish_reason = forced_tool_message(text, "length", "add")
        assert message["tool_calls"] == [] and finish_reason == "length"
    items = [{"name": "add", "parameters": {"a": 1}}, {"parameters": {}}, {"name": 5}, "add"]
    message, finish_reason = forced_tool_message(json.dumps(items), "stop", "")
    calls = [(call["function"]["name"], json.loads(call["function"]["arguments"])) for call in message["tool_calls"]]
    assert calls == [("add", {"a": 1})] and finish_reason == "tool_calls"


# ------------------------------------------------------------------------------------------------ chat requests


def test_the_chat_budget_and_its_refusals():
    engine = chat_engine()
    assert sampling(engine, max_tokens=50, max_completion_tokens=2).max_tokens == 2  # max_completion_tokens wins
    assert sampling(engine, max_tokens=50).max_tokens == 50
    engine = chat_engine(prompt_tokens=505)
    assert sampling(engine, max_tokens=64).max_tokens == 7  # cut to the room the prompt leaves
    assert sampling(engine).max_tokens == 7
    for fields, key in (({"max_tokens": 0}, "max_tokens"), ({"max_completion_tokens": 0}, "max_completion_tokens")):
        with pytest.raises(RequestError, match=re.escape(f"'{key}' must be at least 1, got 0.")):
            sampling(chat_engine(), **fields)
    with pytest.raises(RequestError, match="maximum context length is 512 tokens. However, your request has 512"):
        sampling(chat_engine(prompt_tokens=512))  # no room for one token
    assert sampling(chat_engine(prompt_tokens=511)).max_tokens == 1


def test_tool_call_tags_are_kept_in_the_text_only_where_tools_are_read():
    engine = chat_engine()
    assert sampling(engine, tools=TOOLS).skip_special_tokens is False
    assert sampling(engine).skip_special_tokens is True
    # tool_choice "none": the calls are not read, so a model whose calls no parser reads is served
    engine = chat_engine(steps=[[delta(call(1, 2), finish_reason="stop")]], tool_format=None)
    reply = engine.complete(check_request(request(tools=TOOLS, tool_choice="none"), "tiny"))
    assert reply["choices"][0]["message"]["content"] == call(1, 2) and reply["choices"][0]["finish_reason"] == "stop"
    with pytest.raises(RequestError, match="cannot read the model's tool calls"):
        chat_engine(tool_format=None).complete(check_request(request(tools=TOOLS), "tiny"))


def test_usage_counts_every_token_of_every_choice():
    reply = Reply("chatcmpl-1", 7, 2, None)
    reply.choices[0].add(delta("ab", token_ids=[1, 2, 3]))
    reply.choices[1].add(delta("c", token_ids=[4, 5]))
    assert reply.usage() == {"prompt_tokens": 7, "completion_tokens": 5, "total_tokens": 12}
    steps = [[delta("a", 0, token_ids=[1, 2]), delta("b", 1)], [delta("c", 0, "length"), delta("d", 1, "length")]]
    body = chat_engine(steps).complete(check_request(request(n=2), "tiny"))
    assert body["usage"] == {
        "prompt_tokens": 7,
        "completion_tokens": 5,
        "total_tokens": 12,
        "prompt_tokens_details": None,
        "completion_tokens_details": None,
    }


def test_several_calls_stream_with_their_own_index_and_parallel_false_keeps_the_first():
    text = f"{call(1, 2)}\n{call(3, 4)}\n{call(5, 6)}"
    steps = [[delta(text[:9])], [delta(text[9:], finish_reason="stop")]]
    chunks = list(chat_engine(steps).stream(check_request(request(tools=TOOLS, stream=True), "tiny")))
    calls = [call for chunk in chunks for choice in chunk["choices"] for call in choice["delta"].get("tool_calls", [])]
    assert [(entry["index"], json.loads(entry["function"]["arguments"])) for entry in calls] == [
        (0, {"a": 1, "b": 2}),
        (1, {"a": 3, "b": 4}),
        (2, {"a": 5, "b": 6}),
    ]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    for stream in (False, True):
        engine = chat_engine(steps)
        checked = check_request(request(tools=TOOLS, parallel_tool_calls=False, stream=stream), "tiny")
        if stream:
            deltas = [choice["delta"] for chunk in engine.stream(checked) for choice in chunk["choices"]]
            calls = [call for piece in deltas for call in piece.get("tool_calls", [])]
        else:
            calls = engine.complete(checked)["choices"][0]["message"]["tool_calls"]
        assert [json.loads(entry["function"]["arguments"]) for entry in calls] == [{"a": 1, "b": 2}], stream


def test_the_stream_has_vllms_chunks_and_ends_each_choice_once():
    steps = [[delta("Hel")], [delta("lo", finish_reason="stop", stop_reason="END")]]
    chunks = list(chat_engine(steps).stream(check_request(request(stream=True), "tiny")))
    choices = [chunk["choices"][0] for chunk in chunks]
    assert choices[0]["delta"] == {"role": "assistant", "content": ""}
    assert all(choice["finish_reason"] is None for choice in choices[:-1]) and "usage" not in chunks[-1]
    assert (choices[-1]["delta"], choices[-1]["finish_reason"], choices[-1]["stop_reason"]) == ({}, "stop", "END")
    assert "".join(choice["delta"].get("content", "") for choice in choices) == "Hello"
    body = chat_engine(steps).complete(check_request(request(), "tiny"))
    assert (body["choices"][0]["stop_reason"], body["choices"][0]["logprobs"]) == ("END", None)
    unasked = request(stream=True, stream_options={"include_usage": False})
    assert all(chunk["choices"] for chunk in chat_engine(steps).stream(check_request(unasked, "tiny")))


def test_held_back_text_is_streamed_at_the_end():
    """With tools, the end of the text that could open a call is held; once the choice ends it is content."""
    steps = [[delta("Hi ")], [delta("<tool_ca", finish_reason="length")]]
    chunks = chat_engine(steps).stream(check_request(request(tools=TOOLS, stream=True), "tiny"))
    assert "".join(choice["delta"].get("content", "") for chunk in chunks for choice in chunk["choices"]) == (
        "Hi <tool_ca"
    )


def streamed_logprobs(engine, body):
    chunks = engine.stream(check_request(request(stream=True, **body), "tiny"))
    pieces = [choice["logprobs"] for chunk in chunks for choice in chunk["choices"] if choice["logprobs"]]
    return [entry for piece in pieces for entry in piece["content"]]


def test_streamed_logprobs_add_up_to_the_replys_even_those_of_tokens_with_no_text():
    """The end-of-text token (no text) and a tool call's tokens (sent as calls, not content) have logprobs too."""
    for fields, steps in (
        (
            {},
            [
                [delta("Hi", token_ids=[10], logprobs=[step_logprobs(10, -0.5)])],
                [delta("", finish_reason="stop", token_ids=[20], logprobs=[step_logprobs(20, -1.0)])],
            ],
        ),
        (
            {"tools": TOOLS},
            [
                [delta("I add.", token_ids=[10], logprobs=[step_logprobs(10, -0.5)])],
                [delta(f"\n{call(1, 2)}", token_ids=[20], logprobs=[step_logprobs(20, -1.0)])],
                [delta("", finish_reason="stop", token_ids=[30], logprobs=[step_logprobs(30, -2.0)])],
            ],
        ),
    ):
        fields = {**fields, "logprobs": True, "top_logprobs": 1}
        reply = chat_engine(steps).complete(check_request(request(**fields), "tiny"))
        whole = reply["choices"][0]["logprobs"]["content"]
        tokens = [step[0].token_ids[0] for step in steps]
        assert [entry["token"] for entry in whole] == [f"t{token}" for token in tokens]
        assert all([top["token"] for top in entry["top_logprobs"]] == [entry["token"]] for entry in whole)
        assert streamed_logprobs(chat_engine(steps), fields) == whole, fields


def test_a_media_urls_scheme_is_read_in_any_case(monkeypatch):
    from vllm.connections import global_http_connection

    from verl.serve.chat import fetch_remote_media

    fetched = []
    monkeypatch.setattr(global_http_connection, "get_bytes", lambda url, **_: fetched.append(url) or b"\x89PNG")
    messages = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "HTTPS://example.com/a"}}]}]
    fetch_remote_media(messages)
    assert fetched == ["HTTPS://example.com/a"]
    assert messages[0]["content"][0]["image_url"]["url"].startswith("data:image/*;base64,")


# ------------------------------------------------------------------------------------------------ text completions


def completion_engine(steps=()):
    engine = chat_engine(steps)
    engine.max_model_len, engine.loop = 32, None
    return engine


def run_completion(body, steps):
    """(the reply or its chunks, the SamplingParams of each prompt) of a completions request over scripted deltas,
    replayed for every prompt (request ids `<id>-<prompt>`); streamed where the body says."""
    engine = completion_engine()
    checked, prompts = check_completion({"model": "tiny", **body}, "tiny")

    def submit(add):
        ids, value = add()

        def outputs():
            for step in steps:
                for request_id in ids:
                    yield SimpleNamespace(request_id=request_id, prompt_logprobs=None, outputs=step)

        return value, outputs()

    engine.loop = SimpleNamespace(submit=submit)
    if checked.stream:
        return list(completions.stream(engine, checked, prompts)), [params for _, _, params in engine.llm.added]
    return completions.complete(engine, checked, prompts), [params for _, _, params in engine.llm.added]


@pytest.mark.parametrize(
    "body, message",
    [
        ({"prompt": "Hi", "max_tokens": -1}, "'max_tokens' must be >= 0, got -1."),
        ({"prompt": []}, "'prompt' must be a string, a list of strings"),
        ({"prompt": ["Hi", ""]}, "'prompt' must be a string, a list of strings"),
        ({"prompt": [[1, 2], []]}, "'prompt' must be a string, a list of strings"),
    ],
)
def test_completion_prompts_and_lengths_that_are_refused(body, message):
    with pytest.raises(RequestError, match=re.escape(message)):
        check_completion(body, "tiny")


def test_completion_choices_echo_their_own_prompt_and_usage_counts_each_prompt_once():
    steps = [[delta("x", 0, "length"), delta("y", 1, "length")]]
    reply, added = run_completion({"prompt": ["ab", "cde"], "n": 2, "echo": True, "max_tokens": 1}, steps)
    assert [choice["text"] for choice in reply["choices"]] == ["abx", "aby", "cdex", "cdey"]
    assert [params.max_tokens for params in added] == [1, 1]
    assert {key: reply["usage"][key] for key in ("prompt_tokens", "completion_tokens", "total_tokens")} == {
        "prompt_tokens": 5,
        "completion_tokens": 4,
        "total_tokens": 9,
    }
    assert reply["usage"]["prompt_tokens_details"] is None and reply["usage"]["completion_tokens_details"] is None


def test_completion_tokens_are_counted_as_the_engine_made_them():
    reply, _ = run_completion({"prompt": "ab", "max_tokens": 4}, [[delta("xyz", 0, "length", token_ids=[1, 2, 3])]])
    assert reply["usage"]["completion_tokens"] == 3


def test_max_tokens_0_with_echo_is_the_prompt_alone():
    """The engine makes one token (SamplingParams needs 1), which the reply leaves out."""
    steps = [[delta("z", 0, "length")]]
    reply, added = run_completion({"prompt": "ab", "max_tokens": 0, "echo": True}, steps)
    assert reply["choices"][0]["text"] == "ab" and added[0].max_tokens == 1
    chunks, _ = run_completion({"prompt": "ab", "max_tokens": 0, "echo": True, "stream": True}, steps)
    assert "".join(chunk["choices"][0]["text"] for chunk in chunks) == "ab"


def test_the_echoed_prompt_comes_once_though_the_first_delta_has_no_text():
    steps = [[delta("")], [delta("x")], [delta("y", finish_reason="length")]]
    chunks, _ = run_completion({"prompt": "ab", "echo": True, "stream": True, "max_tokens": 3}, steps)
    assert "".join(chunk["choices"][0]["text"] for chunk in chunks) == "abxy"
    reply, _ = run_completion({"prompt": "ab", "echo": True, "max_tokens": 3}, steps)
    assert reply["choices"][0]["text"] == "abxy"


def test_the_streamed_end_comes_with_its_finish_reason_though_it_has_no_text():
    """A stop string is left out of the text: the last delta can be empty, and still ends the choice."""
    steps = [[delta("a")], [delta("", finish_reason="stop", stop_reason="\n")]]
    chunks, _ = run_completion({"prompt": "ab", "stream": True, "max_tokens": 5, "stop": ["\n"]}, steps)
    last = chunks[-1]["choices"][0]
    assert (last["text"], last["finish_reason"], last["stop_reason"]) == ("", "stop", "\n")
    reply, _ = run_completion({"prompt": "ab", "max_tokens": 5, "stop": ["\n"]}, steps)
    assert (reply["choices"][0]["finish_reason"], reply["choices"][0]["stop_reason"]) == ("stop", "\n")
    chunks, _ = run_completion({"prompt": "ab", "stream": True, "stream_options": {"include_usage": False}}, steps)
    assert all(chunk["choices"] for chunk in chunks)


def test_streamed_text_offsets_run_on_across_chunks():
    assert logprobs_object([("ab", -1.0, {}), ("c", -2.0, {})], 5)["text_offset"] == [5, 7]
    steps = [
        [delta("ab", token_ids=[1], logprobs=[{1: Logprob(-1.0, 1, "ab")}])],
        [delta("c", finish_reason="length", token_ids=[2], logprobs=[{2: Logprob(-2.0, 1, "c")}])],
    ]
    chunks, _ = run_completion({"prompt": "xy", "stream": True, "max_tokens": 2, "logprobs": 0}, steps)
    offsets = [chunk["choices"][0]["logprobs"]["text_offset"] for chunk in chunks]
    assert offsets == [[0], [2]]


def test_a_completion_logprob_entry_is_the_sampled_token_and_the_best_ones():
    """The sampled token (here ranked 2nd) is the entry's token; top_logprobs has it and the `logprobs` best."""
    position = {7: Logprob(-2.0, 2, "b"), 3: Logprob(-0.5, 1, "a")}
    steps = [[delta("b", finish_reason="length", token_ids=[7], logprobs=[position])]]
    reply, _ = run_completion({"prompt": "xy", "max_tokens": 1, "logprobs": 1}, steps)
    logprobs = reply["choices"][0]["logprobs"]
    assert (logprobs["tokens"], logprobs["token_logprobs"]) == (["b"], [-2.0])
    assert logprobs["top_logprobs"] == [{"b": -2.0, "a": -0.5}]


def test_a_prompt_that_fills_the_context_or_passes_its_character_bound_is_refused():
    engine = completion_engine()
    tokens = [1] * 32  # the whole context (max_model_len 32): no room for a token
    with pytest.raises(RequestError, match="maximum context length is 32 tokens. However, your prompt has 32 tokens"):
        completions._submit(engine, check_completion({"prompt": tokens}, "tiny")[0], [tokens])
    _, completion = completions._submit(engine, check_completion({"prompt": tokens[1:]}, "tiny")[0], [tokens[1:]])
    assert engine.llm.added[-1][2].max_tokens == 1
    completions._check_characters(engine, ["a" * 64])  # 32 tokens of at most 2 characters: vLLM's bound, allowed
    with pytest.raises(RequestError, match="your prompt contains 65 characters"):
        completions._check_characters(engine, ["a" * 65])


def test_echoed_prompt_logprobs_start_with_none_and_hold_each_token_and_the_best():
    """lm-eval's loglikelihood request: the prompt's first token has no logprob; each other one its own and the
    `logprobs` best (vLLM's dict: the prompt token, then the best ranked)."""
    completion = Completion([([1, 2, 3], "abc", "a")], 1, True, 1)
    output = SimpleNamespace(
        request_id=f"{completion.id}-0",
        prompt_logprobs=[None, {2: Logprob(-1.0, 3, "b"), 9: Logprob(-0.1, 1, "z")}, {3: Logprob(-2.0, 1, "c")}],
        outputs=[delta("d", finish_reason="length", token_ids=[4], logprobs=[{4: Logprob(-0.3, 1, "d")}])],
    )
    list(completion.take(output))
    logprobs = completion.choice_object(completion.choices[0])["logprobs"]
    assert logprobs["tokens"] == ["a", "b", "c", "d"] and logprobs["token_logprobs"] == [None, -1.0, -2.0, -0.3]
    assert logprobs["top_logprobs"] == [None, {"b": -1.0, "z": -0.1}, {"c": -2.0}, {"d": -0.3}]
    assert (
        logprobs["text_offset"] == [0, 1, 2, 3] and completion.choice_object(completion.choices[0])["text"] == "abcd"
    )


# ------------------------------------------------------------------------------------------------ the Responses API


def as_chat(**body):
    """The chat request a Responses request with `body` runs as."""
    return check_response({"model": "tiny", "input": "Hi", **body}, "tiny")[1]


def test_a_responses_request_becomes_the_chat_request_it_amounts_to():
    chat = as_chat(
        max_output_tokens=5,
        temperature=0,
        top_p=0.5,
        parallel_tool_calls=False,
        tools=[{"type": "function", "name": "add", "parameters": TOOLS[0]["function"]["parameters"]}],
    )
    assert (chat.max_tokens, chat.temperature, chat.top_p, chat.parallel_tool_calls) == (5, 0, 0.5, False)
    assert chat.tool_choice == "auto" and chat.logprobs is False
    chat = as_chat(include=["message.output_text.logprobs"], top_logprobs=2)
    assert (chat.logprobs, chat.top_logprobs) == (True, 2)
    assert (as_chat(include=["message.output_text.logprobs"]).top_logprobs or 0) == 0
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}}
    text = {"format": {"type": "json_schema", "name": "answer", "schema": schema, "strict": True, "description": "d"}}
    format_ = as_chat(text=text).response_format
    assert format_.type == "json_schema" and (format_.json_schema.name, format_.json_schema.strict) == ("answer", True)
    assert format_.json_schema.description == "d" and format_.json_schema.json_schema == schema
    assert as_chat(text={"format": {"type": "json_object"}}).response_format.type == "json_object"
    assert as_chat(tool_choice="auto").tools is None  # a tool_choice without tools: nothing to choose from


@pytest.mark.parametrize(
    "body, message",
    [
        ({"store": True}, "'store': true is not supported by this server"),
        ({"include": ["reasoning.encrypted_content"]}, "'include': ['reasoning.encrypted_content'] is not supported"),
        (
            {"tools": [{"type": "function", "name": "add"}], "tool_choice": {"type": "file_search"}},
            "'tool_choice': only a function can be named",
        ),
        ({"max_output_tokens": 0}, "'max_output_tokens' must be at least 1, got 0."),
    ],
)
def test_what_a_responses_request_cannot_have_is_named(body, message):
    with pytest.raises(RequestError, match=re.escape(message)):
        check_response({"model": "tiny", "input": "Hi", **body}, "tiny")


def responses_reply(steps, stream=False, **body):
    from verl.serve import responses

    request, chat = check_response({"model": "tiny", "input": "Hi", "stream": stream, **body}, "tiny")
    engine = chat_engine(steps)
    return list(responses.stream(engine, request, chat)) if stream else responses.complete(engine, request, chat)


def test_a_response_cut_by_max_output_tokens_is_incomplete_streamed_or_not():
    steps = [[delta("Hel")], [delta("lo", finish_reason="length")]]
    reply = responses_reply(steps, max_output_tokens=2)
    assert (reply["status"], reply["incomplete_details"]) == ("incomplete", {"reason": "max_output_tokens"})
    events = responses_reply(steps, stream=True, max_output_tokens=2)
    assert events[-1]["type"] == "response.incomplete" and events[-1]["response"]["status"] == "incomplete"
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == "Hello"
    done = responses_reply([[delta("Hello", finish_reason="stop")]], stream=True)
    assert done[-1]["type"] == "response.completed" and done[-1]["response"]["incomplete_details"] is None


def test_a_response_of_tool_calls_alone_has_no_empty_message_and_echoes_parallel_tool_calls():
    tools = [{"type": "function", "name": "add", "parameters": TOOLS[0]["function"]["parameters"]}]
    reply = responses_reply([[delta(call(1, 2), finish_reason="stop")]], tools=tools, parallel_tool_calls=False)
    assert [item["type"] for item in reply["output"]] == ["function_call"] and reply["parallel_tool_calls"] is False
    assert responses_reply([[delta("x", finish_reason="stop")]])["parallel_tool_calls"] is True


def test_streamed_output_text_logprobs_add_up_to_the_whole_replys():
    steps = [
        [delta("Hi", token_ids=[10], logprobs=[step_logprobs(10, -0.5)])],
        [delta("!", finish_reason="stop", token_ids=[20], logprobs=[step_logprobs(20, -1.0)])],
    ]
    body = {"include": ["message.output_text.logprobs"], "top_logprobs": 1}
    whole = responses_reply(steps, **body)["output"][0]["content"][0]["logprobs"]
    assert [entry["token"] for entry in whole] == ["t10", "t20"]
    events = responses_reply(steps, stream=True, **body)
    (done,) = [event for event in events if event["type"] == "response.output_text.done"]
    assert done["logprobs"] == whole and events[-1]["response"]["output"][0]["content"][0]["logprobs"] == whole


def test_a_forced_tool_call_response_has_no_empty_message():
    """A forced tool_choice's reply is its calls, with content "" (as chat completions): no empty output_text."""
    tools = [{"type": "function", "name": "add", "parameters": TOOLS[0]["function"]["parameters"]}]
    named = {"type": "function", "name": "add"}
    reply = responses_reply([[delta('{"a": 1, "b": 2}', finish_reason="stop")]], tools=tools, tool_choice=named)
    assert [(item["type"], json.loads(item["arguments"])) for item in reply["output"]] == [
        ("function_call", {"a": 1, "b": 2})
    ]


def test_a_completion_the_engine_failed_is_a_server_error_not_its_partial_text():
    steps = [[delta("a")], [delta("b", finish_reason="error")]]
    for stream in (False, True):
        with pytest.raises(RuntimeError, match="The engine failed this request") as error:
            run_completion({"prompt": "ab", "max_tokens": 2, "stream": stream}, steps)
        assert error_body(error.value)[0] == 500


def test_media_placeholders_stay_blocked_whatever_a_requests_logit_bias_says():
    """A vision-language model's server blocks its image placeholder as the rollout does (the request's other
    biases kept), in chat and plain completions."""
    engine = chat_engine()
    engine.media_bias = {9: -100.0}
    assert sampling(engine, logit_bias={"9": 100, "4": 5}).logit_bias == {9: -100.0, 4: 5.0}
    assert sampling(engine).logit_bias == {9: -100.0}
    engine = completion_engine()
    engine.media_bias = {9: -100.0}
    completions._submit(
        engine, *check_completion({"model": "tiny", "prompt": [1, 2], "logit_bias": {"9": 50}}, "tiny")
    )
    assert engine.llm.added[-1][2].logit_bias == {9: -100.0}


def test_a_video_url_is_sampled_as_training_samples_a_dataset_s_video(tmp_path):
    """verl.serve read video URLs with vLLM's loader, 32 frames spread over the whole clip, while training samples
    videos at data.video_fps: a 2 s clip of 17 frames was 17 frames served, 5 in training. vLLM's media connector, under the
    media settings the server starts its engine with (--video-fps, training's default unless given), now gives the
    frames and the metadata the rollout gives the engine for that video in a dataset."""
    import base64

    import numpy as np
    from media_files import write_video
    from vllm.multimodal.media.connector import MediaConnector

    from verl.data.multimodal import load_video, video_metadata
    from verl.serve import chat
    from verl.trainer.config import DataConfig
    from verl.workers.rollout import vllm_compat

    data = DataConfig()
    path = write_video(str(tmp_path / "clip.mp4"), num_frames=17, rate=8)  # 2.125 s
    url = "data:video/*;base64," + base64.b64encode(open(path, "rb").read()).decode()  # as fetch_remote_media writes
    assert chat.MediaSettings() == chat.MediaSettings(data.video_fps, data.min_pixels, data.max_pixels)
    for fps in (data.video_fps, 1.0):
        connector = MediaConnector(vllm_compat.video_media_io_kwargs(fps, data.min_pixels, data.max_pixels))
        frames, metadata = connector.fetch_video(url).media
        trained = load_video(path, fps, data.min_pixels, data.max_pixels)
        assert len(trained) == math.ceil(17 / 8 * fps)
        np.testing.assert_array_equal(frames, trained)
        assert metadata == {**video_metadata(trained, fps), "do_sample_frames": False}  # as vllm_rollout gives it
    assert len(MediaConnector().fetch_video(url).media[0]) == 17  # vLLM's own loader: up to 32, whatever the rate


def test_a_video_rate_that_is_not_positive_is_refused_before_the_engine(capsys):
    from verl.serve import server

    for rate in ("0", "nan"):
        with pytest.raises(SystemExit):
            server.main(["--model", "no/such-model", "--video-fps", rate])
        assert "--video-fps must be a positive number" in capsys.readouterr().err


def _png_url(image) -> str:
    import base64
    import io

    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def test_a_served_image_is_resized_as_training_resizes_a_dataset_s_image():
    """verl.serve gave vLLM a request's image as sent, while training resizes every image into data.min_pixels and
    data.max_pixels first (a 64 x 48 picture is upscaled to 512 x 512's area): the served model saw other pixels, and
    other image tokens, than the trained one. The engine now renders the image training would have made."""
    import numpy as np
    from PIL import Image

    from verl.data.multimodal import load_image, open_image
    from verl.trainer.config import DataConfig

    rendered = []

    class Recording(StandIn):
        def _preprocess_chat_one(self, messages, tools=None, chat_template_kwargs=None, **kwargs):
            rendered.append(messages)
            return super()._preprocess_chat_one(messages, tools, chat_template_kwargs)

    small = Image.fromarray(np.random.default_rng(0).integers(0, 256, (48, 64, 3), dtype=np.uint8))
    fits = Image.fromarray(np.random.default_rng(1).integers(0, 256, (600, 500, 3), dtype=np.uint8))
    urls = [_png_url(small), _png_url(fits)]
    engine = chat_engine([[delta("ok", 0, "stop")]])
    engine.llm = engine.loop = Recording(engine.llm.steps)
    content = [
        {"type": "image_url", "image_url": {"url": urls[0]}},
        {"type": "input_image", "image_url": urls[1]},
        {"type": "text", "text": "What is it?"},
    ]
    engine.complete(check_request(request(messages=[{"role": "user", "content": content}]), "tiny"))
    parts = rendered[-1][0]["content"]
    data = DataConfig()
    served = open_image(parts[0]["image_url"]["url"]).convert("RGB")
    trained = load_image(urls[0], None, data.min_pixels, data.max_pixels)
    assert served.size == trained.size and served.width * served.height >= data.min_pixels
    np.testing.assert_array_equal(np.asarray(served), np.asarray(trained))
    assert parts[1]["image_url"] == urls[1]  # within the budget already: as sent
    bad = [{"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]
    with pytest.raises(RequestError, match="'image_url': the image cannot be read"):
        engine.complete(check_request(request(messages=[{"role": "user", "content": bad}]), "tiny"))


def test_serve_reads_the_media_settings_of_the_run_that_saved_the_model(tmp_path, caplog):
    """verl.serve read video URLs within training's default pixel budget and at --video-fps (training's default
    unless given), and images not at all: a run trained with other data.min_pixels, data.max_pixels or
    data.video_fps was served other pixels. It now takes them from the checkpoint --model is in, options first."""
    import logging

    from verl.serve import server
    from verl.serve.chat import MediaSettings

    step = tmp_path / "global_step_3"
    model = step / "actor" / "huggingface"
    model.mkdir(parents=True)
    settings = {"data.min_pixels": 3136, "data.max_pixels": None, "data.video_fps": 1.0, "data.max_prompt_length": 9}
    (step / "trainer_state.json").write_text(json.dumps({"global_step": 3, "settings": settings}))
    with caplog.at_level(logging.INFO, logger=server.__name__):
        assert server.media_settings(str(model), None, None, None) == MediaSettings(1.0, 3136, None)
    assert str(step / "trainer_state.json") in caplog.text
    assert server.media_settings(str(step / "actor"), None, 1000, 5000) == MediaSettings(1.0, 1000, 5000)
    assert server.media_settings(str(tmp_path), 4.0, None, None) == MediaSettings(video_fps=4.0)  # no run: defaults
    with pytest.raises(ValueError, match="--min-pixels 5000 is above --max-pixels 4000"):
        server.media_settings(str(tmp_path), None, 5000, 4000)
