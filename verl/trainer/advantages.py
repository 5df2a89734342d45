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
"""Advantage estimators, selected by `algorithm.adv_estimator` through a registry.

Every estimator takes (B, L) `token_level_rewards` and `response_mask` (plus what it needs: group ids, critic
values, ...) and returns `(advantages, returns)`, both (B, L) and zero outside the response mask. The outcome
estimators use the score of a response, s_i = sum_t r_it, which with an outcome reward is the reward itself and with
a KL penalty in the reward also includes the penalty. Group ids (`index`, the `uid` column) mark the responses
sampled for the same prompt.
"""

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from verl.trainer.masked_ops import masked_whiten


AdvantageFn = Callable[..., tuple[torch.Tensor, torch.Tensor]]
GroupIds = np.ndarray | Sequence[Any] | torch.Tensor

_ADV_ESTIMATORS: dict[str, AdvantageFn] = {}


def register_adv_estimator(name: str) -> Callable[[AdvantageFn], AdvantageFn]:
    """Register an advantage estimator under `name` (the value of `algorithm.adv_estimator`)."""

    def decorator(fn: AdvantageFn) -> AdvantageFn:
        if name in _ADV_ESTIMATORS:
            raise ValueError(f"Advantage estimator {name!r} is already registered; pick another name.")
        _ADV_ESTIMATORS[name] = fn
        return fn

    return decorator


def get_adv_estimator(name: str) -> AdvantageFn:
    """The estimator registered under `name`; an unknown name raises ValueError listing the valid ones."""
    if name not in _ADV_ESTIMATORS:
        raise ValueError(
            f"Unknown algorithm.adv_estimator {name!r}; choose one of {', '.join(sorted(_ADV_ESTIMATORS))}."
        )
    return _ADV_ESTIMATORS[name]


def registered_adv_estimators() -> tuple[str, ...]:
    """Names of all registered estimators, in registration order."""
    return tuple(_ADV_ESTIMATORS)


