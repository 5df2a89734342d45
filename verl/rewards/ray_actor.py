# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The reward Ray actor (`worker.reward.run_in=actor`): launched right after generation and awaited only for the
advantages, so a slow reward overlaps the GPU work. It reserves `num_cpus` CPUs, a sequential function's workers.
"""

from typing import Any

import ray

from verl.protocol import DataProto
from verl.rewards.function import check_reward_function
from verl.rewards.local import LocalReward
from verl.rewards.manager import RewardSettings


RewardActor = ray.remote(concurrency_groups={"control": 1})(LocalReward)
"""The reward actor: one per run, holding the tokenizer and the loaded functions, scoring training and validation
batches one at a time; `where` and `close` run beside a batch being scored (the "control" group's thread), so a hung
function neither hides where it waits nor holds up the run's end."""


class RewardActorStartError(RuntimeError):
    """The reward actor could not be built on its node."""


class ActorReward:
    """A RewardActor behind `LocalReward`'s `submit`, `where` and `close` (worker.reward.run_in=actor)."""

    def __init__(self, actor: Any) -> None:
        self.actor = actor

    def submit(self, data: DataProto) -> Any:
        """Start scoring `data`; returns the ObjectRef of what `compute_reward` returns."""
        return self.actor.compute_reward.remote(data)

    def wait_until_started(self) -> None:
        """Return once the actor is built; a RewardActorStartError with its own error where it could not be (the
        reward file's top level failing on the actor's node: the run found it at the first scoring, after every
        worker and engine had started, reported as a killed process)."""
        try:
            ray.get(self.actor.where.options(concurrency_group="control").remote())
        except ray.exceptions.RayActorError as error:
            lines = [line for line in str(error).splitlines()[1:] if line.strip().strip("^")]
            raise RewardActorStartError(
                "The reward actor (worker.reward.run_in=actor) could not start: "
                + ("\n".join(lines) if lines else str(error))
            ) from None

    def where(self, timeout_s: float = 30.0) -> str:
        """`LocalReward.where` of the actor, or why it did not answer."""
        try:
            return ray.get(self.actor.where.options(concurrency_group="control").remote(), timeout=timeout_s)
        except Exception as error:  # the actor may be gone, or stuck beyond answering: the hang is reported anyway
            return f"(the reward actor did not say: {type(error).__name__}: {error})\n"

    def close(self) -> None:
        stop_actor(self.actor, concurrency_group="control")


def stop_actor(actor: Any, concurrency_group: str | None = None) -> None:
    """Let an actor with a `close` method (the reward or judge actor) stop its own processes (its `close` run in
    `concurrency_group` where given), then kill it; an actor that is gone already is fine."""
    close = actor.close if concurrency_group is None else actor.close.options(concurrency_group=concurrency_group)
    try:
        ray.get(close.remote(), timeout=30)
    except Exception:  # the actor may already be gone; killing it is what matters
        pass
    ray.kill(actor)


def create_reward_actor(config: Any, tokenizer_path: str, trust_remote_code: bool = False) -> Any:
    """Start a RewardActor with `config.num_cpus` CPUs (`config`: RewardConfig's attributes), near the driver. The functions are
    loaded here first, so a bad spec raises in the caller; the actor gets plain RewardSettings."""
    settings = RewardSettings.from_config(config)
    for spec, kwargs in settings.functions().values():
        check_reward_function(spec, kwargs)
    options = {"num_cpus": settings.num_cpus, "scheduling_strategy": near_the_driver()}
    return RewardActor.options(**options).remote(settings, tokenizer_path, trust_remote_code)


def near_the_driver() -> Any:
    """On the driver's node where it has room (soft): the reward files and models the driver checked are there, on a
    cluster without a shared filesystem too."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node_id=ray.get_runtime_context().get_node_id(), soft=True)
