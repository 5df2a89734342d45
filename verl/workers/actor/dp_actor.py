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

It also serves as the reference policy (no optimizer: only `compute_log_probs`). The module-level helpers turn a
DataProto of rollouts into model inputs and are shared with the critic:

- `process_multi_modal_inputs` turns raw images/videos into pixel values once per prompt;
- `make_micro_batches` splits by a fixed sample count or by a token budget (balanced, same count on every rank,
  original order restorable);
- `forward_response` runs the model padded or padding-free (all sequences packed into one row, where the attention
  kernel makes that exact) and returns per-response-token outputs (B, R), zero on padding.

Loss normalisation: every micro-batch loss is divided by the token (or sequence) count of the whole mini-batch
summed over all micro-batches and all data-parallel ranks, and multiplied by the world size before `backward`
(FSDP averages gradients over ranks). The accumulated gradient is then the gradient of the mini-batch loss,
however the mini-batch was split, which the tests check against a single-process forward.
"""

import logging
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import FSDPModule

from verl.protocol import DataProto, to_object_array
from verl.trainer.core_algos import (
    agg_loss,
    compute_entropy_loss,
    compute_kl_loss,
    compute_policy_loss,
    loss_token_counts,
)
from verl.utils.fsdp_utils import clip_grad_norm
from verl.utils.seqlen_balancing import dynamic_micro_batches, restore_order
from verl.utils.torch_functional import (
    entropy_from_logits,
    log_probs_from_logits,
    positions_from_mask,
    unpad_input,
)
from verl.workers.actor.config import ActorConfig


logger = logging.getLogger(__name__)

MODEL_INPUT_KEYS: tuple[str, ...] = ("input_ids", "attention_mask", "position_ids", "responses")
"""Tensor columns every forward needs (docs/data_flow.md)."""

PACKING_EXACT_ATTENTION: tuple[str, ...] = ("sdpa", "eager", "flash_attention_2", "flash_attention_3")
"""Attention implementations that honour packed position_ids exactly (block-diagonal mask or varlen kernel).
flex_attention is left out: it has no backward on the CPU."""


# ---------------------------------------------------------------------------------------------- model inputs


def process_multi_modal_inputs(data: DataProto, processor: Any) -> None:
    """Add the non-tensor column `multi_modal_inputs`: per row, the processor's tensors for its images and videos.

    Rows come from `multi_modal_data` ({"images": [...], "videos": [...]} or None). Rows that share a `uid` share
    the prompt and hence the images, so each prompt is processed once. A batch that already has the column is left
    as is, which lets a worker process once and reuse the result for old log-probs, reference and update.
    """
    if "multi_modal_data" not in data.non_tensor_batch or "multi_modal_inputs" in data.non_tensor_batch:
        return
    if processor is None:
        if any(row for row in data.non_tensor_batch["multi_modal_data"]):
            raise ValueError(
                "The batch has images or videos in multi_modal_data but the worker has no processor; use a "
                "vision-language model whose directory has a preprocessor_config.json."
            )
        return  # a text model with an all-empty multi_modal_data column
    uids = data.non_tensor_batch.get("uid")
    cache: dict[Any, dict[str, torch.Tensor]] = {}
    rows = []
    for index, multi_modal_data in enumerate(data.non_tensor_batch["multi_modal_data"]):
        key = uids[index] if uids is not None else index
        if key not in cache:
            cache[key] = _process_row(multi_modal_data or {}, processor)
        rows.append(cache[key])
    data.non_tensor_batch["multi_modal_inputs"] = to_object_array(rows)


def _process_row(multi_modal_data: dict[str, Any], processor: Any) -> dict[str, torch.Tensor]:
    inputs: dict[str, torch.Tensor] = {}
    images = multi_modal_data.get("images")
    if images:
        out = processor.image_processor(images=list(images), return_tensors="pt")
        inputs.update(pixel_values=out["pixel_values"], image_grid_thw=out["image_grid_thw"])
    videos = multi_modal_data.get("videos")
    if videos:
        out = processor.video_processor(videos=list(videos), return_tensors="pt")
        inputs.update(pixel_values_videos=out["pixel_values_videos"], video_grid_thw=out["video_grid_thw"])
    return inputs


def _batch_multi_modal_inputs(micro: DataProto) -> dict[str, torch.Tensor]:
    """Concatenate the rows' vision inputs in row order, the order in which the model fills the image tokens."""
    if "multi_modal_inputs" not in micro.non_tensor_batch:
        if any(row for row in micro.non_tensor_batch.get("multi_modal_data", ())):
            raise ValueError(
                "The batch has multi_modal_data but no multi_modal_inputs; call "
                "verl.workers.actor.dp_actor.process_multi_modal_inputs(data, processor) before the forward."
            )
        return {}
    parts: dict[str, list[torch.Tensor]] = defaultdict(list)
    for row in micro.non_tensor_batch["multi_modal_inputs"]:
        for key, value in (row or {}).items():
            parts[key].append(value)
    return {key: torch.cat(values, dim=0) for key, values in parts.items()}


