# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Edges of the actor's update (verl/workers/actor/dp_actor.py) in one process on the tiny Qwen2: the off-policy
check on old_log_probs, which rows skip_zero_advantage_rows may leave out, the rollout correction's weights beside
top_entropy_quantile, the KL loss's switches and coefficient, the entropy estimate, and clip fractions when no token
takes part."""

import numpy as np
import pytest
import torch

from tests.workers.fsdp_testing import make_text_batch, reference_outputs
from tests.workers.test_dp_actor import actor_config as dp_actor_config
from tests.workers.test_dp_actor import recording_optimizer
from verl.algorithms.core_algos import compute_kl_loss, compute_policy_loss, high_entropy_mask
from verl.algorithms.masked_ops import masked_mean
from verl.models.tiny_models import get_or_build_tiny_model


TEMPERATURE = 0.7
INPUTS = ["input_ids", "attention_mask", "position_ids", "responses", "response_mask"]


def actor_config(**overrides):
    """test_dp_actor's config, packed and without dynamic batching, with micro-batches of 4 and no entropy or KL term."""
    plain = {"micro_batch_size_per_device_for_update": 4, "micro_batch_size_per_device_for_experience": 4}
    plain.update(entropy_coeff=0.0, use_kl_loss=False, kl_coef=1e-3)
    return dp_actor_config(True, False, **{**plain, **overrides})


def gradients_of(model, loss: torch.Tensor) -> dict[str, torch.Tensor]:
    """The gradients `loss` gives the model's parameters (cleared again afterwards)."""
    loss.backward()
    grads = {name: param.grad.clone() for name, param in model.named_parameters() if param.grad is not None}
    model.zero_grad(set_to_none=True)
    return grads


