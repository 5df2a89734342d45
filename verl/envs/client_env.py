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
"""Environments that drive the conversation themselves through an OpenAI-style chat client (the `verifiers` style).

Instead of answering one model turn at a time (`step`), a ChatClientEnv runs a whole episode in its `rollout`
coroutine and asks the model for each turn with `await client.chat.completions.create(model=..., messages=...)`:

    class Quiz(ChatClientEnv):
        async def rollout(self, client, model, messages, state):
            reply = await client.chat.completions.create(model=model, messages=messages)
            messages = messages + [{"role": "assistant", "content": reply.choices[0].message.content}]
            if "42" not in reply.choices[0].message.content:
                messages.append({"role": "user", "content": "Think again."})
                reply = await client.chat.completions.create(model=model, messages=messages)
            state["solved"] = "42" in reply.choices[0].message.content

The same object runs in training and in evaluation. In training (`worker.rollout.env=quiz.py:Quiz`) the client is
the rollout engine: the requests of all episodes are answered together, one batched generate call whenever every
running episode waits for the model, and the token ids of the conversation are tracked exactly (nothing is
re-tokenized): the first request must be the prompt `messages` the episode was given, each later one the previous
request plus the assistant reply it got plus any new messages (user or tool), which are rendered by the chat template
and masked out of the loss. The training sampling settings (rollout temperature, top_p, ...) apply; a request's
`max_tokens` can only lower the turn's length. `python -m verl.envs.evaluate` runs `rollout` with a real
`openai.AsyncOpenAI` client against `python -m verl.serve` or any other endpoint.

A `verifiers` environment's own rollout method has this shape (client, model, prompt messages); wrap it in a
ChatClientEnv subclass whose `rollout` calls it and stores what its rubric needs in `state`.
"""

from typing import Any

from verl.envs.base import Environment, EnvStep


class EpisodeOver(Exception):
    """Raised by the training client when an episode can take no more model turns (the response budget or
    rollout.max_turns is spent); the episode ends there. Let it propagate out of `rollout`."""


class ChatClientEnv(Environment):
    """An environment whose `rollout` coroutine talks to the model through an OpenAI-style async chat client."""

    async def rollout(self, client: Any, model: str, messages: list[dict[str, Any]], state: dict[str, Any]) -> None:
        """Run one episode from the prompt `messages`; record its outcome in `state` (for `episode_info`)."""
        raise NotImplementedError

    def step(self, state: dict[str, Any], response: str) -> EnvStep:
        raise TypeError(f"{type(self).__name__} is a ChatClientEnv: its episodes run through `rollout`, not `step`.")
