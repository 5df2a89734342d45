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
"""Episodes of a ChatClientEnv (verl.envs.client_env) on the rollout engine.

All episodes' `rollout` coroutines run on one event loop, each with a client answered by the engine; whenever every
running episode waits for the model, their requests go to the engine as one batched generate call.
"""

import asyncio
import logging
import time
import types
import uuid
from typing import Any

from verl.envs.client_env import ChatClientEnv, EpisodeOver
from verl.workers.rollout.multi_turn import Episode, TurnRunner


logger = logging.getLogger(__name__)


def _plain_messages(messages: Any, episode_index: int) -> list[dict[str, Any]]:
    if not isinstance(messages, list) or not all(isinstance(m, dict) and "role" in m for m in messages):
        raise ValueError(
            f"Episode {episode_index}: `messages` must be a list of {{'role': ..., 'content': ...}} dicts, got "
            f"{type(messages).__name__}."
        )
    return [dict(message) for message in messages]


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a.get("role") == b.get("role") and (a.get("content") or "") == (b.get("content") or "")


def _reply(text: str, finish_reason: str, model: str, prompt_tokens: int, completion_tokens: int) -> Any:
    """An `openai` ChatCompletion for the reply (the openai package comes with vLLM)."""
    from openai.types.chat import ChatCompletion

    return ChatCompletion.model_validate(
        {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish_reason}
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }
    )


class _Completions:
    def __init__(self, driver: "ClientEpisodes", index: int) -> None:
        self._driver, self._index = driver, index

    async def create(
        self,
        *,
        messages: list[dict[str, Any]],
        model: str | None = None,
        max_tokens: int | None = None,
        max_completion_tokens: int | None = None,
        n: int | None = None,
        tools: list[dict[str, Any]] | None = None,
        **ignored: Any,
    ) -> Any:
        """Sampling options other than the token limit are the rollout's (temperature, top_p, ...) and are ignored."""
        if n not in (None, 1):
            raise ValueError(f"n={n}: in training each episode samples one reply per request (rollout.n sets groups).")
        limit = max_completion_tokens if max_completion_tokens is not None else max_tokens
        return await self._driver.request(self._index, messages, limit, tools)


class EngineChatClient:
    """The `client.chat.completions.create(...)` of one episode, answered by the rollout engine."""

    def __init__(self, driver: "ClientEpisodes", index: int) -> None:
        self.chat = types.SimpleNamespace(completions=_Completions(driver, index))


