# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Environments that drive the conversation through an OpenAI-style chat client (the `verifiers` style): `rollout`
runs a whole episode, the client being the rollout engine in training (verl.workers.rollout.client_episodes) or any
endpoint in `python -m verl.envs.evaluate`. README.md's "Multi-turn and tool-use rollouts" has an example.
"""

import time
import types
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from verl.envs.base import Environment, EnvStep


def chat_client(create: Callable[..., Awaitable[Any]]) -> Any:
    """An OpenAI-style async client whose `chat.completions.create(**request)` is `create`."""
    return types.SimpleNamespace(chat=types.SimpleNamespace(completions=types.SimpleNamespace(create=create)))


def chat_completion(
    message: dict[str, Any], finish_reason: str, model: str, prompt_tokens: int, completion_tokens: int
) -> Any:
    """An `openai` ChatCompletion for the reply `message` (the openai package comes with vLLM)."""
    from openai.types.chat import ChatCompletion

    return ChatCompletion.model_validate(
        {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }
    )


class EpisodeOver(Exception):
    """Raised by the client when the response budget or max_turns is spent; let it propagate out of `rollout`."""


class ChatClientEnv(Environment):
    """An environment whose `rollout` coroutine talks to the model through an OpenAI-style async chat client.

    In training the first request must be the episode's prompt `messages`, and each later one the previous request
    plus its reply plus new (loss-masked) messages. Training's sampling applies; `max_tokens` can only lower a turn.
    """

    async def rollout(self, client: Any, model: str, messages: list[dict[str, Any]], state: dict[str, Any]) -> None:
        """Run one episode from the prompt `messages`; record its outcome in `state` (for `episode_info`)."""
        raise NotImplementedError

    async def release(self) -> None:
        """Release what the running event loop's episodes shared (tool servers, connections), on that loop once they
        are over: at the end of training or a failed rollout call, after each evaluation episode."""

    def step(self, state: dict[str, Any], response: str) -> EnvStep:
        raise TypeError(f"{type(self).__name__} is a ChatClientEnv: its episodes run through `rollout`, not `step`.")


def reply_reasoning(message: Any) -> str | None:
    """The reasoning an endpoint's reasoning parser took out of a reply message (`reasoning`, or the older
    `reasoning_content`), or None."""
    return getattr(message, "reasoning", None) or getattr(message, "reasoning_content", None)
