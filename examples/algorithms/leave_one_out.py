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
