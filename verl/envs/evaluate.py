# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
r"""Run an environment's episodes against any OpenAI-compatible chat endpoint, with the same environment class as
training (the trained model served by `python -m verl.serve`, or another model).

    python -m verl.envs.evaluate --env examples/envs/guess_number.py:GuessNumber --data val.jsonl \
        --base-url http://127.0.0.1:8000/v1 [--max-turns 4 --temperature 0] \
        [--reward examples/envs/guess_number.py:compute_score --output episodes.jsonl]

Prints one JSON line per episode and a last line with the means (with --reward or --rubric: each reward key's mean
and the accuracy); --output writes each episode's conversation in the rollout records' format, which
scripts/rollout_viewer.py shows. Without --env each row gets one model turn (with its --tools-key tools), as training
without an environment. `--help` lists the options.
"""

import argparse
import asyncio
import base64
import contextlib
import functools
import io
import json
import math
import os
import re
import secrets
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from verl.data.multimodal import DEFAULT_MAX_PIXELS, DEFAULT_MIN_PIXELS, content_parts
from verl.data.rollout_dump import finite_or_none, message_record, message_text, transcript_messages, write_image
from verl.data.sources import ground_truth, row_value, split_prompt_messages, tool_schemas
from verl.envs.base import (
    EnvCodeError,
    Environment,
    EnvStepTimeoutError,
    SingleTurnEnv,
    call_env,
    checked_info,
    checked_state,
    checked_step,
    env_code_error,
    release_env,
)
from verl.envs.client_env import ChatClientEnv, EpisodeOver, chat_client, reply_reasoning
from verl.envs.loader import load_environment
from verl.envs.tools import tool_call
from verl.rewards.function import REASONING_OPENING, RewardFunctionError, opens_reasoning
from verl.utils import stall_report
from verl.workers.rollout.config import RolloutConfig


IMAGE_MARKER = "<image>"
MIN_PIXELS, MAX_PIXELS = DEFAULT_MIN_PIXELS, DEFAULT_MAX_PIXELS
"""--min-pixels / --max-pixels defaults: data.min_pixels / data.max_pixels's (verl.trainer.config.DataConfig)."""


def prompt_message(prompt: str, images: list[Any]) -> dict[str, Any]:
    """The first user message of an episode: plain text, or content parts with the images at the prompt's `<image>`
    markers (one per image), or before the text when it has none."""
    if not images:
        return {"role": "user", "content": prompt}
    markers = prompt.count(IMAGE_MARKER)
    if markers not in (0, len(images)):
        raise ValueError(
            f"the prompt has {markers} {IMAGE_MARKER} markers but the row has {len(images)} images; give "
            "one marker per image, or none (then the images come first)."
        )
    parts = content_parts(prompt if markers else IMAGE_MARKER * len(images) + prompt, [IMAGE_MARKER])
    pictures = iter(images)
    return {
        "role": "user",
        "content": [{**part, "image": next(pictures)} if part["type"] == "image" else part for part in parts],
    }


def _image_url(part: Any, cache: dict[int, str]) -> Any:
    """An image part as an `image_url` part with a PNG data URL (encoded once per image in `cache`); other parts as
    they are."""
    image = part.get("image") if isinstance(part, dict) and part.get("type") == "image" else None
    if image is None:
        return part
    from PIL import Image

    if not isinstance(image, Image.Image):
        raise TypeError(f"an image part must hold a PIL image, got {type(image).__name__}")
    if id(image) not in cache:
        buffer = io.BytesIO()
        image.convert("RGB").save(buffer, format="PNG")
        cache[id(image)] = "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")
    return {"type": "image_url", "image_url": {"url": cache[id(image)]}}


def to_openai_messages(messages: list[dict[str, Any]], cache: dict[int, str] | None = None) -> list[dict[str, Any]]:
    """The messages as an OpenAI-style endpoint takes them: `{"type": "image", "image": <PIL image>}` parts become
    `image_url` parts with PNG data URLs (encoded once per image when `cache` is kept across requests)."""
    cache = {} if cache is None else cache
    wire = []
    for message in messages:
        if isinstance(message.get("content"), list):
            message = {**message, "content": [_image_url(part, cache) for part in message["content"]]}
        wire.append(message)
    return wire


@dataclass(frozen=True)
class EpisodeSetup:
    """What one episode is run with: its dataset row, prompt and images, and the run's model, turns and sampling."""

    row: dict[str, Any]
    """The row the environment is reset with (`ground_truth` taken from --answer-key, the images left out)."""
    prompt: str
    images: list[Any]
    """The row's images (PIL), placed at the prompt's `<image>` markers."""
    model: str
    max_turns: int
    sampling: dict[str, Any]
    """Sampling parameters of every request (max_tokens, temperature, extra_body)."""
    context: list[dict[str, Any]] = field(default_factory=list)
    """The messages before the prompt's (a system message, few-shot turns) where the row's prompt is a list of chat
    messages, as training renders them."""
    messages: bool = False
    """Whether the row's prompt was a list of chat messages (reward functions in TRL's signature then get the
    completion as messages)."""
    data_columns: frozenset[str] = frozenset()
    """The row's prompt and answer columns, which a reward function gets as `prompt` and `ground_truth` and, as in
    training, not again in extra_info."""
    rendered: str | None = None
    """The first request's messages as the model's chat template renders them (with --tokenizer): what a reward
    function gets as `prompt` in training (model_turn reads a reasoning block its generation prompt opens)."""
    tools: list[dict[str, Any]] | None = None
    """The tool schemas every request carries: the environment's own, or the row's (--tools-key)."""
    env_step_timeout_s: float = 0.0
    """Longest one environment step may take (--env-step-timeout, as worker.rollout.env_step_timeout_s); <= 0: no
    limit."""
    response_length: int | None = None
    pixels: tuple[int | None, int | None] = (None, None)
    """(--min-pixels, --max-pixels): the environment's images are resized into it, as training resizes them."""
    """--response-length: the tokens after the prompt, all turns together (ResponseBudget); None: --max-tokens a turn
    and --max-turns alone bound an episode."""

    @property
    def opened(self) -> bool:
        """Whether the generation prompt opens the reasoning block (the model's turn then starts inside it)."""
        return opens_reasoning(self.rendered or "")


@dataclass
class EpisodeResult:
    """What one episode gave: its counts, the environment's episode_info and the conversation."""

    counts: dict[str, Any]
    """turns, tool_calls, tool_errors, cut_tool_messages, truncated (the last turn ended at --max-tokens), done."""
    info: dict[str, float]
    messages: list[dict[str, Any]]
    """The conversation in the rollout records' form (rollout_dump.transcript_messages): image parts index into
    `images`; messages the model never saw are marked "cut"."""
    images: list[Any]
    """The images the model was shown (PIL), in order: the prompt's first."""
    completion_tokens: int = 0
    """Tokens of the model's turns as the endpoint counted them (0 when it reports no usage)."""
    last_turn: str = ""


def _tool_messages(messages: list[Any]) -> int:
    return sum(isinstance(message, dict) and message.get("role") == "tool" for message in messages)


def _new_counts() -> dict[str, Any]:
    return {"turns": 0, "tool_calls": 0, "tool_errors": 0, "cut_tool_messages": 0, "truncated": False, "done": False}


