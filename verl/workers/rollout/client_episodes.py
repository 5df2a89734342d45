# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Client-style episodes (a `ChatClientEnv`, e.g. a verifiers taskset) in the request loop, in every mode.

Each episode is the environment's `rollout` coroutine, on an event loop thread for as long as it lasts (across
steps); its client's `create` hands each request to the request loop, which checks it (the first must render to the
prompt; a later one must repeat the conversation and add environment messages, loss mask 0), submits it as one engine
request among the others, and answers when the turn is done. A busy episode never holds the others back.
"""

import asyncio
import json
import logging
import threading
import time
import types
from dataclasses import dataclass, field
from typing import Any

from verl.envs.base import RELEASE_TIMEOUT_S, env_code_error
from verl.envs.client_env import ChatClientEnv, EpisodeOver, chat_completion
from verl.envs.tools import ToolCallFormat, assistant_message, tool_call_format
from verl.workers.rollout.multi_turn import Episode, TurnHooks, TurnRunner, record_messages
from verl.workers.rollout.request_loop import Group, Sample


logger = logging.getLogger(__name__)


def _plain_messages(messages: Any, episode_index: int) -> list[dict[str, Any]]:
    if not isinstance(messages, list) or not all(isinstance(m, dict) and "role" in m for m in messages):
        raise ValueError(
            f"Episode {episode_index}: `messages` must be a list of {{'role': ..., 'content': ...}} dicts, got "
            f"{type(messages).__name__}."
        )
    for number, message in enumerate(messages):
        content = message.get("content")
        if not (content is None or isinstance(content, str) or _content_parts(content)):
            raise ValueError(
                f"Episode {episode_index}: message {number}'s content must be a string or a list of content parts "
                f"(dicts with a 'type'), got {type(content).__name__} {content!r:.80}."
            )
    return [dict(message) for message in messages]


def _content_parts(content: Any) -> bool:
    return isinstance(content, list) and all(isinstance(part, dict) and "type" in part for part in content)


def _calls(message: dict[str, Any]) -> list[tuple[Any, Any]]:
    """A message's tool calls as (name, arguments) pairs, whether given as dicts or as openai objects."""
    calls = []
    for call in message.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, dict) else getattr(call, "function", None)
        if isinstance(function, dict):
            calls.append((function.get("name"), function.get("arguments")))
        else:
            calls.append((getattr(function, "name", None), getattr(function, "arguments", None)))
    return calls


def _same(message: dict[str, Any], sent: dict[str, Any]) -> bool:
    """`message` repeats `sent`. A reply the client gave (sent["reply_text"]: the model's text) is repeated by the
    message it returned (its calls as `tool_calls`), or by the model's whole text as content."""
    if message.get("role") != sent.get("role"):
        return False
    content = message.get("content") or ""
    if content == (sent.get("content") or "") and _calls(message) == _calls(sent):
        return True
    return "reply_text" in sent and content == sent["reply_text"] and not message.get("tool_calls")


REFUSED_OPTIONS = {
    "stop": "stop strings are not applied in training (the engine samples token ids, a turn ends at the chat "
    "template's end of turn); cut the reply in the environment instead",
    "response_format": "structured outputs are not applied in training",
    "logprobs": "replies carry no log-probs in training",
    "top_logprobs": "replies carry no log-probs in training",
    "stream": "replies are not streamed in training",
}
"""Request options that would change what a reply holds, which training does not apply: a request that sets one
(other than to None or False) is refused, so an episode cannot behave one way in evaluation and another here."""


