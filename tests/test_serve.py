# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""`verl.serve` against the OpenAI chat-completions API: request checks, tool calls read by training's parser,
streaming, usage. A scripted engine serves fixed texts over HTTP to the openai client (a random tiny model writes no
tool call); the tiny model behind `python -m verl.serve` checks the real engine, and the same requests to vLLM's own
OpenAI server must get the same answers. tests/envs/test_serve_and_evaluate.py runs environments through it."""

import contextlib
import functools
import http.client
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from types import SimpleNamespace

import pytest

from tests.model_folders import no_tensors
from verl.envs.tools import HERMES, ToolCallFormat
from verl.serve import (
    ChatEngine,
    ChoiceText,
    Reply,
    RequestError,
    chat_message,
    check_request,
    forced_tool_calls,
    make_server,
)
from verl.serve.completions import check_completion
from verl.serve.engine_loop import EngineLoop


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        },
    }
]
CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'
NAMED = {"type": "function", "function": {"name": "add"}}


def request(**fields):
    return {"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], **fields}


def params(**fields):
    """The SamplingParams of a chat request with `fields` (max_tokens 16 where unset)."""
    checked = check_request(request(**fields), "tiny")
    return checked.to_sampling_params(checked.max_completion_tokens or checked.max_tokens or 16, {})


def test_a_model_argument_that_is_not_a_model_stops_before_the_engine(tmp_path, capsys):
    """Such a --model used to end in a traceback from vLLM's config (a missing directory parsed as a Hub id, a
    training checkpoint or any other folder as a model without weights)."""
    from verl.serve import main

    actor = tmp_path / "global_step_1" / "actor"
    (actor / "huggingface").mkdir(parents=True)
    (actor / ".metadata").write_bytes(b"")
    tokenizer_only = tmp_path / "tokenizer_only"
    tokenizer_only.mkdir()
    (tokenizer_only / "config.json").write_text("{}")
    damaged = tmp_path / "damaged"  # a traceback from the engine's settings, naming the trainer's model_path
    damaged.mkdir()
    (damaged / "config.json").write_text("{garbage")
    no_tensors(damaged / "model.safetensors")
    (tmp_path / "a_file").write_text("")
    cut = tmp_path / "cut"  # a download that stopped: the engine started, then a traceback
    cut.mkdir()
    (cut / "config.json").write_text("{}")
    (cut / "model.safetensors").write_bytes(b"\x08\x00\x00\x00")
    for argv, message in (
        (["--model", str(damaged)], f"--model: cannot read '{damaged / 'config.json'}' as JSON: Expecting property"),
        (["--model", str(tmp_path / "a_file")], f"--model '{tmp_path / 'a_file'}' is a file, not a folder"),
        (["--model", str(tmp_path / "missing")], f"--model '{tmp_path / 'missing'}' does not exist"),
        (["--model", str(actor)], f"'{actor}' is a training checkpoint's sharded weights, not a Hugging Face model"),
        (["--model", str(actor / "huggingface")], "python scripts/model_merger.py --local_dir"),
        (["--model", str(tokenizer_only)], f"--model '{tokenizer_only}' is a folder without weights"),
        (["--model", str(cut)], f"--model '{cut}': model.safetensors cannot be read (Error while deserializing"),
        (["--model", str(tmp_path), "--max-model-len", "0"], "--max-model-len and --kv-cache-mb must be positive"),
        (["--model", str(tmp_path), "--dtype", "bf17"], "argument --dtype: invalid choice: 'bf17'"),
        # a relative path that does not exist (a typo) was taken for a hub id: the engine started, then a traceback
        (["--model", "checkpoints/x/global_step_5/actor/huggingface"], "does not exist here (from "),
        (["--model", "bad name!"], "is no hub id (a hub id has only letters"),
        (["--model", ""], "--model is empty"),
    ):
        with pytest.raises(SystemExit) as exit_code:
            main(argv)
        assert exit_code.value.code == 2
        assert message in capsys.readouterr().err


def test_weights_that_do_not_fit_the_config_are_one_error_when_the_engine_fails(
    tiny_model, tmp_path, monkeypatch, capsys
):
    """vLLM's error for them was a 149-line traceback ending in "start (0) + length (1024) exceeds dimension size
    (512)"; when the engine fails to start, the folder's shapes are compared with its config (the engine is a
    stand-in that fails as vLLM's did: starting the real one costs ~15 s)."""
    import json
    import shutil

    from verl.serve import chat, server

    folder = tmp_path / "edited"
    shutil.copytree(tiny_model, folder)
    config = json.loads((folder / "config.json").read_text())
    config["intermediate_size"] *= 2
    (folder / "config.json").write_text(json.dumps(config))

    def failing(*args, **kwargs):
        raise RuntimeError("start (0) + length (1024) exceeds dimension size (512).")

    monkeypatch.setattr(chat, "ChatEngine", failing)
    assert server.main(["--model", str(folder), "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert f"Error: --model '{folder}': its weights do not fit its config.json: model.layers.0.mlp.down_proj" in err
    with pytest.raises(RuntimeError, match="exceeds dimension size"):  # weights that fit: the engine's own error
        server.main(["--model", tiny_model, "--port", "0"])


def test_every_sampling_field_reaches_the_sampling_params():
    got = params(max_tokens=5, temperature=0.5, top_p=0.9, n=2, seed=3, stop="\n")
    assert (got.max_tokens, got.temperature, got.top_p, got.n, got.seed, got.stop) == (5, 0.5, 0.9, 2, 3, ["\n"])
    assert params(max_completion_tokens=7).max_tokens == 7
    got = params(frequency_penalty=0.5, presence_penalty=-0.5, repetition_penalty=1.3, top_k=4, min_p=0.1)
    assert (got.frequency_penalty, got.presence_penalty, got.repetition_penalty, got.top_k, got.min_p) == (
        0.5, -0.5, 1.3, 4, 0.1)  # fmt: skip
    got = params(min_tokens=2, ignore_eos=True, stop_token_ids=[5], bad_words=["x"], allowed_token_ids=[1, 2])
    assert (got.min_tokens, got.ignore_eos, got.stop_token_ids, got.bad_words, got.allowed_token_ids) == (
        2, True, [5], ["x"], [1, 2])  # fmt: skip
    got = params(logprobs=True, top_logprobs=3, logit_bias={"5": -100, "7": 2.5})
    assert got.logprobs == 3 and got.logit_bias == {5: -100.0, 7: 2.5}
    assert params(logprobs=True).logprobs == 0 and params().logprobs is None  # the chosen token's alone; none
    assert check_request({"messages": [{"role": "user", "content": "Hi"}]}, "tiny").model is None
    streamed = request(stream=True, stream_options={"include_usage": True}, tools=TOOLS, tool_choice="auto")
    assert check_request(streamed, "tiny").stream_options.include_usage


def test_completion_requests_are_read_into_vllms_model():
    checked, prompts = check_completion({"prompt": [[1, 2], [3]], "max_tokens": 0, "echo": True, "logprobs": 1}, "x")
    assert prompts == [[1, 2], [3]] and (checked.max_tokens, checked.logprobs, checked.echo) == (0, 1, True)
    got = check_completion({"prompt": "Hi", "top_k": 2, "repetition_penalty": 1.2}, "x")[0].to_sampling_params(4, {})
    assert (got.top_k, got.repetition_penalty) == (2, 1.2)
    for body, message in [
        ({}, "'prompt': Either prompt or prompt_embeds must be provided"),
        ({"prompt": [[1, "a"]]}, "'prompt[0][1]': Input should be a valid integer"),
        ({"prompt": "Hi", "max_tokens": 0}, "'max_tokens' of 0 needs 'echo': true"),
        ({"prompt": "Hi", "echo": "maybe"}, "'echo': Input should be a valid boolean"),
        ({"prompt": "Hi", "suffix": "!"}, "'suffix' is not supported by this server"),
    ]:
        with pytest.raises(RequestError, match=re.escape(message)):
            check_completion(body, "tiny")


def test_an_unknown_model_is_a_404_naming_the_served_one():
    with pytest.raises(RequestError, match="'gpt-4' does not exist; this server serves 'tiny'") as error:
        check_request(request(model="gpt-4"), "tiny")
    assert error.value.status == 404


def test_errors_have_openais_shape_with_the_http_status_as_code():
    from vllm.exceptions import VLLMValidationError

    from verl.serve.server import error_body

    assert error_body(RequestError("'n' must be >= 1, got 0.")) == (
        400,
        {
            "error": {
                "message": "'n' must be >= 1, got 0.",
                "type": "invalid_request_error",
                "param": None,
                "code": 400,
            }
        },
    )
    status, body = error_body(VLLMValidationError("too long", parameter="input_text", value=9))
    assert status == 400 and body["error"]["param"] == "input_text" and body["error"]["code"] == 400
    assert error_body(RuntimeError("the engine died"))[1]["error"]["type"] == "server_error"


def test_vllms_client_errors_keep_their_status_and_a_bad_request_is_never_a_500():
    """A media URL that answers 404 (vLLM's 422) and a token id past the vocabulary's integer type (the tokenizer's
    OverflowError) were 500s with a logged traceback."""
    from vllm.exceptions import VLLMNotFoundError, VLLMUnprocessableEntityError

    from verl.serve.server import error_body

    status, body = error_body(VLLMUnprocessableEntityError("the image could not be fetched", parameter="image_url"))
    assert status == 422 and body["error"]["param"] == "image_url"
    assert error_body(VLLMNotFoundError("no such adapter"))[0] == 404
    assert error_body(OverflowError("number too large to fit in target type"))[0] == 400


def test_a_request_cannot_replace_the_chat_template():
    """vLLM's server refuses it unless started to trust request templates; it ran any Jinja a client sent."""
    body = request(chat_template_kwargs={"chat_template": "{{ 'INJECTED' }}"})
    with pytest.raises(RequestError, match=r"'chat_template_kwargs.chat_template': a request cannot replace"):
        check_request(body, "tiny")
    assert check_request(request(chat_template_kwargs={"enable_thinking": False}), "tiny")


def test_media_urls_in_every_form_vllm_reads_are_fetched_or_refused_on_the_request_thread(monkeypatch):
    """The Responses API's `input_image` with a URL string, an untyped `image_url` part and `audio_url` went to the
    engine thread, which fetched them while every request waited; a local file and a data URL that is not base64 were
    500s from vLLM."""
    from vllm.connections import global_http_connection

    from verl.serve.chat import fetch_remote_media

    fetched = []
    monkeypatch.setattr(global_http_connection, "get_bytes", lambda url, **_: fetched.append(url) or b"\x89PNG")
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "input_image", "image_url": "https://example.com/a.png"},
                {"image_url": {"url": "http://example.com/b.png"}},
                {"type": "audio_url", "audio_url": {"url": "https://example.com/c.wav"}},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
                {"type": "text", "text": "What is it?"},
            ],
        }
    ]
    fetch_remote_media(messages)
    assert fetched == ["https://example.com/a.png", "http://example.com/b.png", "https://example.com/c.wav"]
    parts = messages[0]["content"]
    assert parts[0]["image_url"] == "data:image/*;base64,iVBORw==" and parts[1]["image_url"]["url"].startswith(
        "data:image/*;base64,"
    )
    assert parts[2]["audio_url"]["url"].startswith("data:audio/*;base64,")
    assert parts[3]["image_url"]["url"] == "data:image/png;base64,iVBORw0KGgo="  # already data: untouched
    for url, message in (
        ("file:///etc/passwd", "'image_url': 'file:///etc/passwd' is not served"),
        ("data:image/png,abcd", "'image_url': a data URL must be base64-encoded"),
    ):
        with pytest.raises(RequestError, match=re.escape(message)):
            fetch_remote_media([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}])


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"max_tokens": "five"}, "'max_tokens': Input should be a valid integer"),
        ({"n": 0}, "'n' must be >= 1, got 0."),
        ({"temperature": "hot"}, "'temperature': Input should be a valid number"),
        ({"stop": [1]}, "'stop"),
        ({"stop": ["zz"] * 5}, "'stop': List should have at most 4 items after validation, not 5"),
        ({"messages": []}, "'messages' must be a non-empty list"),
        ({"messages": ["Hi"]}, "'messages[0]': Input should be a valid dictionary, got 'Hi'."),
        (
            {"messages": [{"role": "user", "content": 5}]},
            "'messages[0].content': Input should be a valid string, got 5.",
        ),
        ({"stream": "maybe"}, "'stream': Input should be a valid boolean"),
        ({"stream_options": {"include_usage": True}}, "'stream_options': Stream options can only be defined when"),
        ({"tools": {"add": {}}}, "'tools'"),
        ({"tools": [{"type": "function"}]}, "'tools[0].function': Field required."),
        ({"tools": TOOLS, "tool_choice": "any"}, "'tool_choice': Invalid value for `tool_choice`: any!"),
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "mul"}}}, "'tool_choice"),
        ({"tool_choice": "auto"}, "'tool_choice': When using `tool_choice`, `tools` must be set."),
        ({"top_logprobs": 2}, "'top_logprobs': when using `top_logprobs`, `logprobs` must be set to true."),
        ({"response_format": {"type": "xml"}}, "'response_format"),
        ({"response_format": {"type": "json_schema"}}, "'response_format': When response_format type is"),
        ({"echo": True}, "'echo' is not supported by this server; leave it out or send its default."),
        ({"use_beam_search": True}, "'use_beam_search' is not supported by this server"),
        ({"chat_template": "{{ x }}"}, "'chat_template' is not supported by this server"),
        ({"stream": True, "stream_options": {"continuous_usage_stats": True}}, "'stream_options.continuous_usage_"),
        ({"frobnicate": 1}, "'frobnicate' is not a field this server knows; leave it out."),
        ({"logit_bias": {"a": 1}}, "'logit_bias' keys must be integer token ids, got 'a'."),
        ({"logit_bias": {"5": 101}}, "'logit_bias[5]' must be a number between -100 and 100, got 101.0."),
    ],
)
def test_bad_or_unsupported_fields_are_named_in_one_line(fields, message):
    with pytest.raises(RequestError) as error:
        checked = check_request(request(**fields), "tiny")
        forced_tool_calls(checked)
    assert str(error.value).startswith(message) and "\n" not in str(error.value) and error.value.status == 400