def packing_is_exact(module: nn.Module) -> bool:
    """Whether the model's attention treats packed sequences exactly (so padding-free equals padded)."""
    config = getattr(module, "config", None)
    return getattr(config, "_attn_implementation", None) in PACKING_EXACT_ATTENTION


def make_micro_batches(
    data: DataProto, micro_batch_size: int, dynamic: bool, group: dist.ProcessGroup | None = None
) -> tuple[list[DataProto], torch.Tensor | None]:
    """Split into micro-batches of `micro_batch_size` rows, or dynamically by a token budget.

    The dynamic budget is micro_batch_size x the padded length, so a micro-batch never holds more tokens than a
    fixed one would, but short sequences share one forward. Returns the micro-batches and, for the dynamic case,
    the permutation that restores the original row order of outputs concatenated in micro-batch order.
    """
    if micro_batch_size < 1:
        raise ValueError(f"micro_batch_size_per_device must be positive, got {micro_batch_size}.")
    if not dynamic:
        return data.split(micro_batch_size), None
    attention_mask = data.batch["attention_mask"]
    budget = micro_batch_size * attention_mask.shape[-1]
    partitions = dynamic_micro_batches(attention_mask.sum(dim=-1), budget, group=group)
    micro_batches = [data[np.asarray(part, dtype=np.int64)] for part in partitions]
    return micro_batches, restore_order(partitions)


def _position_ids_for_model(position_ids: torch.Tensor) -> torch.Tensor:
    """Batch-first (B, 3, L) mrope positions from the DataProto become the model's (3, B, L)."""
    return position_ids.transpose(0, 1) if position_ids.dim() == 3 else position_ids


def forward_response(
    module: nn.Module,
    micro: DataProto,
    padding_free: bool,
    head: Callable[[torch.Tensor, torch.Tensor], dict[str, torch.Tensor]],
) -> dict[str, torch.Tensor]:
    """Run the model on a micro-batch and apply `head` to the outputs at the positions predicting response tokens.

    `head(logits, labels)` gets the model outputs at those positions (N, V) and the response tokens they predict
    (N,), and returns per-token values (N,). The result maps each name to a (B, R) tensor (R = response width),
    zero where the response token is padding, identical in the padded and the padding-free modes.

    Padding-free packs the valid tokens of all rows into one row with positions restarting at 0 per sequence, no
    attention mask and no KV cache, which transformers turns into a block-diagonal causal mask (varlen kernels on
    GPU). Only the logits at response-predicting positions are computed (`logits_to_keep`).
    """
    batch = micro.batch
    input_ids, attention_mask = batch["input_ids"], batch["attention_mask"]
    position_ids, responses = batch["position_ids"], batch["responses"]
    num_rows, seq_len = input_ids.shape
    response_len = responses.shape[-1]
    response_valid = attention_mask[:, -response_len:].bool()
    extra = _batch_multi_modal_inputs(micro)
    if not padding_free:
        output = module(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=_position_ids_for_model(position_ids),
            use_cache=False,
            logits_to_keep=response_len + 1,
            **extra,
        )
        logits = output.logits[:, :-1]  # position t predicts token t + 1
        values = head(logits.reshape(-1, logits.shape[-1]), responses.reshape(-1))
        return {name: value.reshape(num_rows, response_len) * response_valid for name, value in values.items()}

    indices = unpad_input(attention_mask)  # flat positions of the valid tokens in the (B * L) grid
    columns = indices % seq_len
    keep = (columns >= seq_len - response_len - 1) & (columns < seq_len - 1)  # positions predicting a response token
    text_positions = positions_from_mask(attention_mask).reshape(-1)[indices].unsqueeze(0)
    if position_ids.dim() == 3:  # mrope: (4, 1, T) = text positions (they mark the packing) + the 3 rope rows
        rope_positions = position_ids.transpose(0, 1).reshape(position_ids.shape[1], -1)[:, indices]
        packed_positions = torch.cat([text_positions, rope_positions], dim=0).unsqueeze(1)
    else:
        packed_positions = text_positions
    output = module(
        input_ids=input_ids.reshape(-1)[indices].unsqueeze(0),
        position_ids=packed_positions,
        use_cache=False,
        logits_to_keep=torch.nonzero(keep).flatten(),
        **extra,
    )
    logits = output.logits[0]
    targets = indices[keep]
    labels = input_ids.reshape(-1)[targets + 1]
    values = head(logits, labels)
    result = {}
    for name, value in values.items():
        full = value.new_zeros(num_rows * seq_len)
        full[targets] = value
        padded = full.reshape(num_rows, seq_len)[:, -response_len - 1 : -1]
        result[name] = padded * response_valid
    return result


