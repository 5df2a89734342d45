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
"""The worker configuration tree: actor, critic, reference model, reward and rollout."""

from dataclasses import dataclass, field
from typing import Any

from .actor.config import ActorConfig, FSDPConfig, LoraConfig, ModelConfig, OffloadConfig, OptimConfig
from .critic.config import CriticConfig
from .rollout.config import RolloutConfig


__all__ = [
    "ActorConfig",
    "CriticConfig",
    "FSDPConfig",
    "LoraConfig",
    "ModelConfig",
    "OffloadConfig",
    "OptimConfig",
    "RefConfig",
    "RewardConfig",
    "RolloutConfig",
    "WorkerConfig",
]


@dataclass
class RefConfig:
    fsdp: FSDPConfig = field(default_factory=FSDPConfig)
    """FSDP2 sharding of the frozen reference model."""
    offload: OffloadConfig = field(default_factory=OffloadConfig)
    """Offloading of the reference model's parameters between phases."""
    micro_batch_size_per_device_for_experience: int = 16
    """Derived from worker.actor.micro_batch_size_per_device_for_experience."""
    padding_free: bool = True
    """Derived from worker.actor.padding_free."""
    dynamic_batching: bool = True
    """Derived from worker.actor.dynamic_batching."""
    ulysses_size: int = 1
    """Derived from worker.actor.ulysses_size."""


@dataclass
class RewardConfig:
    reward_function: str | None = None
    """Python file and function that score a response: path/to/file.py:function (function defaults to main)."""
    reward_function_kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra keyword arguments passed to the reward function."""
    routes: dict[str, str] = field(default_factory=dict)
    """Mixed datasets: {value of the row's route_key column: "path/to/file.py:function"}, e.g. {math: ...math_verify.py:
    compute_score, code: ...code.py:compute_score}. Each row is scored by its route's function; rows whose value is
    not a route go to reward_function (an error if it is unset). Keys that only some routes return are averaged
    over the rows that have them; `<route>/overall` is logged per route."""
    route_key: str = "data_source"
    """Dataset column whose value picks the route of a row."""
    routes_kwargs: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Keyword arguments of each route's function: {route: {name: value}}."""
    skip_special_tokens: bool = True
    """Decode responses without special tokens before scoring."""
    num_cpus: int = 1
    """CPUs of the reward Ray actor; sequential functions run in parallel over them."""
    timeout_s: float = 1800.0
    """Longest a batch's scoring may take; past it the run stops with an error naming the reward function (a hung
    function never hangs the run). <= 0 waits forever."""


@dataclass
class WorkerConfig:
    hybrid_engine: bool = True
    """Colocate the actor, the rollout engine and the reference model in one process per device (the only layout
    implemented: false, separate rollout workers, is refused at validation)."""
    actor: ActorConfig = field(default_factory=ActorConfig)
    """The policy being trained."""
    critic: CriticConfig = field(default_factory=CriticConfig)
    """The value model (used by gae)."""
    ref: RefConfig = field(default_factory=RefConfig)
    """The frozen reference policy for the KL term."""
    reward: RewardConfig = field(default_factory=RewardConfig)
    """The reward function."""
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    """The vLLM generation engine."""
