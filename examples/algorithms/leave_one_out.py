# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""An advantage estimator of your own: a leave-one-out baseline, scaled by the group's spread.

Select it with `algorithm.adv_estimator=examples/algorithms/leave_one_out.py:leave_one_out`. It takes `index` (the
group ids), so the trainer knows it compares the responses to a prompt and requires `worker.rollout.n > 1`.
"""

import torch


def leave_one_out(token_level_rewards, response_mask, index, eps=1e-6):
    """A_i = (s_i - mean of the other responses' scores) / (std of the group + eps), on every token of response i.

    token_level_rewards, response_mask: (B, L) float, the reward on each response token (the score s_i is their
    sum) and 1 on response tokens, 0 on padding. index: (B,) group ids, equal for the responses to one prompt.
    Returns (advantages, returns), both (B, L) and 0 on padding; a response alone in its group gets 0.
    """
    scores = token_level_rewards.sum(dim=-1).double()
    groups: dict = {}
    for row, uid in enumerate(index):
        groups.setdefault(uid, []).append(row)
    advantages = torch.zeros_like(scores)
    for rows in groups.values():
        if len(rows) < 2:
            continue
        group = scores[rows]
        others_mean = (group.sum() - group) / (len(rows) - 1)
        advantages[rows] = (group - others_mean) / (group.std() + eps)
    mask = response_mask.to(token_level_rewards.dtype)
    advantages = advantages.to(token_level_rewards.dtype).unsqueeze(-1) * mask
    return advantages, advantages
