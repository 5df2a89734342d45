# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The RL math at its edges: one token, constant values, empty rows, a bound hit exactly, asymmetric clip ratios,
a padded response width (Dr.GRPO's norm). A mutation audit changed each of these lines and no test failed; each
expected value here is worked out by hand in its comment."""

import math

import pytest
import torch

from verl.algorithms.core_algos import (
    agg_loss,
    compute_entropy_loss,
    compute_grpo_outcome_advantage,
    compute_kl,
    compute_kl_loss,
    compute_policy_loss,
    compute_reinforce_plus_plus_baseline_outcome_advantage,
    compute_value_loss,
    filter_groups_by_reward,
)
from verl.algorithms.masked_ops import loss_token_counts, masked_mean, masked_var, masked_whiten
from verl.algorithms.rollout_correction import CorrectionSettings, compute_rollout_correction
from verl.algorithms.schedules import EntropyController
from verl.utils.torch_functional import entropy_from_logits


def test_masked_statistics_of_one_token_and_of_constant_values_are_zero_not_nan():
    # the unbiased variance of one token: n - 1 = 0 would divide by zero
    assert masked_var(torch.tensor([3.0, 5.0]), torch.tensor([1.0, 0.0])).item() == 0.0
    # identical values (a group's equal returns) whiten to zeros: the variance is 0, eps keeps it finite
    assert torch.equal(masked_whiten(torch.full((2, 3), 0.5), torch.ones(2, 3)), torch.zeros(2, 3))
    # a fractional weight: (2 * 0.5) / 0.5
    assert masked_mean(torch.tensor([2.0]), torch.tensor([0.5])).item() == 2.0


def test_an_empty_response_is_no_sequence_of_the_sequence_means():
    mask = torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    assert loss_token_counts(mask.long()) == (3.0, 1)  # (tokens, rows with a token)
    # one row of three tokens of loss 1: its sum is 3 and its mean 1; the empty row counts in neither mean
    assert agg_loss(torch.ones(2, 3), mask, "seq-mean-token-sum").item() == 3.0
    assert agg_loss(torch.ones(2, 3), mask, "seq-mean-token-mean").item() == 1.0


def test_a_padded_width_divides_the_dr_grpo_norm_of_every_loss():
    """seq-mean-token-sum-norm divides each row's sum by max_response_length (8), not by the batch's width (4)."""
    mask = torch.ones(1, 4)
    # k1 KL: log-ratio 0.5 a token, 4 tokens: 2 / 8
    kl = compute_kl_loss(
        torch.full((1, 4), -1.0),
        torch.full((1, 4), -1.5),
        mask,
        "k1",
        "seq-mean-token-sum-norm",
        max_response_length=8,
    )
    assert kl.item() == pytest.approx(0.25)
    # entropy 1 a token: 4 / 8
    entropy = compute_entropy_loss(torch.ones(1, 4), mask, "seq-mean-token-sum-norm", max_response_length=8)
    assert entropy.item() == 0.5
    # value loss 0.5 * (1 - 0)^2 a token (unclipped: the predictions equal the old values): 4 * 0.5 / 8
    value, _ = compute_value_loss(
        torch.ones(1, 4),
        torch.zeros(1, 4),
        torch.ones(1, 4),
        mask,
        0.5,
        "seq-mean-token-sum-norm",
        max_response_length=8,
    )
    assert value.item() == 0.25


def test_the_k3_estimator_clamps_the_log_ratio_at_20_as_verl_does():
    # ref - logp = -8 (inside the clamp): exp(-8) - (-8) - 1
    value = compute_kl(torch.tensor([0.0]), torch.tensor([-8.0]), "k3").item()
    assert value == pytest.approx(math.exp(-8) + 7, abs=1e-5)


def test_grpo_gives_a_group_of_equal_scores_no_advantage():
    """Seven responses that all score 0.3: each minus the group mean is 0 exactly (in float32, 0.3 - mean(0.3 x 7)
    is not, and std-normalization blew the rounding error up to 0.03)."""
    scores = torch.zeros(7, 3)
    scores[:, -1] = 0.3
    advantages, _ = compute_grpo_outcome_advantage(scores, torch.ones(7, 3), index=[0] * 7)
    assert torch.equal(advantages, torch.zeros(7, 3))


def test_outcome_advantages_are_zero_outside_the_response_mask():
    scores = torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    advantages, _ = compute_reinforce_plus_plus_baseline_outcome_advantage(scores, mask, index=[0, 0])
    assert torch.equal(advantages[1, 1:], torch.zeros(2))


def test_gmpo_clamps_the_log_ratio_to_minus_low_and_plus_high():
    """clip_ratio_low 0.2, clip_ratio_high 0.28 (asymmetric): a log-ratio of 0.25 is inside [-0.2, 0.28] and kept,
    -0.25 is clamped to -0.2; one token, so the geometric mean is the token's ratio; loss = -A * ratio."""
    options = {"clip_ratio_low": 0.2, "clip_ratio_high": 0.28, "clip_ratio_dual": 3.0, "loss_type": "geo_mean"}
    options["loss_avg_mode"] = "seq-mean-token-mean"
    one = torch.ones(1, 1)
    loss, _ = compute_policy_loss(torch.zeros(1, 1), torch.tensor([[0.25]]), one, one, **options)
    assert loss.item() == pytest.approx(-math.exp(0.25))
    loss, _ = compute_policy_loss(torch.zeros(1, 1), torch.tensor([[-0.25]]), -one, one, **options)
    assert loss.item() == pytest.approx(math.exp(-0.2))


def test_the_value_clip_bounds_the_prediction_from_below_too():
    """Old value 0, prediction -1, return -2, clip 0.5: the clipped prediction is -0.5, whose loss 0.5 * 1.5^2 =
    1.125 is the larger (the unclipped one's is 0.5), so it is taken and the token counts as clipped."""
    loss, metrics = compute_value_loss(
        torch.tensor([[-1.0]]), torch.tensor([[-2.0]]), torch.tensor([[0.0]]), torch.ones(1, 1), 0.5, "token-mean"
    )
    assert loss.item() == pytest.approx(1.125) and metrics["vf_clipfrac"].item() == 1.0


def test_online_filtering_keeps_groups_strictly_inside_its_bounds():
    # the group's mean 0.5 equals filter_high: not strictly below it
    assert list(filter_groups_by_reward([0.0, 1.0], ["a", "a"], 0.0, 0.5)) == []


def test_the_entropy_gradient_is_the_softmaxs():
    """dH/dz_i = -p_i (z_i - sum_j p_j z_j): for z = [0, 1], p = [0.269, 0.731], sum p z = 0.731."""
    logits = torch.tensor([0.0, 1.0], requires_grad=True)
    entropy_from_logits(logits).backward()
    p = torch.softmax(logits.detach(), -1)
    expected = -p * (logits.detach() - (p * logits.detach()).sum())
    assert torch.allclose(logits.grad, expected, atol=1e-6)
    assert logits.grad[0].item() == pytest.approx(0.1966, abs=1e-4)


def test_the_entropy_controller_holds_at_its_target_and_starts_inside_its_range():
    controller = EntropyController(0.01, target=0.5, delta=0.001, min_coef=0.0, max_coef=1.0)
    assert controller.update(0.5) == 0.01 and controller.coef == 0.01  # at the target: neither up nor down
    assert EntropyController(0.0, 0.5, 0.001, min_coef=0.002, max_coef=1.0).coef == 0.002


@pytest.mark.parametrize(
    "mode, settings, kept",
    [
        ("seq_mis", {"seq_low": 1.0, "seq_high": 2.0}, "mask"),
        ("seq_mis", {"seq_low": 0.5, "seq_high": 1.0}, "mask"),
        ("geo_rs", {"geo_low": 1.0, "geo_high": 2.0}, "mask"),
        ("icepop", {"mask_low": 1.0, "mask_high": 2.0}, "weights"),
        ("icepop", {"mask_low": 0.5, "mask_high": 1.0}, "weights"),
        ("decoupled", {"is_cap": 1.0}, "weights"),
    ],
)
def test_rollout_correction_bounds_are_inclusive(mode, settings, kept):
    """Equal log-probs make every ratio exactly 1: a bound of 1 keeps both tokens (the docstrings say inclusive)."""
    zeros = torch.zeros(1, 2)
    result = compute_rollout_correction(CorrectionSettings(mode=mode, **settings), zeros, zeros, torch.ones(1, 2))
    assert getattr(result, kept).sum().item() == 2


def test_a_ratio_at_the_tis_cap_is_not_truncated():
    zeros = torch.zeros(1, 2)
    result = compute_rollout_correction(CorrectionSettings(mode="tis", is_cap=1.0), zeros, zeros, torch.ones(1, 2))
    assert result.metrics["rollout_corr/truncated_share"] == 0.0
