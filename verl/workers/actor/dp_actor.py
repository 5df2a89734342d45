# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The data-parallel PPO actor: log-probs, entropy and policy updates on an FSDP2-sharded model; also the reference
policy (no optimizer). Model inputs live in `actor.forward` and micro-batch passes in `workers.micro_batch_passes`,
both shared with the critic; this module holds only the policy's head and loss.
"""

import logging
from collections.abc import Callable
from contextlib import nullcontext
from functools import partial

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
from verl.algorithms.masked_ops import BUILT_IN_LOSS_AVG_MODES, masked_mean, top_fraction_cutoff
from verl.algorithms.policy_losses import scales_with_advantage
from verl.models.moe import RouterStats
from verl.protocol import DataProto
from verl.utils import device as device_utils
from verl.utils.torch_functional import entropy_from_logits, log_probs_from_logits
from verl.workers.actor.config import ActorConfig
from verl.workers.actor.forward import (
    Head,
    computed_tokens_mask,
    packing_obstacle,
    process_multi_modal_inputs,
    select_model_inputs,
)
from verl.workers.micro_batch_passes import RESPONSE_TOKENS, MicroBatchPasses, SummedMetric


__all__ = ["DataParallelPPOActor", "process_multi_modal_inputs"]

logger = logging.getLogger(__name__)


def token_head(
    use_torch_compile: bool,
) -> Callable[[torch.Tensor, torch.Tensor, float, bool], dict[str, torch.Tensor]]:
    """The function from response-predicting logits (N, V) to float32 log-probs (and entropy) of the labels (N,),
    compiled with `use_torch_compile` on CUDA. The compiled head takes the temperature as a 0-d float32 tensor on the
    logits' device: a Python float becomes a CPU tensor saved for backward, whose CPU kernel makes Inductor probe the
    host toolchain, stalling or hanging the first update (docs/gpu.md)."""

    def head(
        logits: torch.Tensor, labels: torch.Tensor, temperature: float | torch.Tensor, with_entropy: bool
    ) -> dict:
        logits = logits.float() / temperature
        out = {"log_probs": log_probs_from_logits(logits, labels)}
        if with_entropy:
            out["entropy"] = entropy_from_logits(logits)
        return out

    if not (use_torch_compile and device_utils.get_device_type() == "cuda"):
        return head
    compiled = torch.compile(head, dynamic=True)

    def on_device(logits: torch.Tensor, labels: torch.Tensor, temperature: float, with_entropy: bool) -> dict:
        # new_full fills on the device: no host-to-device copy, so no host sync between micro-batches
        return compiled(logits, labels, logits.new_full((), float(temperature), dtype=torch.float32), with_entropy)

    return on_device


_POLICY_TOKEN_METRICS = ("pg_clipfrac", "pg_clipfrac_higher", "pg_clipfrac_lower", "ppo_kl")
"""Token-mean metrics of `compute_policy_loss`; docs/metrics.md says what each one means."""

_SUMMED_METRICS: tuple[SummedMetric, ...] = (
    ("actor/pg_loss", None),
    ("actor/entropy_loss", None),
    ("actor/entropy", RESPONSE_TOKENS),
    ("actor/kl_loss", None),
    *((f"actor/{name}", "loss_tokens") for name in _POLICY_TOKEN_METRICS),
)
"""Update metrics as (name, weight); actor/kl_loss only with the KL loss. Loss metrics are shares of the mini-batch
loss (summed over micro-batches and ranks); token means are summed weighted by their token count, then divided: the
policy loss's over the tokens taking part in it (a token of weight 0 does not)."""


def _zero_advantage_rows(mini_batch: DataProto) -> torch.Tensor:
    """(B,) bool: the rows with no nonzero advantage on a response token (worker.actor.skip_zero_advantage_rows)."""
    batch = mini_batch.batch
    return ~((batch["advantages"] != 0) & batch["response_mask"].bool()).any(dim=-1)


