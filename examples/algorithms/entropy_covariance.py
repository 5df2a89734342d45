# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Clip-Cov and KL-Cov ("The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models",
arXiv 2505.22617; verl's policy_loss.loss_mode clip_cov and kl_cov) as policy losses of your own.

The policy's entropy falls fastest through the tokens whose log-probability and advantage covary most. Clip-Cov
takes the gradient away from a few of them; KL-Cov pulls the few highest back towards the old policy. Select one with
`worker.actor.loss_type=examples/algorithms/entropy_covariance.py:clip_cov` (or `:kl_cov`); the settings below are
verl's defaults, edit them here. The covariance is taken over one micro-batch's response tokens.
"""

import torch

from verl.algorithms.policy_losses import PolicyLossInputs, PolicyLossTerms


CLIP_COV_RATIO = 2e-4
"""Clip-Cov: the share of response tokens whose gradient is detached."""
CLIP_COV_LOW, CLIP_COV_HIGH = 1.0, 5.0
"""Clip-Cov: the covariance range the detached tokens are drawn from."""
KL_COV_RATIO = 2e-4
"""KL-Cov: the share of response tokens, the highest covariance first, that get the KL penalty."""
KL_COV_COEF = 1.0
"""KL-Cov: the weight of |log(pi / pi_old)| on those tokens."""


def _covariance(x: PolicyLossInputs) -> torch.Tensor:
    """(A_t - mean A) (log pi_t - mean log pi) over the response tokens (detached); -inf on padding."""
    valid = x.mask > 0
    log_probs = x.log_probs.detach()
    centred_advantage = x.advantages - x.advantages[valid].mean()
    centred_log_prob = log_probs - log_probs[valid].mean()
    return torch.where(valid, centred_advantage * centred_log_prob, float("-inf"))


def _count(ratio: float, x: PolicyLossInputs) -> int:
    return max(int(ratio * x.mask.sum().item()), 1)


def clip_cov(x: PolicyLossInputs) -> PolicyLossTerms:
    """PPO's clipped surrogate, with the gradient of CLIP_COV_RATIO of the tokens, drawn at random among those whose
    covariance lies in (CLIP_COV_LOW, CLIP_COV_HIGH) and that the clip left free, detached."""
    ratio = torch.exp(x.log_ratio.clamp(-20.0, 20.0))
    low, high = 1.0 - x.clip_ratio_low, 1.0 + x.clip_ratio_high
    unclipped, clipped = -x.advantages * ratio, -x.advantages * ratio.clamp(low, high)
    held = clipped > unclipped  # the clip already holds these
    covariance = _covariance(x)
    candidates = ((covariance > CLIP_COV_LOW) & (covariance < CLIP_COV_HIGH) & ~held).nonzero()
    chosen = candidates[torch.randperm(len(candidates), device=candidates.device)[: _count(CLIP_COV_RATIO, x)]]
    keep = torch.ones_like(x.mask)
    keep[chosen[:, 0], chosen[:, 1]] = 0.0
    loss = torch.maximum(unclipped, clipped) * keep
    return PolicyLossTerms(loss, clipped_higher=held & (x.advantages > 0), clipped_lower=held & (x.advantages < 0))


def kl_cov(x: PolicyLossInputs) -> PolicyLossTerms:
    """The unclipped surrogate -A r, plus KL_COV_COEF |log r| on the KL_COV_RATIO of tokens with the highest
    covariance."""
    log_ratio = x.log_ratio.clamp(-20.0, 20.0)
    loss = -x.advantages * torch.exp(log_ratio)
    covariance = _covariance(x).flatten()
    top = torch.topk(covariance, min(_count(KL_COV_RATIO, x), int(x.mask.sum().item()))).indices
    penalised = torch.zeros_like(covariance, dtype=torch.bool)
    penalised[top] = True
    penalised = penalised.view_as(loss)
    return PolicyLossTerms(torch.where(penalised, loss + KL_COV_COEF * log_ratio.abs(), loss))
