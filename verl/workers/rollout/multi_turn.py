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
"""Multi-turn rollouts: all episodes of a batch advance together on the engine, one batched generate call per turn.

Each episode (one of the n samples of a prompt) keeps the token ids of everything after its prompt: the engine's own
ids for the model's turns (loss mask 1) and the chat template's rendering of the environment's messages (loss mask
0). The next turn's prompt is the prompt ids plus those ids, so the engine, and later the actor, reference and
critic, see one and the same token sequence: nothing is decoded and re-tokenized. An episode ends when the
environment says so, when the model stops without its end-of-turn token (truncated), after `max_turns` model turns,
or when the response budget (the rollout's response length, shared by all turns) is spent; finished episodes drop
out of the next generate call.
"""

import dataclasses
from typing import Any

from verl.envs.base import Environment


_MARKER = "\u2063verl-turn-end\u2063"


class ChatContinuation:
    """Token ids that the chat template puts between the end of a model turn and the start of the next one.

    The template closes an assistant message (Qwen: `<|im_end|>\\n`), renders the environment's messages (a user
    reply, tool results) and opens the next assistant turn. The model's generated turn already ends with its
    end-of-turn token, so only the rest of the closing text is added.
    """

    def __init__(self, tokenizer: Any, chat_template: str | None = None) -> None:
        self.tokenizer = tokenizer
        self.chat_template = chat_template
        closed = self._render([{"role": "user", "content": "x"}, {"role": "assistant", "content": _MARKER}], False)
        if _MARKER not in closed:
            raise ValueError("The chat template does not render assistant messages; multi-turn rollouts need one.")
        self.closing = closed[closed.index(_MARKER) + len(_MARKER) :]
        """What the template writes after an assistant message's content."""

    def _render(self, messages: list[dict[str, Any]], generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=generation_prompt, chat_template=self.chat_template
        )

    def ids(self, messages: list[dict[str, Any]], turn_end_text: str) -> list[int]:
        """The ids after a model turn that ended with `turn_end_text` (its decoded end-of-turn token), up to and
        including the opening of the next assistant turn."""
        history = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]
        before = self._render(history, False)
        after = self._render(history + list(messages), True)
        if not after.startswith(before):
            raise ValueError(
                "The chat template renders a conversation differently once messages are added after it; the "
                "environment's turn cannot be appended token for token."
            )
        closing = self.closing
        if turn_end_text and closing.startswith(turn_end_text):
            closing = closing[len(turn_end_text) :]
        return self.tokenizer.encode(closing + after[len(before) :], add_special_tokens=False)


@dataclasses.dataclass
class Episode:
    prompt_input: dict[str, Any]
    """The engine input of the prompt (token ids and any images)."""
    state: dict[str, Any]
    seed: int | None
    ids: list[int] = dataclasses.field(default_factory=list)
    """Everything after the prompt: model and environment tokens."""
    loss_mask: list[int] = dataclasses.field(default_factory=list)
    logprobs: list[float] = dataclasses.field(default_factory=list)
    turns: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    truncated: bool = False
    done: bool = False
    last_turn: str = ""
    """The decoded text of the model's latest turn (its final answer once the episode is done)."""

    def engine_input(self) -> dict[str, Any]:
        return {**self.prompt_input, "prompt_token_ids": list(self.prompt_input["prompt_token_ids"]) + self.ids}


def run_episodes(
    engine: Any,
    env: Environment,
    episodes: list[Episode],
    sampling: dict[str, Any],
    budget: int,
    max_turns: int,
    eos_token_ids: set[int],
    continuation: ChatContinuation,
    tokenizer: Any,
    with_logprobs: bool,
    log_prob_of: Any = None,
    max_tokens_per_turn: int | None = None,
) -> None:
    """Advance every episode to its end (in place); one batched `engine.generate` per turn.

    A model turn ends with an end-of-turn token, or after `max_tokens_per_turn` tokens (then the template's whole
    closing text is added, as environment tokens); a turn cut by the response budget ends the episode (truncated).
    """
    from vllm import SamplingParams

    def turn_limit(episode: Episode) -> int:
        room = budget - len(episode.ids)
        return min(room, max_tokens_per_turn) if max_tokens_per_turn else room

    for turn in range(max_turns):
        active = [episode for episode in episodes if not episode.done]
        if not active:
            break
        params = []
        for episode in active:
            seed = None if episode.seed is None else episode.seed + 7919 * turn
            params.append(SamplingParams(**{**sampling, "n": 1, "max_tokens": turn_limit(episode)}, seed=seed))
        outputs = engine.generate([episode.engine_input() for episode in active], params, use_tqdm=False)
        for episode, output in zip(active, outputs):
            completion = output.outputs[0]
            limit = turn_limit(episode)
            new = list(completion.token_ids)[:limit]
            cut_by_turn_limit = limit < budget - len(episode.ids) and len(new) == limit
            episode.ids += new
            episode.loss_mask += [1] * len(new)
            if with_logprobs:
                episode.logprobs += [log_prob_of(entry, t) for entry, t in zip(completion.logprobs, new)]
            episode.turns += 1
            episode.last_turn = tokenizer.decode(new, skip_special_tokens=True)
            ended = bool(new) and new[-1] in eos_token_ids
            if not (ended or cut_by_turn_limit):  # cut by the budget (or an empty turn): the episode cannot go on
                episode.truncated, episode.done = True, True
                continue
            step = env.step(episode.state, episode.last_turn)
            episode.tool_calls += step.tool_calls
            episode.tool_errors += step.tool_errors
            if step.done or turn == max_turns - 1:
                episode.done = True
                continue
            turn_end = tokenizer.decode(new[-1:], skip_special_tokens=False) if ended else ""
            env_ids = continuation.ids(step.messages, turn_end)
            room = budget - len(episode.ids)
            if len(env_ids) >= room:  # no room for the environment's reply and another model turn
                episode.truncated, episode.done = True, True
                continue
            episode.ids += env_ids
            episode.loss_mask += [0] * len(env_ids)
            if with_logprobs:
                episode.logprobs += [0.0] * len(env_ids)