def global_loss_counts(micro_batches: list[DataProto], group: dist.ProcessGroup | None = None) -> tuple[float, float]:
    """Response tokens and sequences of a mini-batch over all micro-batches and data-parallel ranks."""
    counts = torch.zeros(2, dtype=torch.float64)
    for micro in micro_batches:
        tokens, sequences = loss_token_counts(micro.batch["response_mask"])
        counts += torch.tensor([tokens, sequences], dtype=torch.float64)
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(counts, op=dist.ReduceOp.SUM, group=group)
    return float(counts[0]), float(counts[1])


def reshard(module: nn.Module) -> None:
    """Free the gathered parameters left by a forward without backward (with reshard_after_forward=False)."""
    for submodule in module.modules():
        if isinstance(submodule, FSDPModule):
            submodule.reshard()


def _world_size(group: dist.ProcessGroup | None) -> int:
    return dist.get_world_size(group) if dist.is_available() and dist.is_initialized() else 1


def select_model_inputs(data: DataProto, extra_keys: tuple[str, ...]) -> DataProto:
    """The columns a forward (plus `extra_keys`) needs, with an error naming a missing one; shares the tensors."""
    keys = list(MODEL_INPUT_KEYS) + list(extra_keys)
    missing = [key for key in keys if data.batch is None or key not in data.batch.keys()]
    if missing:
        raise KeyError(f"The batch is missing column(s) {', '.join(missing)}; see docs/data_flow.md for the keys.")
    non_tensor_keys = [key for key in ("multi_modal_inputs", "multi_modal_data") if key in data.non_tensor_batch]
    return data.select(batch_keys=keys, non_tensor_batch_keys=non_tensor_keys)


# ---------------------------------------------------------------------------------------------- actor

