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
"""An OpenAI-compatible chat endpoint over the rollout engine, for evaluating a trained model with any client.

    python -m verl.serve --model checkpoints/.../global_step_N/actor/huggingface --port 8000

It serves `GET /v1/models`, `GET /health`, `POST /v1/chat/completions` (streamed or not, with structured tool calls
read by the parser training uses, or forced by tool_choice "required" or a named function; response_format, logprobs,
logit_bias) and `POST /v1/completions` (verl.serve.completions) with the training engine's settings. Concurrent
requests share the engine's batches (verl.serve.engine_loop: one thread steps the engine). It binds to 127.0.0.1
unless --host says otherwise and has no authentication: do not expose it.
"""

import argparse
import itertools
import json
import logging
import os
import signal
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from verl.envs.tools import assistant_message, tool_call
from verl.serve import completions
from verl.serve.engine_loop import EngineLoop
from verl.serve.request_checks import RequestError, check_model, number, ranked, sampling_options


logger = logging.getLogger(__name__)

TOOL_CALL_TAG = "<tool_call>"


def _check_streaming_and_tools(request: dict[str, Any]) -> None:
    stream = request.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise RequestError(f"'stream' must be a boolean, got {stream!r}.")
    stream_options = request.get("stream_options")
    if stream_options is not None:
        if not stream:
            raise RequestError("'stream_options' can only be set with stream=true.")
        if not isinstance(stream_options, dict) or not isinstance(stream_options.get("include_usage", False), bool):
            raise RequestError(
                f"'stream_options' must be an object with a boolean 'include_usage', got {stream_options!r}."
            )
    tools = request.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise RequestError(f"'tools' must be a list of function tools, got {tools!r}.")
        for index, tool in enumerate(tools):
            function = tool.get("function") if isinstance(tool, dict) else None
            if not isinstance(function, dict) or tool.get("type", "function") != "function":
                raise RequestError(f"'tools[{index}]' must be a {{type: 'function', function: {{name, ...}}}} object.")
            if not isinstance(function.get("name"), str):
                raise RequestError(f"'tools[{index}].function' must have a string 'name'.")
    tool_choice = request.get("tool_choice")
    if tool_choice is not None:
        named = isinstance(tool_choice, dict) and tool_choice.get("type") == "function"
        name = (tool_choice.get("function") or {}).get("name") if named else None
        if tool_choice not in ("auto", "none", "required") and not isinstance(name, str):
            raise RequestError(
                f"tool_choice {tool_choice!r} is not one of 'auto', 'none', 'required' or "
                "{type: 'function', function: {name}}."
            )
        if not tools:
            raise RequestError("'tool_choice' needs 'tools'.")
        if named and name not in {tool["function"]["name"] for tool in tools}:
            raise RequestError(f"tool_choice names the function {name!r}, which is not in 'tools'.")


def _check_logprobs(request: dict[str, Any]) -> int | None:
    """The engine's `logprobs` (the top alternatives per token) of a chat request with `logprobs: true`, else
    None."""
    wanted = request.get("logprobs")
    if wanted is not None and not isinstance(wanted, bool):
        raise RequestError(f"'logprobs' must be a boolean, got {wanted!r}.")
    top = number(request, "top_logprobs", True, 0, 20)
    if top and not wanted:
        raise RequestError("'top_logprobs' needs 'logprobs': true.")
    return (top or 0) if wanted else None


def _check_response_format(request: dict[str, Any]) -> None:
    response_format = request.get("response_format")
    if response_format is None:
        return
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    if kind not in ("text", "json_object", "json_schema"):
        raise RequestError(
            f"'response_format' must be {{type: 'text' | 'json_object' | 'json_schema'}}, got {response_format!r}."
        )
    if kind == "json_schema":
        schema = response_format.get("json_schema")
        if not isinstance(schema, dict) or not isinstance(schema.get("schema"), dict):
            raise RequestError("'response_format.json_schema' must be an object with a JSON schema in 'schema'.")
    forced = request.get("tool_choice") == "required" or isinstance(request.get("tool_choice"), dict)
    if kind != "text" and forced:
        raise RequestError("'response_format' cannot be combined with a forced 'tool_choice'.")


