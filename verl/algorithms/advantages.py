# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Advantage estimators, selected by `algorithm.adv_estimator` through a registry.
Every estimator takes (B, L) `token_level_rewards` and `response_mask` (plus group ids `index`, critic `values`, ...
as needed) and returns `(advantages, returns)`, both (B, L) and zero outside the mask. Outcome estimators use the
score s_i = sum_t r_it (so a KL penalty in the reward is included); `index` (the `uid` column) groups the responses to
one prompt."""

import functools
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from verl.algorithms.masked_ops import masked_whiten
from verl.algorithms.user_functions import Kind, Where, add_kind, check_keyword_inputs, register_once, require_known


AdvantageFn = Callable[..., tuple[torch.Tensor, torch.Tensor]]
GroupIds = np.ndarray | Sequence[Any] | torch.Tensor

_ADV_ESTIMATORS: dict[str, AdvantageFn] = {}
_GROUPED_ADV_ESTIMATORS: set[str] = set()

ESTIMATOR_INPUTS: tuple[str, ...] = ("token_level_rewards", "response_mask", "index", "values", "reward_baselines")
"""Tensors the trainer passes an estimator by these keywords, where it has them (`compute_advantage_return`)."""

ESTIMATOR_OPTIONS: tuple[str, ...] = ("gamma", "lam", "norm_adv_by_std_in_grpo", "grpo_std_scope")
"""`algorithm.*` options passed to the estimator by the same keyword; config validation refuses a non-default value
for an estimator that lacks the keyword."""


def register_adv_estimator(name: str, *, grouped: bool = False) -> Callable[[AdvantageFn], AdvantageFn]:
    """Register an advantage estimator under `name` (the value of `algorithm.adv_estimator`).
    `grouped` marks a baseline from the other responses to the same prompt (takes `index`): validation then requires
    `worker.rollout.n > 1`."""

    def decorator(fn: AdvantageFn) -> AdvantageFn:
        register_once(_ADV_ESTIMATORS, name, fn, "Advantage estimator")
        if grouped:
            _GROUPED_ADV_ESTIMATORS.add(name)
        return fn

    return decorator


def get_adv_estimator(name: str) -> AdvantageFn:
    """The estimator `name`, or one loaded from "file.py:function"; an unknown name raises ValueError."""
    require_known("adv_estimator", _ADV_ESTIMATORS, name, "algorithm.adv_estimator", sorted(_ADV_ESTIMATORS))
    return _ADV_ESTIMATORS[name]


def registered_adv_estimators() -> tuple[str, ...]:
    return tuple(_ADV_ESTIMATORS)


def is_grouped_adv_estimator(name: str) -> bool:
    """Whether the estimator compares responses to the same prompt (needs rollout.n > 1)."""
    return name in _GROUPED_ADV_ESTIMATORS


def estimator_needs_critic(name: str) -> bool:
    """Whether the estimator takes critic `values`: a critic then trains."""
    return "values" in adv_estimator_parameters(name)


def estimator_needs_greedy_baseline(name: str) -> bool:
    """Whether the estimator takes `reward_baselines`: each prompt then also gets a greedy response as baseline."""
    return "reward_baselines" in adv_estimator_parameters(name)


def adv_estimator_parameters(name: str) -> tuple[str, ...]:
    return tuple(inspect.signature(get_adv_estimator(name)).parameters)


@torch.no_grad()
def compute_advantage_return(adv_estimator: str, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the estimator with the keyword arguments it accepts, so one call site serves all of them.
    Options it does not take were refused at config validation unless default; a missing required input raises
    ValueError."""
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
    """Map group ids (any hashable) to dense numbers 0..G-1, in order of first appearance."""
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


