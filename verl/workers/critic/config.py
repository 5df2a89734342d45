# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Configuration of the critic (value model), used by PPO with GAE.

`validate(prefix)` checks the section's own values, as the actor's does; rules that involve other sections (its
batch sizes, its model being required by gae) are `verl.trainer.config`'s.
"""

import dataclasses
from dataclasses import dataclass, field

from verl.models.config import FSDPConfig, ModelConfig, OffloadConfig
from verl.utils.config import require_positive
from verl.utils.optim import OptimConfig
from verl.workers.actor.config import validate_trained_section


@dataclass
class CriticConfig:
    strategy: str = "fsdp"
    """Training backend; fsdp (FSDP2) is the one implemented."""
    global_batch_size: int = 256
    """Prompts per optimizer step (multiplied by rollout.n at runtime)."""
    micro_batch_size_per_device_for_update: int | None = None
    """Samples per forward/backward in the update. Unset (null), each worker picks for its device as
    worker.actor.micro_batch_size_per_device_for_update does (on the CPU 8, or 16 without fsdp.gather_once_per_pass;
    4 on CUDA; lowered to a divisor of the rank's mini-batch without dynamic batching)."""
    micro_batch_size_per_device_for_experience: int = 16
    """Samples per forward when computing values."""
    max_grad_norm: float = 1.0
    """Gradient clipping threshold."""
    cliprange_value: float = 0.5
    """Value clipping: new values stay within old values +- cliprange_value."""
    loss_avg_mode: str = "token-mean"
    """How the value loss is averaged (same modes as the actor's, a user's 'path/to/file.py:function' too)."""
    ppo_epochs: int = 1
    """Passes over each rollout batch."""
    padding_free: bool = False
    """Pack the sequences of a micro-batch into one row without padding, where model.attn_implementation has a varlen
    kernel (auto, varlen, flash_attention_2); otherwise the forward runs on padded rows."""
    dynamic_batching: bool = True
    """Token-budget micro-batches (micro-batch size x max length), as for the actor."""
    ulysses_size: int = 1
    """Ulysses sequence-parallel degree of the critic, as worker.actor.ulysses_size is the actor's (same rules)."""
    model: ModelConfig = field(default_factory=ModelConfig)
    """The value model; usually the same checkpoint as the actor, with a scalar head added (a reward model's
    checkpoint: its score head starts the value head)."""
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=1e-5))
    """Optimizer and learning-rate schedule."""
    fsdp: FSDPConfig = field(default_factory=FSDPConfig)
    """FSDP2 sharding and precision."""
    offload: OffloadConfig = field(default_factory=OffloadConfig)
    """Offloading between phases."""

    def validate(self, prefix: str) -> None:
        validate_trained_section(self, prefix)
        require_positive(self, prefix, "cliprange_value")
        lora, defaults = self.model.lora, type(self.model.lora)()
        changed = [f.name for f in dataclasses.fields(lora) if getattr(lora, f.name) != getattr(defaults, f.name)]
        if changed:  # (rank, alpha, target_modules, ...: none of them is read)
            raise NotImplementedError(
                f"{prefix}model.lora.{changed[0]}={getattr(lora, changed[0])}: LoRA is implemented for the actor "
                f"only; remove the {prefix}model.lora keys (the critic trains all weights)."
            )

    def check_files(self, prefix: str) -> None:
        self.model.check_files(f"{prefix}model.")
