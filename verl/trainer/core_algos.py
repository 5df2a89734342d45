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
"""The RL math: policy, entropy and value losses, explained variance and the DAPO group filter.

This is also the one import surface for the rest of the algorithm code, which lives in small sibling modules:
advantage estimators (`advantages.py`), KL estimators and controllers (`kl.py`), masked statistics and loss
aggregation (`masked_ops.py`) and the torch-free name lists (`algo_constants.py`). Everything is pure torch on
(B, L) tensors of right-padded responses, with `response_mask` marking the response tokens.
"""

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from verl.trainer.advantages import (
    compute_advantage_return,
    compute_gae_advantage_return,
    compute_grpo_outcome_advantage,
    compute_grpo_passk_outcome_advantage,
    compute_reinforce_plus_plus_baseline_outcome_advantage,
    compute_reinforce_plus_plus_outcome_advantage,
    compute_remax_outcome_advantage,
    compute_rloo_outcome_advantage,
    get_adv_estimator,
    register_adv_estimator,
    registered_adv_estimators,
)
from verl.trainer.algo_constants import (
    ADV_ESTIMATOR_NAMES,
    GROUPED_ADV_ESTIMATORS,
    KL_CONTROLLER_TYPES,
    KL_PENALTIES,
    LOSS_AVG_MODES,
    LOSS_TYPES,
)
from verl.trainer.kl import (
    AdaptiveKLController,
    FixedKLController,
    KLController,
    apply_kl_penalty,
    compute_kl,
    compute_kl_loss,
    get_kl_controller,
)
from verl.trainer.masked_ops import Count, agg_loss, loss_token_counts, masked_mean, masked_var, masked_whiten
from verl.utils.torch_functional import entropy_from_logits  # re-exported: the entropy bonus' input


__all__ = [
    "ADV_ESTIMATOR_NAMES",
    "GROUPED_ADV_ESTIMATORS",
    "KL_CONTROLLER_TYPES",
    "KL_PENALTIES",
    "LOSS_AVG_MODES",
    "LOSS_TYPES",
    "AdaptiveKLController",
    "FixedKLController",
    "KLController",
    "agg_loss",
    "apply_kl_penalty",
    "compute_advantage_return",
    "compute_entropy_loss",
    "compute_gae_advantage_return",
    "compute_grpo_outcome_advantage",
    "compute_grpo_passk_outcome_advantage",
    "compute_kl",
    "compute_kl_loss",
    "compute_policy_loss",
    "compute_reinforce_plus_plus_baseline_outcome_advantage",
    "compute_reinforce_plus_plus_outcome_advantage",
    "compute_remax_outcome_advantage",
    "compute_rloo_outcome_advantage",
    "compute_value_loss",
    "entropy_from_logits",
    "explained_variance",
    "filter_groups_by_reward",
    "get_adv_estimator",
    "get_kl_controller",
    "loss_token_counts",
    "masked_mean",
    "masked_var",
    "masked_whiten",
    "register_adv_estimator",
    "registered_adv_estimators",
]

LOG_RATIO_CLAMP = 20.0
"""|log(pi / pi_old)| is clamped before exp: one wildly off-policy token must not give inf or NaN gradients."""


def _check_clip_ratios(clip_ratio_low: float, clip_ratio_high: float, clip_ratio_dual: float) -> None:
    if not 0.0 <= clip_ratio_low < 1.0 or clip_ratio_high < 0.0:
        raise ValueError(
            f"actor.clip_ratio_low must be in [0, 1) and actor.clip_ratio_high >= 0, got {clip_ratio_low} and "
            f"{clip_ratio_high}."
        )
    if clip_ratio_dual <= 1.0:
        raise ValueError(
            f"actor.clip_ratio_dual must be greater than 1, got {clip_ratio_dual}; use float('inf') to turn the dual "
            "clip off."
        )


def _importance_log_ratio(
    log_probs: torch.Tensor, log_ratio: torch.Tensor, mask: torch.Tensor, loss_type: str
) -> torch.Tensor:
    """Token log-ratios for PPO/CISPO/SAPO; the sequence log-ratio, broadcast over tokens, for the GSPO variants.

    GSPO: log s_i = mean_t log(pi / pi_old) (a length-normalised sequence ratio). "gspo" differentiates through
    s_i, so each token gets gradient s_i / |y_i| times its sequence's loss; "gspo_token" uses
    s_it = sg(s_i) * pi(y_t) / sg(pi(y_t)), equal in value to s_i but with a per-token gradient, which allows
    per-token advantages.
    """
    if loss_type not in ("gspo", "gspo_token"):
        return log_ratio
    seq_log_ratio = masked_mean(log_ratio, mask, dim=-1).unsqueeze(-1)
    if loss_type == "gspo":
        return seq_log_ratio.expand_as(log_ratio)
    return seq_log_ratio.detach() + log_probs - log_probs.detach()