def _resized_images(
    messages: list[dict[str, Any]], min_pixels: int | None, max_pixels: int | None
) -> list[dict[str, Any]]:
    """`messages` with each image part's PIL image resized into the pixel budget (verl.data.multimodal.resize_image,
    as training's rollout resizes an environment's images: multi_turn.with_opened_images)."""
    from PIL import Image

    from verl.data.multimodal import resize_image

    if min_pixels is None and max_pixels is None:
        return messages

    def part_of(part: Any) -> Any:
        if isinstance(part, dict) and part.get("type") == "image" and isinstance(part.get("image"), Image.Image):
            return {**part, "image": resize_image(part["image"], min_pixels, max_pixels)}
        return part

    return [
        {**message, "content": [part_of(part) for part in message["content"]]}
        if isinstance(message.get("content"), list)
        else message
        for message in messages
    ]


def _images_of(messages: list[dict[str, Any]]) -> list[Any]:
    """The image parts' images of `messages`, in order."""
    return [
        part.get("image")
        for message in messages
        if isinstance(message, dict) and isinstance(message.get("content"), list)
        for part in message["content"]
        if isinstance(part, dict) and part.get("type") == "image"
    ]


def reply_turn(reply: Any, counts: dict[str, Any], opened: bool = False) -> tuple[str, list[dict[str, Any]], int]:
    """(the model's turn as text, its tool calls as {"name", "arguments"}, its completion tokens or 0) of a reply;
    sets counts["truncated"]. What an endpoint took out of the text is put back, so that the environment and the
    reward read the turn as in training: reasoning a reasoning parser separated (vLLM's `--reasoning-parser`:
    `reasoning`, or the older `reasoning_content`) as a `<think>` block before the content (its opening left out
    where the generation prompt `opened` it), calls parsed into `tool_calls` as `<tool_call>` blocks after it."""
    choice = reply.choices[0]
    counts["truncated"] = choice.finish_reason == "length"
    text, calls = choice.message.content or "", []
    reasoning = reply_reasoning(choice.message)
    if reasoning:
        text = f"{'' if opened else REASONING_OPENING}{reasoning}</think>\n\n{text}"
    for call in _calls(choice.message):
        arguments = call.function.arguments
        try:
            arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
        except (ValueError, RecursionError):
            pass  # not JSON: the environment reports the call as malformed
        calls.append({"name": call.function.name, "arguments": arguments})
        block = json.dumps(calls[-1], ensure_ascii=False)
        text += ("\n" if text else "") + f"<tool_call>\n{block}\n</tool_call>"
    return text, calls, int(getattr(getattr(reply, "usage", None), "completion_tokens", None) or 0)


def model_message(text: str, calls: list[dict[str, Any]], tool_format: Any = None) -> dict[str, Any]:
    """The model's turn as training records it in episode_messages (a reward function reads it so in both): its
    text, and its well-formed calls, read from the text with the environment's `tool_format` where it has one (as
    training reads them, also those an endpoint without a tool parser left in the text), as OpenAI's `tool_calls`
    (JSON-string arguments); no `tool_calls` key without calls."""
    if tool_format is not None:
        calls = [call for call in tool_format.read(text)[1] if isinstance(call, dict)]
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = [tool_call(call["name"], json.dumps(call["arguments"])) for call in calls]
    return message


def _calls(message: Any) -> list[Any]:
    """A reply message's parsed tool calls (those with a function)."""
    return [call for call in getattr(message, "tool_calls", None) or [] if getattr(call, "function", None)]


def sent_back(reply: Any) -> dict[str, Any]:
    """The model's turn as the next request carries it: the endpoint's parsed calls stay `tool_calls` (with their
    ids) and its separated reasoning `reasoning`, so its chat template renders them in the model's own format, as it
    does in training (Qwen3's keeps the reasoning of the turns after the last user message)."""
    message = reply.choices[0].message
    turn: dict[str, Any] = {"role": "assistant", "content": message.content or ""}
    reasoning = reply_reasoning(message)
    if reasoning:
        turn["reasoning"] = reasoning
    calls = _calls(message)
    if calls:
        turn["tool_calls"] = [
            {
                "id": getattr(call, "id", None) or f"call_{number}",
                "type": "function",
                "function": {"name": call.function.name, "arguments": call.function.arguments},
            }
            for number, call in enumerate(calls)
        ]
    return turn


def answered(turn: dict[str, Any], messages: list[Any]) -> list[Any]:
    """An environment's reply to `turn`: where it holds one tool message per call, each names its call's id (as
    OpenAI's API requires)."""
    calls = turn.get("tool_calls") or []
    results = [i for i, message in enumerate(messages) if isinstance(message, dict) and message.get("role") == "tool"]
    named = list(messages)
    if calls and len(results) == len(calls):
        for index, call in zip(results, calls):
            named[index] = {**named[index], "tool_call_id": call["id"]}
    return named


