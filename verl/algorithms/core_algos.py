# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Entropy and value losses, explained variance and the DAPO group filter; also the one import surface of
`advantages.py`, `policy_losses.py`, `kl.py` and `masked_ops.py` (each holds a registry config validation reads).
All pure torch on (B, L) right-padded responses masked by `response_mask`."""

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from verl.algorithms.advantages import (
    ESTIMATOR_OPTIONS,
    adv_estimator_parameters,
    compute_advantage_return,
    compute_gae_advantage_return,
    compute_gpg_outcome_advantage,
    compute_grpo_outcome_advantage,
    compute_grpo_passk_outcome_advantage,
    compute_opo_outcome_advantage,
    compute_reinforce_plus_plus_baseline_outcome_advantage,
    compute_reinforce_plus_plus_outcome_advantage,
    compute_remax_outcome_advantage,
    compute_rloo_outcome_advantage,
    estimator_needs_critic,
    estimator_needs_greedy_baseline,
    get_adv_estimator,
    is_grouped_adv_estimator,
    register_adv_estimator,
    registered_adv_estimators,
)
from verl.algorithms.kl import (
    KL_CONTROLLER_TYPES,
    AdaptiveKLController,
    FixedKLController,
    KLController,
    apply_kl_penalty,
    compute_kl,
    compute_kl_loss,
    get_kl_controller,
    register_kl_penalty,
    registered_kl_penalties,
)
from verl.algorithms.masked_ops import (
    Count,
    agg_loss,
    high_entropy_mask,
    loss_token_counts,
    masked_mean,
    masked_var,
    masked_whiten,
    register_loss_avg_mode,
    registered_loss_avg_modes,
)
from verl.algorithms.policy_losses import (
    compute_policy_loss,
    default_loss_avg_mode,
    policy_loss_avg_mode,
    register_policy_loss,
    registered_policy_losses,
)
from verl.utils.torch_functional import entropy_from_logits  # re-exported: the entropy bonus' input


__all__ = [
    "ESTIMATOR_OPTIONS",
    "KL_CONTROLLER_TYPES",
    "AdaptiveKLController",
    "FixedKLController",
    "KLController",
    "adv_estimator_parameters",
    "agg_loss",
    "apply_kl_penalty",
    "compute_advantage_return",
    "compute_entropy_loss",
    "compute_gae_advantage_return",
    "compute_gpg_outcome_advantage",
    "compute_grpo_outcome_advantage",
    "compute_grpo_passk_outcome_advantage",
    "compute_kl",
    "compute_kl_loss",
    "compute_opo_outcome_advantage",
    "compute_policy_loss",
    "compute_reinforce_plus_plus_baseline_outcome_advantage",
    "compute_reinforce_plus_plus_outcome_advantage",
    "compute_remax_outcome_advantage",
    "compute_rloo_outcome_advantage",
    "compute_value_loss",
    "default_loss_avg_mode",
    "entropy_from_logits",
    "estimator_needs_critic",
    "estimator_needs_greedy_baseline",
    "explained_variance",
    "filter_groups_by_reward",
    "get_adv_estimator",
    "get_kl_controller",
    "high_entropy_mask",
    "is_grouped_adv_estimator",
    "loss_token_counts",
    "masked_mean",
    "masked_var",
    "masked_whiten",
    "policy_loss_avg_mode",
    "register_adv_estimator",
    "register_kl_penalty",
    "register_loss_avg_mode",
    "register_policy_loss",
    "registered_adv_estimators",
    "registered_kl_penalties",
    "registered_loss_avg_modes",
    "registered_policy_losses",
]


def compute_entropy_loss(
    entropy: torch.Tensor,
    response_mask: torch.Tensor,
    loss_avg_mode: str,
    global_token_count: Count | None = None,
    global_seq_count: Count | None = None,
    max_response_length: int | None = None,
) -> torch.Tensor:
    """Token entropies (B, L) aggregated like the policy loss, for the entropy bonus (pg_loss - entropy_coef * this).
    DAPO (arXiv 2503.14476) sets the coefficient to 0: with clip-higher it tends to make the entropy explode."""
    return agg_loss(entropy, response_mask, loss_avg_mode, global_token_count, global_seq_count, max_response_length)


def compute_value_loss(
    vpreds: torch.Tensor,
    returns: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    cliprange_value: float,
    loss_avg_mode: str,
    global_token_count: Count | None = None,
    global_seq_count: Count | None = None,
    max_response_length: int | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped value loss of PPO (arXiv 1707.06347): 1/2 max((V - R)^2, (V_clip - R)^2) per token, aggregated by
    `agg_loss`, with V_clip = V_old + clip(V - V_old, -c, c). Metrics: `vf_clipfrac`, `vpred_mean`."""
    vpreds, returns, values = vpreds.float(), returns.float(), values.float()
    vpreds_clipped = values + (vpreds - values).clamp(-cliprange_value, cliprange_value)
    unclipped_loss = (vpreds - returns).square()
    clipped_loss = (vpreds_clipped - returns).square()
    loss_mat = 0.5 * torch.maximum(unclipped_loss, clipped_loss)
    vf_loss = agg_loss(
        loss_mat, response_mask, loss_avg_mode, global_token_count, global_seq_count, max_response_length
    )
    return vf_loss, {  # detached 0-dim tensors on the device: no host sync per micro-batch
        "vf_clipfrac": masked_mean((clipped_loss > unclipped_loss).float(), response_mask),
        "vpred_mean": masked_mean(vpreds.detach(), response_mask),
    }