class DataParallelPPOActor:
    """Log-probs and PPO updates for one data-parallel rank of an FSDP2 policy (or, without optimizer, a reference);
    each optimizer step takes global_batch_size (prompts) x `rollout_n` / world_size samples per rank."""

    def __init__(
        self,
        config: ActorConfig,
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
        self.passes = MicroBatchPasses("actor", config, module, optimizer, rollout_n, group, sp_group)
        self.padding_free = self.passes.padding_free
        # unset (a config built without the loader): the policy loss's own aggregation
        self.loss_avg_mode = config.loss_avg_mode or default_loss_avg_mode(config.loss_type)
        if config.padding_free and not self.padding_free and optimizer is not None:  # (the reference's would repeat)
            logger.warning("actor.padding_free is set but %s; running padded rows.", packing_obstacle(module))
        self._head = token_head(config.use_torch_compile)
        # a mixture-of-experts actor's routers over the update's tokens (moe/* metrics); not the reference's
        self.router_stats = RouterStats(module) if optimizer is not None else None

    def _token_head(self, temperature: float, calculate_entropy: bool) -> Head:
        return partial(self._head, temperature=temperature, with_entropy=calculate_entropy)

    def compute_log_probs(
        self, data: DataProto, temperature: float, calculate_entropy: bool = False
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Log-probs (B, R) of the response tokens at `temperature`, 0 on padding, in the original row order; with
        `calculate_entropy`, (log_probs, entropy)."""
        out = self.passes.compute(data, self._token_head(temperature, calculate_entropy))
        return (out["log_probs"], out["entropy"]) if calculate_entropy else out["log_probs"]

    def update_policy(
        self, data: DataProto, temperature: float, entropy_coeff: float | None = None
    ) -> dict[str, float]:
        """PPO update: ppo_epochs passes over mini-batches, one optimizer step each; returns mean metrics.

        `temperature` is the rollout's; `entropy_coeff` (adaptive entropy control) replaces actor.entropy_coeff and
        makes the entropy exact, even at 0. Needs advantages, response_mask (ref_log_probs with use_kl_loss) and
        old_log_probs, except on-policy (one epoch, one mini-batch), where the forward's detached log-probs give the
        same loss and gradient.
        """
        if self.optimizer is None:
            raise RuntimeError("update_policy needs an optimizer; this actor was built without one (reference?).")
        config = self.config
        adaptive_entropy = entropy_coeff is not None
        entropy_coeff = float(config.entropy_coeff if entropy_coeff is None else entropy_coeff)
        use_kl_loss = config.use_kl_loss and not config.disable_kl
        extra_keys = ("advantages", "response_mask")
        if "old_log_probs" in data.batch.keys():
            extra_keys += ("old_log_probs",)
        elif config.ppo_epochs != 1 or len(data) > self.passes.mini_batch_size:
            raise KeyError(
                "update_policy needs old_log_probs when the update is off-policy (ppo_epochs > 1 or several "
                "mini-batches); compute them with compute_log_probs first."
            )
        if use_kl_loss:
            extra_keys += ("ref_log_probs",)
        if "rollout_is_weights" in data.batch.keys():  # algorithm.rollout_correction
            extra_keys += ("rollout_is_weights",)
        skip_rows = (  # rows whose advantage is 0 everywhere have no gradient where nothing else reads them
            config.skip_zero_advantage_rows
            and not use_kl_loss
            and entropy_coeff == 0
            and not adaptive_entropy
            and config.top_entropy_quantile == 1
            and scales_with_advantage(config.loss_type)
            and self.loss_avg_mode in BUILT_IN_LOSS_AVG_MODES
        )
        summed = [metric for metric in _SUMMED_METRICS if use_kl_loss or metric[0] != "actor/kl_loss"]
        if skip_rows:  # not a loss term then, and its sum over the rows that ran would be a part of the whole
            summed = [metric for metric in summed if metric[0] != "actor/entropy_loss"]
        metrics = self.passes.update(
            select_model_inputs(data, extra_keys),
            partial(
                self._micro_batch_loss,
                temperature=temperature,
                entropy_coeff=entropy_coeff,
                exact_entropy=adaptive_entropy,
            ),
            tuple(summed),
            constant_metrics={"actor/kl_coef": config.kl_coef} if use_kl_loss else None,
            prepare=partial(self._entropy_cutoff, temperature=temperature)
            if config.top_entropy_quantile < 1
            else None,
            no_gradient=_zero_advantage_rows if skip_rows else None,
        )
        if adaptive_entropy:
            metrics["actor/entropy_coeff"] = entropy_coeff
        if self.router_stats:
            metrics.update(self.router_stats.metrics(self.passes.group, device_utils.get_local_device()))
        return metrics

    def _entropy_cutoff(self, mini_batch: DataProto, temperature: float) -> None:
        """top_entropy_quantile: the entropy the mini-batch's selected tokens reach, over its response tokens on every
        rank (a pass of its own before the update's: the micro-batches, dynamic batching and the ranks do not change
        which tokens are selected)."""
        entropy = self.passes.compute(mini_batch, self._token_head(temperature, calculate_entropy=True))["entropy"]
        values = entropy[mini_batch.batch["response_mask"].bool()]
        keep, passes = self.config.top_entropy_quantile, self.passes
        self.entropy_cutoff = top_fraction_cutoff(values, keep, passes.group, copies=passes.sp_size)

    def _micro_batch_loss(
        self,
        micro: DataProto,
        token_count: float,
        seq_count: float,
        *,
        temperature: float,
        entropy_coeff: float,
        exact_entropy: bool,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """This micro-batch's share of the mini-batch loss, and its values of the `_SUMMED_METRICS` by name."""
        config = self.config
        batch = micro.batch
        response_mask = batch["response_mask"]
        agg = {
            "loss_avg_mode": self.loss_avg_mode,
            "global_token_count": token_count,
            "global_seq_count": seq_count,
            "max_response_length": self.max_response_length or response_mask.shape[-1],
        }
        select_tokens = config.top_entropy_quantile < 1.0
        head = self._token_head(temperature, calculate_entropy=entropy_coeff != 0 or exact_entropy or select_tokens)
        routes = nullcontext()
        if (
            self.router_stats
        ):  # the forward's own columns: a trimmed padded forward's mask is narrower than the batch's
            routes = self.router_stats.collecting(computed_tokens_mask(micro, self.padding_free))
        with routes:  # the forward only: a checkpointed layer's re-run in the backward would count its tokens twice
            out = self.passes.forward(micro, head)
        log_probs = out["log_probs"]
        old_log_probs = batch["old_log_probs"] if "old_log_probs" in batch.keys() else log_probs.detach()
        token_weights = batch["rollout_is_weights"] if "rollout_is_weights" in batch.keys() else None
        if select_tokens:  # only the mini-batch's highest-entropy tokens keep their policy gradient
            kept = ((out["entropy"].detach() >= self.entropy_cutoff) & response_mask.bool()).float()
            token_weights = kept if token_weights is None else token_weights * kept
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
            token_weights=token_weights,
            **agg,
        )
        loss = pg_loss
        if "entropy" in out:
            token_entropy = out["entropy"]
            entropy_loss = compute_entropy_loss(token_entropy, response_mask, **agg)
            if entropy_coeff != 0:
                loss = loss - entropy_coeff * entropy_loss
        else:  # -log p of the sampled tokens estimates the entropy for free (on-policy samples)
            token_entropy = -log_probs.detach()
            entropy_loss = agg_loss(token_entropy, response_mask, **agg)
        values = {
            "actor/pg_loss": pg_loss,
            "actor/entropy_loss": entropy_loss,
            "actor/entropy": masked_mean(token_entropy.detach(), response_mask),  # per token, whatever the loss mode
            **{f"actor/{name}": pg_metrics[name] for name in _POLICY_TOKEN_METRICS},
            "loss_tokens": pg_metrics["loss_tokens"],
        }
        if config.use_kl_loss and not config.disable_kl:
            kl_loss = compute_kl_loss(log_probs, batch["ref_log_probs"], response_mask, config.kl_penalty, **agg)
            loss = loss + config.kl_coef * kl_loss
            values["actor/kl_loss"] = kl_loss
        return loss, values
