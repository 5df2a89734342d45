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
"""The data-parallel PPO actor: log-probs, entropy and policy updates on an FSDP2-sharded model.

It also serves as the reference policy (no optimizer: only `compute_log_probs`). Turning a DataProto into model
inputs (micro-batches, padded or packed forwards, vision inputs) lives in `verl.workers.actor.forward`, shared with
the critic.

Loss normalisation: every micro-batch loss is divided by the token (or sequence) count of the whole mini-batch
summed over all micro-batches and all data-parallel ranks, and multiplied by the world size before `backward`
(FSDP averages gradients over ranks). The accumulated gradient is then the gradient of the mini-batch loss,
however the mini-batch was split, which the tests check against a single-process forward.
"""

import logging
from collections import defaultdict
from collections.abc import Callable

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from verl.algorithms.core_algos import (
    agg_loss,
    compute_entropy_loss,
    compute_kl_loss,
    compute_policy_loss,
    default_loss_avg_mode,
)
from verl.models import ulysses
from verl.models.fsdp import clip_grad_norm, gathers_once_per_pass, micro_batch_pass
from verl.protocol import DataProto
from verl.utils import device as device_utils
from verl.utils.torch_functional import entropy_from_logits, log_probs_from_logits
from verl.workers.actor.config import ActorConfig
from verl.workers.actor.forward import (
    forward_response,
    global_loss_counts,
    make_micro_batches,
    packing_is_exact,
    process_multi_modal_inputs,
    select_model_inputs,
    update_micro_batch_size,
)


__all__ = ["DataParallelPPOActor", "process_multi_modal_inputs"]

logger = logging.getLogger(__name__)


def _world_size(group: dist.ProcessGroup | None) -> int:
    return dist.get_world_size(group) if dist.is_available() and dist.is_initialized() else 1


def token_head(
    use_torch_compile: bool,
) -> Callable[[torch.Tensor, torch.Tensor, float, bool], dict[str, torch.Tensor]]:
    """The function from response-predicting logits (N, V) to float32 log-probs (and entropy) of the labels (N,).

    With `use_torch_compile` on CUDA it is compiled (dynamic shapes: the token count changes every micro-batch), which
    fuses the float32 upcast, temperature scaling, log-softmax gather and entropy into fewer passes over the logits.
    """

    def head(logits: torch.Tensor, labels: torch.Tensor, temperature: float, with_entropy: bool) -> dict:
        logits = logits.float() / temperature
        out = {"log_probs": log_probs_from_logits(logits, labels)}
        if with_entropy:
            out["entropy"] = entropy_from_logits(logits)
        return out

    if use_torch_compile and device_utils.get_device_type() == "cuda":
        return torch.compile(head, dynamic=True)
    return head


# ---------------------------------------------------------------------------------------------- actor

_POLICY_TOKEN_METRICS = ("pg_clipfrac", "pg_clipfrac_higher", "pg_clipfrac_lower", "ppo_kl")
"""Token-mean metrics of `compute_policy_loss`; docs/metrics.md says what each one means."""

_SUMMED_METRICS: tuple[tuple[str, bool], ...] = (
    ("actor/pg_loss", False),
    ("actor/entropy_loss", False),
    ("actor/kl_loss", False),
    *((f"actor/{name}", True) for name in _POLICY_TOKEN_METRICS),
)
"""Update metrics as (name, is_token_mean). Loss metrics are shares of the mini-batch loss, so their sum over
micro-batches and ranks is the mini-batch loss; token means are summed weighted by token count, then divided."""