@torch.no_grad()
def explained_variance(returns: torch.Tensor, values: torch.Tensor, mask: torch.Tensor) -> float:
    """1 - Var[R - V] / Var[R] over the masked tokens; NaN when the returns do not vary (a logger then shows a gap).
    GAE's returns A + V of a step without rewards are 0 only up to float32 rounding (at most about eps x response
    length x |V|): a spread within that is no variation (divided by it, the metric was -1e14)."""
    returns, values = returns.float(), values.float()
    var_returns = masked_var(returns, mask, unbiased=False).item()
    tokens = mask.bool()
    scale = torch.cat([returns[tokens], values[tokens]]).abs().max().item()
    rounding = torch.finfo(torch.float32).eps * mask.shape[-1] * scale
    if var_returns <= rounding**2:
        return float("nan")
    return 1.0 - masked_var(returns - values, mask, unbiased=False).item() / var_returns


def filter_groups_by_reward(
    scores_by_sample: np.ndarray | torch.Tensor | Sequence[float],
    uids: np.ndarray | Sequence[Any],
    low: float,
    high: float,
) -> np.ndarray:
    """DAPO dynamic sampling (arXiv 2503.14476): in order, the indices of samples whose group's mean score is strictly
    in (low, high) (NaN dropped) and whose scores are not all equal: such a group has zero advantage and only dilutes
    the batch (with a filter key that is not 0/1, e.g. `overall` with a format term, its mean may lie inside)."""
    if isinstance(scores_by_sample, torch.Tensor):
        scores_by_sample = scores_by_sample.detach().float().cpu().numpy()
    scores = np.asarray(scores_by_sample, dtype=np.float64).reshape(-1)
    uids = list(uids)
    if len(uids) != len(scores):
        raise ValueError(f"filter_groups_by_reward got {len(scores)} scores but {len(uids)} uids; pass one uid each.")
    groups: dict[Any, list[float]] = {}
    for uid, score in zip(uids, scores):
        groups.setdefault(uid, []).append(score)
    kept = {uid for uid, group in groups.items() if low < sum(group) / len(group) < high and max(group) > min(group)}
    return np.array([i for i, uid in enumerate(uids) if uid in kept], dtype=np.int64)