def response_format_schema(request: dict[str, Any]) -> dict[str, Any] | None:
    """Keyword arguments of vLLM's StructuredOutputsParams for the request's `response_format` (a JSON schema, or
    any JSON object), or None for text."""
    response_format = request.get("response_format") or {}
    if response_format.get("type") == "json_object":
        return {"json_object": True}
    if response_format.get("type") == "json_schema":
        return {"json": response_format["json_schema"]["schema"]}
    return None


def check_request(request: Any, served_name: str) -> dict[str, Any]:
    """The sampling options of a chat-completions request, or a RequestError naming the first bad field (see
    check_model for `model`)."""
    check_model(request, served_name)
    messages = request.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' must be a non-empty list of {role, content} objects.")
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise RequestError(f"'messages[{index}]' must be an object with a string 'role'.")
    _check_streaming_and_tools(request)
    _check_response_format(request)
    max_tokens = number(request, "max_completion_tokens", True, 1)
    options = {
        "max_tokens": number(request, "max_tokens", True, 1) if max_tokens is None else max_tokens,
        **sampling_options(request),
        "logprobs": _check_logprobs(request),
    }
    return {key: value for key, value in options.items() if value is not None}


def forced_tool_calls(request: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """(the function a named tool_choice forces, or "" for "required"; the JSON schema the reply is held to), or
    None where tool_choice forces no call.

    As vLLM's server does it: a named function's reply is its arguments object (the function's `parameters`
    schema); a "required" reply is a non-empty JSON array of {name, parameters} objects, one per call. The engine's
    structured outputs keep the text to the schema, so even a model never trained to call tools calls one.
    """
    choice = request.get("tool_choice")
    if choice != "required" and not isinstance(choice, dict):
        return None
    empty = {"type": "object", "properties": {}}
    parameters = {tool["function"]["name"]: tool["function"].get("parameters") or empty for tool in request["tools"]}
    if isinstance(choice, dict):
        name = choice["function"]["name"]
        return name, parameters[name]
    shared: dict[str, Any] = {}  # every tool's "$defs", lifted to the root, where their "#/$defs/..." refs point
    calls = []
    for name, schema in parameters.items():
        schema = dict(schema)
        for key, definition in (schema.pop("$defs", None) or {}).items():
            if shared.setdefault(key, definition) != definition:
                raise RequestError(f"tools define '$defs/{key}' differently; tool_choice 'required' needs one schema.")
        properties = {"name": {"type": "string", "enum": [name]}, "parameters": schema}
        calls.append({"properties": properties, "required": ["name", "parameters"]})
    schema = {"type": "array", "minItems": 1, "items": {"type": "object", "anyOf": calls}}
    return "", {**schema, "$defs": shared} if shared else schema


def forced_tool_message(text: str, finish_reason: str | None, function: str) -> tuple[dict[str, Any], str]:
    """The assistant message and finish_reason of a reply held to `forced_tool_calls`' schema (`function` as it
    returned it): the calls as `tool_calls`, content "" (vLLM's server answers so); finish_reason "tool_calls" for a
    finished "required" reply and the engine's for a named one (OpenAI's convention). Text cut off by max_tokens
    that is no longer JSON gives no calls."""
    if function:
        calls = [(function, text)] if text.strip() else []
    else:
        try:
            items = json.loads(text)
        except ValueError:
            items = []
        calls = [
            (item["name"], json.dumps(item.get("parameters") or {}, ensure_ascii=False))
            for item in (items if isinstance(items, list) else [])
            if isinstance(item, dict) and isinstance(item.get("name"), str)
        ]
    message = _reply_message("")
    message["tool_calls"] = [tool_call(name, arguments) for name, arguments in calls]
    finish_reason = finish_reason or "stop"
    return message, "tool_calls" if not function and finish_reason == "stop" else finish_reason


def reads_tool_calls(request: dict[str, Any]) -> bool:
    """Whether the reply's tool calls become structured `tool_calls`: the request has tools and tool_choice is not
    "none"."""
    return bool(request.get("tools")) and request.get("tool_choice") != "none"


def _reply_message(content: str) -> dict[str, Any]:
    """An assistant message with the keys vLLM's server writes (refusal, annotations, audio, function_call: null)."""
    return {"role": "assistant", "content": content, "refusal": None, "annotations": None, "audio": None,
            "function_call": None}  # fmt: skip


def chat_message(text: str, finish_reason: str | None, tools: bool) -> tuple[dict[str, Any], str]:
    """The OpenAI assistant message of a generated `text` and its choice's finish_reason ("stop" or "length" as the
    engine ended it).

    With `tools`, the `<tool_call>` blocks that verl.envs.tools reads as calls (as training does) become `tool_calls`
    with JSON-string arguments, the content is the text around them (null when only whitespace is left) and the
    finish_reason is "tool_calls". A malformed block stays in the content, as vLLM's hermes parser leaves it.
    """
    message = _reply_message(text)
    message.update(assistant_message(text, tools))
    return message, "tool_calls" if "tool_calls" in message else finish_reason or "stop"


def _partial_tag(text: str) -> int:
    """Length of the longest end of `text` that could be the start of a `<tool_call>` tag."""
    for size in range(min(len(text), len(TOOL_CALL_TAG) - 1), 0, -1):
        if TOOL_CALL_TAG.startswith(text[-size:]):
            return size
    return 0


def token_logprob(logprob: Any) -> dict[str, Any]:
    """OpenAI's {token, logprob, bytes} of a vLLM Logprob (the engine's decoded token; -inf as -9999.0)."""
    token = logprob.decoded_token or ""
    return {"token": token, "logprob": max(logprob.logprob, -9999.0), "bytes": list(token.encode("utf-8", "replace"))}


def chat_logprob(token_id: int, alternatives: dict[int, Any], top: int) -> dict[str, Any]:
    """The chat `logprobs.content` entry of one generated token: the token and the `top` most likely ones."""
    entries = [token_logprob(logprob) for _, logprob in ranked(alternatives, top)]
    return {**token_logprob(alternatives[token_id]), "top_logprobs": entries}


class ChoiceText:
    """One choice's text as the engine extends it, and what a stream may send of its content so far.

    With tools, text from a `<tool_call>` tag on (or a tag still forming) waits for the end, when chat_message
    decides what is content; so does content that is only whitespace (it may end as null). The content streamed then
    adds up to the message content of the same text, token for token.
    """

    def __init__(self, tools: bool, forced: str | None = None, top_logprobs: int | None = None) -> None:
        self.tools, self.forced, self.top_logprobs = tools, forced, top_logprobs
        self.text, self.sent, self.tokens = "", 0, 0
        self.logprobs: list[dict[str, Any]] = []
        """The chat `logprobs.content` entries so far (with top_logprobs set: the request asked for them)."""
        self.logprobs_sent = 0
        self.ended = False
        """Whether a stream has sent this choice's end."""
        self.finish_reason: str | None = None
        self.stop_reason: int | str | None = None

    def add(self, completion: Any) -> str:
        """Take one step's new text of this choice (a vLLM CompletionOutput delta): the content to send now."""
        self.text += completion.text
        self.tokens += len(completion.token_ids)
        if self.top_logprobs is not None:
            for token_id, alternatives in zip(completion.token_ids, completion.logprobs or []):
                self.logprobs.append(chat_logprob(token_id, alternatives, self.top_logprobs))
        if completion.finish_reason is not None:
            self.finish_reason, self.stop_reason = completion.finish_reason, completion.stop_reason
        limit = len(self.text)
        if self.forced is not None:  # JSON held to the tool schema: calls, sent whole at the end
            limit = 0
        elif self.tools:
            tag = self.text.find(TOOL_CALL_TAG)
            limit = tag if tag >= 0 else limit - _partial_tag(self.text)
            if not self.text[:limit].strip():
                limit = 0
        piece = self.text[self.sent : limit] if limit > self.sent else ""
        self.sent = max(self.sent, limit)
        return piece

    def take_logprobs(self) -> dict[str, Any] | None:
        """A stream chunk's `logprobs`: the entries of the tokens since the last chunk that had some (None when the
        request asked for none)."""
        if self.top_logprobs is None:
            return None
        entries, self.logprobs_sent = self.logprobs[self.logprobs_sent :], len(self.logprobs)
        return {"content": entries}

    def message(self) -> tuple[dict[str, Any], str, str]:
        """(message, finish_reason, the content not streamed yet) of the finished choice."""
        if self.forced is not None:
            message, finish_reason = forced_tool_message(self.text, self.finish_reason, self.forced)
        else:
            message, finish_reason = chat_message(self.text, self.finish_reason, self.tools)
        content = message["content"] or ""
        if content[: self.sent] != self.text[: self.sent]:  # cannot happen: the content starts with what was sent
            raise AssertionError("streamed content is not a prefix of the message content")
        return message, finish_reason, content[self.sent :]


class Reply:
    """A request the engine holds: its id, creation time, choices and prompt tokens."""

    def __init__(
        self,
        request_id: str,
        prompt_tokens: int,
        n: int,
        tools: bool,
        forced: str | None = None,
        top_logprobs: int | None = None,
    ) -> None:
        self.id, self.created = request_id, int(time.time())
        self.prompt_tokens = prompt_tokens
        self.choices = [ChoiceText(tools, forced, top_logprobs) for _ in range(n)]

    def usage(self) -> dict[str, Any]:
        completion = sum(choice.tokens for choice in self.choices)
        return {
            "prompt_tokens": self.prompt_tokens,
            "total_tokens": self.prompt_tokens + completion,
            "completion_tokens": completion,
        }


class ChatEngine:
    """A vLLM engine answering chat completion requests token by token, all it holds in one batch.

    Each request is rendered as `LLM.chat` renders it (`LLM._preprocess_chat_one`: vLLM's renderer, which its OpenAI
    server uses too; tool-call arguments reach the template as dicts) and added to the engine with delta outputs.
    One thread owns the engine (verl.serve.engine_loop.EngineLoop: `LLMEngine.add_request`, `step`,
    `abort_request`) and steps it while it holds any request: a stream sends tokens as they are made, and a
    non-streamed reply is the same text gathered.
    """

    def __init__(self, model: str, name: str, max_model_len: int, kv_cache_mb: int | None, dtype: str) -> None:
        from verl.utils import device

        on_cpu = device.get_device_type() == "cpu"
        if on_cpu:
            # The engine lives in this process, as in training: vLLM's default on the CPU is an engine-core process
            # and a worker process besides this one, each importing vLLM and torch again (slower to start, and 3
            # copies of the libraries in memory; docs/performance.md). One thread steps it for every request.
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        from vllm import LLM

        kwargs: dict[str, Any] = {"model": model, "max_model_len": max_model_len, "seed": 0}
        if on_cpu:
            kwargs.update(dtype="float32" if dtype == "auto" else dtype, enforce_eager=True)
            kwargs["kv_cache_memory_bytes"] = (kv_cache_mb or 256) * 2**20
        else:
            kwargs["dtype"] = dtype
        self.llm = LLM(**kwargs)
        self.name = name
        self.max_model_len = max_model_len
        self.loop = EngineLoop(self.llm)

    def close(self) -> None:
        """Stop the engine (on a GPU vLLM runs its engine core in a child process that would outlive us)."""
        self.loop.stop()
        core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
        if core is not None:
            core.shutdown()

    def _submit(self, request: dict[str, Any]) -> Reply:
        """Check `request`, render it and add it to the engine (on the engine loop's thread)."""
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        from verl.workers.rollout import vllm_compat

        options = check_request(request, self.name)
        tools = reads_tool_calls(request)
        prompt = vllm_compat.render_chat(self.llm, request["messages"], request.get("tools") or None)
        prompt_ids = prompt.get("prompt_token_ids") if isinstance(prompt, dict) else None
        prompt_tokens = None if prompt_ids is None else len(prompt_ids)
        room = None if prompt_tokens is None else self.max_model_len - prompt_tokens
        if room is not None and room < 1:
            raise RequestError(
                f"This model's maximum context length is {self.max_model_len} tokens. However, your request has "
                f"{prompt_tokens} input tokens. Reduce the length of the messages."
            )
        wanted = options.setdefault("max_tokens", self.max_model_len if room is None else room)
        if room is not None and wanted > room:
            raise RequestError(
                f"This model's maximum context length is {self.max_model_len} tokens. However, you requested "
                f"{prompt_tokens + wanted} tokens ({prompt_tokens} in the messages, {wanted} in the completion). "
                "Reduce the length of the messages or completion."
            )
        if tools:  # as vLLM's hermes parser asks: a model may write its tool-call tags as special tokens
            options["skip_special_tokens"] = False
        forced = forced_tool_calls(request)
        structured = {"json": forced[1]} if forced is not None else response_format_schema(request)
        if structured is not None:
            from vllm.sampling_params import StructuredOutputsParams

            options["structured_outputs"] = StructuredOutputsParams(**structured)
        params = SamplingParams(**options, output_kind=RequestOutputKind.DELTA)
        function = None if forced is None else forced[0]
        top = options.get("logprobs")
        reply = Reply(f"chatcmpl-{uuid.uuid4().hex}", prompt_tokens or 0, params.n, tools, function, top)
        self.llm.llm_engine.add_request(reply.id, prompt, params)
        return reply

    def _run(self, request: dict[str, Any]) -> Iterator[tuple[Reply, ChoiceText | None, str]]:
        """Yields (reply, None, "") once the engine holds the request, then (reply, choice, content to send) for
        each step of each choice. Closing the iterator early aborts the request."""

        def add() -> tuple[list[str], Reply]:
            reply = self._submit(request)
            return [reply.id], reply

        reply, outputs = self.loop.submit(add)
        try:
            yield reply, None, ""
            for output in outputs:
                reply.prompt_tokens = len(output.prompt_token_ids or []) or reply.prompt_tokens
                for completion in output.outputs:
                    choice = reply.choices[completion.index]
                    yield reply, choice, choice.add(completion)
        finally:
            outputs.close()

    def complete(self, request: dict[str, Any]) -> dict[str, Any]:
        """The chat.completion object of a non-streamed request."""
        run = self._run(request)
        reply, _, _ = next(run)
        for _ in run:
            pass
        choices = []
        for index, choice in enumerate(reply.choices):
            message, finish_reason, _ = choice.message()
            choices.append(
                {
                    "index": index,
                    "message": message,
                    "logprobs": None if choice.top_logprobs is None else {"content": choice.logprobs},
                    "finish_reason": finish_reason,
                    "stop_reason": choice.stop_reason,
                }
            )
        usage = {**reply.usage(), "prompt_tokens_details": None, "completion_tokens_details": None}
        return {
            "id": reply.id,
            "object": "chat.completion",
            "created": reply.created,
            "model": self.name,
            "choices": choices,
            "service_tier": None,
            "system_fingerprint": None,
            "usage": usage,
        }

    def stream(self, request: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """The chat.completion.chunk objects of a streamed request: each choice's role, its content as the engine
        makes it, its tool calls once the choice has ended (they are read from its whole text), a chunk with its
        finish_reason, and the usage after all choices (with stream_options.include_usage). The request is checked
        and in the engine once the first chunk is out."""
        run = self._run(request)
        reply, _, _ = next(run)
        include_usage = bool((request.get("stream_options") or {}).get("include_usage"))

        def chunk(index: int, delta: dict[str, Any], logprobs: bool = True, **ending: Any) -> dict[str, Any]:
            """A chunk of one choice; with `logprobs`, those of its tokens not sent yet (when the request asked)."""
            sent = reply.choices[index].take_logprobs() if logprobs else None
            choice = {"index": index, "delta": delta, "logprobs": sent, "finish_reason": None, **ending}
            return self._chunk(reply, [choice])

        try:
            for index in range(len(reply.choices)):
                yield chunk(index, {"role": "assistant", "content": ""}, logprobs=False)
            for _, choice, piece in run:
                index = reply.choices.index(choice)
                if piece:
                    yield chunk(index, {"content": piece})
                if choice.finish_reason is None or choice.ended:
                    continue
                choice.ended = True
                message, finish_reason, rest = choice.message()
                if rest:
                    yield chunk(index, {"content": rest})
                if message.get("tool_calls"):
                    calls = [{"index": number, **call} for number, call in enumerate(message["tool_calls"])]
                    yield chunk(index, {"tool_calls": calls})
                left = choice.logprobs_sent < len(choice.logprobs)  # tokens held back and sent as no content
                yield chunk(index, {}, left, finish_reason=finish_reason, stop_reason=choice.stop_reason)
            if include_usage:
                yield self._chunk(reply, [], usage=reply.usage())
        finally:
            run.close()

    def _chunk(self, reply: Reply, choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        chunk = {"id": reply.id, "object": "chat.completion.chunk", "created": reply.created, "model": self.name}
        return {**chunk, "choices": choices, **extra}


def error_body(error: Exception) -> tuple[int, dict[str, Any]]:
    """HTTP status and OpenAI error object of a refused or failed request: the engine's own validation errors (vLLM
    raises ValueError or its *ValidationError) are 400s, as vLLM's server answers them."""
    if isinstance(error, RequestError):
        return error.status, {"error": {"message": str(error), "type": error.kind}}
    invalid = isinstance(error, (ValueError, TypeError, KeyError)) or "Validation" in type(error).__name__
    kind = "invalid_request_error" if invalid else "server_error"
    return (400 if invalid else 500), {"error": {"message": str(error), "type": kind}}


def make_handler(engine: ChatEngine) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _send(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 - http.server's method name
            if self.path.rstrip("/") == "/health":  # as vLLM's server: 200, no body, while it serves
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()
            elif self.path.rstrip("/") == "/v1/models":
                self._send(
                    200, {"object": "list", "data": [{"id": engine.name, "object": "model", "owned_by": "verl"}]}
                )
            else:
                self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

        def do_POST(self) -> None:  # noqa: N802 - http.server's method name

            routes = {
                "/v1/chat/completions": (engine.complete, engine.stream),
                "/v1/completions": (
                    lambda request: completions.complete(engine, request),
                    lambda request: completions.stream(engine, request),
                ),
            }
            if self.path.rstrip("/") not in routes:
                self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                return
            complete, stream = routes[self.path.rstrip("/")]
            try:
                length = int(self.headers.get("Content-Length", "0"))
                try:
                    request = json.loads(self.rfile.read(length) or b"{}")
                except ValueError as error:
                    raise RequestError(f"the request body is not JSON: {error}.") from None
                if isinstance(request, dict) and request.get("stream"):
                    self._stream(stream(request))
                else:
                    self._send(200, complete(request))
            except Exception as error:  # never drop the connection: say what went wrong, keep serving
                self._send(*error_body(error))

        def _stream(self, chunks: Iterator[dict[str, Any]]) -> None:
            """Server-sent events, one `data: {chunk}` each and `data: [DONE]` last; an error before the first chunk
            is a plain HTTP error, one after it an error event (as vLLM's server sends it)."""
            first = next(chunks)  # the request is checked and running: from here on the answer is a 200 stream
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.send_header("Cache-Control", "no-cache")
            self.end_headers()
            try:
                try:
                    for chunk in itertools.chain([first], chunks):
                        self._event(chunk)
                except (BrokenPipeError, ConnectionResetError):
                    raise
                except Exception as error:
                    self._event(error_body(error)[1])
                self.wfile.write(b"data: [DONE]\n\n")
            except (BrokenPipeError, ConnectionResetError):  # the client left: closing the chunks aborts the request
                logger.info("a client closed its stream before the end")
            finally:
                chunks.close()

        def _event(self, body: dict[str, Any]) -> None:
            self.wfile.write(b"data: " + json.dumps(body, ensure_ascii=False).encode("utf-8") + b"\n\n")
            self.wfile.flush()

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
            logger.debug("%s " + format, self.address_string(), *args)

    return Handler


class Server(ThreadingHTTPServer):
    """One thread per connection; a listen backlog deep enough for a burst of clients (http.server's default of 5
    resets the connections of a sixth and later client connecting at once)."""

    request_queue_size = 256
    daemon_threads = True


def make_server(engine: ChatEngine, host: str, port: int) -> Server:
    """The HTTP server of `engine` on host:port (0 picks a free port), not yet serving."""
    return Server((host, port), make_handler(engine))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m verl.serve", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", required=True, help="a Hugging Face model directory (e.g. the merged checkpoint)")
    parser.add_argument("--served-model-name", default=None, help="the model id clients send (default: --model)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port (printed on start)")
    parser.add_argument("--max-model-len", type=int, default=4096)
    parser.add_argument("--kv-cache-mb", type=int, default=None, help="KV cache on the CPU (default 256 MiB)")
    parser.add_argument("--dtype", default="auto")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from verl.utils import quiet

    quiet.install_worker_filters()  # as the trainer's workers do, before vLLM and transformers are imported
    engine = ChatEngine(
        args.model, args.served_model_name or args.model, args.max_model_len, args.kv_cache_mb, args.dtype
    )
    server = make_server(engine, args.host, args.port)
    host, port = server.server_address[:2]
    print(f"Serving {engine.name} at http://{host}:{port}/v1 (OpenAI chat completions)", flush=True)
    signal.signal(signal.SIGTERM, _interrupt)  # a plain SIGTERM would leave the engine's process behind
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        engine.close()
    return 0


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt
