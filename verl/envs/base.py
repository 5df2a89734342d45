# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Environments for multi-turn rollouts: after each model turn, `step` returns the messages to add (user replies,
tool results; appended with a zero loss mask by verl.workers.rollout.multi_turn) or ends the episode. README.md's
"Multi-turn and tool-use rollouts" shows how to write and configure one.
"""

import dataclasses
import logging
import math
import numbers
import threading
from typing import Any

import numpy as np

from verl.utils import stall_report
from verl.utils.module_loading import user_traceback


logger = logging.getLogger(__name__)

RELEASE_TIMEOUT_S = 10.0
"""Longest an environment's `release` may take (a hung one is left with a warning)."""


class EnvCodeError(RuntimeError):
    """An environment's own code raised (its `reset`, `step` or `episode_info`); the message names the environment,
    the hook and the episode, and ends with where the code raised, so it reads whole after crossing Ray."""


class EnvStepTimeoutError(TimeoutError):
    """An environment step (or a client-style episode's work between two model requests) ran past
    worker.rollout.env_step_timeout_s."""


class EnvRowError(ValueError):
    """An environment cannot run a row: the row's data is wrong, not the environment's code (e.g. a verifiers task's
    data that does not match its taskset). Its message says how to fix the data; env_code_error gives no traceback."""


def env_code_error(env: str, hook: str, where: str, error: BaseException) -> EnvCodeError:
    """The EnvCodeError for `error`, raised by environment `env`'s `hook` (for `where`: the row or episode)."""
    if isinstance(error, EnvRowError):  # the data is to fix, which the message says
        return EnvCodeError(f"{env}: {hook} raised {type(error).__name__} {where}: {error}")
    return EnvCodeError(
        f"{env}: {hook} raised {type(error).__name__} {where}: {error}. Fix the environment; where it raised (most "
        f"recent call last):\n{user_traceback(error)}"
    )


def call_env(env: Any, name: str, hook: str, where: str, *args: Any, check: Any = None, timeout_s: float = 0) -> Any:
    """`env.<hook>(*args)`, passed through `check`; what the environment's own code raises, or a result `check`
    refuses, becomes an EnvCodeError naming the environment (`name`), the hook and `where`. With `timeout_s` > 0
    (worker.rollout.env_step_timeout_s) the call runs in a thread of its own, and one still running then is an
    EnvStepTimeoutError showing where it waits (a `reset` that starts a container hung the rollout forever)."""
    if not 0 < timeout_s < math.inf:  # (inf waits forever too: a thread's join raised OverflowError)
        return _checked_call(env, name, hook, where, args, check)
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = _checked_call(env, name, hook, where, args, check)
        except BaseException as error:
            outcome["error"] = error

    thread = threading.Thread(target=run, name=f"env-{hook}", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        stack = stall_report.format_stacks([thread.ident], user_code_only=True)
        raise EnvStepTimeoutError(
            f"{name}: {hook} {where} did not return within worker.rollout.env_step_timeout_s={timeout_s:g} s, so the "
            "rollout stops here instead of hanging. Give what it waits on its own timeout, or raise "
            f"worker.rollout.env_step_timeout_s (<= 0 waits forever). Where it was when the time ran out:\n{stack}"
        )
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def release_env(env: "Environment", name: str) -> None:
    """A step environment's `release()` in a thread of its own, given up after RELEASE_TIMEOUT_S with a warning, as
    is an error it raises: it may neither hide the error that ended the episodes nor hold a shutdown."""

    def run() -> None:
        try:
            env.release()
        except (Exception, SystemExit) as error:
            logger.warning("%s.release did not finish cleanly: %s: %s", name, type(error).__name__, error)

    thread = threading.Thread(target=run, name="env-release", daemon=True)
    thread.start()
    thread.join(RELEASE_TIMEOUT_S)
    if thread.is_alive():
        logger.warning("%s.release did not return within %g s; it is left running.", name, RELEASE_TIMEOUT_S)


def _checked_call(env: Any, name: str, hook: str, where: str, args: tuple, check: Any) -> Any:
    try:
        result = getattr(env, hook)(*args)
        return result if check is None else check(result)
    except (Exception, SystemExit) as error:  # sys.exit in a hook (a test harness) would end the worker unnamed
        raise env_code_error(name, hook, where, error) from error


def checked_state(state: Any) -> Any:
    """`state` of a `reset` call, else TypeError where it is None (a `return` left out: the episode's first `step`
    then failed on None, naming `step` rather than `reset`, or a ChatClientEnv's rollout could record nothing)."""
    if state is None:
        raise TypeError(
            "reset returned None; return the episode's state, a dict (e.g. {'row': row}), which step and "
            "episode_info get"
        )
    return state


STEP_ROLES = ("user", "tool", "system")


def checked_step(result: Any) -> "EnvStep":
    """`result` of a `step` call, else TypeError saying what it is instead (an environment's mistake would otherwise
    surface as an AttributeError inside the rollout, or render as empty turns)."""
    if not isinstance(result, EnvStep):
        raise TypeError(f"step returned {type(result).__name__} {_short(result)}; return an EnvStep")
    if not isinstance(result.messages, list):
        raise TypeError(f"EnvStep.messages is a {type(result.messages).__name__}; give a list of chat messages")
    for index, message in enumerate(result.messages):
        if not isinstance(message, dict) or message.get("role") not in STEP_ROLES:
            raise TypeError(
                f"EnvStep.messages[{index}] is {_short(message)}; each is a dict with a role of {', '.join(STEP_ROLES)}"
            )
        if not isinstance(message.get("content"), (str, list)):
            raise TypeError(
                f"EnvStep.messages[{index}]['content'] is a {type(message.get('content')).__name__}; give text, or a "
                "list of content parts"
            )
    if not isinstance(result.done, (bool, np.bool_)):  # "false" ended the episode
        raise TypeError(f"EnvStep.done is {_short(result.done)}; give True or False")
    result.done = bool(result.done)
    for name in ("tool_calls", "tool_errors"):
        value = getattr(result, name)
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
            raise TypeError(f"EnvStep.{name} is {_short(value)}; give a count (an int, 0 or more)")
    return result


EPISODE_COUNTERS = ("turns", "tool_calls", "tool_errors", "cut_tool_messages", "truncated")
"""What the trainer counts of every episode (columns env_<name>)."""


def checked_info(info: Any) -> dict[str, float]:
    """`info` of an `episode_info` call, else TypeError: a dict of finite numbers by text keys (each becomes a float
    column env_<key>), none of them a counter only the trainer keeps (it replaced the trainer's; the tool counts may
    come from the environment, as from a harness that runs the tools)."""
    if not isinstance(info, dict):
        raise TypeError(f"episode_info returned {type(info).__name__} {_short(info)}; return a dict of numbers")
    info = {key: float(value) if isinstance(value, np.bool_) else value for key, value in info.items()}
    wrong = {key: value for key, value in info.items() if not isinstance(value, numbers.Real)}
    if wrong:
        raise TypeError(f"episode_info's values must be numbers; {_short(wrong)} are not")
    odd = [key for key, value in info.items() if not isinstance(key, str) or not math.isfinite(value)]
    if odd:
        raise TypeError(f"episode_info's keys must be text and its values finite; {_short({k: info[k] for k in odd})}")
    taken = sorted(set(info) & {"turns", "truncated", "cut_tool_messages"})  # (tool counts: a harness's own)
    if taken:
        raise TypeError(f"episode_info's keys {taken} are the trainer's own counters (env_<key>); name them otherwise")
    return info


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


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

    def release(self) -> None:
        """Release what the episodes share across calls (a server or container the class started): called when a
        worker's episodes end (the end of training, a failed rollout call), by the driver after it read the class's
        settings, and at the end of evaluate; it may come more than once, and a later episode may start them again. A ChatClientEnv's `release` is a
        coroutine, run on its episodes' event loop."""


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