def _within(timeout_s: float, late: str, call: Any, *args: Any, **kwargs: Any) -> Any:
    """`call(*args, **kwargs)`, which must return within `timeout_s` (<= 0: no limit), else EnvStepTimeoutError with
    `late` and where the call was (the thread cannot be stopped; it is a daemon, so evaluate still exits)."""
    if not 0 < timeout_s < math.inf:  # (inf: no limit either)
        return call(*args, **kwargs)
    outcome: dict[str, Any] = {}

    def run() -> None:
        outcome["thread"] = threading.get_ident()
        try:
            outcome["value"] = call(*args, **kwargs)
        except BaseException as error:  # handed to the caller's thread
            outcome["error"] = error

    thread = threading.Thread(target=run, name="evaluate-env-step", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        where = stall_report.format_stacks([outcome["thread"]], user_code_only=True) if "thread" in outcome else ""
        raise EnvStepTimeoutError(late + (f"; where it was:\n{where}" if where else "."))
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _env_call(
    setup: EpisodeSetup, env: Environment, name: str, hook: str, where: str, *args: Any, **kwargs: Any
) -> Any:
    """`call_env(env, name, hook, where, *args, **kwargs)` within setup.env_step_timeout_s (`_within`), as training
    bounds an environment's `reset`, `step` and `episode_info` by worker.rollout.env_step_timeout_s."""
    late = f"{name}: the {hook} {where} did not finish within --env-step-timeout {setup.env_step_timeout_s:g} s"
    return _within(setup.env_step_timeout_s, late, call_env, env, name, hook, where, *args, **kwargs)


class ResponseBudget:
    """--response-length, training's shared response budget (rollout.response_length): the tokens after the prompt,
    the model's and the environment's together, counted as the endpoint counts them (`usage`). As in training, a
    request whose environment messages leave no room for a model turn ends the episode, truncated, with those
    messages cut; a model turn the budget (not --max-tokens) cuts ends it, truncated."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.prompt_tokens: int | None = None
        """The first request's prompt tokens."""
        self.spent = 0
        """Tokens after the prompt through the last reply."""
        self.over = False
        """The budget ended the episode."""

    def limit(self, max_tokens: int | None) -> int | None:
        """A request's max_tokens: its own limit, at most what the last reply left (the new messages are not counted
        yet); None when nothing is left."""
        left = self.total - self.spent
        if left < 1:
            self.over = True
            return None
        return left if max_tokens is None else min(max_tokens, left)

    def room(self, reply: Any) -> int:
        """The tokens the reply's request left for the model's turn (< 1: its new messages did not fit; the episode
        is then over)."""
        prompt = _usage(reply, "prompt_tokens")
        if self.prompt_tokens is None:
            self.prompt_tokens = prompt
        room = self.total - (prompt - self.prompt_tokens)
        self.over = room < 1
        return room

    def took(self, reply: Any, max_tokens: int | None, room: int) -> None:
        """Count an accepted reply; a turn the budget cut ends the episode."""
        self.spent = _usage(reply, "prompt_tokens") - self.prompt_tokens + _usage(reply, "completion_tokens")
        self.over = reply.choices[0].finish_reason == "length" and (max_tokens is None or max_tokens >= room)


def _usage(reply: Any, field: str) -> int:
    value = getattr(getattr(reply, "usage", None), field, None)
    if not isinstance(value, int):
        raise NotImplementedError(
            f"--response-length counts tokens as the endpoint reports them, and its reply has no usage.{field}; use "
            "an endpoint that reports usage (verl.serve, vLLM), or leave --response-length out."
        )
    return value


def _within_budget(budget: ResponseBudget, request: dict[str, Any]) -> Any:
    """Yields the requests to send for `request` within `budget` and gets their replies; returns the reply taken, or
    None when the request's new messages leave no room for a model turn. A reply longer than the room its request
    left (the new messages took more than the last reply left) is asked again with that room, as training's turn
    limit would have cut it."""
    asked = budget.limit(request.get("max_tokens"))
    if asked is None:
        return None
    reply = yield {**request, "max_tokens": asked}
    room = budget.room(reply)
    if room < 1:
        return None
    if _usage(reply, "completion_tokens") > room:
        reply = yield {**request, "max_tokens": room}
    budget.took(reply, request.get("max_tokens"), room)
    return reply


class EndpointReplyError(ValueError):
    """The endpoint answered a chat request with something that is no chat completion."""


def _completion(reply: Any) -> Any:
    """`reply`, checked to be a chat completion with a choice (an endpoint that is no OpenAI-compatible one answered
    HTML, or a JSON object without choices: a TypeError or IndexError deep in the episode)."""
    choices = getattr(reply, "choices", None)
    if not choices or getattr(choices[0], "message", None) is None:
        shown = str(reply)[:120] if isinstance(reply, str) else f"a {type(reply).__name__} with choices={choices!r}"
        raise EndpointReplyError(f"the reply is no chat completion: {shown}")
    return reply


def budgeted(create: Any, budget: ResponseBudget | None, request: dict[str, Any]) -> Any:
    """`create(**request)` within `budget` (None: as it is); None when no room is left (`_within_budget`)."""
    if budget is None:
        return _completion(create(**request))
    steps = _within_budget(budget, request)
    try:
        sent = next(steps)
        while True:
            sent = steps.send(_completion(create(**sent)))
    except StopIteration as taken:
        return taken.value


async def budgeted_async(create: Any, budget: ResponseBudget | None, request: dict[str, Any]) -> Any:
    """`budgeted` with an async `create`."""
    if budget is None:
        return _completion(await create(**request))
    steps = _within_budget(budget, request)
    try:
        sent = next(steps)
        while True:
            sent = steps.send(_completion(await create(**sent)))
    except StopIteration as taken:
        return taken.value


def run_episode(env: Environment, setup: EpisodeSetup, client: Any) -> EpisodeResult:
    """One episode through `client.chat.completions`. Messages after the last turn are kept marked cut, as in
    training (their tool results counted in cut_tool_messages)."""
    name = f"{type(env).__name__} (--env)"
    state = _env_call(
        setup,
        env,
        name,
        "reset",
        "for the row",
        {**setup.row, "prompt_images": list(setup.images)},
        check=checked_state,
    )
    messages: list[dict[str, Any]] = [*setup.context, prompt_message(setup.prompt, setup.images)]
    extra = {"tools": setup.tools} if setup.tools is not None else {}
    counts = _new_counts()
    transcript = transcript_messages(messages, 0)
    images, tokens, text = list(setup.images), 0, ""
    urls: dict[int, str] = {}
    budget = ResponseBudget(setup.response_length) if setup.response_length else None
    pending: list[Any] = []  # the environment's last messages, shown once the next request shows that they fit
    for turn in range(setup.max_turns):
        wire = to_openai_messages(messages, urls)
        request = {"model": setup.model, "messages": wire, **setup.sampling, **extra}
        reply = budgeted(client.chat.completions.create, budget, request)
        if reply is None:  # they leave no room for a model turn: over, truncated (as in training)
            transcript += transcript_messages(pending, len(images), cut=True)
            counts["cut_tool_messages"] += _tool_messages(pending)
            counts["truncated"] = True
            break
        transcript += transcript_messages(pending, len(images))
        images += _images_of(pending)
        text, calls, used = reply_turn(reply, counts, setup.opened)
        tokens += used
        messages.append(sent_back(reply))
        transcript += transcript_messages([model_message(text, calls, getattr(env, "tool_format", None))], 0)
        counts["turns"] += 1
        if budget is not None and budget.over:  # the budget cut the turn: over, truncated, no step (as in training)
            break
        step = _env_call(setup, env, name, "step", f"after model turn {turn + 1}", state, text, check=checked_step)
        counts["tool_calls"] += step.tool_calls
        counts["tool_errors"] += step.tool_errors
        shown = _resized_images(step.messages, *setup.pixels)  # as training's rollout resizes them
        if step.done or turn == setup.max_turns - 1:
            transcript += transcript_messages(shown, len(images), cut=True)
            counts["cut_tool_messages"] += _tool_messages(shown)
            counts["done"] = bool(step.done)
            break
        messages.extend(answered(messages[-1], shown))
        pending = shown
    info = _env_call(setup, env, name, "episode_info", "at the episode's end", state, check=checked_info)
    return EpisodeResult(counts, info, transcript, images, tokens, text)


def client_request(request: dict[str, Any], sampling: dict[str, Any]) -> dict[str, Any]:
    """An environment's request with the run's sampling, as training treats it: the run's temperature, its
    --max-tokens unless the request asks fewer (max_completion_tokens or max_tokens), and the run's template
    variables added to the request's own extra_body."""
    request = dict(request)
    asked = request.pop("max_completion_tokens", None)
    asked = request.get("max_tokens") if asked is None else asked
    sent = {**request, **sampling}
    if asked:
        sent["max_tokens"] = min(asked, sampling.get("max_tokens") or asked)
    if "extra_body" in request and "extra_body" in sampling:
        sent["extra_body"] = {**request["extra_body"], **sampling["extra_body"]}
    return sent


def run_client_episode(env: ChatClientEnv, setup: EpisodeSetup, make_client: Any) -> EpisodeResult:
    """One episode of a ChatClientEnv: its `rollout` with an async client from `make_client()` (made in the episode's
    loop). Requests get `setup.sampling` (`client_request`); one past `setup.max_turns` ends the episode (its new
    messages kept, marked cut). Text prompts only, as in training. What `rollout` raises becomes an EnvCodeError, as
    in training, except EpisodeOver, NotImplementedError and the endpoint's own errors (openai.APIError); its work
    between two requests past setup.env_step_timeout_s is an EnvStepTimeoutError."""
    import openai

    if setup.images:
        raise NotImplementedError(
            f"{type(env).__name__} is a ChatClientEnv, which runs text prompts only (as in training); this row has "
            f"{len(setup.images)} images."
        )
    name = f"{type(env).__name__} (--env)"
    state = _env_call(
        setup, env, name, "reset", "for the row", {**setup.row, "prompt_images": []}, check=checked_state
    )
    counts = _new_counts()
    seen: list[dict[str, Any]] = []  # the last answered request and its reply
    written: list[dict[str, Any]] = []  # each reply as the model wrote it, tool calls as blocks in its text
    refused: list[dict[str, Any]] = []  # a request made after --max-turns
    usage = {"tokens": 0, "text": ""}
    first = [*setup.context, {"role": "user", "content": setup.prompt}]
    budget = ResponseBudget(setup.response_length) if setup.response_length else None
    clock = {"since": time.monotonic(), "asking": False}

    async def episode() -> None:
        client = make_client()

        async def create(**request: Any) -> Any:
            clock["asking"] = True
            try:
                return await ask(**request)
            finally:  # the episode has control back: its work from here counts towards --env-step-timeout
                clock["asking"], clock["since"] = False, time.monotonic()

        async def ask(**request: Any) -> Any:
            sent = list(request.get("messages", []))
            if budget is not None and budget.over:  # a turn it cut ended the episode (as in training)
                raise EpisodeOver(f"the --response-length={budget.total} tokens are spent")
            if counts["turns"] >= setup.max_turns:
                refused[:] = sent
                raise EpisodeOver(f"--max-turns={setup.max_turns} requests were answered")
            request = client_request({**request, "messages": to_openai_messages(sent)}, setup.sampling)
            reply = await budgeted_async(client.chat.completions.create, budget, request)
            if reply is None:  # its new messages leave no room for a model turn: kept, cut (as in training)
                refused[:] = sent
                counts["truncated"] = True
                raise EpisodeOver(f"the --response-length={budget.total} tokens are spent")
            counts["turns"] += 1
            usage["text"], calls, used = reply_turn(reply, counts, setup.opened)
            usage["tokens"] += used
            turn = model_message(usage["text"], calls, getattr(env, "tool_format", None))
            seen[:] = [*as_written(sent, written), turn]
            written.append(turn)
            return reply

        try:
            timeout = setup.env_step_timeout_s
            overdue = lambda: (  # noqa: E731
                f"{name}: the episode did not ask the model again within --env-step-timeout {timeout:g} s after "
                f"model turn {counts['turns']}"
            )
            await _working_within(env.rollout(chat_client(create), setup.model, first, state), clock, timeout, overdue)
        except (EpisodeOver, NotImplementedError, EnvCodeError, EnvStepTimeoutError, openai.APIError):
            raise
        except Exception as error:  # the environment's own code (a verifiers episode that failed, ...)
            raise env_code_error(name, "rollout", f"in the episode (turn {counts['turns'] + 1})", error) from error
        finally:
            await env.release()

    with contextlib.suppress(EpisodeOver):
        asyncio.run(episode())
        counts["done"] = True
    conversation = seen or first
    transcript, images = transcript_messages(conversation, 0), _images_of(conversation)
    if len(refused) > len(seen):
        late = refused[len(seen) :]
        transcript += transcript_messages(late, len(images), cut=True)
        counts["cut_tool_messages"] += _tool_messages(late)
    info = _env_call(setup, env, name, "episode_info", "at the episode's end", state, check=checked_info)
    return EpisodeResult(counts, info, transcript, images, usage["tokens"], usage["text"])


async def _working_within(episode: Any, clock: dict[str, Any], timeout_s: float, late: Any) -> None:
    """Await a client-style `episode` coroutine; EnvStepTimeoutError (`late()`: its message) once it has worked
    `timeout_s` (<= 0: no limit) without asking the model since it last had control back (`clock`: "since" then,
    "asking" while a request waits for the endpoint), as worker.rollout.env_step_timeout_s bounds it in training."""
    task = asyncio.ensure_future(episode)
    if not 0 < timeout_s < math.inf:
        return await task
    while not task.done():
        left = timeout_s if clock["asking"] else clock["since"] + timeout_s - time.monotonic()
        await asyncio.wait({task}, timeout=max(left, 0.0))
        if not task.done() and not clock["asking"] and time.monotonic() - clock["since"] >= timeout_s:
            task.cancel()  # (a coroutine that blocks the event loop itself cannot be stopped, as in training)
            raise EnvStepTimeoutError(late())
    return task.result()


def as_written(messages: list[Any], written: list[dict[str, Any]]) -> list[Any]:
    """`messages` with the last len(written) assistant turns replaced by the model's own text (a client may send
    them back with parsed `tool_calls`); earlier ones (few-shot examples) stay."""
    turns = [
        i for i, message in enumerate(messages) if isinstance(message, dict) and message.get("role") == "assistant"
    ]
    replaced = dict(zip(turns[len(turns) - len(written) :] if written else [], written))
    return [replaced.get(i, message) for i, message in enumerate(messages)]


def reward_sample(index: int, setup: EpisodeSetup, result: EpisodeResult) -> dict[str, Any]:
    """The episode as a reward function gets it in training (RewardInput): `response` is the seen messages after the
    prompt, one per line; `response_length` the endpoint's completion tokens; extra_info the row's other columns,
    env_<count>, env_<episode_info key>, last_turn and episode_messages."""
    # the messages from the model's first turn on (training's episode_messages), past the context (few-shot turns)
    messages, context = result.messages, len(setup.context)
    turns = (i for i, message in enumerate(messages) if i >= context and message.get("role") == "assistant")
    episode = messages[next(turns, len(messages)) :]
    shown = [message for message in episode if not message.get("cut")]
    extra = {key: value for key, value in setup.row.items() if key != "ground_truth" and key not in setup.data_columns}
    counts = {key: value for key, value in result.counts.items() if key != "done"}
    extra.update({f"env_{key}": float(value) for key, value in {**counts, **result.info}.items()})
    extra.update(last_turn=result.last_turn, episode_messages=episode)
    return {
        "response": "\n".join(message_text(message.get("content")) for message in shown),
        "response_length": result.completion_tokens,
        "response_ids": None,
        "ground_truth": setup.row.get("ground_truth"),
        "prompt": setup.rendered or setup.prompt,
        "prompt_messages": [*setup.context, {"role": "user", "content": setup.prompt}] if setup.messages else None,
        "multi_modal_data": {"images": list(result.images), "videos": []} if result.images else None,
        "uid": str(index),
        "extra_info": extra,
    }


EPISODE_IMAGE = re.compile(r"(?:[0-9a-f]{6}_)?e\d{4,}_\d+\.png")
"""The names of the images `episode_record` writes (a run's tag first): what a finished run removes of an earlier
run's."""


def _images_folder(output: str) -> str:
    """images/<output's stem>/ beside `output`."""
    stem = os.path.splitext(os.path.basename(output))[0]
    return os.path.join(os.path.dirname(os.path.abspath(output)), "images", stem)


def episode_record(
    index: int, setup: EpisodeSetup, result: EpisodeResult, scores: dict[str, float], output: str, run: str = ""
) -> dict[str, Any]:
    """The episode in the rollout records' format (verl.data.rollout_dump.rollout_records; "step" and
    "advantage" are training's), plus "row" and "done"; its images are written under images/<output's stem>/ beside
    `output`, named after the run's tag `run` (an earlier run's, whose records a failed run keeps, stay)."""
    folder = os.path.dirname(os.path.abspath(output))
    relative = os.path.relpath(_images_folder(output), folder)
    paths = [
        write_image(image, folder, f"{relative}/{run}e{index:04d}_{k}.png") for k, image in enumerate(result.images)
    ]
    records = [message_record(m, paths) for m in result.messages]
    model_turns = [m["content"] for m in records if m["role"] == "assistant"]
    return {
        "row": index,
        "uid": str(index),
        "prompt": setup.rendered or setup.prompt,
        "response": "".join(model_turns),
        "ground_truth": setup.row.get("ground_truth"),
        "reward": finite_or_none(scores.get("overall")),
        "scores": {key: finite_or_none(value) for key, value in scores.items()},
        "response_length": result.completion_tokens,
        "images": paths,
        "messages": records,
        "env": {
            key: finite_or_none(value) for key, value in {**result.counts, **result.info}.items() if key != "done"
        },
        "done": bool(result.counts["done"]),
    }


def load_scorer(args: argparse.Namespace) -> Any:
    """The reward manager of --reward / --rubric (the classes training scores with), or None without either."""
    rubric = _json_object(args.rubric, "--rubric") if args.rubric else {}
    kwargs = _json_object(args.reward_kwargs, "--reward-kwargs")
    if kwargs and not args.reward:  # a rubric's parts have kwargs of their own
        raise ValueError("--reward-kwargs is given without --reward (a --rubric part takes its own 'kwargs').")
    if not args.reward and not rubric:
        return None
    from verl.rewards.function import RewardFunctionLoadError, RewardNames
    from verl.rewards.manager import RewardSettings, create_reward_manager
    from verl.utils.config import ConfigError
    from verl.workers.config import RewardConfig

    try:  # training's rule for worker.reward.rubric: a function, a numeric weight and kwargs, nothing else
        RewardConfig(rubric=rubric).check_rubric("--", remote=False)
    except ConfigError as error:
        raise ValueError(str(error)) from None
    names = RewardNames("--reward", "--reward-kwargs", remote=False)  # the flags, not the trainer's keys
    settings = RewardSettings(args.reward, kwargs, rubric=rubric, answer_key=args.answer_key, names=names)
    try:
        return create_reward_manager(settings, tokenizer=None)
    except RewardFunctionLoadError as error:
        raise SystemExit(f"evaluate: {error}") from None


def accuracy_keys(keys: list[str]) -> list[str]:
    """The reward keys that are an accuracy: `accuracy`, else each `<part>/accuracy` of a rubric."""
    return ["accuracy"] if "accuracy" in keys else [key for key in keys if key.endswith("/accuracy")]


def summarize(results: list[dict[str, Any]], scores: list[dict[str, float]]) -> dict[str, Any]:
    """The last printed line: the episode count, `<name>/mean` of every number of the episodes' lines and, with a
    reward, `reward/<key>/mean` and `accuracy`: the mean of the one accuracy key (`accuracy_keys`), the share with
    overall > 0 where there is none, and left out (null) where a rubric has several (each is in its mean)."""
    numbers: dict[str, list[float]] = {}  # counts, done, episode_info numbers: each over the episodes that report
    for result in results:  # it, as training's env/<name>/mean
        for key, value in result.items():
            if isinstance(value, (int, float)) and key not in ("row", "reward") and math.isfinite(value):
                numbers.setdefault(key, []).append(float(value))
    summary: dict[str, Any] = {"episodes": len(results), **{f"{k}/mean": sum(v) / len(v) for k, v in numbers.items()}}
    if not scores:
        return summary
    keys = list(dict.fromkeys(key for score in scores for key in score))
    finite = {key: [score[key] for score in scores if key in score and math.isfinite(score[key])] for key in keys}
    means = {key: sum(values) / len(values) if values else None for key, values in finite.items()}
    chosen = accuracy_keys(keys)
    if len(chosen) == 1:
        summary["accuracy"] = means[chosen[0]]
    elif not chosen:
        summary["accuracy"] = sum(score.get("overall", 0.0) > 0 for score in scores) / len(scores)
    else:  # which part is "the" accuracy is the user's call: reward/<part>/accuracy/mean has each
        summary["accuracy"] = None
    summary.update({f"reward/{key}/mean": value for key, value in means.items()})
    return summary


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("--env", help="path/to/env.py:ClassName (default: one model turn, as training without one)")
    add("--env-kwargs", default="{}", help="JSON object of the environment's keyword arguments")
    add(
        "--data",
        required=True,
        help="rows as the trainer reads them: a .jsonl/.parquet/.json/.csv file, folder, name@split",
    )
    add("--prompt-key", default="prompt", help="the prompt's text, or its chat messages (verl's layout)")
    add(
        "--answer-key",
        default="answer",
        type=lambda key: key or None,
        help="passed to the environment as ground_truth (dots: a dict's field); '' for rows without answers",
    )
    add(
        "--format-prompt",
        help="a Jinja file rendering each prompt from `content` and the row's columns, as data.format_prompt",
    )
    add(
        "--tools-key",
        default="tools",
        help="a row's tool schemas (a list, or a JSON string of one), sent with its requests as training renders them "
        "into its prompt (data.tools_key); 'none' leaves the column to the reward function",
    )
    add("--image-key", default="images", help="a row's list of images (paths), for a VL model")
    add("--image-dir", help="where relative image paths are (default: --data's folder)")
    add(
        "--video-key",
        default="videos",
        help="a row's videos (data.video_key): evaluate sends images only, so a row with videos is refused rather "
        "than asked without them",
    )
    add(
        "--min-pixels",
        type=int,
        default=MIN_PIXELS,
        help="images (the rows' and the environment's) smaller than this area are upscaled before they are sent, as "
        "training does (data.min_pixels; default: %(default)s, its default): give the training run's value",
    )
    add(
        "--max-pixels",
        type=int,
        default=MAX_PIXELS,
        help="images larger than this area are downscaled before they are sent (data.max_pixels; default: "
        "%(default)s)",
    )
    add("--base-url", default="http://127.0.0.1:8000/v1", help="the endpoint (default: %(default)s)")
    add("--model", help="model id (default: the endpoint's first)")
    add(
        "--tokenizer",
        help="the model's tokenizer (folder or hub name): its chat template renders the prompt a reward function gets "
        "as `prompt`, as in training (default: the served model where its id is a local folder; else the row's text)",
    )
    add("--max-turns", type=int, default=4, help="model turns an episode may take (default: %(default)s)")
    add(
        "--max-tokens",
        type=int,
        help="most tokens of one model turn, as worker.rollout.max_tokens_per_turn (default: 256 without "
        "--response-length; with it, none beside the budget)",
    )
    add(
        "--response-length",
        type=int,
        help="most tokens after the prompt, all turns together (the model's and the environment's), as training's "
        "data.max_response_length, counted by the endpoint: spending it ends the episode truncated",
    )
    add(
        "--temperature",
        type=float,
        default=0.0,
        help="sampling temperature (default: %(default)s, greedy; training samples at worker.rollout.temperature)",
    )
    add("--timeout", type=float, default=300.0, help="seconds one request may take before it is tried again")
    add("--max-retries", type=int, default=2, help="how often a request that failed or timed out is tried again")
    add(
        "--env-step-timeout",
        type=float,
        default=600.0,
        help="seconds one environment step may take, as worker.rollout.env_step_timeout_s (<= 0: no limit)",
    )
    add(
        "--chat-template-kwargs",
        default="{}",
        help='JSON object of chat template variables, as data.chat_template_kwargs: {"enable_thinking": false}',
    )
    add("--limit", type=int, help="evaluate the first N rows")
    add("--reward", help="path/to/file.py:function scoring each episode (as worker.reward.reward_function)")
    add("--reward-kwargs", default="{}", help="JSON object of the reward function's keyword arguments")
    add(
        "--rubric",
        help='JSON object of rubric parts, as worker.reward.rubric: {"name": {"function": ..., "weight": ...}}',
    )
    add("--output", help="write one JSON record per episode (the rollout records' format) to this file")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from verl.utils.hub import offline_unless_reachable

    offline_unless_reachable({"data": args.data, "tokenizer": args.tokenizer})  # before huggingface_hub's import
    import openai

    try:  # the inputs first, then the endpoint: each failure is one line naming the option
        for value, option in (
            (args.max_turns, "--max-turns"),
            (args.max_tokens, "--max-tokens"),
            (args.response_length, "--response-length"),
            (args.limit, "--limit"),
            (args.min_pixels, "--min-pixels"),
            (args.max_pixels, "--max-pixels"),
        ):
            if value is not None and value < 1:
                raise ValueError(f"{option} must be at least 1, got {value}.")
        if args.min_pixels > args.max_pixels:
            raise ValueError(f"--min-pixels {args.min_pixels} is above --max-pixels {args.max_pixels}.")
        if not args.timeout > 0 or args.max_retries < 0:
            raise ValueError(
                f"--timeout must be positive and --max-retries at least 0, got {args.timeout} and {args.max_retries}."
            )
        _check_output_is_no_input(args)
        rows = read_rows(args.data, args.prompt_key, args.limit, args.answer_key)
        template = _format_template(args.format_prompt)
        prompts = [row_prompt(row, index, args, template) for index, row in enumerate(rows)]
        env_kwargs = _json_object(args.env_kwargs, "--env-kwargs")
        if env_kwargs and not args.env:
            raise ValueError("--env-kwargs is given without --env.")
        env = load_environment(args.env, env_kwargs, "--env", "--env-kwargs") if args.env else SingleTurnEnv()
        env_tools = None if isinstance(env, ChatClientEnv) else getattr(env, "tool_schemas", lambda: None)()
        row_tools = [_row_tools(row, index, args, env) for index, row in enumerate(rows)]
        scorer = load_scorer(args)
        template_kwargs = _json_object(args.chat_template_kwargs, "--chat-template-kwargs")
    except ValueError as error:  # EnvironmentLoadError is one
        raise SystemExit(f"evaluate: {error}") from None
    lines: list[dict[str, Any]] = []
    scores: list[dict[str, float]] = []
    with contextlib.ExitStack() as cleanup:
        if not isinstance(env, ChatClientEnv):  # a ChatClientEnv releases after each episode
            cleanup.callback(release_env, env, f"{type(env).__name__} (--env)")
        if scorer is not None:
            cleanup.callback(scorer.close)
        connection = {"base_url": args.base_url, "api_key": "unused", "timeout": args.timeout}
        connection["max_retries"] = args.max_retries
        client = openai.OpenAI(**connection)
        try:
            model = args.model or client.models.list().data[0].id
        except openai.OpenAIError as error:
            raise SystemExit(
                f"evaluate: the endpoint --base-url {args.base_url} did not answer ({error}); start one, e.g. "
                "`python -m verl.serve --model DIR --port 8000`."
            ) from None
        except (AttributeError, IndexError, TypeError):  # an empty list, or an answer that is no list of models
            raise SystemExit(
                f"evaluate: the endpoint --base-url {args.base_url} lists no models (GET /models); pass --model."
            ) from None
        tokenizer = args.tokenizer or (model if os.path.isdir(model) else None)
        render = _prompt_renderer(tokenizer, args.tokenizer is not None, template_kwargs)
        if scorer is not None and render is None:
            print(
                f"evaluate: note: the reward function gets the row's prompt text, not the chat template's rendering of "
                f"it as in training (no --tokenizer, and the served model {model!r} is no local folder with a chat "
                "template here); a reward that reads it (a reasoning block the generation prompt opens) may score "
                "otherwise. Pass --tokenizer with the model's folder.",
                file=sys.stderr,
            )
        run = run_client_episode if isinstance(env, ChatClientEnv) else run_episode
        if isinstance(env, ChatClientEnv):
            client = functools.partial(openai.AsyncOpenAI, **connection)
        sampling: dict[str, Any] = {"temperature": args.temperature}
        if args.max_tokens or not args.response_length:
            sampling["max_tokens"] = args.max_tokens or 256
        if template_kwargs:  # the OpenAI client sends extra_body's fields in the request (vLLM's servers read them)
            sampling["extra_body"] = {"chat_template_kwargs": template_kwargs}
        if set_by_model := _generation_config_sampling(tokenizer):  # the endpoint's defaults, which training ignores
            sampling.update({key: TRAINING_SAMPLING[key] for key in set_by_model if key in OPENAI_SAMPLING_FIELDS})
            vllm_fields = {key: TRAINING_SAMPLING[key] for key in set_by_model if key not in OPENAI_SAMPLING_FIELDS}
            if vllm_fields:
                sampling["extra_body"] = {**sampling.get("extra_body", {}), **vllm_fields}
            print(
                f"evaluate: note: {tokenizer}/generation_config.json sets "
                f"{', '.join(f'{key}={value}' for key, value in set_by_model.items())}, which verl.serve and vLLM apply "
                "as a request's defaults and training's rollout does not; each request sends training's value instead "
                f"({', '.join(f'{key}={TRAINING_SAMPLING[key]}' for key in set_by_model)}).",
                file=sys.stderr,
            )
        data = os.path.abspath(os.path.expanduser(args.data))
        image_dir = args.image_dir or (data if os.path.isdir(data) else os.path.dirname(data))
        try:
            folder = os.path.dirname(os.path.abspath(args.output)) if args.output else None
            if folder is not None and os.path.exists(folder) and not os.path.isdir(folder):
                raise SystemExit(f"evaluate: --output {args.output} cannot be written ({folder} is not a folder).")
            if folder is not None:  # a folder that does not exist yet is made, as the trainer's rollout_dir is
                os.makedirs(folder, exist_ok=True)
            # written beside it and moved over it at the end: a run that fails keeps an earlier run's --output
            partial, tag = f"{args.output}.partial", f"{secrets.token_hex(3)}_"
            output = cleanup.enter_context(open(partial, "w", encoding="utf-8")) if args.output else None
        except OSError as error:
            raise SystemExit(f"evaluate: --output {args.output} cannot be written ({error.strerror}).") from None
        finished: list[bool] = []
        if output is not None:
            cleanup.callback(_settle_output, output, args.output, lines, finished, tag)
        data_columns = frozenset({args.prompt_key, args.answer_key})  # as the trainer leaves them out
        firsts = []  # every row's images are checked before the first episode (PIL reads the headers only)
        for index, row in enumerate(rows):
            context, prompt = prompts[index]
            try:  # a missing image, or markers that do not match the images
                videos = row.get(args.video_key)  # training shows them; they were left out, the prompt sent alone
                if videos is not None and (not hasattr(videos, "__len__") or len(videos) > 0):
                    raise ValueError(
                        f"row {index}: it has videos (--video-key {args.video_key}), which evaluate does not send "
                        "(images only): the endpoint would be asked without them and the reply scored as if it had "
                        "seen them. Leave such rows out of --data."
                    )
                images = _row_images(row.get(args.image_key), image_dir, index, args.min_pixels, args.max_pixels)
                firsts.append((images, [*context, prompt_message(prompt, images)]))
            except ValueError as error:
                where = "" if str(error).startswith(f"row {index}:") else f"row {index}: "
                raise SystemExit(f"evaluate: --data {args.data}, {where}{error}") from None
        for index, row in enumerate(rows):
            context, prompt = prompts[index]
            images, first = firsts[index]
            tools = env_tools if env_tools is not None else row_tools[index]
            rendered = render(index, first, tools) if render is not None else None
            fields = {key: value for key, value in row.items() if key != args.image_key}
            setup = EpisodeSetup(
                row=fields,  # with read_rows' ground_truth
                prompt=prompt,
                images=images,
                model=model,
                max_turns=args.max_turns,
                sampling=sampling,
                context=context,
                messages=isinstance(row.get(args.prompt_key), list),
                data_columns=data_columns,
                rendered=rendered,
                tools=tools,
                env_step_timeout_s=args.env_step_timeout,
                response_length=args.response_length,
                pixels=(args.min_pixels, args.max_pixels),
            )
            try:
                result = run(env, setup, client)
            except (NotImplementedError, EnvCodeError, EnvStepTimeoutError) as error:  # the env's own code, or late
                raise SystemExit(f"evaluate: row {index}: {error}") from None
            except openai.APIError as error:  # the endpoint refused a request or went away
                raise SystemExit(
                    f"evaluate: row {index}: the endpoint --base-url {args.base_url} failed: {error}"
                ) from None
            except EndpointReplyError as error:
                raise SystemExit(
                    f"evaluate: row {index}: the endpoint --base-url {args.base_url} did not answer with a chat "
                    f"completion ({error}); is it an OpenAI-compatible /v1 endpoint?"
                ) from None
            line: dict[str, Any] = {"row": index, **result.counts, **result.info}
            score: dict[str, float] = {}
            if scorer is not None:
                try:
                    columns = scorer.score([reward_sample(index, setup, result)])
                except RewardFunctionError as error:  # the user's function raised: one line, the row named
                    raise SystemExit(f"evaluate: row {index}: {error}") from None
                score = {key: float(values[0]) for key, values in columns.items()}
                if scores and score.keys() != scores[0].keys():  # training refuses it too (check_scores)
                    raise SystemExit(
                        f"evaluate: row {index}: the reward returned the keys {sorted(score)}, but row 0 returned "
                        f"{sorted(scores[0])}; return the same keys for every row (the means would mix rows)."
                    )
                scores.append(score)
                line.update(
                    reward=finite_or_none(score["overall"]), scores={k: finite_or_none(v) for k, v in score.items()}
                )
            print(json.dumps(line), flush=True)
            lines.append(line)
            if output is not None:
                record = episode_record(index, setup, result, score, args.output, tag)
                output.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
                output.flush()
        finished.append(True)
    print(json.dumps(summarize(lines, scores)))
    return 0


def _settle_output(output: Any, path: str, lines: list[Any], finished: list[bool], run: str) -> None:
    """The run's episodes replace --output once every row ran (and its images an earlier run's: `run` tags this
    run's); a run that stopped keeps the earlier --output and its images, and leaves its episodes in <output>.partial
    (none: removed)."""
    output.close()
    if finished:
        os.replace(output.name, path)
        images = _images_folder(path)
        for name in os.listdir(images) if os.path.isdir(images) else []:
            if EPISODE_IMAGE.fullmatch(name) and not name.startswith(run):
                with contextlib.suppress(OSError):
                    os.remove(os.path.join(images, name))
    elif lines:
        print(
            f"evaluate: the {len(lines)} episode(s) before the error are in {output.name}; --output {path} is as it "
            "was.",
            file=sys.stderr,
        )
    else:
        os.remove(output.name)


def _check_output_is_no_input(args: argparse.Namespace) -> None:
    """--output must not be a file the run reads (it was replaced by the episodes: the environment's own .py file),
    nor inside a --data folder (the next run would read it as data)."""
    if not args.output:
        return
    output = os.path.abspath(os.path.expanduser(args.output))
    inputs = [("--data", args.data), ("--format-prompt", args.format_prompt)]
    inputs += [
        (option, (spec or "").rpartition(":")[0]) for option, spec in (("--env", args.env), ("--reward", args.reward))
    ]
    for option, path in inputs:
        if path and os.path.exists(output) and _same_file(output, path):
            raise ValueError(f"--output {args.output} is the {option} file: it would be overwritten; write elsewhere.")
    data = os.path.abspath(os.path.expanduser(args.data))
    if os.path.isdir(data) and output.startswith(data.rstrip(os.sep) + os.sep):
        raise ValueError(
            f"--output {args.output} is inside the --data folder {args.data}: the next run would read it as data; "
            "write elsewhere."
        )


def _same_file(one: str, other: str) -> bool:
    try:
        return os.path.samefile(os.path.expanduser(one), os.path.expanduser(other))
    except OSError:  # --data is a name@split, or gone
        return False


def read_rows(
    path: str, prompt_key: str, limit: int | None, answer_key: str | None = "answer"
) -> list[dict[str, Any]]:
    """The first `limit` rows of --data, read as the trainer reads data.val_files (a .jsonl/.json/.parquet/.csv file, a
    folder of them, or name@split); ValueError naming the file and row of one without `prompt_key` or `answer_key`
    (the answer as training passes it on, `ground_truth`; None for every row where `answer_key` is None)."""
    from verl.data.sources import load_source

    try:
        source = load_source(path)
    except (OSError, TypeError, ValueError) as error:
        raise ValueError(f"--data {path} cannot be read: {str(error).rstrip('.')}.") from None
    for key, option in ((prompt_key, "--prompt-key"), (answer_key, "--answer-key")):
        if (
            key is not None
            and key not in source.columns
            and not (option == "--answer-key" and key.split(".")[0] in source.columns)
        ):
            raise ValueError(f"--data {path} has no '{key}' column ({option}); its columns: {source.columns}.")
    rows = []
    for index in range(len(source) if limit is None else min(limit, len(source))):
        row = dict(source.row(index))
        if row[prompt_key] is None:
            raise ValueError(f"--data {source.where(index)}: no '{prompt_key}' value (--prompt-key).")
        row["ground_truth"] = None if answer_key is None else ground_truth(row_value(row, answer_key))
        if row["ground_truth"] is None and answer_key is not None:
            raise ValueError(f"--data {source.where(index)}: no '{answer_key}' value (--answer-key).")
        rows.append(row)
    return rows


def _row_tools(row: dict[str, Any], index: int, args: argparse.Namespace, env: Environment) -> Any:
    """The row's tool schemas (--tools-key), read as training reads them; ValueError naming the row, or where the
    environment describes tools of its own (training refuses a tools column with one too)."""
    if args.tools_key == "none" or row.get(args.tools_key) is None:
        return None
    try:
        tools = tool_schemas(row[args.tools_key])
    except ValueError as error:
        raise ValueError(f"--data {args.data}, row {index}, key '{args.tools_key}' (--tools-key): {error}.") from None
    if tools is not None and (isinstance(env, ChatClientEnv) or hasattr(env, "tool_schemas")):
        raise ValueError(
            f"--data {args.data} has tools in column '{args.tools_key}' (--tools-key), and --env {args.env} sends its "
            "own; pass --tools-key none to leave the column to the reward function."
        )
    return tools


def row_prompt(
    row: dict[str, Any], index: int, args: argparse.Namespace, template: Any = None
) -> tuple[list[dict[str, str]], str]:
    """(the messages before the prompt's, its text) of a row: a prompt given as chat messages is split as the trainer
    splits it, and the text rendered through --format-prompt's `template` as data.format_prompt renders it;
    ValueError naming the row."""
    prompt = row[args.prompt_key]
    try:
        context, text = split_prompt_messages(prompt) if isinstance(prompt, list) else ([], str(prompt))
    except ValueError as error:
        raise ValueError(f"--data {args.data}, row {index}, key '{args.prompt_key}': {error}.") from None
    if template is None:
        return context, text
    try:
        return context, template.render({**row, "content": text})
    except Exception as error:  # e.g. a column the row does not have
        raise ValueError(f"--data {args.data}, row {index}: --format-prompt failed on this row: {error}.") from None


def _format_template(path: str | None) -> Any:
    if path is None:
        return None
    from verl.data.dataset import compile_format_prompt

    try:
        with open(path, encoding="utf-8") as file:
            source = file.read().strip()
    except OSError as error:
        raise ValueError(f"--format-prompt {path} cannot be read: {error.strerror or error}.") from None
    return compile_format_prompt(source, path, "--format-prompt")


def _prompt_renderer(tokenizer_path: str | None, given: bool, template_kwargs: dict[str, Any]) -> Any:
    """render(row index, messages, tools) -> the first request as the chat template of the tokenizer at
    `tokenizer_path` renders it (None where there is none; a --tokenizer that cannot be loaded or has no chat
    template is a SystemExit, a --model folder without one gives None)."""
    if tokenizer_path is None:
        return None
    if given and not os.path.isdir(os.path.expanduser(tokenizer_path)):  # a local path was read as a hub id
        from verl.models.config import model_folder_problem

        problem = model_folder_problem(tokenizer_path, "--tokenizer")  # None for a hub id
        if problem is not None:
            raise SystemExit(f"evaluate: {problem}")
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
    except (OSError, ValueError) as error:
        if given:
            raise SystemExit(f"evaluate: --tokenizer {tokenizer_path} cannot be loaded: {error}") from None
        return None
    if getattr(tokenizer, "chat_template", None) is None:
        if given:
            raise SystemExit(
                f"evaluate: --tokenizer {tokenizer_path} has no chat template to render the prompts with."
            )
        return None

    def render(index: int, messages: list[dict[str, Any]], tools: Any) -> str:
        options = {**({"tools": tools} if tools else {}), **template_kwargs}
        try:
            return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **options)
        except Exception as error:  # a template error: the endpoint renders the same messages
            raise SystemExit(f"evaluate: row {index}: the chat template cannot render the prompt: {error}") from None

    return render