class DataParallelPPOActor:
    """Log-probs and PPO updates for one data-parallel rank of an FSDP2 policy (or, without optimizer, a reference).

    `rollout_n` (samples per prompt) turns `config.global_batch_size` (prompts) into samples: each optimizer step
    takes global_batch_size x rollout_n / world_size samples on every rank.
    """

    def __init__(
        self,
        config: ActorConfig,
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
        self.world_size = _world_size(group)
        self.sp_group = sp_group
        """Ulysses: the ranks that share each row (they hold the same rows; see verl.models.ulysses); None for 1."""
        self.sp_size = _world_size(sp_group) if sp_group is not None else 1
        if self.sp_size != config.ulysses_size:
            raise ValueError(
                f"actor.ulysses_size={config.ulysses_size} but the sequence-parallel group has {self.sp_size} ranks."
            )
        dp_size = self.world_size // self.sp_size
        samples = config.global_batch_size * rollout_n
        if samples % dp_size != 0:
            raise ValueError(
                f"actor.global_batch_size x rollout.n = {samples} samples must split evenly over {dp_size} "
                "data-parallel ranks."
            )
        self.mini_batch_size = samples // dp_size
        # unset (a config built without the loader): the policy loss's own aggregation, as the loader would fill in
        self.loss_avg_mode = config.loss_avg_mode or default_loss_avg_mode(config.loss_type)
        self.padding_free = config.padding_free and packing_is_exact(module)
        if config.padding_free and not self.padding_free:
            logger.warning(
                "actor.padding_free is set but attention %r has no varlen kernel for packed sequences; running "
                "padded (set model.attn_implementation=auto to pack).",
                getattr(module.config, "_attn_implementation", None),
            )
        ulysses.check_split(module, self.sp_size, self.padding_free, "actor")
        self._head = token_head(config.use_torch_compile)
        self.gather_once = gathers_once_per_pass(config.fsdp, device_utils.get_device_type())

    def _pass(self):
        """Context of one pass of micro-batches (see verl.models.fsdp.micro_batch_pass)."""
        return micro_batch_pass(self.module, self.gather_once, self.config.fsdp.enable_full_shard)

    def _forward(self, micro: DataProto, temperature: float, calculate_entropy: bool) -> dict[str, torch.Tensor]:
        def head(logits: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
            return self._head(logits, labels, temperature, calculate_entropy)

        with ulysses.sequence_parallel(self.sp_group):
            return forward_response(self.module, micro, self.padding_free, head)

    @torch.no_grad()
    def compute_log_probs(
        self, data: DataProto, temperature: float, calculate_entropy: bool = False
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Log-probs (B, R) of the response tokens at `temperature`; with `calculate_entropy`, (log_probs, entropy).

        Micro-batches follow micro_batch_size_per_device_for_experience (fixed, or the token budget with
        dynamic_batching); the rows come back in their original order. Padding positions are 0.
        """
        self.module.eval()
        micro_batches, order = make_micro_batches(
            select_model_inputs(data, ()),
            self.config.micro_batch_size_per_device_for_experience,
            self.config.dynamic_batching,
            self.group,
            padded=not self.padding_free,
        )
        with self._pass():
            outputs = [self._forward(micro, temperature, calculate_entropy) for micro in micro_batches]
        log_probs = torch.cat([out["log_probs"] for out in outputs])
        entropy = torch.cat([out["entropy"] for out in outputs]) if calculate_entropy else None
        if order is not None:
            order = order.to(log_probs.device)
            log_probs = log_probs[order]
            entropy = entropy[order] if entropy is not None else None
        return (log_probs, entropy) if calculate_entropy else log_probs

    def update_policy(self, data: DataProto) -> dict[str, float]:
        """PPO update: ppo_epochs passes over mini-batches, one optimizer step each; returns mean metrics.

        Needs advantages, response_mask (and ref_log_probs with use_kl_loss), meta_info["temperature"] and
        old_log_probs, except for an on-policy update (one epoch, one mini-batch): there the behaviour policy is the
        current one, so its log-probs are the forward's own, detached (ratio 1, the same loss and gradient), and the
        separate old-log-prob forward can be skipped. A step whose gradient norm is not finite is skipped (gradients dropped, weights
        unchanged). Loss metrics are the mini-batch values over all ranks (identical on every rank).
        """
        if self.optimizer is None:
            raise RuntimeError("update_policy needs an optimizer; this actor was built without one (reference?).")
        if "temperature" not in data.meta_info:
            raise KeyError("update_policy needs meta_info['temperature'] (the rollout temperature); set it.")
        temperature = data.meta_info["temperature"]
        # Adaptive entropy control sends this step's coefficient; the entropy is then computed exactly, even at 0.
        adaptive_entropy = "entropy_coeff" in data.meta_info
        entropy_coeff = float(data.meta_info.get("entropy_coeff", self.config.entropy_coeff))
        extra_keys = ("advantages", "response_mask")
        if "old_log_probs" in data.batch.keys():
            extra_keys += ("old_log_probs",)
        elif self.config.ppo_epochs != 1 or len(data) > self.mini_batch_size:
            raise KeyError(
                "update_policy needs old_log_probs when the update is off-policy (ppo_epochs > 1 or several "
                "mini-batches); compute them with compute_log_probs first."
            )
        if self.config.use_kl_loss and not self.config.disable_kl:
            extra_keys += ("ref_log_probs",)
        data = select_model_inputs(data, extra_keys)
        self.module.train()
        metrics: dict[str, list[float]] = defaultdict(list)
        for _ in range(self.config.ppo_epochs):
            for mini_batch in data.split(self.mini_batch_size):
                update = self._update_mini_batch(mini_batch, temperature, entropy_coeff, adaptive_entropy)
                for name, value in update.items():
                    metrics[name].append(value)
        metrics["actor/lr"].append(self.optimizer.param_groups[0]["lr"])
        if adaptive_entropy:
            metrics["actor/entropy_coeff"].append(entropy_coeff)
        return {name: float(np.mean(values)) for name, values in metrics.items()}

    def _update_mini_batch(
        self, mini_batch: DataProto, temperature: float, entropy_coeff: float, exact_entropy: bool = False
    ) -> dict[str, float]:
        """Accumulate the gradient of one mini-batch over its micro-batches, then take one optimizer step."""
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
        # Per-micro-batch loss shares and token-weighted token means, summed on the device (no host sync between
        # micro-batches, so the device never waits for the host to launch the next backward), then across ranks.
        sums = torch.zeros(len(_SUMMED_METRICS), dtype=torch.float64, device=device_utils.get_local_device())
        self.optimizer.zero_grad(set_to_none=True)
        with self._pass() as before_backward:
            for index, micro in enumerate(micro_batches):
                # the backward too: gradient checkpointing re-runs each layer's forward (its attention) inside it
                with ulysses.sequence_parallel(self.sp_group):
                    loss, micro_sums = self._micro_batch_loss(
                        micro, temperature, token_count, seq_count, entropy_coeff, exact_entropy
                    )
                    before_backward(index == len(micro_batches) - 1)
                    (loss * self.world_size).backward()  # FSDP averages gradients over ranks; the shares must add up
                sums += micro_sums
        grad_norm = self._optimizer_step()
        sums = sums.cpu()  # the host's backend (gloo) reduces these few numbers
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(sums, op=dist.ReduceOp.SUM, group=self.group)
            sums /= self.sp_size  # every rank of a sequence-parallel group computed the same loss
        metrics = {}
        for (name, is_token_mean), total in zip(_SUMMED_METRICS, sums.tolist()):
            metrics[name] = total / max(token_count, 1.0) if is_token_mean else total
        metrics["actor/grad_norm"] = grad_norm
        if not (config.use_kl_loss and not config.disable_kl):
            del metrics["actor/kl_loss"]
        else:
            metrics["actor/kl_coef"] = config.kl_coef
        return metrics

    def _micro_batch_loss(
        self,
        micro: DataProto,
        temperature: float,
        token_count: float,
        seq_count: float,
        entropy_coeff: float,
        exact_entropy: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """This micro-batch's share of the mini-batch loss, and its contributions to the `_SUMMED_METRICS`."""
        config = self.config
        batch = micro.batch
        response_mask = batch["response_mask"]
        agg = {
            "loss_avg_mode": self.loss_avg_mode,
            "global_token_count": token_count,
            "global_seq_count": seq_count,
            "max_response_length": response_mask.shape[-1],
        }
        out = self._forward(micro, temperature, calculate_entropy=entropy_coeff != 0 or exact_entropy)
        log_probs = out["log_probs"]
        old_log_probs = batch["old_log_probs"] if "old_log_probs" in batch.keys() else log_probs.detach()
        pg_loss, pg_metrics = compute_policy_loss(
            old_log_probs=old_log_probs,
            log_probs=log_probs,
            advantages=batch["advantages"],
            response_mask=response_mask,
            loss_type=config.loss_type,
            clip_ratio_low=config.clip_ratio_low,
            clip_ratio_high=config.clip_ratio_high,
            clip_ratio_dual=config.clip_ratio_dual,
            tau_positive=config.tau_positive,
            tau_negative=config.tau_negative,
            **agg,
        )
        loss = pg_loss
        if "entropy" in out:
            entropy_loss = compute_entropy_loss(out["entropy"], response_mask, **agg)
            if entropy_coeff != 0:
                loss = loss - entropy_coeff * entropy_loss
        else:  # -log p of the sampled tokens estimates the entropy for free (on-policy samples)
            entropy_loss = agg_loss(-log_probs.detach(), response_mask, **agg)
        kl_loss = torch.zeros((), device=log_probs.device)
        if config.use_kl_loss and not config.disable_kl:
            kl_loss = compute_kl_loss(log_probs, batch["ref_log_probs"], response_mask, config.kl_penalty, **agg)
            loss = loss + config.kl_coef * kl_loss
        tokens = response_mask.sum()
        values = {
            "actor/pg_loss": pg_loss,
            "actor/entropy_loss": entropy_loss,
            "actor/kl_loss": kl_loss,
            **{f"actor/{name}": pg_metrics[name] * tokens for name in _POLICY_TOKEN_METRICS},
        }
        return loss, torch.stack([values[name].detach().double() for name, _ in _SUMMED_METRICS])

    def _optimizer_step(self) -> float:
        grad_norm = clip_grad_norm(self.module, self.config.max_grad_norm).item()
        if np.isfinite(grad_norm):
            self.optimizer.step()
        else:
            logger.warning("Skipping the actor's optimizer step: the gradient norm is %s.", grad_norm)
        self.optimizer.zero_grad(set_to_none=True)
        return grad_norm