def test_defaults_and_labels_are_accepted():
    """Fields a client sends at their default (lm-eval, the Agents SDK) or that only label the request."""
    checked = check_request(request(echo=False, use_beam_search=False, priority=0, user="me", metadata={"a": "b"},
                                    store=False, parallel_tool_calls=True), "tiny")  # fmt: skip
    assert checked.user == "me"
    # OpenAI fields this server does not know, sent as null (unset) by clients that fill every field
    assert check_request(request(service_tier=None, modalities=None, prediction=None), "tiny").messages


def test_vllms_own_refusals_keep_the_field_in_the_error_objects_param():
    from verl.serve.server import error_body

    with pytest.raises(RequestError) as error:
        check_request(request(stop=["zz"] * 5), "tiny")
    assert error_body(error.value)[1]["error"]["param"] in (None, "stop")  # pydantic's carry no parameter
    with pytest.raises(RequestError) as error:
        check_request(request(top_logprobs=2), "tiny")  # vLLM's own check, naming the field
    assert error_body(error.value)[1]["error"]["param"] == "top_logprobs"


def test_tool_call_blocks_become_structured_calls():
    message, finish = chat_message(f"Let me add.\n{CALL}\nDone.", "stop", tools=HERMES)
    assert finish == "tool_calls" and message["content"] == "Let me add.\n\nDone."
    (call,) = message["tool_calls"]
    assert call["id"].startswith("call_") and call["type"] == "function"
    assert call["function"]["name"] == "add" and json.loads(call["function"]["arguments"]) == {"a": 1, "b": 2}
    # only calls and whitespace: null content; two calls, one with its arguments as a JSON string
    second = '<tool_call>{"name": "add", "arguments": "{\\"a\\": 3, \\"b\\": 4}"}</tool_call>'
    message, finish = chat_message(f"\n{CALL}\n{second}\n", "stop", tools=HERMES)
    assert finish == "tool_calls" and message["content"] is None
    assert [json.loads(call["function"]["arguments"]) for call in message["tool_calls"]] == [
        {"a": 1, "b": 2},
        {"a": 3, "b": 4},
    ]
    assert len({call["id"] for call in message["tool_calls"]}) == 2
    # a final call without its closing tag counts when its JSON is complete (as in training)
    message, finish = chat_message('<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}', "stop", tools=HERMES)
    assert finish == "tool_calls" and message["tool_calls"][0]["function"]["name"] == "add"


def test_malformed_or_unrequested_calls_stay_in_the_content():
    for text, reason in [
        ('<tool_call>{"name": "add", "arguments": {"a": 1, ', "length"),  # cut by max_tokens
        ("<tool_call>not json</tool_call>", "stop"),
        ('<tool_call>{"arguments": {}}</tool_call>', "stop"),  # no name
    ]:
        message, finish = chat_message(text, reason, tools=HERMES)
        assert (message["content"], finish, "tool_calls" in message) == (text, reason, False)
    message, finish = chat_message(CALL, "stop", tools=None)  # no tools in the request, or tool_choice "none"
    assert (message["content"], finish, "tool_calls" in message) == (CALL, "stop", False)
    message, finish = chat_message(f"<tool_call>oops</tool_call> and {CALL}", None, tools=HERMES)
    assert message["content"] == "<tool_call>oops</tool_call> and " and finish == "tool_calls"
    assert message["role"] == "assistant" and message["refusal"] is None


def completion(text, index=0, finish_reason=None, tokens=1):
    """A vLLM CompletionOutput delta: one step's new text of a choice."""
    return SimpleNamespace(
        index=index, text=text, token_ids=[0] * tokens, finish_reason=finish_reason, stop_reason=None
    )


@pytest.mark.parametrize(
    "text",
    [f"Let me add.\n{CALL}\nDone.", f"  \n{CALL}", "<tool_ca", "a <tool_callx> b", "  \n ", "plain text", CALL],
)
def test_streamed_content_adds_up_to_the_message_content(text):
    for tools in (HERMES, None):
        choice = ChoiceText(tools)
        pieces = [choice.add(completion(char)) for char in text[:-1]]
        pieces.append(choice.add(completion(text[-1], finish_reason="stop")))
        message, _, rest = choice.message()
        assert "".join(pieces) + rest == (message["content"] or "")
        assert tools is not None or "".join(pieces) == text  # without tools every token goes out as it comes
        if tools and "<tool_call>" in text:
            assert "<tool_call>" not in "".join(pieces)  # a call is never streamed as content


def test_calls_in_the_models_own_format_are_read_and_never_streamed():
    """A model whose template writes Qwen3.5's XML calls (or pythonic ones) gets them read by vLLM's parser of that
    format, its content held to the end (the parser tidies it). A model whose calls no parser reads is refused a
    request with tools, naming why."""
    from verl.models.tiny_models import build_tokenizer

    tokenizer = build_tokenizer(kind="qwen3")
    xml = "Let me add.\n<tool_call>\n<function=add>\n<parameter=a>\n1\n</parameter>\n<parameter=b>\n2\n"
    for parser, text in [
        ("qwen3_coder", xml + "</parameter>\n</function>\n</tool_call>"),
        ("pythonic", "[add(a=1, b=2)]"),
    ]:
        choice = ChoiceText(ToolCallFormat(parser, tokenizer, TOOLS))
        pieces = [choice.add(completion(char)) for char in text[:-1]]
        pieces.append(choice.add(completion(text[-1], finish_reason="stop")))
        message, finish_reason, rest = choice.message()
        assert finish_reason == "tool_calls" and "".join(pieces) + rest == (message["content"] or "")
        assert "<tool_call>" not in "".join(pieces) and "add(" not in "".join(pieces)
        assert [json.loads(call["function"]["arguments"]) for call in message["tool_calls"]] == [{"a": 1, "b": 2}]
    engine = object.__new__(ChatEngine)  # refused before the engine is touched
    engine.tool_format, engine.tool_error = None, "The chat template writes a tool call as 'CALL add()'"
    with pytest.raises(RequestError, match="cannot read the model's tool calls: .*CALL add"):
        engine._submit(check_request(request(tools=TOOLS), "tiny"))