def _json_object(text: str, option: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{option} is not JSON: {error}.") from None
    if not isinstance(value, dict):
        raise ValueError(f"{option} must be a JSON object, got {text}.")
    return value


TRAINING_SAMPLING: dict[str, float] = {
    "top_p": RolloutConfig.top_p,
    "top_k": RolloutConfig.top_k,
    "min_p": 0.0,
    "repetition_penalty": 1.0,
}
"""The sampling fields a model's generation_config.json may set as an OpenAI endpoint's defaults (vLLM's
`get_diff_sampling_param`, which verl.serve uses; temperature and max_tokens are sent with every request anyway), at
the values the trainer's rollout samples with whatever that file says (worker.rollout.top_p / top_k's defaults; no
min_p or repetition penalty)."""
OPENAI_SAMPLING_FIELDS = frozenset({"top_p"})
"""Of TRAINING_SAMPLING, the request fields of OpenAI's own API; the others go in extra_body (vLLM's)."""


def _generation_config_sampling(model_folder: str | None) -> dict[str, Any]:
    """The TRAINING_SAMPLING fields that `model_folder`'s generation_config.json sets to other values (Qwen2.5's and
    Qwen3's instruct models: top_p, top_k and repetition_penalty), by name; {} without a local folder or file."""
    path = os.path.join(model_folder, "generation_config.json") if model_folder else None
    if path is None or not os.path.isfile(path):
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError):
        return {}
    if not isinstance(config, dict):
        return {}
    return {
        key: config[key]
        for key, value in TRAINING_SAMPLING.items()
        if isinstance(config.get(key), (int, float))
        and config[key] != value
        and not (key == "top_k" and config[key] == 0)
    }


def _row_images(
    value: Any, image_dir: str, index: int, min_pixels: int | None = None, max_pixels: int | None = None
) -> list[Any]:
    """A row's images, decoded as RGB (a path, a base64 data URL, bytes or {"bytes"/"path"} dict each) and resized
    into [min_pixels, max_pixels] as training's dataset resizes them (data.min/max_pixels), or [] without any."""
    from verl.data.multimodal import open_image, resize_image, resolve_path

    if value is None:
        return []
    values = value if isinstance(value, list) else [value]
    images = []
    for position, item in enumerate(values):
        try:
            images.append(resize_image(open_image(item, image_dir), min_pixels, max_pixels))
        except FileNotFoundError:
            missing = f"image file {resolve_path(item, image_dir)!r} does not exist (--image-dir)"
            if isinstance(item, str) and os.path.isfile(item):  # training reads it there without data.image_dir
                missing += f"; {item!r} is a file in the working directory, where training reads it: add --image-dir ."
            raise ValueError(f"row {index}: image {position} cannot be read: {missing}") from None
        except (OSError, TypeError, ValueError) as error:
            raise ValueError(f"row {index}: image {position} cannot be read: {error}") from None
    return images


if __name__ == "__main__":
    sys.exit(main())
