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
"""Names of the RL algorithm choices, importable without torch.

The config validator reads these tuples before Ray (and possibly before torch) is loaded, so this module imports
nothing. `verl.trainer.core_algos` re-exports all of them; a test checks that each tuple matches what the code
actually implements.
"""

ADV_ESTIMATOR_NAMES: tuple[str, ...] = (
    "gae",
    "grpo",
    "grpo_passk",
    "rloo",
    "reinforce_plus_plus",
    "reinforce_plus_plus_baseline",
    "remax",
)
"""Values of `algorithm.adv_estimator`."""

GROUPED_ADV_ESTIMATORS: tuple[str, ...] = ("grpo", "grpo_passk", "rloo", "reinforce_plus_plus_baseline")
"""Estimators whose baseline comes from the other samples of the same prompt: they need `rollout.n > 1`."""

LOSS_TYPES: tuple[str, ...] = ("default", "gspo", "gspo_token", "cispo", "sapo")
"""Values of `actor.loss_type`; "default" is PPO clip with clip-higher and dual clip."""

LOSS_AVG_MODES: tuple[str, ...] = (
    "token-mean",
    "seq-mean-token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-sum-norm",
)
"""Values of `actor.loss_avg_mode` and `critic.loss_avg_mode`."""

BASE_KL_PENALTIES: tuple[str, ...] = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "full")
"""KL estimators; pairs of names are aliases (kl = k1, mse = k2, low_var_kl = k3)."""

STRAIGHT_THROUGH_KL_PENALTIES: tuple[str, ...] = ("kl+", "k1+", "abs+", "mse+", "k2+", "low_var_kl+", "k3+")
"""Straight-through variants: the value of the base estimator with the gradient of k2."""

KL_PENALTIES: tuple[str, ...] = BASE_KL_PENALTIES + STRAIGHT_THROUGH_KL_PENALTIES
"""Values of `algorithm.kl_penalty`."""

KL_CONTROLLER_TYPES: tuple[str, ...] = ("fixed", "adaptive")
"""Values of `algorithm.kl_type` (controller of the KL coefficient when the KL is a penalty in the reward)."""