def test_a_forced_tool_choice_holds_the_reply_to_a_schema():
    def forced(**fields):
        return forced_tool_calls(check_request(request(**fields), "tiny"))

    assert forced(tools=TOOLS, tool_choice=NAMED) == ("add", TOOLS[0]["function"]["parameters"])
    assert forced(tools=TOOLS, tool_choice="auto") is None
    assert "maxItems" not in forced(tools=TOOLS, tool_choice="required")[1]
    assert forced(tools=TOOLS, tool_choice="required", parallel_tool_calls=False)[1]["maxItems"] == 1
    defs = {"$defs": {"n": {"type": "integer"}}, "properties": {"x": {"$ref": "#/$defs/n"}}}
    tools = [*TOOLS, {"type": "function", "function": {"name": "neg", "parameters": defs}}]
    function, schema = forced(tools=tools, tool_choice="required")
    assert function == "" and schema["type"] == "array" and schema["minItems"] == 1
    assert schema["$defs"] == {"n": {"type": "integer"}}  # lifted to the root, where the ref points
    names = [option["properties"]["name"]["enum"] for option in schema["items"]["anyOf"]]
    assert names == [["add"], ["neg"]] and "$defs" not in schema["items"]["anyOf"][1]["properties"]["parameters"]


@pytest.mark.parametrize(
    "forced, text, finish, calls, reason",
    [
        ("add", '{"a": 1, "b": 2}', "stop", [("add", {"a": 1, "b": 2})], "stop"),
        ("", '[{"name": "add", "parameters": {"a": 1, "b": 2}}, {"name": "add", "parameters": {}}]', "stop",
         [("add", {"a": 1, "b": 2}), ("add", {})], "tool_calls"),
        ("", '[{"name": "add", "parameters": {"a":', "length", [], "length"),  # cut off: no JSON, no calls
    ],
)  # fmt: skip
def test_a_forced_reply_is_its_tool_calls_streamed_or_not(forced, text, finish, calls, reason):
    choice = ChoiceText(HERMES, forced)
    pieces = [choice.add(completion(char)) for char in text[:-1]]
    pieces.append(choice.add(completion(text[-1], finish_reason=finish)))
    message, finish_reason, rest = choice.message()
    assert "".join(pieces) == rest == message["content"] == ""  # nothing of the JSON goes out as content
    got = [(call["function"]["name"], json.loads(call["function"]["arguments"])) for call in message["tool_calls"]]
    assert got == calls and finish_reason == reason
    assert all(call["id"].startswith("call_") and call["type"] == "function" for call in message["tool_calls"])


class ScriptedEngine(ChatEngine):
    """ChatEngine over a fake vLLM engine whose steps write the given pieces (per choice), for the HTTP layer."""

    def __init__(self, pieces, prompt_tokens=7):
        self.name, self.max_model_len, self.defaults, self.delay = "tiny", 512, {}, 0.0
        self.pieces, self.prompt_tokens, self.aborted = pieces, prompt_tokens, []
        self.last_finish = "stop"
        self.steps = []
        self.llm = SimpleNamespace(llm_engine=self)
        self.loop = EngineLoop(self.llm)  # the server's engine loop, stepping this engine

    def _submit(self, request):
        reply = Reply("chatcmpl-scripted", self.prompt_tokens, request.n, HERMES if request.tools else None)
        self.steps = [
            [
                completion(text, index, self.last_finish if step == len(self.pieces) - 1 else None)
                for index in range(len(reply.choices))
            ]
            for step, text in enumerate(self.pieces)
        ]
        self.reply = reply
        return reply

    def has_unfinished_requests(self):
        return bool(self.steps)

    def step(self):
        time.sleep(self.delay)
        outputs = self.steps.pop(0)
        return [
            SimpleNamespace(request_id=self.reply.id, finished=not self.steps, prompt_token_ids=None, outputs=outputs)
        ]

    def abort_request(self, ids):
        self.aborted += ids
        self.steps = []


@pytest.fixture
def scripted_server():
    """Serve a ScriptedEngine over HTTP on a free port: yields (engine, base URL)."""
    servers = []

    def start(pieces):
        engine = ScriptedEngine(pieces)
        server, url = serve(engine)
        servers.append((server, engine))
        return engine, url

    yield start
    for server, engine in servers:
        server.shutdown()
        engine.loop.stop()


def serve(engine):
    """Serve `engine` on a free port from a thread: (the server, its base URL) once it answers."""
    server = make_server(engine, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    deadline = time.monotonic() + 30
    while not server.uvicorn.started and time.monotonic() < deadline:
        time.sleep(0.01)
    return server, f"http://127.0.0.1:{server.server_address[1]}/v1"


def test_the_openai_client_reads_tool_calls_streamed_or_not(scripted_server):
    from openai import OpenAI

    pieces = [
        "Let",
        " me",
        " add.",
        "\n<tool",
        "_call>",
        '\n{"name": "add", ',
        '"arguments": {"a": 1, "b": 2}}',
        "\n</tool_call>",
    ]
    _, url = scripted_server(pieces)
    client = OpenAI(base_url=url, api_key="unused")
    reply = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "1+2?"}], tools=TOOLS)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content == "Let me add.\n"
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "add" and call.id.startswith("call_")
    assert json.loads(call.function.arguments) == {"a": 1, "b": 2}
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens, reply.usage.total_tokens) == (7, 8, 15)

    chunks = list(
        client.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "1+2?"}],
            tools=TOOLS,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert {chunk.object for chunk in chunks} == {"chat.completion.chunk"} and chunks[0].choices[
        0
    ].delta.role == "assistant"
    deltas = [chunk.choices[0].delta for chunk in chunks if chunk.choices]
    assert "".join(delta.content or "" for delta in deltas) == "Let me add.\n"
    (streamed,) = [call for delta in deltas for call in delta.tool_calls or []]
    assert (streamed.index, streamed.type, streamed.function.name) == (0, "function", "add")
    assert json.loads(streamed.function.arguments) == {"a": 1, "b": 2} and streamed.id.startswith("call_")
    assert [chunk.choices[0].finish_reason for chunk in chunks if chunk.choices][-1] == "tool_calls"
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens == 15


def test_several_choices_stream_side_by_side(scripted_server):
    from openai import OpenAI

    _, url = scripted_server(["a", "b", "c"])
    client = OpenAI(base_url=url, api_key="unused")
    chunks = list(
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "Hi"}], n=2, stream=True)
    )
    text = {0: "", 1: ""}
    for chunk in chunks:
        for choice in chunk.choices:
            text[choice.index] += choice.delta.content or ""
    assert text == {0: "abc", 1: "abc"}
    assert sum(choice.finish_reason == "stop" for chunk in chunks for choice in chunk.choices) == 2


def test_a_chunked_request_body_is_read_whole(scripted_server):
    """A body sent with Transfer-Encoding: chunked (no Content-Length: httpx with a generator, a streaming proxy)."""
    import httpx

    _, url = scripted_server(["a", "b"])
    data = json.dumps(request(max_tokens=2)).encode()

    def pieces():
        for start in range(0, len(data), 7):
            yield data[start : start + 7]

    reply = httpx.post(f"{url}/chat/completions", content=pieces(), headers={"Content-Type": "application/json"})
    assert reply.request.headers["Transfer-Encoding"] == "chunked" and "Content-Length" not in reply.request.headers
    assert reply.status_code == 200 and reply.json()["choices"][0]["message"]["content"] == "ab"
    refused = httpx.post(f"{url}/chat/completions", content=iter([b'{"messages": ', b"[]}"]))
    assert refused.status_code == 400 and refused.json()["error"]["message"].startswith("'messages' must be")
    assert httpx.post(f"{url}/nowhere", json={}).status_code == 404


def test_a_streamed_completion_waits_for_the_engine_outside_the_event_loop():
    """The server builds a stream on its event loop and takes its first chunk in a worker thread; a streamed
    completion handed its request to the engine thread while being built, so every stream and /health waited for an
    engine step (1 s measured). Nothing reaches the engine now until the first chunk is asked for."""
    from verl.serve import completions

    handed = []
    engine = SimpleNamespace(
        name="tiny",
        max_model_len=512,
        llm=SimpleNamespace(get_tokenizer=lambda: SimpleNamespace(max_chars_per_token=4)),
        loop=SimpleNamespace(submit=lambda work: handed.append(work) or (_ for _ in ()).throw(RuntimeError("sent"))),
    )
    request, prompts = check_completion({"model": "tiny", "prompt": "Hi", "stream": True}, "tiny")
    chunks = completions.stream(engine, request, prompts)
    assert handed == []
    with pytest.raises(RuntimeError, match="sent"):
        next(chunks)
    assert len(handed) == 1


TOOLS_FLAT = [{"type": "function", **TOOLS[0]["function"]}]
"""TOOLS as the Responses API writes function tools."""


