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
"""The data-parallel PPO critic: token values and clipped value-loss updates on an FSDP2-sharded value model.

The value model is the policy architecture with a scalar head (`verl.models.loading.add_value_head`). The value
of response token t is read at the position that predicts it (the state before the token is generated), exactly
where the actor reads the token's log-prob, so values and log-probs line up for GAE. Batching, padding-free packing
and loss normalisation are the actor's (`verl.workers.actor.forward`).
"""

import logging
from collections import defaultdict

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from verl.algorithms.core_algos import compute_value_loss
from verl.models import ulysses
from verl.models.fsdp import clip_grad_norm, gathers_once_per_pass, micro_batch_pass
from verl.protocol import DataProto
from verl.utils import device as device_utils
from verl.workers.actor.forward import (
    forward_response,
    global_loss_counts,
    make_micro_batches,
    packing_is_exact,
    select_model_inputs,
    update_micro_batch_size,
)
from verl.workers.critic.config import CriticConfig


logger = logging.getLogger(__name__)


def _value_head(logits: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
    """The value model's single output channel, in float32 (labels are not needed for values)."""
    return {"values": logits[..., 0].float()}


class DataParallelPPOCritic:
    """Values and PPO value updates for one data-parallel rank of an FSDP2 critic.

    `rollout_n` turns `config.global_batch_size` (prompts) into samples, as for the actor.
    """

    def __init__(
        self,
        config: CriticConfig,
        module: nn.Module,
        optimizer: torch.optim.Optimizer | None = None,
        *,
        rollout_n: int = 1,
        group: dist.ProcessGroup | None = None,
        sp_group: dist.ProcessGroup | None = None,
    ) -> None:
        self.config = config
        self.module = module
        self.optimizer = optimizer
        self.group = group
        self.world_size = dist.get_world_size(group) if dist.is_available() and dist.is_initialized() else 1
        self.sp_group = sp_group
        """Ulysses: the ranks that share each row (see verl.models.ulysses); None for 1."""
        self.sp_size = dist.get_world_size(sp_group) if sp_group is not None else 1
        if self.sp_size != config.ulysses_size:
            raise ValueError(
                f"critic.ulysses_size={config.ulysses_size} but the sequence-parallel group has {self.sp_size} ranks."
            )
        dp_size = self.world_size // self.sp_size
        samples = config.global_batch_size * rollout_n
        if samples % dp_size != 0:
            raise ValueError(
                f"critic.global_batch_size x rollout.n = {samples} samples must split evenly over "
                f"{dp_size} data-parallel ranks."
            )
        self.mini_batch_size = samples // dp_size
        self.padding_free = config.padding_free and packing_is_exact(module)
        ulysses.check_split(module, self.sp_size, self.padding_free, "critic")
        self.gather_once = gathers_once_per_pass(config.fsdp, device_utils.get_device_type())

    def _pass(self):
        """Context of one pass of micro-batches (see verl.models.fsdp.micro_batch_pass)."""
        return micro_batch_pass(self.module, self.gather_once, self.config.fsdp.enable_full_shard)

    def _values(self, micro: DataProto) -> torch.Tensor:
        with ulysses.sequence_parallel(self.sp_group):
            return forward_response(self.module, micro, self.padding_free, _value_head)["values"]

    @torch.no_grad()
    def compute_values(self, data: DataProto) -> torch.Tensor:
        """Values (B, R) of the response tokens, 0 where the response is padding; rows in the original order."""
        self.module.eval()
        micro_batches, order = make_micro_batches(
            select_model_inputs(data, ()),
            self.config.micro_batch_size_per_device_for_experience,
            self.config.dynamic_batching,
            self.group,
            padded=not self.padding_free,
        )
        with self._pass():
            values = torch.cat([self._values(micro) for micro in micro_batches])
        return values[order.to(values.device)] if order is not None else values

    def update_critic(self, data: DataProto) -> dict[str, float]:
        """Clipped value-loss updates over ppo_epochs x mini-batches (needs values and returns); mean metrics.

        A step with a non-finite gradient norm is skipped. critic/vf_loss is the mini-batch loss over all ranks;
        vf_clipfrac and vpred_mean are token means over all ranks.
        """
        if self.optimizer is None:
            raise RuntimeError("update_critic needs an optimizer; this critic was built without one.")
        data = select_model_inputs(data, ("values", "returns", "response_mask"))
        self.module.train()
        metrics: dict[str, list[float]] = defaultdict(list)
        for _ in range(self.config.ppo_epochs):
            for mini_batch in data.split(self.mini_batch_size):
                for name, value in self._update_mini_batch(mini_batch).items():
                    metrics[name].append(value)
        metrics["critic/lr"].append(self.optimizer.param_groups[0]["lr"])
        return {name: float(np.mean(values)) for name, values in metrics.items()}

    def _update_mini_batch(self, mini_batch: DataProto) -> dict[str, float]:
        config = self.config
        micro_batches, _ = make_micro_batches(
            mini_batch,
            update_micro_batch_size(
                config.micro_batch_size_per_device_for_update,
                len(mini_batch),
                config.dynamic_batching,
                self.gather_once,
            ),
            config.dynamic_batching,
            self.group,
            padded=not self.padding_free,
        )
        token_count, seq_count = global_loss_counts(micro_batches, self.group)
        # the ranks of a sequence-parallel group hold the same rows: count them once
        token_count, seq_count = token_count / self.sp_size, seq_count / self.sp_size
        # vf_loss share, clipped tokens, sum of predicted values: summed on the device (no host sync per micro-batch)
        sums = torch.zeros(3, dtype=torch.float64, device=device_utils.get_local_device())
        self.optimizer.zero_grad(set_to_none=True)
        with self._pass() as before_backward:
            for index, micro in enumerate(micro_batches):
                batch = micro.batch
                response_mask = batch["response_mask"]
                # the backward too: gradient checkpointing re-runs each layer's forward (its attention) inside it
                with ulysses.sequence_parallel(self.sp_group):
                    vpreds = self._values(micro)
                    vf_loss, vf_metrics = compute_value_loss(
                        vpreds=vpreds,
                        returns=batch["returns"],
                        values=batch["values"],
                        response_mask=response_mask,
                        cliprange_value=config.cliprange_value,
                        loss_avg_mode=config.loss_avg_mode,
                        global_token_count=token_count,
                        global_seq_count=seq_count,
                        max_response_length=response_mask.shape[-1],
                    )
                    before_backward(index == len(micro_batches) - 1)
                    (vf_loss * self.world_size).backward()
                tokens = response_mask.sum()
                micro_sums = [vf_loss.detach(), vf_metrics["vf_clipfrac"] * tokens, vf_metrics["vpred_mean"] * tokens]
                sums += torch.stack(micro_sums).double()
        grad_norm = clip_grad_norm(self.module, config.max_grad_norm).item()
        if np.isfinite(grad_norm):
            self.optimizer.step()
        else:
            logger.warning("Skipping the critic's optimizer step: the gradient norm is %s.", grad_norm)
        self.optimizer.zero_grad(set_to_none=True)
        sums = sums.cpu()  # the host's backend (gloo) reduces these few numbers
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(sums, op=dist.ReduceOp.SUM, group=self.group)
            sums /= self.sp_size  # every rank of a sequence-parallel group computed the same loss
        return {
            "critic/vf_loss": sums[0].item(),
            "critic/vf_clipfrac": sums[1].item() / max(token_count, 1.0),
            "critic/vpred_mean": sums[2].item() / max(token_count, 1.0),
            "critic/grad_norm": grad_norm,
        }
