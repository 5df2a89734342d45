# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The data-parallel PPO critic: token values and clipped value-loss updates on an FSDP2-sharded value model.

The value model is the policy with a scalar head (`verl.models.loading.add_value_head`). Token t's value is read where
the actor reads its log-prob (the position predicting it), so they line up for GAE. Batching and update passes are
the actor's (`actor.forward`, `workers.micro_batch_passes`); this module holds only the value head and loss.
"""

import torch
import torch.distributed as dist
from torch import nn

from verl.algorithms.core_algos import compute_value_loss
from verl.protocol import DataProto
from verl.workers.actor.forward import select_model_inputs
from verl.workers.critic.config import CriticConfig
from verl.workers.micro_batch_passes import RESPONSE_TOKENS, MicroBatchPasses, SummedMetric


_SUMMED_METRICS: tuple[SummedMetric, ...] = (
    ("critic/vf_loss", None),
    ("critic/vf_clipfrac", RESPONSE_TOKENS),
    ("critic/vpred_mean", RESPONSE_TOKENS),
)
"""Update metrics as (name, weight): vf_loss is the mini-batch loss over all ranks, the others token means."""


def _value_head(logits: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
    """The value model's single output channel, in float32 (labels are not needed for values)."""
    return {"values": logits[..., 0].float()}


class DataParallelPPOCritic:
    """Values and PPO value updates for one data-parallel rank of an FSDP2 critic (`rollout_n` as for the actor)."""

    def __init__(
        self,
        config: CriticConfig,
        module: nn.Module,
        optimizer: torch.optim.Optimizer | None = None,
        *,
        rollout_n: int = 1,
        group: dist.ProcessGroup | None = None,
        sp_group: dist.ProcessGroup | None = None,
        max_response_length: int | None = None,
    ) -> None:
        self.config = config
        self.max_response_length = max_response_length
        """data.max_response_length: seq-mean-token-sum-norm's constant (None: each batch's padded width)."""
        self.module = module
        self.optimizer = optimizer
        self.passes = MicroBatchPasses("critic", config, module, optimizer, rollout_n, group, sp_group)

    def compute_values(self, data: DataProto) -> torch.Tensor:
        """Values (B, R) of the response tokens, 0 where the response is padding; rows in the original order."""
        return self.passes.compute(data, _value_head)["values"]

    def update_critic(self, data: DataProto) -> dict[str, float]:
        """Clipped value-loss updates over ppo_epochs x mini-batches (needs values and returns); mean metrics over all
        ranks. A step with a non-finite gradient norm is skipped.
        """
        if self.optimizer is None:
            raise RuntimeError("update_critic needs an optimizer; this critic was built without one.")
        data = select_model_inputs(data, ("values", "returns", "response_mask"))
        return self.passes.update(data, self._micro_batch_loss, _SUMMED_METRICS)

    def _micro_batch_loss(
        self, micro: DataProto, token_count: float, seq_count: float
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """This micro-batch's share of the mini-batch value loss, and its values of the `_SUMMED_METRICS` by name."""
        batch = micro.batch
        response_mask = batch["response_mask"]
        vpreds = self.passes.forward(micro, _value_head)["values"]
        vf_loss, vf_metrics = compute_value_loss(
            vpreds=vpreds,
            returns=batch["returns"],
            values=batch["values"],
            response_mask=response_mask,
            cliprange_value=self.config.cliprange_value,
            loss_avg_mode=self.config.loss_avg_mode,
            global_token_count=token_count,
            global_seq_count=seq_count,
            max_response_length=self.max_response_length or response_mask.shape[-1],
        )
        return vf_loss, {"critic/vf_loss": vf_loss, **{f"critic/{name}": value for name, value in vf_metrics.items()}}