@torch.no_grad()
def compute_advantage_return(adv_estimator: str, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the estimator `adv_estimator` with the keyword arguments it accepts.

    The trainer passes everything it has (rewards, mask, index, values, reward_baselines, gamma, lam,
    norm_adv_by_std); each estimator takes only its own inputs, so one call site serves all of them. A missing
    required input raises ValueError naming it.
    """
    fn = get_adv_estimator(adv_estimator)
    params = inspect.signature(fn).parameters
    missing = [
        name for name, param in params.items() if param.default is inspect.Parameter.empty and kwargs.get(name) is None
    ]
    if missing:
        raise ValueError(
            f"Advantage estimator {adv_estimator!r} needs {', '.join(missing)}; pass it to compute_advantage_return."
        )
    return fn(**{name: value for name, value in kwargs.items() if name in params})


def _group_inverse(index: GroupIds, batch_size: int, device: torch.device) -> tuple[torch.Tensor, int]:
    """Map group ids (any hashable: str uids, ints) to dense group numbers 0..G-1, in order of first appearance."""
    ids = index.tolist() if isinstance(index, (np.ndarray, torch.Tensor)) else list(index)
    if len(ids) != batch_size:
        raise ValueError(
            f"index has {len(ids)} group ids but the batch has {batch_size} responses; pass one uid each."
        )
    dense: dict[Any, int] = {}
    inverse = [dense.setdefault(uid, len(dense)) for uid in ids]
    return torch.tensor(inverse, dtype=torch.long, device=device), len(dense)


def _group_sum(values: torch.Tensor, inverse: torch.Tensor, num_groups: int) -> torch.Tensor:
    return torch.zeros(num_groups, dtype=values.dtype, device=values.device).index_add_(0, inverse, values)


def _group_stats(scores: torch.Tensor, inverse: torch.Tensor, num_groups: int) -> tuple[torch.Tensor, ...]:
    """Per-sample (group size, group mean, unbiased group std) broadcast back to the samples; float64 inside.

    Float64 keeps (s - mean) exactly 0 in groups of identical scores, where a float32 residue divided by a tiny std
    would otherwise turn into a spurious advantage. A singleton group has std 0.
    """
    scores = scores.double()
    counts = _group_sum(torch.ones_like(scores), inverse, num_groups)
    means = _group_sum(scores, inverse, num_groups) / counts
    squares = _group_sum((scores - means[inverse]) ** 2, inverse, num_groups)
    stds = (squares / (counts - 1).clamp(min=1)).sqrt()
    return counts[inverse], means[inverse], stds[inverse]


def _broadcast(per_sequence: torch.Tensor, response_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return per_sequence.to(dtype).unsqueeze(-1) * response_mask.to(dtype)


@register_adv_estimator("gae")
def compute_gae_advantage_return(
    token_level_rewards: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float = 1.0,
    lam: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized Advantage Estimation (Schulman et al. 2016, arXiv 1506.02438) with critic values.

    delta_t = r_t + gamma * V_{t+1} - V_t,  A_t = delta_t + gamma * lam * A_{t+1},  returns R_t = A_t + V_t,
    with V and A taken as 0 after the last response token. Masked positions are skipped (the next value and the
    running advantage carry over them), so padding values never leak in. The returns are the critic's targets; the
    advantages are then whitened over all response tokens of the batch.
    """
    mask = response_mask.to(values.dtype)
    next_value = torch.zeros_like(values[:, 0])
    running = torch.zeros_like(values[:, 0])
    advantages = torch.zeros_like(values)
    for t in reversed(range(values.shape[1])):
        delta = token_level_rewards[:, t] + gamma * next_value - values[:, t]
        m = mask[:, t]
        running = m * (delta + gamma * lam * running) + (1 - m) * running
        next_value = m * values[:, t] + (1 - m) * next_value
        advantages[:, t] = running
    returns = (advantages + values) * mask
    return masked_whiten(advantages, mask) * mask, returns


@register_adv_estimator("grpo")
def compute_grpo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: GroupIds,
    norm_adv_by_std: bool = True,
    eps: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO group-normalised outcome advantage (Shao et al. 2024, DeepSeekMath, arXiv 2402.03300).

    A_i = (s_i - mean_g(s)) / (std_g(s) + eps) for every token of response i in group g, with the unbiased std.
    `norm_adv_by_std=False` gives Dr.GRPO (Liu et al. 2025, arXiv 2503.20783): A_i = s_i - mean_g(s), which avoids
    up-weighting prompts whose rewards barely vary. A group with one response gets advantage 0 (s_i - mean = 0).
    Returns equal the advantages.
    """
    scores = token_level_rewards.sum(dim=-1)
    inverse, num_groups = _group_inverse(index, scores.shape[0], scores.device)
    _, means, stds = _group_stats(scores, inverse, num_groups)
    advantages = scores.double() - means
    if norm_adv_by_std:
        advantages = advantages / (stds + eps)
    advantages = _broadcast(advantages, response_mask, token_level_rewards.dtype)
    return advantages, advantages


@register_adv_estimator("grpo_passk")
def compute_grpo_passk_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: GroupIds,
    eps: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pass@k advantage: credit only the best response of each group (Tang et al. 2025, arXiv 2503.19595).

    For the objective max_i s_i over a group of k = n samples, the leave-one-out baseline of sample i is the max
    of the others, so only the argmax gets a non-zero advantage: A = (s_max - s_second) / (std_g(s) + eps); all
    other responses get 0. Ties go to the first response in batch order (and then s_max = s_second gives 0).
    Singleton groups get 0.
    """
    scores = token_level_rewards.sum(dim=-1).double()
    inverse, num_groups = _group_inverse(index, scores.shape[0], scores.device)
    counts, _, stds = _group_stats(scores, inverse, num_groups)
    neg_inf = torch.full((num_groups,), -torch.inf, dtype=scores.dtype, device=scores.device)
    group_max = neg_inf.scatter_reduce(0, inverse, scores, reduce="amax")
    positions = torch.arange(scores.shape[0], device=scores.device)
    is_max = scores == group_max[inverse]
    first_argmax = torch.full((num_groups,), scores.shape[0], device=scores.device).scatter_reduce(
        0, inverse[is_max], positions[is_max], reduce="amin"
    )
    is_best = positions == first_argmax[inverse]
    second_max = neg_inf.scatter_reduce(0, inverse[~is_best], scores[~is_best], reduce="amax")
    gap = (group_max - second_max)[inverse]
    advantages = torch.where(is_best & (counts > 1), gap / (stds + eps), torch.zeros_like(scores))
    advantages = _broadcast(advantages, response_mask, token_level_rewards.dtype)
    return advantages, advantages


@register_adv_estimator("rloo")
def compute_rloo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: GroupIds,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE leave-one-out (Kool et al. 2019; Ahmadian et al. 2024, arXiv 2402.14740).

    A_i = s_i - (1 / (n - 1)) * sum_{j != i} s_j over the n responses of the group: the baseline of each sample is
    the mean of the others, so it is independent of the sample and the estimate stays unbiased. Singleton groups
    get 0. Returns equal the advantages.
    """
    scores = token_level_rewards.sum(dim=-1).double()
    inverse, num_groups = _group_inverse(index, scores.shape[0], scores.device)
    counts, means, _ = _group_stats(scores, inverse, num_groups)
    others_mean = (means * counts - scores) / (counts - 1).clamp(min=1)
    advantages = torch.where(counts > 1, scores - others_mean, torch.zeros_like(scores))
    advantages = _broadcast(advantages, response_mask, token_level_rewards.dtype)
    return advantages, advantages


def _discounted_returns(token_level_rewards: torch.Tensor, mask: torch.Tensor, gamma: float) -> torch.Tensor:
    """G_t = m_t * (r_t + gamma * G_{t+1}): the discounted reward-to-go, reset to 0 at padding."""
    returns = torch.zeros_like(token_level_rewards)
    running = torch.zeros_like(token_level_rewards[:, 0])
    for t in reversed(range(token_level_rewards.shape[1])):
        running = mask[:, t] * (token_level_rewards[:, t] + gamma * running)
        returns[:, t] = running
    return returns


@register_adv_estimator("reinforce_plus_plus")
def compute_reinforce_plus_plus_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++ (Hu 2025, arXiv 2501.03262): whitened discounted returns, no critic and no groups.

    G_t = sum_{k >= t} gamma^(k - t) r_k within the response (reset at the end of the response); the advantage is
    G whitened over all response tokens of the batch, A = (G - mean) / sqrt(var + 1e-8). Returns are the raw G.
    """
    mask = response_mask.to(token_level_rewards.dtype)
    returns = _discounted_returns(token_level_rewards, mask, gamma)
    return masked_whiten(returns, mask) * mask, returns


@register_adv_estimator("reinforce_plus_plus_baseline")
def compute_reinforce_plus_plus_baseline_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: GroupIds,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++ with a group baseline (Hu 2025, arXiv 2501.03262, "REINFORCE++-baseline").

    Subtract the group mean score, A_i = s_i - mean_g(s), broadcast it over the response, then whiten over all
    response tokens of the batch (a global, not per-group, scale). Returns equal the advantages.
    """
    scores = token_level_rewards.sum(dim=-1)
    inverse, num_groups = _group_inverse(index, scores.shape[0], scores.device)
    _, means, _ = _group_stats(scores, inverse, num_groups)
    mask = response_mask.to(token_level_rewards.dtype)
    centred = _broadcast(scores.double() - means, mask, token_level_rewards.dtype)
    advantages = masked_whiten(centred, mask) * mask
    return advantages, advantages


@register_adv_estimator("remax")
def compute_remax_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    reward_baselines: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """ReMax (Li et al. 2023, arXiv 2310.10505): REINFORCE with the greedy response's reward as the baseline.

    R_t = sum_{k >= t} r_k (the reward-to-go, which is the score s_i on every token for an outcome reward) and
    A_t = R_t - b_i, where b_i (`reward_baselines`, shape (B,)) is the score of a greedy (temperature 0) response to
    the same prompt. Returns are R.
    """
    mask = response_mask.to(token_level_rewards.dtype)
    returns = _discounted_returns(token_level_rewards, mask, gamma=1.0)
    baselines = torch.as_tensor(reward_baselines, dtype=returns.dtype, device=returns.device)
    if baselines.shape != returns.shape[:1]:
        raise ValueError(f"reward_baselines must have shape ({returns.shape[0]},), got {tuple(baselines.shape)}.")
    return (returns - baselines.unsqueeze(-1)) * mask, returns
