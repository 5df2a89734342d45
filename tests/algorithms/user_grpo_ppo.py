# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""A user's file, as a researcher would write it from the papers: GRPO's advantage, PPO's clipped loss, the k3 KL
and the token-mean aggregation, each selected by `path/to/this_file.py:function`. The tests check that training with
them gives the built-ins' weights bit for bit (not a test module: pytest does not collect it)."""

import torch

from verl.algorithms.policy_losses import PolicyLossInputs, PolicyLossTerms


def grpo(token_level_rewards, response_mask, index, eps=1e-6):
    """A_i = (s_i - mean_g) / (std_g + eps) on every token of response i, with the unbiased std of its group."""
    scores = token_level_rewards.sum(dim=-1).double()
    members: dict = {}
    for row, uid in enumerate(index):
        members.setdefault(uid, []).append(row)
    advantages = torch.zeros_like(scores)
    for rows in members.values():
        group = scores[rows]
        mean = group.sum() / len(rows)
        std = (((group - mean) ** 2).sum() / max(len(rows) - 1, 1)).sqrt()
        advantages[rows] = (group - mean) / (std + eps)
    advantages = advantages.to(token_level_rewards.dtype).unsqueeze(-1) * response_mask.to(token_level_rewards.dtype)
    return advantages, advantages


def ppo_clip(x: PolicyLossInputs) -> PolicyLossTerms:
    """max(-A r, -A clip(r, 1 - eps_l, 1 + eps_h)), and -A C where the dual clip C holds a negative advantage."""
    ratio = torch.exp(x.log_ratio.clamp(-20.0, 20.0))
    low, high = 1.0 - x.clip_ratio_low, 1.0 + x.clip_ratio_high
    loss = torch.maximum(-x.advantages * ratio, -x.advantages * ratio.clamp(low, high))
    dual = (x.advantages < 0) & (ratio > x.clip_ratio_dual)
    loss = torch.where(dual, -x.advantages * x.clip_ratio_dual, loss)
    higher = (x.advantages > 0) & (ratio > high)
    lower = (x.advantages < 0) & (ratio < low)
    return PolicyLossTerms(loss, clipped_higher=higher, clipped_lower=lower, clipped_dual=dual)


def k3(log_probs, ref_log_probs):
    """Schulman's k3: r - 1 - log r with r = pi_ref / pi (log r clamped to 20, the value to 10)."""
    log_r = (ref_log_probs - log_probs).clamp(-20.0, 20.0)
    return (log_r.exp() - log_r - 1).clamp(-10.0, 10.0)


def token_mean(token_sums, token_counts, num_tokens, num_seqs, max_response_length):
    """Every token of the mini-batch weighs the same."""
    return token_sums.sum() / num_tokens
