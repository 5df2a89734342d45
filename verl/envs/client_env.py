# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Environments that drive the conversation themselves through an OpenAI-style chat client (the `verifiers` style).

A ChatClientEnv runs a whole episode in its `rollout` coroutine and asks the model for each turn with
`await client.chat.completions.create(...)`. The same class runs in training, where the client is the rollout engine
(`verl.workers.rollout.client_episodes`), and in evaluation against any endpoint (`python -m verl.envs.evaluate`);
README.md's "Multi-turn and tool-use rollouts" has an example.
"""

from typing import Any

from verl.envs.base import Environment, EnvStep


class EpisodeOver(Exception):
    """Raised by the training client when an episode can take no more model turns (the response budget or
    rollout.max_turns is spent); the episode ends there. Let it propagate out of `rollout`."""


class ChatClientEnv(Environment):
    """An environment whose `rollout` coroutine talks to the model through an OpenAI-style async chat client.

    In training the first request must be the prompt `messages` the episode was given, each later one the previous
    request plus the assistant reply it got plus any new messages (user or tool), which are masked out of the loss.
    The training sampling settings apply; a request's `max_tokens` can only lower the turn's length. `verifiers`
    tasksets run through one (verl.envs.verifiers_env.VerifiersEnv).
    """

    async def rollout(self, client: Any, model: str, messages: list[dict[str, Any]], state: dict[str, Any]) -> None:
        """Run one episode from the prompt `messages`; record its outcome in `state` (for `episode_info`)."""
        raise NotImplementedError

    async def release(self) -> None:
        """Release what the episodes of the running event loop shared (tool servers, connections); called on that loop
        when its episodes are over: in training at the end of the run (a rollout worker's episodes share one loop
        across steps) or after a failed rollout call, in evaluation at the end of an episode. Nothing by default."""

    def step(self, state: dict[str, Any], response: str) -> EnvStep:
        raise TypeError(f"{type(self).__name__} is a ChatClientEnv: its episodes run through `rollout`, not `step`.")
