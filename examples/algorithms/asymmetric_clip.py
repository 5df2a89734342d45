# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""A policy loss of your own: PPO's clipped surrogate written out by the advantage's sign, the place to start
changing a bound (the built-in `default` loss adds the dual clip, `worker.actor.clip_ratio_dual`).

Select it with `worker.actor.loss_type=examples/algorithms/asymmetric_clip.py:asymmetric_clip`. The bounds come from
`worker.actor.clip_ratio_low` and `clip_ratio_high`, so a recipe tunes them like the built-in losses'.
"""

import torch

from verl.algorithms.policy_losses import PolicyLossInputs, PolicyLossTerms


def asymmetric_clip(x: PolicyLossInputs) -> PolicyLossTerms:
    """l_t = -A_t min(r_t, 1 + eps_h) for A_t > 0 and -A_t max(r_t, 1 - eps_l) for A_t <= 0, r_t = pi / pi_old.

    A token the policy already favours (A > 0) stops pushing once its ratio exceeds 1 + eps_h; one it disfavours
    (A < 0) once its ratio falls below 1 - eps_l. This is PPO's max(-A r, -A clip(r, 1 - eps_l, 1 + eps_h)) case by
    case: a negative-advantage token whose ratio grew is never bounded above (the dual clip bounds it).

    x holds float32 (B, L) tensors (log_probs with gradient, log_ratio = log pi - log pi_old, advantages, mask) and
    the actor's clip settings. Return the (B, L) per-token loss (the trainer masks and aggregates it with
    worker.actor.loss_avg_mode) and, for the pg_clipfrac metrics, the tokens each bound held.
    """
    ratio = torch.exp(x.log_ratio.clamp(-20.0, 20.0))  # one far off-policy token must not overflow
    positive = x.advantages > 0
    clipped = torch.where(positive, ratio.clamp(max=1.0 + x.clip_ratio_high), ratio.clamp(min=1.0 - x.clip_ratio_low))
    loss = -x.advantages * clipped
    higher = positive & (ratio > 1.0 + x.clip_ratio_high)
    lower = ~positive & (ratio < 1.0 - x.clip_ratio_low)
    return PolicyLossTerms(loss, clipped_higher=higher, clipped_lower=lower)
