# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The passes of micro-batches one data-parallel rank runs through its FSDP2 model, shared by actor and critic:
`compute` (no grad, rows in original order) and `update` (ppo_epochs x mini-batches, each one gradient accumulation
and optimizer step, the caller giving only its per-micro-batch loss).

Each micro-batch loss is divided by the whole mini-batch's token (or sequence) count over all ranks and multiplied by
the world size (FSDP averages over ranks), so the gradient is the mini-batch loss's, however it was split.
"""

import logging
from collections import defaultdict
from collections.abc import Callable, Sequence

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from verl.models import ulysses
from verl.models.fsdp import clip_grad_norm, gathers_once_per_pass, micro_batch_pass
from verl.protocol import DataProto
from verl.utils import device as device_utils
from verl.workers.actor.config import ActorConfig
from verl.workers.actor.forward import (
    Head,
    forward_response,
    global_loss_counts,
    make_micro_batches,
    packing_is_exact,
    select_model_inputs,
    update_micro_batch_size,
)
from verl.workers.critic.config import CriticConfig


logger = logging.getLogger(__name__)

MicroBatchLoss = Callable[[DataProto, float, float], tuple[torch.Tensor, dict[str, torch.Tensor]]]
"""(micro-batch, mini-batch token count, mini-batch sequence count) -> (the micro-batch's share of the mini-batch
loss, its values of the summed metrics by name; others are ignored)."""

SummedMetric = tuple[str, str | None]
"""(name, weight): a loss share, summed over micro-batches and ranks (weight None); or a micro-batch's mean over
tokens, summed weighted by their count and divided by the mini-batch's: `RESPONSE_TOKENS` (every response token),
or the name of a count the loss returns among its values (the tokens a mean was taken over)."""

RESPONSE_TOKENS = "response_tokens"


def _world_size(group: dist.ProcessGroup | None) -> int:
    return dist.get_world_size(group) if dist.is_available() and dist.is_initialized() else 1


_SKIPPED_TOKENS, _TOKENS = "skipped_tokens", "tokens"
"""A mini-batch's tokens left out of the passes (no_gradient) and in all, over every rank: summed into a share."""