class EngineChatClient:
    """The `client.chat.completions.create(...)` of one episode, answered by the rollout engine."""

    def __init__(self, turns: "ClientTurns", conversation: "_Conversation") -> None:
        self._turns, self._conversation = turns, conversation
        self.chat = types.SimpleNamespace(completions=self)

    async def create(
        self,
        *,
        messages: list[dict[str, Any]],
        model: str | None = None,
        max_tokens: int | None = None,
        max_completion_tokens: int | None = None,
        n: int | None = None,
        tools: list[dict[str, Any]] | None = None,
        tool_choice: Any = None,
        **ignored: Any,
    ) -> Any:
        """Hand the request to the request loop and wait for its reply. Sampling options other than the token limit
        are the rollout's (temperature, top_p, seed, ...) and are ignored; options that change what a reply holds
        (REFUSED_OPTIONS, a forced `tool_choice`, `parallel_tool_calls=False`) and chat template variables (`extra_body={"chat_template_kwargs":
        ...}`) other than the run's data.chat_template_kwargs are refused. With `tools`, the reply's tool calls are
        read as `verl.serve` reads them (`tool_calls`, finish_reason "tool_calls")."""
        if n not in (None, 1):
            raise ValueError(f"n={n}: in training each episode samples one reply per request (rollout.n sets groups).")
        for key, why in REFUSED_OPTIONS.items():
            if ignored.get(key) not in (None, False, []):
                raise ValueError(f"{key}={ignored[key]!r}: {why}. Leave it out of the request.")
        if tool_choice not in (None, "auto", "none"):
            raise ValueError(
                f"tool_choice={tool_choice!r}: forced tool calls are not applied in training; use 'auto' (or leave "
                "it out) and let the model choose."
            )
        if ignored.get("parallel_tool_calls") is False:
            raise ValueError(
                "parallel_tool_calls=False: in training a reply's calls are all read (the engine's tokens hold every "
                "call the model wrote); leave it out of the request."
            )
        asked = (ignored.get("extra_body") or {}).get("chat_template_kwargs")
        run = self._turns.runner.continuation.template_kwargs
        if asked is not None and dict(asked) != run:
            raise ValueError(
                f"chat_template_kwargs={asked}: in training every turn is rendered with the run's "
                f"data.chat_template_kwargs={run}; set them there, or leave them out of the request."
            )
        limit = max_completion_tokens if max_completion_tokens is not None else max_tokens
        future = asyncio.get_running_loop().create_future()
        # under "none" the prompt still shows the tools (as vLLM renders it), and no call is read from the reply
        calls_read = tools if tool_choice != "none" else None
        self._turns.post(("request", self._conversation, messages, limit, tools, calls_read, future))
        return await future


def check_first_request(
    runner: TurnRunner, episode: Episode, index: int, messages: list[dict[str, Any]], tools: Any
) -> None:
    """An episode's first request must render (chat template, generation prompt) to its prompt's token ids."""
    continuation = runner.continuation
    text = continuation.render(messages, True, tools)
    ids = continuation.tokenizer.encode(text, add_special_tokens=False)
    prompt_ids = list(episode.prompt_input["prompt_token_ids"])
    if ids != prompt_ids:
        at = next((i for i, (a, b) in enumerate(zip(ids, prompt_ids)) if a != b), min(len(ids), len(prompt_ids)))
        raise ValueError(
            f"Episode {index}: the first request's messages render to {len(ids)} tokens that differ from the "
            f"dataset prompt's {len(prompt_ids)} from token {at} on; start the conversation with the `messages` "
            "that rollout() was given (tools, if any, as the dataset renders them)."
        )


def add_environment_messages(
    runner: TurnRunner,
    episode: Episode,
    index: int,
    sent: list[dict[str, Any]],
    messages: list[dict[str, Any]],
    turn_end: str,
) -> None:
    """A later request must repeat what was `sent` (the previous request and its reply) and add messages after it:
    those become the episode's environment turn; EpisodeOver when they leave no room for a model turn."""
    if not runner.add_environment_turn(episode, added_messages(index, sent, messages), turn_end):
        raise EpisodeOver(f"episode {index}: the response budget is spent")


