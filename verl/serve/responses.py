# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""OpenAI's Responses API (`POST /v1/responses`, the Agents SDK's default) on verl.serve's chat engine: a request runs
as the chat request it amounts to (`text.format` as response_format; with a forced tool_choice the calls come first,
the typed answer in a later request), its reply as output items or, streamed, the Responses API's events.
"""

import itertools
import time
import uuid
from collections.abc import Iterator
from typing import Any

from verl.serve.chat import check_request
from verl.serve.request_checks import RequestError, check_within_context, parse


RESPONSE_FIELDS = {
    "input", "model", "instructions", "max_output_tokens", "temperature", "top_p", "top_k", "min_p", "seed",
    "stop", "frequency_penalty", "presence_penalty", "repetition_penalty", "logit_bias", "tools", "tool_choice",
    "parallel_tool_calls", "text", "stream", "include", "top_logprobs", "store",
}  # fmt: skip
"""The Responses request fields this server carries out; any other must be absent or its default."""

SAMPLING = ("temperature", "top_p", "top_k", "min_p", "seed", "stop", "frequency_penalty", "presence_penalty",
            "repetition_penalty", "logit_bias", "parallel_tool_calls", "stream")  # fmt: skip
"""Fields a Responses request shares with chat completions, under the same name."""


def _tools(body: dict[str, Any]) -> dict[str, Any]:
    """The chat `tools` and `tool_choice` of the request's flat function tools."""
    tools = []
    for index, tool in enumerate(body.get("tools") or []):
        if tool.get("type") != "function":
            raise RequestError(f"'tools[{index}]': only function tools are served, got type {tool.get('type')!r}.")
        function = {key: tool[key] for key in ("name", "description", "parameters") if tool.get(key) is not None}
        tools.append({"type": "function", "function": function})
    fields: dict[str, Any] = {"tools": tools} if tools else {}
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        if choice.get("type") != "function":
            raise RequestError(f"'tool_choice': only a function can be named, got {choice!r}.")
        choice = {"type": "function", "function": {"name": choice.get("name")}}
    if choice is not None and tools:
        fields["tool_choice"] = choice
    return fields


def check_response(body: Any, served_name: str) -> tuple[Any, Any]:
    """(`body` as vLLM's ResponsesRequest, the ChatCompletionRequest it runs as), or a RequestError."""
    from vllm.entrypoints.openai.responses.protocol import ResponsesRequest
    from vllm.entrypoints.openai.responses.utils import construct_input_messages

    request = parse(ResponsesRequest, body, served_name, RESPONSE_FIELDS)
    if body.get("store"):
        raise RequestError("'store': true is not supported by this server (it keeps no responses); send false.")
    unsupported = set(request.include or []) - {"message.output_text.logprobs"}
    if unsupported:
        raise RequestError(f"'include': {sorted(unsupported)} is not supported by this server.")
    try:
        messages = construct_input_messages(request_instructions=request.instructions, request_input=request.input)
    except ValueError as error:
        raise RequestError(f"'input': {error}") from None
    chat = {"model": served_name, "messages": messages, **_tools(body)}
    chat.update({key: body[key] for key in SAMPLING if body.get(key) is not None})
    if request.max_output_tokens is not None:
        if request.max_output_tokens < 1:
            raise RequestError(f"'max_output_tokens' must be at least 1, got {request.max_output_tokens}.")
        chat["max_tokens"] = request.max_output_tokens
    if request.stream:
        chat["stream_options"] = {"include_usage": True}
    if request.include:
        chat.update(logprobs=True, top_logprobs=request.top_logprobs or 0)
    format_ = ((body.get("text") or {}).get("format")) or {"type": "text"}
    if format_.get("type") == "json_schema":
        schema = {key: format_.get(key) for key in ("name", "schema", "strict", "description") if key in format_}
        chat["response_format"] = {"type": "json_schema", "json_schema": schema}
    elif format_.get("type") == "json_object":
        chat["response_format"] = {"type": "json_object"}
    return request, check_request(chat, served_name)


def _message_item(item_id: str, text: str, logprobs: list[dict[str, Any]], status: str) -> dict[str, Any]:
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs}
    return {"type": "message", "id": item_id, "role": "assistant", "status": status, "content": [part]}


def _call_item(call: dict[str, Any], status: str = "completed") -> dict[str, Any]:
    function = call["function"]
    return {"type": "function_call", "id": f"fc_{uuid.uuid4().hex}", "call_id": call["id"], "name": function["name"],
            "arguments": function["arguments"], "status": status}  # fmt: skip


def _plain(value: Any) -> Any:
    """A request field as JSON: a named tool_choice is parsed into a pydantic object (the Agents SDK's forced tool)."""
    return value.model_dump(exclude_none=True) if hasattr(value, "model_dump") else value