@dataclass(frozen=True)
class _ScoreGroups:
    """Response scores s_i and their groups, with per-sample group statistics, all (B,).
    float64 keeps (s - mean) exactly 0 in groups of identical scores (a float32 residue over a tiny std would be a
    spurious advantage)."""

    scores: torch.Tensor
    inverse: torch.Tensor
    """Dense group number (0..G-1) of each sample."""
    num_groups: int
    counts: torch.Tensor
    means: torch.Tensor
    stds: torch.Tensor
    """Unbiased std of the group's scores (0 for a singleton group)."""


def _score_groups(token_level_rewards: torch.Tensor, index: GroupIds) -> _ScoreGroups:
    """Shared first step of the grouped outcome estimators: scores, dense groups, group size/mean/std per sample."""
    scores = token_level_rewards.sum(dim=-1).double()
    inverse, num_groups = _group_inverse(index, scores.shape[0], scores.device)
    counts = _group_sum(torch.ones_like(scores), inverse, num_groups)
    means = _group_sum(scores, inverse, num_groups) / counts
    squares = _group_sum((scores - means[inverse]) ** 2, inverse, num_groups)
    stds = (squares / (counts - 1).clamp(min=1)).sqrt()
    return _ScoreGroups(scores, inverse, num_groups, counts[inverse], means[inverse], stds[inverse])