def added_messages(index: int, sent: list[dict[str, Any]], messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages a later request adds after what was `sent`; ValueError unless it repeats that unchanged."""
    changed = next((i for i, (a, b) in enumerate(zip(messages, sent)) if not _same(a, b)), None)
    if changed is None and len(messages) == len(sent):
        raise ValueError(
            f"Episode {index}: the request repeats the previous request and its reply without a new message (a "
            "retry after a timeout?); a request must add the environment's messages after the reply it got."
        )
    if changed is not None or len(messages) < len(sent):
        changed = len(messages) if changed is None else changed
        raise ValueError(
            f"Episode {index}: a request must repeat the conversation so far (the previous request and the reply "
            f"it got, unchanged) and add messages after it; message {changed} differs or nothing was added."
        )
    return messages[len(sent) :]


async def release_within(env: ChatClientEnv, timeout_s: float) -> None:
    """`env.release()`, given up after `timeout_s` with a warning, so it can neither hide the error that ended the
    episodes nor hold a shutdown."""
    try:
        await asyncio.wait_for(env.release(), timeout_s)
    except Exception as err:
        logger.warning("%s.release did not finish cleanly: %s: %s", type(env).__name__, type(err).__name__, err)


@dataclass
class _Conversation:
    group: Group
    sample: Sample
    sent: list[dict[str, Any]] | None = None
    """The last request's messages plus the reply it got (what the next request must repeat)."""
    turn_end: str = ""
    request: tuple[asyncio.Future, int, Any] | None = None
    """The request waiting for the engine: the coroutine's future, the turn's token limit and the tools whose calls
    are read from the reply (None under tool_choice "none")."""
    asked: bool = False
    """The coroutine has sent a request (one that was accepted)."""
    working_since: float = field(default_factory=time.monotonic)
    """When the coroutine last got control back (its start, its latest reply, or a refusal of its request)."""
    done: bool = False
    tools: str | None = None
    """The first request's tools as JSON: the model's context shows their schemas, so later requests keep them."""


class ClientTurns(TurnHooks):
    """The request loop's hooks (see `multi_turn.EpisodeTurns`) for client-style episodes."""

    def __init__(self, runner: TurnRunner, env: ChatClientEnv, model: str) -> None:
        super().__init__(runner)
        self.env, self.model = env, model
        self.tool_format: ToolCallFormat | None = getattr(env, "tool_format", None)
        """How the model writes tool calls: the environment's (the rollout sets it from the chat template), else found
        at the first request with `tools`."""
        self._warned_silent = False
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name="client-episodes", daemon=True).start()
        self.conversations: dict[int, _Conversation] = {}
        """id(sample) -> its episode's conversation, while its coroutine runs."""
        self._inbox: list[tuple] = []
        self._lock = threading.Lock()
        self._posted = threading.Event()

    def post(self, event: tuple) -> None:
        with self._lock:
            self._inbox.append(event)
        self._posted.set()

    def start(self, group: Group, sample: Sample, messages: list[dict[str, Any]]) -> None:
        conversation = _Conversation(group, sample)
        self.conversations[id(sample)] = conversation
        asyncio.run_coroutine_threadsafe(self._episode(conversation, [dict(m) for m in messages]), self.loop)

    async def _episode(self, conversation: _Conversation, messages: list[dict[str, Any]]) -> None:
        client = EngineChatClient(self, conversation)
        error = None
        try:
            await self.env.rollout(client, self.model, messages, conversation.sample.episode.state)
        except EpisodeOver:
            pass
        except (Exception, SystemExit) as err:
            sample = conversation.sample
            where = f"in episode {sample.index} (turn {sample.episode.turns + 1})"
            error = env_code_error(self.runner.env_name, "rollout", where, err)
            error.__cause__ = err
        self.post(("done", conversation, error))

    def _answer(self, future: asyncio.Future, reply: Any = None, error: BaseException | None = None) -> None:
        def settle() -> None:
            if future.done():
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(reply)

        self.loop.call_soon_threadsafe(settle)

    @property
    def pending(self) -> int:
        """Episodes whose coroutines are at work (none of their requests in the engine or ready for it)."""
        return sum(not c.done and c.request is None for c in self.conversations.values())

    def waiting(self, sample: Sample) -> bool:
        conversation = self.conversations.get(id(sample))
        return conversation is None or conversation.request is None

    def _turn_limit(self, group: Group, sample: Sample) -> int:
        return self.conversations[id(sample)].request[1]

    def turn_done(self, group: Group, sample: Sample) -> bool:
        """The model's turn is complete: add it and answer the coroutine; the episode ends when the coroutine does."""
        conversation = self.conversations[id(sample)]
        episode = sample.episode
        future, _, tools = conversation.request
        conversation.request = None
        prompt_tokens = len(episode.prompt_input["prompt_token_ids"]) + len(episode.engine_ids)
        before = len(episode.ids)
        turn_end = self._end_model_turn(group, sample)
        conversation.turn_end = turn_end or ""
        text = episode.last_turn
        message = assistant_message(text, self.tool_format.for_tools(tools) if tools else None)
        conversation.sent = conversation.sent + [{**message, "reply_text": text}]
        stopped = turn_end or (episode.done and not episode.truncated)  # the template's end or the request's stop
        finish = "tool_calls" if message.get("tool_calls") else "stop" if stopped else "length"
        reply = chat_completion(message, finish, self.model, prompt_tokens, len(episode.ids) - before)
        conversation.working_since = time.monotonic()
        self._answer(future, reply)
        return False

    def poll(self) -> tuple[bool, bool]:
        """Take the coroutines' new requests (checked, environment messages added) and finished episodes; (a group
        became complete, a request is ready). An episode's error, or work past env_step_timeout_s, stops the rollout."""
        with self._lock:
            events, self._inbox = self._inbox, []
            self._posted.clear()
        completed, ready = False, False
        for event in events:
            if event[0] == "done":
                _, conversation, error = event
                if error is None and conversation.request is not None:
                    error = self._episode_error(
                        conversation, "returned while its request was unanswered (await each reply)"
                    )
                if error is not None:
                    raise error
                if not conversation.asked and not self._warned_silent:
                    self._warned_silent = True
                    logger.warning(
                        "%s: episode %d's rollout returned without asking the model anything: its sample has an "
                        "empty response (said once).",
                        self.runner.env_name,
                        conversation.sample.index,
                    )
                conversation.done = True
                conversation.sample.episode.end()
                conversation.sample.finished = True
                del self.conversations[id(conversation.sample)]
                completed = completed or conversation.group.complete
                continue
            _, conversation, messages, max_tokens, tools, calls_read, future = event
            try:
                limit = self._check(conversation, messages, max_tokens, tools)
            # the coroutine gets it, from its client's create (TypeError, NotImplementedError: an image part that
            # holds no image, a video part)
            except (EpisodeOver, ValueError, TypeError, NotImplementedError) as err:
                # the coroutine has control back from now (a refusal read after a pause between asynchronous calls,
                # a training step, must not count that pause as its work)
                conversation.working_since = time.monotonic()
                self._answer(future, error=err)
                continue
            conversation.request, conversation.asked = (future, limit, calls_read), True
            ready = True
        timeout = self.runner.env_step_timeout_s
        if timeout > 0:
            now = time.monotonic()
            for conversation in self.conversations.values():
                if conversation.request is None and now - conversation.working_since > timeout:
                    raise self.runner.env_timeout_error(conversation.sample.index, conversation.sample.episode.turns)
        return completed, ready

    def _check(self, conversation: _Conversation, messages: Any, max_tokens: int | None, tools: Any) -> int:
        sample, episode = conversation.sample, conversation.sample.episode
        runner = self._for(conversation.group)
        if episode.done or episode.turns >= runner.max_turns:
            if not episode.done and conversation.sent is not None:  # kept as cut, as a step environment's are
                added = added_messages(sample.index, conversation.sent, _plain_messages(messages, sample.index))
                episode.end()
                record_messages(episode, added, cut=True)
            raise EpisodeOver(
                f"episode {sample.index} has no model turns left (rollout.max_turns={runner.max_turns} or the "
                "response budget)"
            )
        if conversation.request is not None:  # its reply would come from a context this request does not hold
            raise ValueError(
                f"Episode {sample.index}: a request came while the previous one was unanswered; an episode is one "
                "conversation: await each reply before the next request."
            )
        if max_tokens is not None and (
            not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1
        ):
            raise ValueError(f"Episode {sample.index}: max_tokens={max_tokens!r} must be a positive integer.")
        messages = _plain_messages(messages, sample.index)
        offered = json.dumps(tools, sort_keys=True, default=str) if tools else None
        if conversation.sent is None:
            check_first_request(runner, episode, sample.index, messages, tools)
            conversation.tools = offered
        elif offered != conversation.tools:  # its calls would be read against schemas the model never saw
            raise ValueError(
                f"Episode {sample.index}: the request offers other tools than the episode's first request; the "
                "model's context holds the first request's tool schemas (rendered once, with the prompt): offer the "
                "same tools on every request of an episode."
            )
        else:
            before = len(episode.ids)
            add_environment_messages(runner, episode, sample.index, conversation.sent, messages, conversation.turn_end)
            sample.episode_versions += [-1] * (len(episode.ids) - before)  # environment tokens
        if tools and self.tool_format is None:
            try:
                continuation = runner.continuation
                self.tool_format = tool_call_format(continuation.tokenizer, None, continuation.template_kwargs)
            except NotImplementedError as err:
                raise ValueError(f"Episode {sample.index}: the request offers tools, and {err}") from None
            for each in (self.runner, *self._runners.values()):  # the turns record their calls, as step episodes do
                each.tool_format = each.tool_format or self.tool_format
        conversation.sent = messages
        return runner.turn_limit(episode, max_tokens)

    def _episode_error(self, conversation: _Conversation, what: str) -> Exception:
        sample = conversation.sample
        return env_code_error(
            self.runner.env_name, "rollout", f"in episode {sample.index} (turn {sample.episode.turns + 1})",
            RuntimeError(what),
        )  # fmt: skip

    def close(self) -> None:
        """Cancel every coroutine, let the environment release what its episodes shared (at most RELEASE_TIMEOUT_S),
        and stop the event loop's thread."""

        async def cancel_all() -> None:
            tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await release_within(self.env, RELEASE_TIMEOUT_S)

        self.conversations.clear()
        try:
            asyncio.run_coroutine_threadsafe(cancel_all(), self.loop).result(2 * RELEASE_TIMEOUT_S)
        except Exception:  # a coroutine that ignores its cancellation must not hold the shutdown
            logger.warning("Closing the client episodes of %s did not finish cleanly.", type(self.env).__name__)
        self.loop.call_soon_threadsafe(self.loop.stop)

    def wait(self, timeout_s: float) -> None:
        """Until a coroutine posts a request or ends (or `timeout_s`)."""
        self._posted.wait(timeout_s)
