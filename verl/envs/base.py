# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Environments for multi-turn rollouts: after each model turn, `step` returns the messages to add (user replies,
tool results; appended with a zero loss mask by verl.workers.rollout.multi_turn) or ends the episode. README.md's
"Multi-turn and tool-use rollouts" shows how to write and configure one.
"""

import dataclasses
from typing import Any

from verl.utils.module_loading import user_traceback


class EnvCodeError(RuntimeError):
    """An environment's own code raised (its `reset`, `step` or `episode_info`); the message names the environment,
    the hook and the episode, and ends with where the code raised, so it reads whole after crossing Ray."""


class EnvStepTimeoutError(TimeoutError):
    """An environment step (or a client-style episode's work between two model requests) ran past
    worker.rollout.env_step_timeout_s."""


def env_code_error(env: str, hook: str, where: str, error: BaseException) -> EnvCodeError:
    """The EnvCodeError for `error`, raised by environment `env`'s `hook` (for `where`: the row or episode)."""
    return EnvCodeError(
        f"{env}: {hook} raised {type(error).__name__} {where}: {error}. Fix the environment; where it raised (most "
        f"recent call last):\n{user_traceback(error)}"
    )


@dataclasses.dataclass
class EnvStep:
    """What the environment does after a model turn."""

    messages: list[dict[str, Any]]
    """Chat messages to append before the model's next turn (roles user or tool); empty when done."""
    done: bool
    """The episode ends here (the model's last turn is final)."""
    tool_calls: int = 0
    """Tool calls this turn made (logged as env/tool_calls)."""
    tool_errors: int = 0
    """Tool calls that failed, timed out or named no known tool (env/tool_errors)."""


class Environment:
    """The interface. One instance serves every episode of a worker; per-episode data lives in the `state` dict.
    With tensor_parallel_size > 1 the episodes run on the first process of each engine's group, which drives its
    peers. `reset` gets its own copy of the row for each episode (the n episodes of a prompt share no object)."""

    concurrent_steps: int = 1
    """How many episodes' `step` calls may run at once (threads). Raise it when a step waits outside Python (a
    subprocess, a remote call) and keeps its data in `state`."""

    def reset(self, row: dict[str, Any]) -> dict[str, Any]:
        """The state of a new episode for a dataset `row` (its prompt text, `ground_truth` and other columns, and
        `prompt_images`: the prompt's pictures as PIL images, as the model sees them; empty for a text prompt)."""
        return {"row": row}

    def step(self, state: dict[str, Any], response: str) -> EnvStep:
        """React to the model's latest turn (`response`, its decoded text); may update `state`."""
        raise NotImplementedError

    def episode_info(self, state: dict[str, Any]) -> dict[str, float]:
        """Numbers about a finished episode (e.g. {"solved": 1.0}); each becomes the column env_<name>, which the
        reward function reads as extra_info["env_<name>"] and the trainer logs as env/<name>/mean."""
        return {}


class SingleTurnEnv(Environment):
    """One model turn, nothing added."""

    def step(self, state: dict[str, Any], response: str) -> EnvStep:
        return EnvStep(messages=[], done=True)


class MultiTurnEnv(Environment):
    """An environment that replies with messages until it says the episode is done: implement `env_response`."""

    def env_response(self, state: dict[str, Any], response: str) -> tuple[list[dict[str, Any]], bool]:
        """(messages to add, done) after the model's turn `response`."""
        raise NotImplementedError

    def step(self, state: dict[str, Any], response: str) -> EnvStep:
        messages, done = self.env_response(state, response)
        return EnvStep(messages=[] if done else list(messages), done=bool(done))