_POLICY_TOKEN_METRICS = ("pg_clipfrac_higher", "pg_clipfrac_lower", "pg_clipfrac_dual", "ppo_kl")

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
    ) -> None:
        if config.ulysses_size != 1:
            raise NotImplementedError(f"actor.ulysses_size={config.ulysses_size}: only 1 is implemented; set it to 1.")
        self.config = config
        self.module = module
        self.optimizer = optimizer
        self.group = group
        self.world_size = _world_size(group)
        samples = config.global_batch_size * rollout_n
        if samples % self.world_size != 0:
            raise ValueError(
                f"actor.global_batch_size x rollout.n = {samples} samples must split evenly over {self.world_size} "
                "data-parallel ranks."
            )
        self.mini_batch_size = samples // self.world_size
        self.padding_free = config.padding_free and packing_is_exact(module)
        if config.padding_free and not self.padding_free:
            logger.warning(
                "actor.padding_free is set but attention %r is not exact on packed sequences; running padded.",
                getattr(module.config, "_attn_implementation", None),
            )

    def _forward(self, micro: DataProto, temperature: float, calculate_entropy: bool) -> dict[str, torch.Tensor]:
        def head(logits: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
            logits = logits.float() / temperature
            out = {"log_probs": log_probs_from_logits(logits, labels)}
            if calculate_entropy:
                out["entropy"] = entropy_from_logits(logits)
            return out

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
        )
        outputs = [self._forward(micro, temperature, calculate_entropy) for micro in micro_batches]
        reshard(self.module)
        log_probs = torch.cat([out["log_probs"] for out in outputs])
        entropy = torch.cat([out["entropy"] for out in outputs]) if calculate_entropy else None
        if order is not None:
            log_probs = log_probs[order]
            entropy = entropy[order] if entropy is not None else None
        return (log_probs, entropy) if calculate_entropy else log_probs

    def update_policy(self, data: DataProto) -> dict[str, float]:
        """PPO update: ppo_epochs passes over mini-batches, one optimizer step each; returns mean metrics.

        Needs old_log_probs, advantages, response_mask (and ref_log_probs with use_kl_loss) and
        meta_info["temperature"]. A step whose gradient norm is not finite is skipped (gradients dropped, weights
        unchanged). Loss metrics are the mini-batch values over all ranks (identical on every rank).
        """
        if self.optimizer is None:
            raise RuntimeError("update_policy needs an optimizer; this actor was built without one (reference?).")
        if "temperature" not in data.meta_info:
            raise KeyError("update_policy needs meta_info['temperature'] (the rollout temperature); set it.")
        temperature = data.meta_info["temperature"]
        extra_keys = ("old_log_probs", "advantages", "response_mask")
        if self.config.use_kl_loss and not self.config.disable_kl:
            extra_keys += ("ref_log_probs",)
        data = select_model_inputs(data, extra_keys)
        self.module.train()
        metrics: dict[str, list[float]] = defaultdict(list)
        for _ in range(self.config.ppo_epochs):
            for mini_batch in data.split(self.mini_batch_size):
                for name, value in self._update_mini_batch(mini_batch, temperature).items():
                    metrics[name].append(value)
        metrics["actor/lr"].append(self.optimizer.param_groups[0]["lr"])
        return {name: float(np.mean(values)) for name, values in metrics.items()}

    def _update_mini_batch(self, mini_batch: DataProto, temperature: float) -> dict[str, float]:
        """Accumulate the gradient of one mini-batch over its micro-batches, then take one optimizer step."""
        config = self.config
        micro_batches, _ = make_micro_batches(
            mini_batch, config.micro_batch_size_per_device_for_update, config.dynamic_batching, self.group
        )
        token_count, seq_count = global_loss_counts(micro_batches, self.group)
        # Per-micro-batch loss shares and token-weighted token means, summed here and across ranks below.
        sums = torch.zeros(len(_SUMMED_METRICS), dtype=torch.float64)
        self.optimizer.zero_grad(set_to_none=True)
        for micro in micro_batches:
            loss, micro_sums = self._micro_batch_loss(micro, temperature, token_count, seq_count)
            (loss * self.world_size).backward()  # FSDP averages gradients over ranks; the shares must add up
            sums += micro_sums
        grad_norm = self._optimizer_step()
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(sums, op=dist.ReduceOp.SUM, group=self.group)
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
        self, micro: DataProto, temperature: float, token_count: float, seq_count: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """This micro-batch's share of the mini-batch loss, and its contributions to the `_SUMMED_METRICS`."""
        config = self.config
        batch = micro.batch
        response_mask = batch["response_mask"]
        agg = {
            "loss_avg_mode": config.loss_avg_mode,
            "global_token_count": token_count,
            "global_seq_count": seq_count,
            "max_response_length": response_mask.shape[-1],
        }
        out = self._forward(micro, temperature, calculate_entropy=config.entropy_coeff != 0)
        log_probs = out["log_probs"]
        pg_loss, pg_metrics = compute_policy_loss(
            old_log_probs=batch["old_log_probs"],
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
        if config.entropy_coeff != 0:
            entropy_loss = compute_entropy_loss(out["entropy"], response_mask, **agg)
            loss = loss - config.entropy_coeff * entropy_loss
        else:  # -log p of the sampled tokens estimates the entropy for free (on-policy samples)
            entropy_loss = agg_loss(-log_probs.detach(), response_mask, **agg)
        kl_loss = torch.zeros(())
        if config.use_kl_loss and not config.disable_kl:
            kl_loss = compute_kl_loss(log_probs, batch["ref_log_probs"], response_mask, config.kl_penalty, **agg)
            loss = loss + config.kl_coef * kl_loss
        tokens = float(response_mask.sum())
        values = {
            "actor/pg_loss": pg_loss.item(),
            "actor/entropy_loss": entropy_loss.item(),
            "actor/kl_loss": kl_loss.item(),
            **{f"actor/{name}": pg_metrics[name] * tokens for name in _POLICY_TOKEN_METRICS},
        }
        return loss, torch.tensor([values[name] for name, _ in _SUMMED_METRICS], dtype=torch.float64)

    def _optimizer_step(self) -> float:
        grad_norm = clip_grad_norm(self.module, self.config.max_grad_norm).item()
        if np.isfinite(grad_norm):
            self.optimizer.step()
        else:
            logger.warning("Skipping the actor's optimizer step: the gradient norm is %s.", grad_norm)
        self.optimizer.zero_grad(set_to_none=True)
        return grad_norm