def test_the_responses_api_reads_text_and_tool_calls_streamed_or_not(scripted_server):
    from openai import OpenAI

    _, url = scripted_server(["Let", " me", " add.", "\n<tool", "_call>", '\n{"name": "add", ', '"arguments": {"a": 1, "b": 2}}', "\n</tool_call>"])  # fmt: skip
    client = OpenAI(base_url=url, api_key="unused")
    reply = client.responses.create(model="tiny", input="1+2?", tools=TOOLS_FLAT, instructions="Be brief.")
    assert reply.status == "completed" and [item.type for item in reply.output] == ["message", "function_call"]
    assert reply.output_text == "Let me add.\n" and reply.output[0].content[0].type == "output_text"
    call = reply.output[1]
    assert call.name == "add" and json.loads(call.arguments) == {"a": 1, "b": 2} and call.call_id.startswith("call_")
    assert (reply.usage.input_tokens, reply.usage.output_tokens, reply.usage.total_tokens) == (7, 8, 15)
    events = list(client.responses.create(model="tiny", input="1+2?", tools=TOOLS_FLAT, stream=True))
    kinds = [event.type for event in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert [event.sequence_number for event in events] == list(range(len(events)))
    text = "".join(event.delta for event in events if event.type == "response.output_text.delta")
    assert text == "Let me add.\n" and kinds.count("response.output_text.delta") > 1  # piece by piece
    assert kinds.index("response.output_text.done") < kinds.index("response.function_call_arguments.done")
    (done,) = [event for event in events if event.type == "response.function_call_arguments.done"]
    assert json.loads(done.arguments) == {"a": 1, "b": 2}
    final = events[-1].response
    assert [item.type for item in final.output] == ["message", "function_call"] and final.usage.total_tokens == 15
    assert final.output_text == "Let me add.\n"
    # a named tool_choice (the Agents SDK's forced tool) is echoed as given, streamed or not (it could not be written
    # as JSON: a 400 after the generation, a dropped connection when streamed)
    named = {"type": "function", "name": "add"}
    reply = client.responses.create(model="tiny", input="1+2?", tools=TOOLS_FLAT, tool_choice=named)
    assert reply.tool_choice.model_dump(exclude_none=True) == named and reply.output[-1].name == "add"
    events = list(
        client.responses.create(model="tiny", input="1+2?", tools=TOOLS_FLAT, tool_choice=named, stream=True)
    )
    assert events[-1].type == "response.completed" and events[-1].response.tool_choice.name == "add"
    # what is refused is named
    status, body = post_json(f"{url}/responses", {"input": "Hi", "previous_response_id": "resp_1"})
    assert status == 400 and body["error"]["message"].startswith("'previous_response_id' is not supported")
    status, body = post_json(f"{url}/responses", {"input": "Hi", "tools": [{"type": "web_search"}]})
    assert status == 400 and "only function tools" in body["error"]["message"]


def test_a_request_the_engine_failed_is_a_server_error(scripted_server):
    """vLLM's finish_reason "error" (a retryable internal error its server turns into a 500) reached the client as a
    200 holding the partial text."""
    engine, url = scripted_server(["Hel", "lo"])
    engine.last_finish = "error"
    status, _, body = post(url, request())
    assert status == 500 and "The engine failed this request" in body["error"]["message"]
    status, _, text = post(url, request(stream=True))  # after the first chunk: an error event
    assert status == 200 and "The engine failed this request" in text


def test_health_says_when_the_engine_can_no_longer_serve(scripted_server):
    """/health was 200 whatever the engine's state: a load balancer kept sending requests that all failed."""
    engine, url = scripted_server(["a"])
    health = url.replace("/v1", "/health")
    with urllib.request.urlopen(health, timeout=30) as response:
        assert response.status == 200
    engine.loop.thread.fail(RuntimeError("the engine process died"))
    with pytest.raises(urllib.error.HTTPError) as error:
        urllib.request.urlopen(health, timeout=30)
    assert error.value.code == 503


def test_the_model_list_gives_the_context_length_as_vllms_server_does(scripted_server):
    """GET /v1/models lacked max_model_len, which vLLM's own server lists and clients size their requests by."""
    engine, url = scripted_server(["a"])
    with urllib.request.urlopen(f"{url}/models", timeout=30) as response:
        [model] = json.loads(response.read())["data"]
    assert (model["id"], model["object"], model["max_model_len"]) == ("tiny", "model", engine.max_model_len)


def test_a_client_that_leaves_a_stream_aborts_its_request(scripted_server):
    engine, url = scripted_server([str(i) for i in range(1000)])
    engine.delay = 0.01  # a token every 10 ms: the client is gone long before the end
    address = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(address.hostname, address.port, timeout=30)
    connection.request(
        "POST", "/v1/chat/completions", json.dumps(request(stream=True)), {"Content-Type": "application/json"}
    )
    response = connection.getresponse()
    assert response.readline().startswith(b"data: ")
    response.close()  # the client goes before the end
    connection.close()
    deadline = time.monotonic() + 30
    while not engine.aborted and time.monotonic() < deadline:
        time.sleep(0.05)
    assert engine.aborted == ["chatcmpl-scripted"]
    engine.pieces = ["ok"]  # and the engine is free for the next request
    assert post(url, request())[2]["choices"][0]["message"]["content"] == "ok"


@pytest.mark.parametrize("stream", [True, False])
def test_a_client_that_leaves_at_once_aborts_its_request_streamed_or_not(scripted_server, stream):
    """A client gone right after the response's headers (streamed) or while it waits for the whole reply: its
    request is aborted, not generated to the end (a stream's body could be dropped before it ran its cleanup)."""
    engine, url = scripted_server([str(i) for i in range(1000)])
    engine.delay = 0.01
    address = urllib.parse.urlsplit(url)
    for attempt in range(3):
        engine.aborted = []
        connection = http.client.HTTPConnection(address.hostname, address.port, timeout=30)
        body = json.dumps(request(stream=stream, n=4))
        connection.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        if stream:
            connection.getresponse().close()  # the headers only
        else:
            time.sleep(0.2)  # the engine is generating
        connection.close()
        deadline = time.monotonic() + 30
        while not engine.aborted and time.monotonic() < deadline:
            time.sleep(0.02)
        assert engine.aborted == ["chatcmpl-scripted"], attempt
        assert len(engine.steps) == 0
    engine.pieces = ["ok"]
    assert post(url, request())[2]["choices"][0]["message"]["content"] == "ok"


def test_requests_still_waiting_when_the_server_stops_are_aborted_and_their_threads_end():
    """At a shutdown (SIGTERM, Ctrl-C) uvicorn gives requests 5 s, then cancels them: a request still waiting for its
    whole reply is aborted, a thread still waiting on the engine once the engine stops is woken, and a request that
    comes later is refused. Such threads were left waiting for ever, and the server process with them (it never
    exited)."""
    engine = ScriptedEngine([str(i) for i in range(10000)])
    engine.delay = 0.01  # 100 s of tokens
    server, url = serve(engine)
    try:

        def ask():
            with contextlib.suppress(Exception):  # the server goes while it waits
                post_json(f"{url}/chat/completions", request())

        threading.Thread(target=ask, daemon=True).start()
        deadline = time.monotonic() + 30
        while not engine.steps and time.monotonic() < deadline:
            time.sleep(0.02)
        server.shutdown()
        deadline = time.monotonic() + 30
        while not engine.aborted and time.monotonic() < deadline:
            time.sleep(0.05)
        assert engine.aborted == ["chatcmpl-scripted"]
    finally:
        engine.loop.stop()
    # a thread waiting on a request that no client watches (the thread pool's, at the engine's close)
    engine, errors = ScriptedEngine([str(i) for i in range(10000)]), []
    engine.delay = 0.01

    def wait_for_reply():
        try:
            engine.complete(check_request(request(), "tiny"))
        except RuntimeError as error:
            errors.append(str(error))

    waiting = threading.Thread(target=wait_for_reply, daemon=True)
    waiting.start()
    deadline = time.monotonic() + 30
    while not engine.steps and time.monotonic() < deadline:
        time.sleep(0.02)
    engine.loop.stop()
    waiting.join(timeout=30)
    assert not waiting.is_alive() and errors == ["The server is shutting down."]
    # a request that comes once the engine has stopped is refused, not left waiting for ever
    late = threading.Thread(target=wait_for_reply, daemon=True)
    late.start()
    late.join(timeout=30)
    assert not late.is_alive() and errors[1:] == ["The engine thread has stopped."]


@pytest.mark.parametrize("stream", [False, True])
def test_requests_cut_off_by_a_shutdown_are_not_logged_as_server_errors(stream):
    """uvicorn cancels the requests still running 5 s into a shutdown (SIGTERM, Ctrl-C) and says how many; each was
    then also logged as "Exception in ASGI application" with a 60-line traceback of its CancelledError (a Ctrl-C with
    20 requests in flight printed 1200 lines). They are aborted (the test above), and not logged again."""
    engine = ScriptedEngine([str(i) for i in range(10000)])
    engine.delay = 0.01  # 100 s of tokens
    server = make_server(engine, "127.0.0.1", 0)
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("uvicorn.error").addHandler(handler)
    try:
        deadline = time.monotonic() + 30
        while not server.uvicorn.started and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.uvicorn.started, "the server did not start within 30 s"
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"

        def ask():
            with contextlib.suppress(Exception):  # the server goes while it answers
                post(url, request(stream=stream))

        threading.Thread(target=ask, daemon=True).start()
        deadline = time.monotonic() + 30
        while not engine.steps and time.monotonic() < deadline:
            time.sleep(0.02)
        server.shutdown()
        serving.join(timeout=60)
        deadline = time.monotonic() + 30
        while not engine.aborted and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not serving.is_alive() and engine.aborted == ["chatcmpl-scripted"]
    finally:
        logging.getLogger("uvicorn.error").removeHandler(handler)
        engine.loop.stop()
    messages = [record.getMessage() for record in records if record.levelno >= logging.ERROR]
    assert messages == ["Cancel 1 running task(s), timeout graceful shutdown exceeded"]


def test_a_client_that_leaves_while_sending_its_request_is_not_a_server_error(scripted_server, caplog):
    """A body cut short by the client's leaving is a 499 like any client gone, not a logged traceback and a 500."""
    engine, url = scripted_server(["ok"])
    address = urllib.parse.urlsplit(url)
    with caplog.at_level("INFO", logger="verl.serve.server"):
        for _ in range(3):
            with socket.create_connection((address.hostname, address.port), timeout=30) as raw:
                head = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                raw.sendall(f'{head}Content-Length: 1000\r\n\r\n{{"messages": '.encode())
                time.sleep(0.2)  # the server is reading the body
        assert post(url, request())[2]["choices"][0]["message"]["content"] == "ok"  # and it serves on
    assert [record.getMessage() for record in caplog.records] == []


def post(url, body):
    """POST a chat-completions request: (status, headers, JSON body or the raw text of a stream)."""
    data = json.dumps(body).encode()
    call = urllib.request.Request(f"{url}/chat/completions", data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(call, timeout=120) as response:
            text = response.read().decode("utf-8")
            status, headers = response.status, response.headers
    except urllib.error.HTTPError as error:
        text, status, headers = error.read().decode("utf-8"), error.code, error.headers
    return status, headers, text if body.get("stream") and status == 200 else json.loads(text)


# --------------------------------------------------------------------------------------- the real engine (tiny model)


def start(command, env, ready, log):
    """Start a server process in its own session; wait for `ready` in its log (then it serves)."""
    proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"{command[2]} exited with {proc.returncode}: {open(log.name).read()[-3000:]}")
        if ready(open(log.name).read()):
            return proc
        time.sleep(0.5)
    stop(proc)
    pytest.fail(f"{command[2]} did not start within 300 s")


def stop(proc):
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from verl.models.tiny_models import get_or_build_tiny_model

    return get_or_build_tiny_model("qwen2", str(tmp_path_factory.mktemp("serve") / "models"))


SERVER_ARGS = ["--served-model-name", "tiny", "--max-model-len", "512"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}


@pytest.fixture(scope="module")
def server(tiny_model, tmp_path_factory):
    """`python -m verl.serve` of the tiny model: its base URL."""
    log = open(tmp_path_factory.mktemp("serve_log") / "server.log", "w")
    command = [sys.executable, "-m", "verl.serve", "--model", tiny_model, *SERVER_ARGS, "--kv-cache-mb", "32"]
    proc = start([*command, "--port", "0"], ENV, lambda text: "Serving tiny at" in text, log)
    (url,) = [line.split(" at ")[1].split()[0] for line in open(log.name) if "Serving tiny at" in line]
    yield url
    stop(proc)


def test_an_address_it_cannot_listen_on_stops_before_the_engine(tiny_model, capsys):
    """A port in use or out of range is found before the engine starts (it was a traceback after the engine had
    loaded, and the engine was left unclosed)."""
    from verl.serve import main

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for argv, message in (
            (["--port", str(port)], f"--host 127.0.0.1 --port {port}: cannot listen there ("),
            (["--port", "70000"], "--host 127.0.0.1 --port 70000: cannot listen there ("),
        ):
            started = time.monotonic()
            with pytest.raises(SystemExit) as exit_code:
                main(["--model", tiny_model, *argv])
            assert exit_code.value.code == 2 and message in capsys.readouterr().err
            assert "vllm" not in sys.modules or time.monotonic() - started < 10  # no engine was started


@pytest.mark.slow
def test_the_address_it_prints_for_an_ipv6_host_is_a_url(tiny_model, tmp_path):
    """`--host ::1` printed "Serving tiny at http://::1:<port>/v1", which the openai client refuses ("Invalid port:
    ':1:<port>'"; an IPv6 address goes in brackets in a URL: http://[::1]:<port>/v1)."""
    from openai import OpenAI

    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        pytest.skip("this machine has no IPv6 loopback")
    log = open(tmp_path / "server.log", "w")
    command = [sys.executable, "-m", "verl.serve", "--model", tiny_model, *SERVER_ARGS, "--kv-cache-mb", "32"]
    proc = start([*command, "--host", "::1", "--port", "0"], ENV, lambda text: "Serving tiny at" in text, log)
    try:
        (url,) = [line.split(" at ")[1].split()[0] for line in open(log.name) if "Serving tiny at" in line]
        assert [model.id for model in OpenAI(base_url=url, api_key="unused", max_retries=0).models.list()] == ["tiny"]
    finally:
        stop(proc)


@pytest.mark.slow
def test_a_kv_cache_too_small_for_one_sequence_is_one_error_naming_the_options(tiny_model):
    command = [sys.executable, "-m", "verl.serve", "--model", tiny_model, *SERVER_ARGS, "--kv-cache-mb", "1"]
    result = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2
    error = [line for line in result.stderr.splitlines() if line.startswith("Error: ")]
    assert re.fullmatch(
        rf"Error: The vLLM engine's KV cache of 1 MiB cannot hold one sequence of 512 tokens of {re.escape(tiny_model)}"
        r" \(it holds about \d+ tokens\); change --kv-cache-mb or --max-model-len\.",
        error[0],
    ), error
    assert "Traceback" not in result.stderr
    # a context longer than the model's (its config.json says 8192) is the same kind of one-line error
    longer = [*command[:-2], "--max-model-len", "9000"]
    result = subprocess.run(longer, env=ENV, capture_output=True, text=True, timeout=300)
    error = [line for line in result.stderr.splitlines() if line.startswith("Error: ")]
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert error == [
        f"Error: max_model_len=9000 is longer than the model {tiny_model} takes (max_position_embeddings=8192 in its "
        "config.json); change --kv-cache-mb or --max-model-len."
    ], error


def streamed(client, **fields):
    """(each choice's content, each choice's finish_reason, usage, chunks) of a streamed request through the openai
    client."""
    chunks = list(client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **fields))
    content, reasons = [""] * fields.get("n", 1), [None] * fields.get("n", 1)
    for choice in (choice for chunk in chunks for choice in chunk.choices):
        content[choice.index] += choice.delta.content or ""
        reasons[choice.index] = choice.finish_reason or reasons[choice.index]
    return content, reasons, chunks[-1].usage, chunks