def _outcome_advantages(
    per_response: torch.Tensor, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, whiten: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Shared last step of the outcome estimators: one advantage per response put on its tokens, in the rewards' dtype
    (optionally whitened over the batch's response tokens); returns equal the advantages."""
    dtype = token_level_rewards.dtype
    mask = response_mask.to(dtype)
    advantages = per_response.to(dtype).unsqueeze(-1) * mask
    if whiten:
        advantages = masked_whiten(advantages, mask) * mask
    return advantages, advantages


def _except_singletons(groups: _ScoreGroups, advantages: torch.Tensor) -> torch.Tensor:
    """`advantages`, with 0 for responses alone in their group."""
    return torch.where(groups.counts > 1, advantages, torch.zeros_like(groups.scores))


@register_adv_estimator("gae")
def compute_gae_advantage_return(
    token_level_rewards: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float = 1.0,
    lam: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized Advantage Estimation (Schulman et al. 2016, arXiv 1506.02438) with critic values.
    delta_t = r_t + gamma * V_{t+1} - V_t, A_t = delta_t + gamma * lam * A_{t+1}, R_t = A_t + V_t. Masked positions
    are skipped (value and running advantage carry over them), so padding never leaks in. Advantages are whitened."""
    mask = response_mask.to(values.dtype)
    # the loop walks time-major copies: a column of a (B, T) tensor is strided, a row of (T, B) contiguous (5x faster)
    rewards_t, values_t, mask_t = (x.t().contiguous() for x in (token_level_rewards, values, mask))
    next_value = torch.zeros_like(values_t[0])
    running = torch.zeros_like(values_t[0])
    advantages_t = torch.zeros_like(values_t)
    for t in reversed(range(values_t.shape[0])):
        delta = rewards_t[t] + gamma * next_value - values_t[t]
        m = mask_t[t]
        running = m * (delta + gamma * lam * running) + (1 - m) * running
        next_value = m * values_t[t] + (1 - m) * next_value
        advantages_t[t] = running
    advantages = advantages_t.t().contiguous()
    returns = (advantages + values) * mask
    return masked_whiten(advantages, mask) * mask, returns


@register_adv_estimator("grpo", grouped=True)
def compute_grpo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: GroupIds,
    norm_adv_by_std_in_grpo: bool = True,
    grpo_std_scope: str = "group",
    eps: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO group-normalised outcome advantage (Shao et al. 2024, arXiv 2402.03300).
    A_i = (s_i - mean_g(s)) / (std_g(s) + eps); `norm_adv_by_std_in_grpo=False` gives Dr.GRPO (arXiv 2503.20783),
    A_i = s_i - mean_g(s), which does not up-weight prompts whose rewards barely vary. `grpo_std_scope="batch"`
    divides by the std of the whole batch's scores instead (Lite PPO: Liu et al. 2025, "Tricks or Traps? A Deep Dive into RL for LLM Reasoning"; TRL's
    scale_rewards="batch")."""
    groups = _score_groups(token_level_rewards, index)
    advantages = groups.scores - groups.means
    if norm_adv_by_std_in_grpo:
        stds = groups.scores.std() if grpo_std_scope == "batch" and groups.scores.numel() > 1 else groups.stds
        advantages = advantages / (stds + eps)
    return _outcome_advantages(advantages, token_level_rewards, response_mask)


@register_adv_estimator("grpo_passk", grouped=True)
def compute_grpo_passk_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: GroupIds,
    norm_adv_by_std_in_grpo: bool = True,
    eps: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pass@k advantage: credit only the best response of each group (Tang et al. 2025, arXiv 2503.19595).
    The leave-one-out baseline of max_i s_i is the max of the others, so only the argmax (first in batch order on
    ties) gets A = (s_max - s_second) / (std_g(s) + eps), or no std division with `norm_adv_by_std_in_grpo=False`."""
    groups = _score_groups(token_level_rewards, index)
    scores, inverse, num_groups = groups.scores, groups.inverse, groups.num_groups
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
    if norm_adv_by_std_in_grpo:
        gap = gap / (groups.stds + eps)
    advantages = _except_singletons(groups, torch.where(is_best, gap, torch.zeros_like(scores)))
    return _outcome_advantages(advantages, token_level_rewards, response_mask)


@register_adv_estimator("rloo", grouped=True)
def compute_rloo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: GroupIds,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE leave-one-out (Kool et al. 2019; Ahmadian et al. 2024, arXiv 2402.14740).
    A_i = s_i - mean of the other responses' scores in the group (a baseline independent of the sample: unbiased)."""
    groups = _score_groups(token_level_rewards, index)
    others_mean = (groups.means * groups.counts - groups.scores) / (groups.counts - 1).clamp(min=1)
    advantages = _except_singletons(groups, groups.scores - others_mean)
    return _outcome_advantages(advantages, token_level_rewards, response_mask)


@register_adv_estimator("opo", grouped=True)
def compute_opo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: GroupIds,
) -> tuple[torch.Tensor, torch.Tensor]:
    """OPO, on-policy RL with the optimal reward baseline (Hao et al. 2025, arXiv 2505.23585).
    A_i = s_i - b_g with the length-weighted baseline b_g = sum_j |y_j| s_j / sum_j |y_j| (|y_j| response tokens)."""
    groups = _score_groups(token_level_rewards, index)
    lengths = response_mask.sum(dim=-1).double()
    weighted_sums = _group_sum(lengths * groups.scores, groups.inverse, groups.num_groups)
    baselines = weighted_sums / _group_sum(lengths, groups.inverse, groups.num_groups).clamp(1.0)
    advantages = _except_singletons(groups, groups.scores - baselines[groups.inverse])
    return _outcome_advantages(advantages, token_level_rewards, response_mask)


@register_adv_estimator("gpg", grouped=True)
def compute_gpg_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: GroupIds,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GPG, group policy gradient (Chu et al. 2025, arXiv 2504.02546).
    A_i = alpha (s_i - mean_g(s)), alpha = B / max(M, 1), M the number of responses with a non-zero score: verl's
    alpha; the paper's is B / (B - M'), M' the responses in groups whose scores are all equal. Either only rescales
    the step."""
    groups = _score_groups(token_level_rewards, index)
    alpha = groups.scores.shape[0] / max(int(torch.count_nonzero(groups.scores).item()), 1)
    advantages = _except_singletons(groups, alpha * (groups.scores - groups.means))
    return _outcome_advantages(advantages, token_level_rewards, response_mask)


def _discounted_returns(token_level_rewards: torch.Tensor, mask: torch.Tensor, gamma: float) -> torch.Tensor:
    """Discounted reward-to-go over response tokens, G_t = r_t + gamma * G_next.
    Masked positions are skipped (return 0, running value carried), so an interior hole (a tool output in a
    multi-turn response) does not cut earlier tokens off from a later reward."""
    rewards_t, mask_t = token_level_rewards.t().contiguous(), mask.t().contiguous()  # time-major: rows contiguous
    returns_t = torch.zeros_like(rewards_t)
    running = torch.zeros_like(rewards_t[0])
    for t in reversed(range(rewards_t.shape[0])):
        m = mask_t[t]
        running = m * (rewards_t[t] + gamma * running) + (1 - m) * running
        returns_t[t] = m * running
    return returns_t.t().contiguous()


@register_adv_estimator("reinforce_plus_plus")
def compute_reinforce_plus_plus_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++ (Hu 2025, arXiv 2501.03262): discounted returns (`_discounted_returns`) whitened over the batch's
    response tokens; no critic, no groups. Returns are the raw G."""
    mask = response_mask.to(token_level_rewards.dtype)
    returns = _discounted_returns(token_level_rewards, mask, gamma)
    return masked_whiten(returns, mask) * mask, returns


@register_adv_estimator("reinforce_plus_plus_baseline", grouped=True)
def compute_reinforce_plus_plus_baseline_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: GroupIds,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++-baseline (Hu 2025, arXiv 2501.03262): A_i = s_i - mean_g(s), then whitened over the whole batch."""
    groups = _score_groups(token_level_rewards, index)
    return _outcome_advantages(groups.scores - groups.means, token_level_rewards, response_mask, whiten=True)


@register_adv_estimator("remax")
def compute_remax_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    reward_baselines: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """ReMax (Li et al. 2023, arXiv 2310.10505): REINFORCE with a greedy response's score as baseline.
    A_t = R_t - b_i, R the reward-to-go (`_discounted_returns`, gamma 1) and `reward_baselines` b (B,) the score of a
    greedy (temperature 0) response to the same prompt. Returns are R."""
    mask = response_mask.to(token_level_rewards.dtype)
    returns = _discounted_returns(token_level_rewards, mask, gamma=1.0)
    baselines = torch.as_tensor(reward_baselines, dtype=returns.dtype, device=returns.device)
    if baselines.shape != returns.shape[:1]:
        raise ValueError(f"reward_baselines must have shape ({returns.shape[0]},), got {tuple(baselines.shape)}.")
    return (returns - baselines.unsqueeze(-1)) * mask, returns


# ------------------------------------------------------------------------------------------------ users' estimators


def _check_user_estimator(signature: inspect.Signature) -> str | None:
    missing = [name for name in ("token_level_rewards", "response_mask") if name not in signature.parameters]
    if missing:
        return f"it does not take {' and '.join(missing)}"
    return check_keyword_inputs(signature, ESTIMATOR_INPUTS + ESTIMATOR_OPTIONS)


def _register_user_estimator(spec: str, function: AdvantageFn, where: Where) -> None:
    @functools.wraps(function)  # keeps the signature: the trainer passes the inputs the function names
    def checked(**inputs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        out = where.call(function, **inputs)
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise where.fail(f"returned a {type(out).__name__}, not a tuple (advantages, returns)")
        shape = tuple(inputs["token_level_rewards"].shape)
        return where.tensor(out[0], "advantages", shape), where.tensor(out[1], "returns", shape)

    register_adv_estimator(spec, grouped="index" in inspect.signature(function).parameters)(checked)


add_kind(
    "adv_estimator",
    Kind(
        label="advantage estimator",
        key="algorithm.adv_estimator",
        signature="def estimator(token_level_rewards, response_mask, [index], [values], [reward_baselines], [gamma], "
        "[lam], [norm_adv_by_std_in_grpo], [grpo_std_scope]) -> tuple[advantages, returns], taking only the inputs it uses, by these "
        "names; all tensors (B, L) but index (B,) group ids and reward_baselines (B,)",
        check=_check_user_estimator,
        register=_register_user_estimator,
    ),
)