def compute_policy_loss(
    old_log_probs: torch.Tensor,
    log_probs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_type: str,
    clip_ratio_low: float,
    clip_ratio_high: float,
    clip_ratio_dual: float,
    loss_avg_mode: str,
    tau_positive: float = 1.0,
    tau_negative: float = 1.05,
    global_token_count: Count | None = None,
    global_seq_count: Count | None = None,
    max_response_length: int | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Policy-gradient loss of one micro-batch, aggregated with `agg_loss` (see there for the global counts).

    With ratio r = pi / pi_old = exp(clamp(log_probs - old_log_probs, +-20)), advantage A, eps_l = clip_ratio_low,
    eps_h = clip_ratio_high, the per-token loss is:

    - "default" (PPO, Schulman et al. 2017, arXiv 1707.06347) with clip-higher (DAPO, Yu et al. 2025,
      arXiv 2503.14476) and dual clip (Ye et al. 2020, arXiv 1912.09729):
      l = max(-A r, -A clip(r, 1 - eps_l, 1 + eps_h)), and for A < 0 additionally l = min(l, -A C) with
      C = clip_ratio_dual. So the effective ratio is min(r, 1 + eps_h) for A > 0 and min(max(r, 1 - eps_l), C) for
      A < 0, and the gradient is 0 wherever a bound is active.
    - "gspo" / "gspo_token" (GSPO, Zheng et al. 2025, arXiv 2507.18071): the same clipped surrogate, without dual
      clip, on the sequence ratio s_i = exp(mean_t log(pi / pi_old)) (see `_importance_log_ratio`).
    - "cispo" (CISPO, MiniMax-M1, arXiv 2506.13585): l = -sg(clip(r, 1 - eps_l, 1 + eps_h)) A log pi. The ratio only
      weights the gradient (clipped, stop-gradient), so clipped tokens still contribute a gradient.
    - "sapo" (SAPO, Gao et al. 2025, arXiv 2511.20347): l = -A (4 / tau) sigmoid(tau (r - 1)), tau = tau_positive
      for A > 0 and tau_negative otherwise. A smooth gate instead of a hard clip: with g = sigmoid(tau (r - 1)) the
      gradient is -A 4 g (1 - g) r grad(log pi), the plain policy gradient at r = 1, decaying smoothly off-policy
      (faster for negative advantages, since tau_negative > tau_positive).

    Metrics (token means over this micro-batch): `pg_clipfrac_higher` (share of tokens held at the upper bound
    1 + eps_h), `pg_clipfrac_lower` (held at the lower bound 1 - eps_l), `pg_clipfrac_dual` (held by the dual
    clip), and `ppo_kl`, the k1 estimate of KL(pi_old || pi), mean(log pi_old - log pi).
    """
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"Unknown actor.loss_type {loss_type!r}; choose one of {', '.join(LOSS_TYPES)}.")
    _check_clip_ratios(clip_ratio_low, clip_ratio_high, clip_ratio_dual)
    log_probs, advantages, mask = log_probs.float(), advantages.float(), response_mask.float()
    log_ratio = log_probs - old_log_probs.float()
    ratio_log = _importance_log_ratio(log_probs, log_ratio, mask, loss_type)
    ratio = torch.exp(ratio_log.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    low, high = 1.0 - clip_ratio_low, 1.0 + clip_ratio_high
    no_clip = torch.zeros_like(mask, dtype=torch.bool)
    clipped_higher, clipped_lower, clipped_dual = no_clip, no_clip, no_clip
    if loss_type == "sapo":
        tau = torch.where(advantages > 0, tau_positive, tau_negative)
        loss_mat = -advantages * (4.0 / tau) * torch.sigmoid(tau * (ratio - 1.0))
    elif loss_type == "cispo":
        loss_mat = -advantages * ratio.clamp(low, high).detach() * log_probs
        clipped_higher, clipped_lower = ratio > high, ratio < low
    else:
        loss_mat = torch.maximum(-advantages * ratio, -advantages * ratio.clamp(low, high))
        clipped_higher = (advantages > 0) & (ratio > high)
        clipped_lower = (advantages < 0) & (ratio < low)
        if loss_type == "default":
            clipped_dual = (advantages < 0) & (ratio > clip_ratio_dual)
            loss_mat = torch.where(clipped_dual, -advantages * clip_ratio_dual, loss_mat)
    pg_loss = agg_loss(loss_mat, mask, loss_avg_mode, global_token_count, global_seq_count, max_response_length)
    per_token = torch.stack([clipped_higher.float(), clipped_lower.float(), clipped_dual.float(), -log_ratio.detach()])
    stats = (per_token * mask).sum(dim=(1, 2)) / mask.sum().clamp(min=1.0)
    names = ("pg_clipfrac_higher", "pg_clipfrac_lower", "pg_clipfrac_dual", "ppo_kl")
    metrics = dict(zip(names, stats.tolist()))  # one device sync for all metrics
    return pg_loss, metrics


def compute_entropy_loss(
    entropy: torch.Tensor,
    response_mask: torch.Tensor,
    loss_avg_mode: str,
    global_token_count: Count | None = None,
    global_seq_count: Count | None = None,
    max_response_length: int | None = None,
) -> torch.Tensor:
    """Token entropies (B, L) aggregated like the policy loss, for the entropy bonus.

    The actor minimises pg_loss - entropy_coef * this (Williams and Peng 1991; Mnih et al. 2016, arXiv 1602.01783),
    which keeps the policy from collapsing early. DAPO (arXiv 2503.14476) drops it (coefficient 0) because with
    clip-higher it tends to make the entropy explode.
    """
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
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped value loss of PPO (Schulman et al. 2017, arXiv 1707.06347; OpenAI baselines ppo2).

    V_clip = V_old + clip(V - V_old, -c, c) and l = 1/2 max((V - R)^2, (V_clip - R)^2) per token, aggregated with
    `agg_loss`: the critic cannot gain by moving its prediction more than c away from the value used to compute
    the advantages. Metrics: `vf_clipfrac` (share of tokens where the clipped term is the larger one) and
    `vpred_mean`.
    """
    vpreds, returns, values = vpreds.float(), returns.float(), values.float()
    vpreds_clipped = values + (vpreds - values).clamp(-cliprange_value, cliprange_value)
    unclipped_loss = (vpreds - returns).square()
    clipped_loss = (vpreds_clipped - returns).square()
    loss_mat = 0.5 * torch.maximum(unclipped_loss, clipped_loss)
    vf_loss = agg_loss(
        loss_mat, response_mask, loss_avg_mode, global_token_count, global_seq_count, max_response_length
    )
    metrics = {
        "vf_clipfrac": masked_mean((clipped_loss > unclipped_loss).float(), response_mask).item(),
        "vpred_mean": masked_mean(vpreds.detach(), response_mask).item(),
    }
    return vf_loss, metrics


@torch.no_grad()
def explained_variance(returns: torch.Tensor, values: torch.Tensor, mask: torch.Tensor) -> float:
    """1 - Var[R - V] / Var[R] over the masked tokens: 1 is a perfect critic, 0 is no better than a constant.

    NaN when the returns do not vary (the ratio is undefined), so a logger shows a gap instead of a fake value.
    """
    returns, values = returns.float(), values.float()
    var_returns = masked_var(returns, mask, unbiased=False).item()
    if var_returns == 0.0:
        return float("nan")
    return 1.0 - masked_var(returns - values, mask, unbiased=False).item() / var_returns


def filter_groups_by_reward(
    scores_by_sample: np.ndarray | torch.Tensor | Sequence[float],
    uids: np.ndarray | Sequence[Any],
    low: float,
    high: float,
) -> np.ndarray:
    """DAPO dynamic sampling (Yu et al. 2025, arXiv 2503.14476): keep the groups whose mean score is in (low, high).

    A group where every response gets the same reward (all right or all wrong) has zero group-relative advantage
    and only dilutes the batch. Returns the indices of the samples of the kept groups, in their original order.
    The bounds are strict; a NaN mean is dropped.
    """
    if isinstance(scores_by_sample, torch.Tensor):
        scores_by_sample = scores_by_sample.detach().float().cpu().numpy()
    scores = np.asarray(scores_by_sample, dtype=np.float64).reshape(-1)
    uids = list(uids)
    if len(uids) != len(scores):
        raise ValueError(f"filter_groups_by_reward got {len(scores)} scores but {len(uids)} uids; pass one uid each.")
    sums: dict[Any, list[float]] = {}
    for uid, score in zip(uids, scores):
        total = sums.setdefault(uid, [0.0, 0.0])
        total[0] += score
        total[1] += 1.0
    kept = {uid for uid, (total, count) in sums.items() if low < total / count < high}
    return np.array([i for i, uid in enumerate(uids) if uid in kept], dtype=np.int64)