def _response(request: Any, name: str, response_id: str, created: int, output: list, finish: str | None,
              usage: dict[str, int] | None) -> dict[str, Any]:  # fmt: skip
    """The `response` object: in progress while `finish` is None, incomplete when the length limit cut it."""
    status = "in_progress" if finish is None else "incomplete" if finish == "length" else "completed"
    return {
        "id": response_id, "object": "response", "created_at": created, "model": name, "status": status,
        "output": output, "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": request.instructions, "metadata": request.metadata, "max_output_tokens":
        request.max_output_tokens, "parallel_tool_calls": request.parallel_tool_calls is not False,
        "temperature": request.temperature, "top_p": request.top_p, "tool_choice": _plain(request.tool_choice),
        "tools": [tool.model_dump(exclude_none=True) for tool in request.tools], "text": request.text and
        request.text.model_dump(by_alias=True, exclude_none=True), "store": False, "truncation": "disabled",
        "previous_response_id": None, "reasoning": None, "user": request.user,
        "usage": None if usage is None else {
            "input_tokens": usage["prompt_tokens"], "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": usage["completion_tokens"], "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": usage["total_tokens"],
        },
    }  # fmt: skip


def _logprobs(choice: dict[str, Any]) -> list[dict[str, Any]]:
    """The output_text `logprobs` of a chat choice's (or chunk's) logprob entries."""
    return list(((choice.get("logprobs") or {}).get("content")) or [])


def complete(engine: Any, request: Any, chat: Any) -> dict[str, Any]:
    """The response object of a non-streamed request: its message's text (if any), then its function calls."""
    check_within_context(request.max_output_tokens, engine.max_model_len, "max_output_tokens")
    reply = engine.complete(chat)
    (choice,) = reply["choices"]
    message, output = choice["message"], []
    if message["content"]:
        output.append(_message_item(f"msg_{uuid.uuid4().hex}", message["content"], _logprobs(choice), "completed"))
    output += [_call_item(call) for call in message.get("tool_calls") or []]
    response_id = f"resp_{reply['id'].removeprefix('chatcmpl-')}"
    return _response(request, engine.name, response_id, reply["created"], output, choice["finish_reason"],
                     reply["usage"])  # fmt: skip


def stream(engine: Any, request: Any, chat: Any) -> Iterator[dict[str, Any]]:
    """The Responses API's events of a streamed request: response.created and .in_progress; the message's .added,
    output_text.delta per piece and .done events; each function call's events; and response.completed (or
    .incomplete) with the whole response and its usage."""
    check_within_context(request.max_output_tokens, engine.max_model_len, "max_output_tokens")
    chunks = engine.stream(chat)
    first = next(chunks)  # the request is checked and in the engine
    response_id, created = f"resp_{first['id'].removeprefix('chatcmpl-')}", int(time.time())
    numbers = itertools.count()

    def event(kind: str, **fields: Any) -> dict[str, Any]:
        return {"type": f"response.{kind}", "sequence_number": next(numbers), **fields}

    def state(finish: str | None = None, usage: dict | None = None) -> dict[str, Any]:
        return _response(request, engine.name, response_id, created, list(output), finish, usage)

    output: list[dict[str, Any]] = []
    message: dict[str, Any] | None = None  # the open message item: its id, index, text, logprobs
    finish, usage = None, None
    try:
        yield event("created", response=state())
        yield event("in_progress", response=state())
        for chunk in chunks:
            usage = chunk.get("usage") or usage
            for choice in chunk["choices"]:
                delta, finish = choice["delta"], choice.get("finish_reason") or finish
                if delta.get("content"):
                    if message is None:
                        message = {"id": f"msg_{uuid.uuid4().hex}", "index": len(output), "text": "", "logprobs": []}
                        output.append(_message_item(message["id"], "", [], "in_progress"))
                        yield event("output_item.added", output_index=message["index"], item=output[-1])
                        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
                        yield event("content_part.added", item_id=message["id"], output_index=message["index"],
                                    content_index=0, part=part)  # fmt: skip
                    message["text"] += delta["content"]
                    message["logprobs"] += _logprobs(choice)
                    yield event("output_text.delta", item_id=message["id"], output_index=message["index"],
                                content_index=0, delta=delta["content"], logprobs=_logprobs(choice))  # fmt: skip
                if delta.get("tool_calls") and message is not None:
                    yield from _close(event, output, message)
                    message = None
                for call in delta.get("tool_calls") or []:
                    item, index = _call_item(call), len(output)
                    output.append(item)
                    yield event("output_item.added", output_index=index, item={**item, "arguments": "",
                                                                                "status": "in_progress"})  # fmt: skip
                    ids = {"item_id": item["id"], "output_index": index}
                    yield event("function_call_arguments.delta", **ids, delta=item["arguments"])
                    yield event("function_call_arguments.done", **ids, name=item["name"], arguments=item["arguments"])
                    yield event("output_item.done", output_index=index, item=item)
        if message is not None:
            yield from _close(event, output, message)
        done = state(finish or "stop", usage)
        yield event("completed" if done["status"] == "completed" else "incomplete", response=done)
    finally:
        chunks.close()


def _close(event: Any, output: list[dict[str, Any]], message: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The .done events of the open message item, whose final form replaces it in `output`."""
    index, text = message["index"], message["text"]
    output[index] = _message_item(message["id"], text, message["logprobs"], "completed")
    ids = {"item_id": message["id"], "output_index": index, "content_index": 0}
    yield event("output_text.done", **ids, text=text, logprobs=message["logprobs"])
    yield event("content_part.done", **ids, part=output[index]["content"][0])
    yield event("output_item.done", output_index=index, item=output[index])