class ClientEpisodes:
    """Runs the `rollout` coroutines of a batch of episodes against the engine (`multi_turn.TurnRunner`'s turns).

    The messages of a request are checked against what the episode's tokens already hold, so the sequence the
    trainer gets is exactly what the engine saw: the first request must render (chat template, generation prompt) to
    the prompt's token ids; a later one must repeat the previous request and the reply it got, and whatever follows
    is rendered as an environment turn (loss mask 0).
    """

    def __init__(
        self,
        runner: TurnRunner,
        env: ChatClientEnv,
        episodes: list[Episode],
        prompts: list[list[dict[str, Any]]],
        model: str,
    ) -> None:
        self.runner, self.env, self.episodes, self.prompts, self.model = runner, env, episodes, prompts, model
        self.sent: list[list[dict[str, Any]] | None] = [None] * len(episodes)
        """Per episode: the last request's messages plus the reply it got (what the next request must repeat)."""
        self.turn_end: list[str] = [""] * len(episodes)
        self.pending: dict[int, tuple[int, asyncio.Future]] = {}
        self.changed: asyncio.Event | None = None
        self.working_since = [0.0] * len(episodes)
        """Per episode: when its coroutine last got control back (its start, or the answer to its request)."""

    def run(self, loop: asyncio.AbstractEventLoop) -> None:
        """Every episode to its end (in place), on `loop`, which then keeps what the episodes shared (a verifiers
        taskset's tool servers) for the next call's episodes; the environment releases it when a call fails or when
        the loop's owner says (`VLLMRollout.close_envs`)."""
        try:
            loop.run_until_complete(self._main())
        except BaseException:
            loop.run_until_complete(release_within(self.env, CLOSE_TIMEOUT_S))
            raise

    async def _main(self) -> None:
        self.changed = asyncio.Event()
        self.working_since = [time.monotonic()] * len(self.episodes)
        tasks = [asyncio.ensure_future(self._episode(index)) for index in range(len(self.episodes))]
        for task in tasks:
            task.add_done_callback(lambda _: self.changed.set())
        try:
            while True:
                for task in tasks:
                    if task.done() and task.exception() is not None:
                        raise task.exception()
                live = sum(not task.done() for task in tasks)
                if not live:
                    return
                if len(self.pending) < live:  # some episode is still working (e.g. running a tool)
                    self.changed.clear()
                    await self._wait_for_change(tasks)
                    continue
                self._answer_pending()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _wait_for_change(self, tasks: list[asyncio.Future]) -> None:
        """Until an episode sends a request or ends; a TimeoutError once one has worked (between two model requests)
        longer than the runner's env_step_timeout_s. A coroutine that blocks the event loop itself (a synchronous
        sleep or call) cannot be interrupted: only awaits are."""
        timeout = self.runner.env_step_timeout_s
        if timeout <= 0:
            await self.changed.wait()
            return
        working = [index for index, task in enumerate(tasks) if not task.done() and index not in self.pending]
        first = min(working, key=lambda index: self.working_since[index])
        try:
            remaining = self.working_since[first] + timeout - time.monotonic()
            await asyncio.wait_for(self.changed.wait(), max(remaining, 0.0))
        except asyncio.TimeoutError:
            raise self.runner.env_timeout_error(first, self.episodes[first].turns) from None

    async def _episode(self, index: int) -> None:
        episode = self.episodes[index]
        client = EngineChatClient(self, index)
        try:
            await self.env.rollout(client, self.model, [dict(m) for m in self.prompts[index]], episode.state)
        except EpisodeOver:
            pass
        except Exception as error:
            raise RuntimeError(
                f"{type(self.env).__name__}.rollout failed in episode {index} (turn {episode.turns + 1}): "
                f"{type(error).__name__}: {error}"
            ) from error
        finally:
            episode.done = True

    def _answer_pending(self) -> None:
        order = sorted(self.pending)
        requests, self.pending = self.pending, {}
        episodes = [self.episodes[index] for index in order]
        limits = [requests[index][0] for index in order]
        for index, episode, completion, limit in zip(order, episodes, self.runner.generate(episodes, limits), limits):
            before = len(episode.prompt_input["prompt_token_ids"]) + len(episode.engine_ids), len(episode.ids)
            turn_end = self.runner.add_model_turn(episode, completion, limit)
            self.turn_end[index] = turn_end or ""
            text = episode.last_turn
            self.sent[index] = self.sent[index] + [{"role": "assistant", "content": text}]
            finish = "stop" if turn_end else "length"
            reply = _reply(text, finish, self.model, before[0], len(episode.ids) - before[1])
            requests[index][1].set_result(reply)
            self.working_since[index] = time.monotonic()

    async def request(self, index: int, messages: Any, max_tokens: int | None, tools: Any) -> Any:
        episode = self.episodes[index]
        if index in self.pending:
            raise ValueError(f"Episode {index} sent a request while its previous one was unanswered; await each.")
        if episode.done or episode.turns >= self.runner.max_turns:
            raise EpisodeOver(
                f"episode {index} has no model turns left (rollout.max_turns={self.runner.max_turns} or the response "
                "budget)"
            )
        messages = _plain_messages(messages, index)
        if self.sent[index] is None:
            self._check_prompt(index, messages, tools)
        else:
            self._add_environment_messages(index, messages)
        self.sent[index] = messages
        if max_tokens is not None and max_tokens < 1:
            raise ValueError(f"Episode {index}: max_tokens={max_tokens} must be positive.")
        future = asyncio.get_running_loop().create_future()
        self.pending[index] = (self.runner.turn_limit(episode, max_tokens), future)
        self.changed.set()
        return await future

    def _check_prompt(self, index: int, messages: list[dict[str, Any]], tools: Any) -> None:
        check_first_request(self.runner, self.episodes[index], index, messages, tools)

    def _add_environment_messages(self, index: int, messages: list[dict[str, Any]]) -> None:
        add_environment_messages(
            self.runner, self.episodes[index], index, self.sent[index], messages, self.turn_end[index]
        )


def check_first_request(
    runner: TurnRunner, episode: Episode, index: int, messages: list[dict[str, Any]], tools: Any
) -> None:
    """An episode's first request must render (chat template, generation prompt) to its prompt's token ids."""
    continuation = runner.continuation
    extra = {"tools": tools} if tools else {}
    text = continuation.tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True, chat_template=continuation.chat_template, **extra
    )
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
    if len(messages) <= len(sent) or not all(_same(a, b) for a, b in zip(messages, sent)):
        changed = next((i for i, (a, b) in enumerate(zip(messages, sent)) if not _same(a, b)), len(messages))
        raise ValueError(
            f"Episode {index}: a request must repeat the conversation so far (the previous request and the reply "
            f"it got, unchanged) and add messages after it; message {changed} differs or nothing was added."
        )
    if not runner.add_environment_turn(episode, messages[len(sent) :], turn_end):
        raise EpisodeOver(f"episode {index}: the response budget is spent")


def run_client_episodes(
    runner: TurnRunner,
    env: ChatClientEnv,
    episodes: list[Episode],
    prompts: list[list[dict[str, Any]]],
    model: str,
    loop: asyncio.AbstractEventLoop,
) -> None:
    """Run `env.rollout` for every episode (prompt messages `prompts[i]`) on the engine (see `ClientEpisodes`)."""
    ClientEpisodes(runner, env, episodes, prompts, model).run(loop)


CLOSE_TIMEOUT_S = 10.0
"""Longest an environment's `release` may take when its episodes' loop closes (a hung one is left, with a warning)."""


async def release_within(env: ChatClientEnv, timeout_s: float) -> None:
    """`env.release()`, given up after `timeout_s` with a warning: a release that fails or hangs must not hide the
    error that ended the episodes, nor hold a shutdown."""
    try:
        await asyncio.wait_for(env.release(), timeout_s)
    except Exception as err:
        logger.warning("%s.release did not finish cleanly: %s: %s", type(env).__name__, type(err).__name__, err)