@pytest.fixture(scope="module")
def live(tiny_model):
    """The tiny model's ChatEngine in this process, served over HTTP: (base URL, the engine's count of unfinished
    requests at each step, the request ids it aborted, the vLLM engine, the ChatEngine). The counts are read off the
    real engine, not faked."""
    engine = ChatEngine(tiny_model, "tiny", 512, 32, "auto")
    core = engine.llm.llm_engine
    seen = SimpleNamespace(held=[], aborted=[], prompts=[])
    step, abort, add = core.step, core.abort_request, core.add_request

    def counted_step():
        seen.held.append(core.get_num_unfinished_requests())
        return step()

    def recorded_abort(request_ids, *args, **kwargs):
        seen.aborted.extend(request_ids)
        return abort(request_ids, *args, **kwargs)

    def recorded_add(request_id, prompt, *args, **kwargs):
        seen.prompts.append(prompt)
        return add(request_id, prompt, *args, **kwargs)

    core.step, core.abort_request, core.add_request = counted_step, recorded_abort, recorded_add
    server, url = serve(engine)
    yield url, seen, core, engine
    server.shutdown()
    engine.close()


def in_threads(call, arguments):
    """call(argument) for every argument at once, one thread each, released together: the results in order."""
    barrier, results = threading.Barrier(len(arguments)), [None] * len(arguments)

    def run(index):
        barrier.wait()
        results[index] = call(arguments[index])

    threads = [threading.Thread(target=run, args=(index,)) for index in range(len(arguments))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    return results


@pytest.mark.slow
def test_chat_template_kwargs_of_a_request_reach_the_template(tmp_path):
    """A request's chat_template_kwargs render its messages, as in vLLM's server: Qwen3's enable_thinking=false (the
    tiny qwen3 template does as Qwen3's) opens the answer with an empty thinking block."""
    from openai import OpenAI

    from verl.models.tiny_models import get_or_build_tiny_model

    engine = ChatEngine(get_or_build_tiny_model("qwen3", str(tmp_path)), "tiny", 256, 16, "auto")
    server, url = serve(engine)
    try:
        client = OpenAI(base_url=url, api_key="unused")
        fields = {"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}
        thinking = client.chat.completions.create(**fields)
        quiet = client.chat.completions.create(
            **fields, extra_body={"chat_template_kwargs": {"enable_thinking": False}}
        )
        block = engine.llm.get_tokenizer().encode("<think>\n\n</think>\n\n", add_special_tokens=False)
        assert quiet.usage.prompt_tokens == thinking.usage.prompt_tokens + len(block)
    finally:
        server.shutdown()
        engine.close()


@pytest.mark.slow
def test_a_hybrid_model_is_served_on_the_cpu_as_the_rollout_runs_it(tmp_path):
    """Qwen3.5's Gated DeltaNet layers: vLLM's CPU kernel asserts bf16, and the server ran fp32, so every request was
    a 500 ("CPU GDN attention requires BF16."); it now runs them as the rollout does (in bf16, prefix caching off)."""
    import torch
    from openai import OpenAI

    from verl.models.tiny_models import get_or_build_tiny_model
    from verl.utils import device

    if device.get_device_type() != "cpu":
        pytest.skip("the CPU engine's settings")
    engine = ChatEngine(get_or_build_tiny_model("qwen3_5", str(tmp_path)), "tiny", 256, 16, "float32")
    server, url = serve(engine)
    try:
        assert engine.llm.llm_engine.model_config.dtype == torch.bfloat16
        reply = OpenAI(base_url=url, api_key="unused").chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "Hi"}], max_tokens=4, temperature=0.0
        )
        assert reply.usage.completion_tokens > 0
    finally:
        server.shutdown()
        engine.close()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["falcon_h1", "glm4v_moe", "llava_onevision"])