def assert_same_grads(got: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    assert set(got) == set(expected)
    for name, grad in expected.items():  # fp32 noise: packed attention sums in another order
        torch.testing.assert_close(got[name], grad, rtol=1e-4, atol=1e-5 * grad.abs().max().item() + 1e-9)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from verl.models.config import ModelConfig
    from verl.models.loading import build_model

    path = get_or_build_tiny_model("qwen2", str(tmp_path_factory.mktemp("tiny_models")))
    return build_model(ModelConfig(model_path=path, enable_gradient_checkpointing=False))


def update(model, data, config, **kwargs) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
    from verl.workers.actor.dp_actor import DataParallelPPOActor

    optimizer = recording_optimizer(model)
    metrics = DataParallelPPOActor(config, model, optimizer).update_policy(data, TEMPERATURE, **kwargs)
    return metrics, getattr(optimizer, "grads", {})


def test_several_mini_batches_without_old_log_probs_are_refused(model) -> None:
    """One epoch over two mini-batches is off-policy for the second one: the update's own log-probs would make its
    ratio 1 (no clipping, no correction), so old_log_probs are required, as for two epochs."""
    data = make_text_batch(seed=7, batch_size=8)
    batch = data.select(batch_keys=[*INPUTS, "advantages"])
    with pytest.raises(KeyError, match="off-policy"):
        update(model, batch, actor_config(global_batch_size=4))  # mini-batches of 4 rows
    metrics, _ = update(model, batch, actor_config(global_batch_size=8))  # one on-policy mini-batch runs
    assert metrics["actor/ppo_kl"] == 0.0


def test_an_adaptive_entropy_coefficient_of_zero_skips_no_rows(model) -> None:
    """The entropy control steers on actor/entropy: with a step's coefficient of 0 the update still computes the
    exact entropy over every row (zero-advantage rows included), so no row is left out of the passes."""
    data = make_text_batch(seed=5, batch_size=8)
    data.batch["advantages"][[1, 3, 4, 6]] = 0.0
    mask = data.batch["response_mask"]
    with torch.no_grad():
        entropy = reference_outputs(model, data, TEMPERATURE)["entropy"]
    metrics, _ = update(model, data, actor_config(), entropy_coeff=0.0)
    assert "actor/skipped_token_share" not in metrics and "actor/entropy_loss" in metrics
    assert metrics["actor/entropy"] == pytest.approx(masked_mean(entropy, mask).item(), rel=1e-4)
    plain, _ = update(model, data, actor_config())  # without entropy control the rows are skipped
    assert plain["actor/skipped_token_share"] > 0


def test_rows_without_advantage_train_under_a_loss_that_does_not_scale_with_it(model) -> None:
    """A user's policy loss need not be the advantage times a function of the ratio: its zero-advantage rows have a
    gradient, so skip_zero_advantage_rows leaves none out (the gradient is that of every row)."""
    from verl.algorithms import policy_losses
    from verl.algorithms.policy_losses import PolicyLossTerms, register_policy_loss

    name = "test-ratio-square"
    register_policy_loss(name)(lambda x: PolicyLossTerms((x.log_ratio + x.log_probs).square()))
    try:
        data = make_text_batch(seed=5, batch_size=8)
        data.batch["advantages"][[1, 3, 4, 6]] = 0.0
        skipped, grads = update(model, data, actor_config(loss_type=name))
        every, expected = update(model, data, actor_config(loss_type=name, skip_zero_advantage_rows=False))
    finally:
        policy_losses._POLICY_LOSSES.pop(name)
        policy_losses._POLICY_LOSS_OPTIONS.pop(name)
    assert "actor/skipped_token_share" not in skipped
    assert skipped["actor/pg_loss"] == pytest.approx(every["actor/pg_loss"], rel=1e-5)
    assert_same_grads(grads, expected)


def test_rollout_weights_and_the_top_entropy_tokens_both_weigh_the_policy_gradient(model) -> None:
    """algorithm.rollout_correction's token weights and top_entropy_quantile's mask multiply: the gradient is the
    policy loss's with token weights = rollout weights x high-entropy mask."""
    data = make_text_batch(seed=9, batch_size=8)
    mask = data.batch["response_mask"]
    weights = torch.rand(mask.shape, generator=torch.Generator().manual_seed(2)) * 2 * mask
    data.batch["rollout_is_weights"] = weights
    model.zero_grad(set_to_none=True)
    out = reference_outputs(model, data, TEMPERATURE)
    kept = high_entropy_mask(out["entropy"].detach(), mask, 0.5)
    pg_loss, _ = compute_policy_loss(
        data.batch["old_log_probs"],
        out["log_probs"],
        data.batch["advantages"],
        mask,
        "default",
        0.2,
        0.3,
        3.0,
        "token-mean",
        token_weights=weights * kept,
    )
    expected = gradients_of(model, pg_loss)
    metrics, grads = update(model, data, actor_config(top_entropy_quantile=0.5))
    assert metrics["actor/pg_loss"] == pytest.approx(pg_loss.item(), rel=1e-4)
    assert_same_grads(grads, expected)


def test_the_kl_loss_is_weighed_by_kl_coef_and_reported_with_it(model) -> None:
    """use_kl_loss: loss = policy loss + kl_coef x KL loss (the gradient says so), and actor/kl_coef is logged."""
    data = make_text_batch(seed=4, batch_size=8)
    mask = data.batch["response_mask"]
    model.zero_grad(set_to_none=True)
    log_probs = reference_outputs(model, data, TEMPERATURE)["log_probs"]
    args = (mask, "default", 0.2, 0.3, 3.0, "token-mean")
    pg_loss, _ = compute_policy_loss(data.batch["old_log_probs"], log_probs, data.batch["advantages"], *args)
    kl_loss = compute_kl_loss(log_probs, data.batch["ref_log_probs"], mask, "low_var_kl", "token-mean")
    expected = gradients_of(model, pg_loss + 0.25 * kl_loss)
    metrics, grads = update(model, data, actor_config(use_kl_loss=True, kl_coef=0.25))
    assert metrics["actor/kl_coef"] == 0.25
    assert metrics["actor/kl_loss"] == pytest.approx(kl_loss.item(), rel=1e-4)
    assert_same_grads(grads, expected)


def test_the_entropy_bonus_is_subtracted_from_the_loss(model) -> None:
    """entropy_coeff > 0 rewards entropy: loss = policy loss - entropy_coeff x entropy loss (the gradient says so)."""
    from verl.algorithms.core_algos import compute_entropy_loss

    data = make_text_batch(seed=4, batch_size=8)
    mask = data.batch["response_mask"]
    model.zero_grad(set_to_none=True)
    out = reference_outputs(model, data, TEMPERATURE)
    args = (mask, "default", 0.2, 0.3, 3.0, "token-mean")
    pg_loss, _ = compute_policy_loss(data.batch["old_log_probs"], out["log_probs"], data.batch["advantages"], *args)
    entropy_loss = compute_entropy_loss(out["entropy"], mask, "token-mean")
    expected = gradients_of(model, pg_loss - 0.5 * entropy_loss)
    metrics, grads = update(model, data, actor_config(entropy_coeff=0.5))
    assert metrics["actor/entropy_loss"] == pytest.approx(entropy_loss.item(), rel=1e-4)
    assert_same_grads(grads, expected)


def test_disable_kl_wins_over_use_kl_loss_without_reference_log_probs(model) -> None:
    """algorithm.disable_kl=true with use_kl_loss=true (accepted with a warning) runs no reference model: the update
    needs no ref_log_probs and has no KL term."""
    data = make_text_batch(seed=4, batch_size=8)
    batch = data.select(batch_keys=[*INPUTS, "advantages", "old_log_probs"])
    metrics, grads = update(model, batch, actor_config(use_kl_loss=True, disable_kl=True))
    assert "actor/kl_loss" not in metrics and "actor/kl_coef" not in metrics
    _, expected = update(model, batch, actor_config())
    assert_same_grads(grads, expected)


def test_without_an_entropy_term_the_entropy_is_estimated_by_minus_log_p(model) -> None:
    """entropy_coeff=0 and no entropy control: actor/entropy is the token mean of -log p of the sampled tokens (an
    estimate of the entropy, positive), not of log p."""
    data = make_text_batch(seed=6, batch_size=8)
    mask = data.batch["response_mask"]
    with torch.no_grad():
        log_probs = reference_outputs(model, data, TEMPERATURE)["log_probs"]
    metrics, _ = update(model, data, actor_config(skip_zero_advantage_rows=False))
    expected = masked_mean(-log_probs, mask).item()
    assert expected > 0 and metrics["actor/entropy"] == pytest.approx(expected, rel=1e-4)


def test_clip_fractions_are_zero_when_no_token_takes_part(model) -> None:
    """The rollout correction may give every token weight 0: the policy loss's token means (clip fractions, ppo_kl)
    are over no token then, reported as 0 (not nan), and the gradient is 0."""
    data = make_text_batch(seed=8, batch_size=8)
    data.batch["rollout_is_weights"] = torch.zeros_like(data.batch["response_mask"], dtype=torch.float32)
    metrics, grads = update(model, data, actor_config())
    for name in ("pg_clipfrac", "pg_clipfrac_higher", "pg_clipfrac_lower", "ppo_kl"):
        assert metrics[f"actor/{name}"] == 0.0, name
    assert metrics["actor/pg_loss"] == 0.0 and np.isfinite(metrics["actor/grad_norm"])
    assert all(torch.count_nonzero(grad) == 0 for grad in grads.values())