class MicroBatchPasses:
    """One rank's micro-batch passes through `module` for `role` ("actor" or "critic": named in errors and metrics).
    Each optimizer step takes global_batch_size (prompts) x `rollout_n` / data-parallel size samples per rank.
    """

    def __init__(
        self,
        role: str,
        config: ActorConfig | CriticConfig,
        module: nn.Module,
        optimizer: torch.optim.Optimizer | None,
        rollout_n: int,
        group: dist.ProcessGroup | None,
        sp_group: dist.ProcessGroup | None,
    ) -> None:
        self.role = role
        self.config = config
        self.module = module
        self.optimizer = optimizer
        self.group = group
        self.world_size = _world_size(group)
        self.sp_group = sp_group
        """Ulysses: the ranks that share each row (verl.models.ulysses); None for 1."""
        self.sp_size = _world_size(sp_group) if sp_group is not None else 1
        if self.sp_size != config.ulysses_size:
            raise ValueError(
                f"{role}.ulysses_size={config.ulysses_size} but the sequence-parallel group has {self.sp_size} ranks."
            )
        dp_size = self.world_size // self.sp_size
        samples = config.global_batch_size * rollout_n
        if samples % dp_size != 0:
            raise ValueError(
                f"{role}.global_batch_size x rollout.n = {samples} samples must split evenly over {dp_size} "
                "data-parallel ranks."
            )
        self.mini_batch_size = samples // dp_size
        self.padding_free = config.padding_free and packing_is_exact(module)
        ulysses.check_split(module, self.sp_size, self.padding_free, role)
        self.gather_once = gathers_once_per_pass(config.fsdp, device_utils.get_device_type())

    def _pass(self):
        """Context of one pass of micro-batches (see verl.models.fsdp.micro_batch_pass)."""
        return micro_batch_pass(self.module, self.gather_once, self.config.fsdp.enable_full_shard)

    def forward(self, micro: DataProto, head: Head) -> dict[str, torch.Tensor]:
        """`forward_response` on one micro-batch, its rows split over the sequence-parallel group if there is one."""
        with ulysses.sequence_parallel(self.sp_group):
            return forward_response(self.module, micro, self.padding_free, head)

    @torch.no_grad()
    def compute(self, data: DataProto, head: Head) -> dict[str, torch.Tensor]:
        """`head`'s outputs (B, R) over the whole batch, in the original row order, the model in eval mode."""
        self.module.eval()
        micro_batches, order = make_micro_batches(
            select_model_inputs(data, ()),
            self.config.micro_batch_size_per_device_for_experience,
            self.config.dynamic_batching,
            self.group,
            padded=not self.padding_free,
        )
        with self._pass():
            outputs = [self.forward(micro, head) for micro in micro_batches]
        result = {name: torch.cat([out[name] for out in outputs]) for name in outputs[0]}
        if order is not None:
            result = {name: value[order.to(value.device)] for name, value in result.items()}
        return result

    def update(
        self,
        data: DataProto,
        micro_batch_loss: MicroBatchLoss,
        summed_metrics: Sequence[SummedMetric],
        constant_metrics: dict[str, float] | None = None,
        prepare: Callable[[DataProto], None] | None = None,
        no_gradient: Callable[[DataProto], torch.Tensor] | None = None,
    ) -> dict[str, float]:
        """ppo_epochs passes over the mini-batches of `data`, one optimizer step each (skipped on a non-finite gradient
        norm); returns the mean of the `summed_metrics` (over all ranks), grad_norm, `constant_metrics` and lr.
        `prepare(mini_batch)` runs before each mini-batch's micro-batches (a pass of its own over it, say).
        `no_gradient(mini_batch)`, (B,) bool, marks rows whose loss has no gradient: they are left out of the passes
        (`_rows_to_run`), still counted in the loss's normaliser."""
        metrics: dict[str, list[float]] = defaultdict(list)
        for _ in range(self.config.ppo_epochs):
            for mini_batch in data.split(self.mini_batch_size):
                if prepare is not None:
                    prepare(mini_batch)
                self.module.train()
                update = self._update_mini_batch(mini_batch, micro_batch_loss, summed_metrics, no_gradient)
                for name, value in {**update, **(constant_metrics or {})}.items():
                    metrics[name].append(value)
        metrics[f"{self.role}/lr"].append(self.optimizer.param_groups[0]["lr"])
        skipped, tokens = metrics.pop(_SKIPPED_TOKENS, None), metrics.pop(_TOKENS, None)
        result = {name: float(np.mean(values)) for name, values in metrics.items()}
        if skipped is not None:  # over every rank and mini-batch, not a mean of their shares
            result[f"{self.role}/skipped_token_share"] = float(np.sum(skipped)) / max(float(np.sum(tokens)), 1.0)
        return result

    def _rows_to_run(
        self, mini_batch: DataProto, no_gradient: Callable[[DataProto], torch.Tensor]
    ) -> tuple[DataProto, dict[str, float]]:
        """The rows of `mini_batch` the update runs: those with a gradient, topped up with rows without one to the most
        any rank keeps (at least one), so every rank runs the same number of rows (and of FSDP collectives); and the
        tokens left out and in all, over every rank. The rows run only to keep the ranks in step get no response
        tokens (their loss is 0 either way), so the token metrics cover the rows with a gradient alone, whatever the
        data-parallel layout."""
        skip = no_gradient(mini_batch).cpu()
        kept = torch.nonzero(~skip).flatten()
        most = torch.tensor([max(len(kept), 1)], dtype=torch.int64)
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(most, op=dist.ReduceOp.MAX, group=self.group)
        fill = torch.nonzero(skip).flatten()[: int(most) - len(kept)]
        rows = torch.cat([kept, fill]).sort().values
        run = mini_batch if len(rows) == len(mini_batch) and not len(fill) else mini_batch[rows.numpy()]  # a copy
        if len(fill):
            filled = torch.isin(rows, fill).to(run.batch["response_mask"].device).unsqueeze(-1)
            run.batch["response_mask"] = run.batch["response_mask"].masked_fill(filled, 0)
        tokens = mini_batch.batch["attention_mask"].sum().item()
        counts = torch.tensor([tokens - run.batch["attention_mask"].sum().item(), tokens], dtype=torch.float64)
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(counts, op=dist.ReduceOp.SUM, group=self.group)
        counts /= self.sp_size  # the ranks of a sequence-parallel group hold the same rows
        return run, {_SKIPPED_TOKENS: float(counts[0]), _TOKENS: float(counts[1])}

    def _update_mini_batch(
        self,
        mini_batch: DataProto,
        micro_batch_loss: MicroBatchLoss,
        summed_metrics: Sequence[SummedMetric],
        no_gradient: Callable[[DataProto], torch.Tensor] | None = None,
    ) -> dict[str, float]:
        """Accumulate the gradient of one mini-batch over its micro-batches, then take one optimizer step."""
        config = self.config
        counts = None
        skipped: dict[str, float] = {}
        if no_gradient is not None:  # the loss's normaliser counts every row; the passes run those with a gradient
            counts = global_loss_counts([mini_batch], self.group)
            mini_batch, skipped = self._rows_to_run(mini_batch, no_gradient)
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
        token_count, seq_count = counts if counts is not None else global_loss_counts(micro_batches, self.group)
        # the ranks of a sequence-parallel group hold the same rows: count them once
        token_count, seq_count = token_count / self.sp_size, seq_count / self.sp_size
        if token_count == 0:  # every response masked out (truncated, or by the rollout correction): on every rank
            logger.warning("Skipping a %s mini-batch: no response token of it is in the loss.", self.role)
            return {}
        # summed on the device (no host sync between micro-batches), then across ranks: each metric, then each weight
        weights = list(dict.fromkeys(weight for _, weight in summed_metrics if weight is not None))
        size = len(summed_metrics) + len(weights)
        sums = torch.zeros(size, dtype=torch.float64, device=device_utils.get_local_device())
        self.optimizer.zero_grad(set_to_none=True)
        with self._pass() as before_backward:
            for index, micro in enumerate(micro_batches):
                # the backward too: gradient checkpointing re-runs each layer's forward (its attention) inside it
                with ulysses.sequence_parallel(self.sp_group):
                    loss, values = micro_batch_loss(micro, token_count, seq_count)
                    before_backward(index == len(micro_batches) - 1)
                    (loss * self.world_size).backward()  # FSDP averages gradients over ranks; the shares must add up
                counts = {RESPONSE_TOKENS: micro.batch["response_mask"].sum(), **values}
                micro_sums = [values[name].detach() * (1 if w is None else counts[w]) for name, w in summed_metrics]
                sums += torch.stack([*micro_sums, *(counts[w].detach() for w in weights)]).double()
        grad_norm = self._optimizer_step()
        sums = sums.cpu()  # the host's backend (gloo) reduces these few numbers
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(sums, op=dist.ReduceOp.SUM, group=self.group)
            sums /= self.sp_size  # every rank of a sequence-parallel group computed the same loss
        totals = sums.tolist()
        weight_totals = dict(zip(weights, totals[len(summed_metrics) :]))
        metrics = {}
        for (name, weight), total in zip(summed_metrics, totals):
            metrics[name] = total if weight is None else total / max(weight_totals[weight], 1.0)
        metrics[f"{self.role}/grad_norm"] = grad_norm
        return {**metrics, **skipped}

    def _optimizer_step(self) -> float:
        grad_norm = clip_grad_norm(self.module, self.config.max_grad_norm).item()
        if np.isfinite(grad_norm):
            self.optimizer.step()
        else:
            logger.warning("Skipping the %s's optimizer step: the gradient norm is %s.", self.role, grad_norm)
        self.optimizer.zero_grad(set_to_none=True)
        return grad_norm