def test_a_model_family_is_served_with_the_engine_settings_the_rollout_gives_it(tmp_path, kind):
    """The server starts its engine as the rollout does (vllm_compat.family_engine_kwargs); it did not, and failed:
    Falcon-H1's Mamba mixers with vLLM's prefix caching on the CPU made every new prompt longer than a cache block a
    500 ("index 31 is out of bounds for dimension 0 with size 1"; a retry hit the prefix cache, so none here); a
    GLM-4.5V config as transformers writes it (no head_dim or use_qk_norm, which vLLM reads) stopped the server with
    "'Glm4vMoeTextConfig' object has no attribute 'head_dim'"; a LLaVA-OneVision folder as transformers 5 saves it
    (the SigLIP tower without its `vision_model` level: the trainer's exports) with vLLM's "There is no module or
    parameter named 'vision_tower.embeddings'"."""
    from openai import OpenAI

    from verl.models.tiny_models import get_or_build_tiny_model

    model = get_or_build_tiny_model(kind, str(tmp_path / "models"))
    if kind == "glm4v_moe":
        model = shutil.copytree(model, tmp_path / "written_without")
        config = json.loads((model / "config.json").read_text())
        assert (config["text_config"].pop("head_dim"), config["text_config"].pop("use_qk_norm")) == (64, False)
        (model / "config.json").write_text(json.dumps(config))
    texts = ("Hi", "Tell " * 120, "Count " * 150) if kind == "falcon_h1" else ("Hi",)
    engine = ChatEngine(str(model), "tiny", 512, 32, "auto")
    server, url = serve(engine)
    try:
        client = OpenAI(base_url=url, api_key="unused", max_retries=0)
        for text in texts:
            reply = client.chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": text}], max_tokens=4, temperature=0.0
            )
            assert reply.usage.completion_tokens > 0
    finally:
        server.shutdown()
        engine.close()


@pytest.mark.slow
def test_concurrent_requests_share_the_engine(live):
    """20 requests at once all get their own greedy reply, the one each gets alone, and the engine held several at
    a time (one engine loop batches them; a lock around each request would keep its count at 1)."""
    url, seen, core, _ = live
    cases = [request(messages=[{"role": "user", "content": f"Count to {i}."}], max_tokens=8, temperature=0.0)
             for i in range(20)]  # fmt: skip
    alone = [post(url, case)[2] for case in cases[:3]]
    seen.held.clear()
    together = in_threads(lambda case: post(url, case), cases)
    assert all(status == 200 for status, _, _ in together)
    assert [reply["choices"][0]["message"]["content"] for _, _, reply in together[:3]] == [
        reply["choices"][0]["message"]["content"] for reply in alone
    ]
    assert all(reply["usage"]["completion_tokens"] == 8 for _, _, reply in together)
    assert len({reply["id"] for _, _, reply in together}) == 20
    assert max(seen.held) > 1
    assert not core.has_unfinished_requests()


@pytest.mark.slow
def test_seeded_prompts_that_fill_an_engine_step_are_answered(live):
    """On the CPU, vLLM failed the step in which a seeded request's prefill was split over two steps ("CPU Generator
    does not use offset"), and every request in it was a 500; prompts are now prefilled whole, as the rollout does.
    Ten distinct 500-token prompts of one request go into one step: more than its 4096-token budget."""
    url = live[0]
    prompts = [[10 + (37 * index + position) % 2000 for position in range(500)] for index in range(10)]
    replies = [post_json(f"{url}/completions", {"prompt": prompts, "max_tokens": 2, "seed": 1}) for _ in range(2)]
    assert [status for status, _ in replies] == [200, 200], replies[0][1]
    assert replies[0][1]["choices"] == replies[1][1]["choices"]  # the seed still makes the same samples
    assert post(url, request(max_tokens=2, seed=1))[0] == 200


@pytest.mark.slow
def test_a_stream_that_is_left_is_aborted_while_the_others_finish(live):
    url, seen, core, _ = live
    address = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(address.hostname, address.port, timeout=60)
    body = request(stream=True, max_tokens=400, temperature=1.0, seed=1)
    connection.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    response = connection.getresponse()
    first = json.loads(response.readline()[len(b"data: ") :])
    response.close()  # the client goes long before the 400th token
    connection.close()
    others = in_threads(lambda i: post(url, request(max_tokens=4, temperature=0.0)), list(range(3)))
    assert [status for status, _, _ in others] == [200] * 3
    deadline = time.monotonic() + 60
    while first["id"] not in seen.aborted and time.monotonic() < deadline:
        time.sleep(0.05)
    assert first["id"] in seen.aborted
    assert post(url, request(max_tokens=2))[0] == 200 and not core.has_unfinished_requests()


@pytest.mark.slow
def test_a_text_prompt_longer_than_the_context_can_hold_is_refused_before_it_is_tokenized(live):
    """The bound is vLLM's (each token at most the vocabulary's longest): the engine thread, which every request
    waits on, never tokenizes megabytes (20 MB held every request for 38 s)."""
    url, seen, core, engine = live
    limit = 512 * engine.llm.get_tokenizer().max_chars_per_token
    data = json.dumps({"model": "tiny", "prompt": "a" * (limit + 1), "max_tokens": 1}).encode()
    call = urllib.request.Request(f"{url}/completions", data=data, headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(call, timeout=60)
    assert refused.value.code == 400
    message = json.loads(refused.value.read())["error"]["message"]
    assert f"your prompt contains {limit + 1} characters (more than {limit} characters" in message


EOS = {"2048": -100, "2050": -100}
"""The tiny model's end-of-text tokens, banned through logit_bias where a reply must run to its limit."""


@pytest.mark.slow
def test_response_format_holds_the_reply_to_json(live):
    from openai import OpenAI

    client = OpenAI(base_url=live[0], api_key="unused")
    schema = {
        "type": "object",
        "properties": {"ok": {"type": "boolean"}},
        "required": ["ok"],
        "additionalProperties": False,
    }
    tokenizer = live[2].get_tokenizer()  # JSON may have any whitespace, which a random model writes on and on
    spaces = {str(token): -100 for token in range(len(tokenizer)) if not tokenizer.decode([token]).strip()}
    fields = {"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "temperature": 0.0, "max_tokens": 40}
    fields["logit_bias"] = spaces
    format_ = {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}
    reply = client.chat.completions.create(response_format=format_, **fields)
    assert reply.choices[0].finish_reason == "stop" and set(json.loads(reply.choices[0].message.content)) == {"ok"}
    reply = client.chat.completions.create(response_format={"type": "json_object"}, **fields)
    assert reply.choices[0].message.content.lstrip().startswith("{")  # a random model's object may not end in 40
    if reply.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(reply.choices[0].message.content), dict)
    plain = client.chat.completions.create(**fields)
    assert not plain.choices[0].message.content.lstrip().startswith("{")  # without it the model writes anything


@pytest.mark.slow
def test_logprobs_come_back_in_openais_shape(live):
    from openai import OpenAI

    client = OpenAI(base_url=live[0], api_key="unused")
    fields = {"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "temperature": 0.0, "max_tokens": 5}
    reply = client.chat.completions.create(logprobs=True, top_logprobs=3, **fields)
    entries = reply.choices[0].logprobs.content
    assert len(entries) == reply.usage.completion_tokens == 5
    for entry in entries:
        assert len(entry.top_logprobs) == 3 and entry.logprob <= 0
        assert (entry.token, entry.logprob) == (entry.top_logprobs[0].token, entry.top_logprobs[0].logprob)  # greedy
        assert [top.logprob for top in entry.top_logprobs] == sorted(
            (top.logprob for top in entry.top_logprobs), reverse=True
        )
        assert entry.bytes == list(entry.token.encode("utf-8"))
    chunks = list(client.chat.completions.create(logprobs=True, top_logprobs=3, stream=True, **fields))
    streamed = [
        entry for chunk in chunks for choice in chunk.choices if choice.logprobs for entry in choice.logprobs.content
    ]
    assert streamed == entries
    assert client.chat.completions.create(**fields).choices[0].logprobs is None
    status, _, body = post(live[0], request(top_logprobs=2))
    assert status == 400 and body["error"]["message"].startswith(
        "'top_logprobs': when using `top_logprobs`, `logprobs`"
    )


@pytest.mark.slow
def test_logit_bias_no_model_health_and_the_default_length(live):
    url = live[0]
    forced = {"prompt": [1, 2, 3], "max_tokens": 4, "temperature": 0.0, "logprobs": 0, "logit_bias": {"77": 100}}
    status, body = post_json(f"{url}/completions", forced)
    token_77 = post_json(f"{url}/completions", {"prompt": [77], "max_tokens": 0, "echo": True, "logprobs": 0})[1]
    assert (
        status == 200 and body["choices"][0]["logprobs"]["tokens"] == token_77["choices"][0]["logprobs"]["tokens"] * 4
    )
    status, body = post_json(f"{url}/completions", {**forced, "logit_bias": {"77": 1000}})
    assert status == 400 and body["error"]["message"].startswith("'logit_bias[77]' must be a number between")
    status, _, body = post(url, {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2})  # no model
    assert status == 200 and body["model"] == "tiny"
    with urllib.request.urlopen(url.replace("/v1", "/health"), timeout=30) as response:
        assert response.status == 200
    status, _, body = post(url, request(logit_bias=EOS, temperature=0.0))  # no max_tokens: the rest of the context
    assert status == 200 and body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["total_tokens"] == 512
    # a length of 0 is refused (vLLM's SamplingParams needs 1), not taken as "the rest of the context"; where both
    # lengths are set max_completion_tokens wins, as in vLLM's server
    for fields, key in (({"max_tokens": 0}, "max_tokens"), ({"max_completion_tokens": 0}, "max_completion_tokens")):
        status, _, body = post(url, request(**fields))
        assert status == 400 and body["error"]["message"] == f"'{key}' must be at least 1, got 0.", body
    status, _, body = post(url, request(logit_bias=EOS, temperature=0.0, max_tokens=50, max_completion_tokens=2))
    assert status == 200 and body["usage"]["completion_tokens"] == 2
    status, body = post_json(f"{url}/responses", {"model": "tiny", "input": "Hi", "max_output_tokens": 0})
    assert status == 400 and body["error"]["message"] == "'max_output_tokens' must be at least 1, got 0."


@pytest.mark.slow
def test_text_completions_with_the_openai_client(live):
    """Several prompts as text or token ids, n samples each, echo, and lm-eval's loglikelihood request."""
    from openai import OpenAI

    client = OpenAI(base_url=live[0], api_key="unused")
    reply = client.completions.create(
        model="tiny", prompt=["One", "Two"], max_tokens=3, n=2, temperature=1.0, seed=1, logit_bias=EOS
    )
    assert [choice.index for choice in reply.choices] == [0, 1, 2, 3] and reply.object == "text_completion"
    # rendered as LLM.generate renders them (a raw prompt made vLLM warn of a deprecation at the first request)
    assert live[1].prompts and all(isinstance(p, dict) and "type" in p for p in live[1].prompts), live[1].prompts
    assert reply.usage.completion_tokens == 12 and all(choice.finish_reason == "length" for choice in reply.choices)
    greedy = {"model": "tiny", "max_tokens": 4, "temperature": 0.0}
    text = client.completions.create(prompt="The sum of", **greedy)
    echoed = client.completions.create(prompt="The sum of", echo=True, **greedy)
    assert echoed.choices[0].text == "The sum of" + text.choices[0].text
    chunks = list(client.completions.create(prompt="The sum of", stream=True, echo=True, **greedy))
    assert "".join(chunk.choices[0].text for chunk in chunks if chunk.choices) == echoed.choices[0].text
    # lm-eval's local-completions loglikelihood: token ids, echo, no new tokens, the top logprob per position
    ids = post_json(live[0] + "/completions", {"prompt": "The sum of two", "max_tokens": 0, "echo": True})[1]
    scored = client.completions.create(model="tiny", prompt=[[11, 12, 13, 14]], max_tokens=0, echo=True, logprobs=1)
    logprobs = scored.choices[0].logprobs
    assert len(logprobs.tokens) == 4 and logprobs.token_logprobs[0] is None and logprobs.top_logprobs[0] is None
    assert all(value < 0 for value in logprobs.token_logprobs[1:]) and scored.usage.prompt_tokens == 4
    for token, value, top in zip(logprobs.tokens[1:], logprobs.token_logprobs[1:], logprobs.top_logprobs[1:]):
        assert top[token] == value and 1 <= len(top) <= 2  # the prompt's token and the most likely one
    assert logprobs.text_offset[0] == 0 and scored.choices[0].text == "".join(logprobs.tokens)
    assert ids["choices"][0]["text"] == "The sum of two"


def post_json(url, body):
    """POST JSON to `url`: (status, JSON body)."""
    call = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(call, timeout=120) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.mark.slow
def test_streamed_and_whole_replies_agree(server):
    from openai import OpenAI

    client = OpenAI(base_url=server, api_key="unused")
    messages = [{"role": "user", "content": "Hi"}]
    for sampling in ({"temperature": 0.0}, {"temperature": 1.0, "seed": 5}):
        fields = {"model": "tiny", "messages": messages, "max_tokens": 12, **sampling}
        whole = client.chat.completions.create(**fields)
        content, reasons, usage, chunks = streamed(client, **fields)
        assert content == [whole.choices[0].message.content] and reasons == [whole.choices[0].finish_reason]
        assert usage == whole.usage
        assert whole.usage.completion_tokens == 12 and whole.choices[0].finish_reason == "length"
        assert whole.usage.total_tokens == whole.usage.prompt_tokens + 12
        assert len({chunk.id for chunk in chunks}) == 1 and chunks[0].choices[0].delta.role == "assistant"
        assert sum(bool(choice.delta.content) for chunk in chunks for choice in chunk.choices) > 1  # token by token


@pytest.mark.slow
def test_tools_and_tool_messages_go_through_the_template(server):
    from openai import OpenAI

    client = OpenAI(base_url=server, api_key="unused")
    asked = [{"role": "user", "content": "What is 1 + 2?"}]
    fields = {"model": "tiny", "max_tokens": 6, "temperature": 0.0}
    plain = client.chat.completions.create(messages=asked, **fields)
    reply = client.chat.completions.create(messages=asked, tools=TOOLS, **fields)
    message = reply.choices[0].message
    assert message.tool_calls is None or all(call.function.name for call in message.tool_calls)
    assert reply.choices[0].finish_reason in ("stop", "length", "tool_calls")
    assert reply.usage.prompt_tokens > plain.usage.prompt_tokens  # the tools' schemas are in the prompt
    content, _, _, _ = streamed(client, messages=asked, tools=TOOLS, **fields)
    assert content == [message.content or ""]
    call = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}
    history = [*asked, {"role": "assistant", "content": None, "tool_calls": [call]}]
    history.append({"role": "tool", "tool_call_id": "call_1", "content": "3"})
    answer = client.chat.completions.create(messages=history, tools=TOOLS, **fields)
    assert answer.usage.prompt_tokens > reply.usage.prompt_tokens and answer.choices[0].message.role == "assistant"
    none = client.chat.completions.create(messages=asked, tools=TOOLS, tool_choice="none", **fields)
    assert none.choices[0].message.tool_calls is None and none.usage.prompt_tokens == reply.usage.prompt_tokens


@pytest.mark.slow
def test_a_forced_tool_choice_makes_even_an_untrained_model_call_a_tool(server):
    """tool_choice "required" and a named function on the random tiny model: the engine's structured outputs keep
    the reply to the tools' schemas, so the calls parse and their arguments have the declared types."""
    from openai import OpenAI

    client = OpenAI(base_url=server, api_key="unused")
    fields = {"model": "tiny", "messages": [{"role": "user", "content": "1 + 2?"}], "tools": TOOLS, "temperature": 0.0}
    for tool_choice, max_tokens, reason in (("required", 240, "tool_calls"), (NAMED, 60, "stop")):
        reply = client.chat.completions.create(tool_choice=tool_choice, max_tokens=max_tokens, **fields)
        choice = reply.choices[0]
        assert choice.finish_reason == reason and choice.message.content == ""
        assert choice.message.tool_calls and {call.function.name for call in choice.message.tool_calls} == {"add"}
        for call in choice.message.tool_calls:
            arguments = json.loads(call.function.arguments)
            assert set(arguments) == {"a", "b"} and all(type(value) is int for value in arguments.values())
        chunks = streamed(client, tool_choice=tool_choice, max_tokens=max_tokens, **fields)[3]
        deltas = [choice.delta for chunk in chunks for choice in chunk.choices]
        assert "".join(delta.content or "" for delta in deltas) == ""  # the JSON never goes out as content
        calls = [call for delta in deltas for call in delta.tool_calls or []]
        got = [(call.function.name, call.function.arguments) for call in calls]
        assert got == [(call.function.name, call.function.arguments) for call in choice.message.tool_calls]


@pytest.mark.slow
def test_the_stream_is_server_sent_events(server):
    status, headers, text = post(server, request(max_tokens=4, temperature=0.0, stream=True))
    assert status == 200 and headers["Content-Type"].startswith("text/event-stream")
    assert text.endswith("data: [DONE]\n\n")
    events = text.split("\n\n")[:-1]
    assert all(event.startswith("data: ") and "\n" not in event for event in events)
    chunks = [json.loads(event[len("data: ") :]) for event in events[:-1]]
    assert {chunk["object"] for chunk in chunks} == {"chat.completion.chunk"}
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[-1]["choices"][0]["finish_reason"] == "length" and chunks[-1]["choices"][0]["delta"] == {}
    assert "usage" not in chunks[-1]  # without stream_options.include_usage
    status, _, body = post(server, request(max_tokens=600, stream=True))  # refused before the stream starts
    assert status == 400 and "maximum context length" in body["error"]["message"]


# ------------------------------------------------------------------------------- the same requests to vLLM's server

VLLM_ONLY = {
    "response": {
        "prompt_logprobs",
        "prompt_token_ids",
        "prompt_text",
        "kv_transfer_params",
        "ec_transfer_params",
        "metrics",
    },
    "choice": {"token_ids", "routed_experts"},
    "message": {"reasoning"},
}
"""vLLM's own fields beyond OpenAI's (all null in these replies); the rest of the keys must be the same."""


@pytest.mark.slow
def test_the_same_requests_get_the_same_answers_from_vllms_server(server, tiny_model, tmp_path):
    """vLLM's OpenAI server (with its hermes tool parser) on the same model, fp32, eager, one engine in its process:
    the same greedy and seeded requests give the same text, finish_reason, usage and keys."""
    from openai import OpenAI

    log = open(tmp_path / "vllm.log", "w")
    with socket.socket() as probe:  # vLLM's server takes no port 0: a port free a moment ago
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", tiny_model, *SERVER_ARGS]
    command += ["--host", "127.0.0.1", "--port", str(port), "--dtype", "float32", "--enforce-eager", "--seed", "0"]
    command += [
        "--kv-cache-memory-bytes",
        str(32 * 2**20),
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "hermes",
    ]
    env = {**ENV, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    # its ZeroMQ socket files and distributed store go in a folder removed after it (stopped, it leaves them); a short
    # path: a socket's path is at most 107 characters, and pytest-xdist's tmp_path is longer
    files = tempfile.mkdtemp(prefix="vllm-")
    env.update(VLLM_RPC_BASE_PATH=files, TMPDIR=files)
    proc = start(command, env, lambda text: "Application startup complete" in text, log)
    try:
        vllm_url = f"http://127.0.0.1:{port}/v1"
        call = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}
        history = [
            {"role": "user", "content": "What is 1 + 2?"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": "3"},
        ]
        cases = [
            request(max_tokens=8, temperature=0.0),
            request(max_tokens=8, temperature=0.0, tools=TOOLS),
            {**request(max_tokens=8, temperature=0.0, tools=TOOLS), "messages": history},
            request(max_tokens=6, temperature=1.0, seed=3, n=2),
            request(max_tokens=30, temperature=0.0, stop=["e"]),
            # 505 tokens of messages and max_tokens 64 in a context of 512: cut to the 7 left (it was a 400)
            {**request(max_tokens=64, temperature=0.0), "messages": [{"role": "user", "content": "one two " * 96}]},
        ]
        endings = set()
        for case in cases:
            (status, _, ours), (vllm_status, _, theirs) = post(server, case), post(vllm_url, case)
            assert (status, vllm_status) == (200, 200), (ours, theirs)
            for key in ("content", "finish_reason", "stop_reason"):
                mine = [choice["message"].get(key, choice.get(key)) for choice in ours["choices"]]
                assert mine == [choice["message"].get(key, choice.get(key)) for choice in theirs["choices"]], key
            endings.update(choice["finish_reason"] for choice in ours["choices"])
            assert ours["usage"] == theirs["usage"]
            assert set(ours) == set(theirs) - VLLM_ONLY["response"]
            assert all(theirs[key] is None for key in VLLM_ONLY["response"] & set(theirs))
            for mine, vllms in zip(ours["choices"], theirs["choices"]):
                assert set(mine) == set(vllms) - VLLM_ONLY["choice"]
                assert set(mine["message"]) == set(vllms["message"]) - VLLM_ONLY["message"]
            ours_stream = streamed(OpenAI(base_url=server, api_key="unused"), **case)
            theirs_stream = streamed(OpenAI(base_url=vllm_url, api_key="unused"), **case)
            assert ours_stream[:3] == theirs_stream[:3]  # content, finish_reason and usage of each choice
            assert ours_stream[0] == [choice["message"]["content"] for choice in ours["choices"]]
            first = [
                chunk.choices[0].delta.model_dump(exclude_none=True)
                for chunk in (ours_stream[3][0], theirs_stream[3][0])
            ]
            assert first[0] == first[1] == {"role": "assistant", "content": ""}
        assert endings == {"length", "stop"}
        compare_logprobs_and_completions(server, vllm_url)
    finally:
        stop(proc)
        log.close()
        shutil.rmtree(files, ignore_errors=True)


def compare_logprobs_and_completions(ours, vllms):
    """Chat logprobs and text completions (echo, prompt logprobs, several prompts) as vLLM's server gives them."""
    chat = request(max_tokens=5, temperature=0.0, logprobs=True, top_logprobs=2)
    mine, theirs = post(ours, chat)[2]["choices"][0], post(vllms, chat)[2]["choices"][0]
    for entry, vllm_entry in zip(mine["logprobs"]["content"], theirs["logprobs"]["content"], strict=True):
        assert (entry["token"], entry["bytes"]) == (vllm_entry["token"], vllm_entry["bytes"])
        assert entry["logprob"] == pytest.approx(vllm_entry["logprob"], abs=1e-4)
        assert [top["token"] for top in entry["top_logprobs"]] == [top["token"] for top in vllm_entry["top_logprobs"]]
    for case in [
        {"prompt": "The sum of", "max_tokens": 6, "temperature": 0.0},
        {"prompt": ["One", "Two"], "max_tokens": 3, "temperature": 0.0, "logprobs": 2},
        {"prompt": [[11, 12, 13, 14]], "max_tokens": 0, "echo": True, "logprobs": 1},  # lm-eval's loglikelihood
        {"prompt": [11, 12, 13], "max_tokens": 2, "echo": True, "logprobs": 0, "temperature": 0.0},
        {"prompt": "one two " * 100, "max_tokens": 64, "temperature": 0.0},  # cut to the room the prompt leaves
    ]:
        (status, mine), (vllm_status, theirs) = (
            post_json(f"{ours}/completions", case),
            post_json(f"{vllms}/completions", case),
        )
        assert (status, vllm_status) == (200, 200), (mine, theirs)
        assert mine["usage"] == theirs["usage"]
        for choice, vllm_choice in zip(mine["choices"], theirs["choices"], strict=True):
            assert [choice[key] for key in ("index", "text", "finish_reason")] == [
                vllm_choice[key] for key in ("index", "text", "finish_reason")
            ]
            if case.get("logprobs") is None:
                continue
            logprobs, vllm_logprobs = choice["logprobs"], vllm_choice["logprobs"]
            assert (
                logprobs["tokens"] == vllm_logprobs["tokens"]
                and logprobs["text_offset"] == vllm_logprobs["text_offset"]
            )
            assert logprobs["token_logprobs"] == pytest.approx(vllm_logprobs["token_logprobs"], abs=1e-4)
            for top, vllm_top in zip(logprobs["top_logprobs"], vllm_logprobs["top_logprobs"]):
                assert (top is None) == (vllm_top is None) and (
                    top is None or top == pytest.approx(vllm_top, abs=1e-4)
                )


@pytest.mark.slow
@pytest.mark.parametrize(
    "fields",
    [
        {"repetition_penalty": 2.0},
        {"frequency_penalty": 2.0},
        {"presence_penalty": 2.0},
        {"top_k": 2, "temperature": 1.0, "seed": 3},
        {"min_p": 0.3, "temperature": 1.0, "seed": 3},
        {"allowed_token_ids": [11, 12, 13, 14]},
        {"bad_words": ["QuXX"], "temperature": 1.0, "seed": 3},
    ],
)
def test_each_sampling_field_changes_the_reply_as_in_vllm(live, fields):
    """A field changes the engine's tokens (against the same request without it) to exactly what vLLM's own
    LLM.generate makes with it in SamplingParams, through /v1/completions and /v1/chat/completions."""
    from vllm import SamplingParams

    url, _, _, engine = live
    base = {"temperature": 0.0, "max_tokens": 12, "logit_bias": EOS}
    ids = [11, 12, 13, 14, 15, 16, 17, 18]
    body = {**base, **fields}
    got = post_json(f"{url}/completions", {"prompt": ids, **body})[1]["choices"][0]["text"]
    without = {**base, **{key: fields[key] for key in ("temperature", "seed") if key in fields}}
    plain = post_json(f"{url}/completions", {"prompt": ids, **without})[1]["choices"][0]["text"]
    bias = {int(token): value for token, value in body.pop("logit_bias").items()} or None
    params = SamplingParams(**body, logit_bias=bias)
    # on the server's engine thread, which owns the engine: from this thread, vLLM's generate stepped it while that
    # thread still ended the step that had answered the request before (seen under load: vLLM's batch state broke)
    generate = functools.partial(engine.llm.generate, [{"prompt_token_ids": ids}], params, use_tqdm=False)
    (expected,) = engine.loop.thread.call(generate)
    assert got == expected.outputs[0].text and got != plain, (got, plain)
    chat = post(url, request(**body, logit_bias={str(token): value for token, value in (bias or {}).items()}))[2]
    assert (
        chat["choices"][0]["message"]["content"]
        == post(url, request(**body, logit_bias=bias or {}))[2]["choices"][0]["message"]["content"]
    )  # honoured the same way on chat requests (deterministic: the same text twice)


@pytest.mark.slow
def test_the_responses_api_on_the_engine(live):
    """Structured output through text.format, streamed and not; tool_choice "required" with text.format (the Agents
    SDK's typed output with a forced tool): the call first, then the typed answer once its output is in."""
    from openai import OpenAI

    url, _, core, _ = live
    client = OpenAI(base_url=url, api_key="unused")
    tokenizer = core.get_tokenizer()  # JSON may have any whitespace, which a random model writes on and on
    spaces = {str(token): -100 for token in range(len(tokenizer)) if not tokenizer.decode([token]).strip()}
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    schema["additionalProperties"] = False
    text = {"format": {"type": "json_schema", "name": "answer", "schema": schema, "strict": True}}
    fields = {"model": "tiny", "temperature": 0.0, "max_output_tokens": 60, "extra_body": {"logit_bias": spaces}}
    reply = client.responses.create(input="Is 2 + 2 four?", text=text, **fields)
    assert reply.status == "completed" and set(json.loads(reply.output_text)) == {"ok"}
    events = list(client.responses.create(input="Is 2 + 2 four?", text=text, stream=True, **fields))
    assert events[-1].type == "response.completed" and events[-1].response.output_text == reply.output_text
    assert "".join(event.delta for event in events if event.type == "response.output_text.delta") == reply.output_text
    asked = [{"role": "user", "content": "What is 1 + 2?"}]
    forced = client.responses.create(input=asked, tools=TOOLS_FLAT, tool_choice="required", text=text, **fields)
    assert forced.output and {item.type for item in forced.output} == {"function_call"}
    for call in forced.output:
        arguments = json.loads(call.arguments)
        assert call.name == "add" and set(arguments) == {"a", "b"} and all(type(v) is int for v in arguments.values())
    history = [*asked, *(item.model_dump(exclude_none=True) for item in forced.output)]
    history += [{"type": "function_call_output", "call_id": item.call_id, "output": "3"} for item in forced.output]
    answer = client.responses.create(input=history, tools=TOOLS_FLAT, text=text, **fields)
    assert answer.usage.input_tokens > forced.usage.input_tokens and set(json.loads(answer.output_text)) == {"ok"}
    assert [item.type for item in answer.output] == ["message"]
