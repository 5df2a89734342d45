# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""KL estimators (values and gradients), the controllers, the reward penalty and the KL loss."""

import math

import pytest
import torch

from verl.algorithms.core_algos import (
    AdaptiveKLController,
    FixedKLController,
    agg_loss,
    apply_kl_penalty,
    compute_kl,
    compute_kl_loss,
    get_kl_controller,
    registered_kl_penalties,
)


LOG_PROBS = [-1.0, -0.5]
REF_LOG_PROBS = [-1.5, -0.2]  # x = log p - log ref = [0.5, -0.3]
X = torch.tensor([0.5, -0.3])

EXPECTED = {  # name: (value, d value / d log p)
    "k1": (X, torch.ones(2)),
    "abs": (X.abs(), X.sign()),
    "k2": (0.5 * X**2, X),
    "k3": (torch.exp(-X) - 1 + X, 1 - torch.exp(-X)),
}
ALIASES = {"kl": "k1", "mse": "k2", "low_var_kl": "k3"}


def kl_and_grad(kl_penalty: str) -> tuple[torch.Tensor, torch.Tensor]:
    log_probs = torch.tensor(LOG_PROBS, requires_grad=True)
    kl = compute_kl(log_probs, torch.tensor(REF_LOG_PROBS), kl_penalty)
    kl.sum().backward()
    return kl.detach(), log_probs.grad


@pytest.mark.parametrize("kl_penalty", ["k1", "abs", "k2", "k3", "kl", "mse", "low_var_kl"])
def test_estimator_value_and_gradient(kl_penalty: str) -> None:
    value, grad = kl_and_grad(kl_penalty)
    expected_value, expected_grad = EXPECTED[ALIASES.get(kl_penalty, kl_penalty)]
    torch.testing.assert_close(value, expected_value)
    torch.testing.assert_close(grad, expected_grad)


def test_registry_lists_base_estimators_then_straight_through_forms() -> None:
    # the built-ins: a module run before in the same process may have registered a user's 'file.py:function'
    built_in = tuple(name for name in registered_kl_penalties() if ".py:" not in name)
    assert built_in == (
        *("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "full"),
        *("kl+", "k1+", "abs+", "mse+", "k2+", "low_var_kl+", "k3+"),  # "full" has no straight-through form
    )
    with pytest.raises(ValueError, match="Unknown algorithm.kl_penalty 'full\\+'"):
        kl_and_grad("full+")


@pytest.mark.parametrize("kl_penalty", [name for name in registered_kl_penalties() if name.endswith("+")])
def test_straight_through_keeps_the_value_and_takes_the_k2_gradient(kl_penalty: str) -> None:
    value, grad = kl_and_grad(kl_penalty)
    base = kl_penalty.removesuffix("+")
    torch.testing.assert_close(value, EXPECTED[ALIASES.get(base, base)][0])
    torch.testing.assert_close(grad, X)


def exact_kl(p_logits: torch.Tensor, q_logits: torch.Tensor) -> torch.Tensor:
    p, q = torch.distributions.Categorical(logits=p_logits), torch.distributions.Categorical(logits=q_logits)
    return torch.distributions.kl_divergence(p, q)


def test_expectations_over_the_policy_match_the_exact_kl_and_its_gradient() -> None:
    """Weighting each token by its probability turns a sampled estimator into its exact expectation."""
    p_logits = torch.tensor([0.3, -1.2, 0.8, 0.1], requires_grad=True)
    q_logits = torch.tensor([-0.4, 0.5, 0.2, 0.9])
    log_p, log_q = torch.log_softmax(p_logits, -1), torch.log_softmax(q_logits, -1)
    kl = exact_kl(p_logits, q_logits)
    (kl_grad,) = torch.autograd.grad(kl, p_logits)
    probs = log_p.exp().detach()

    def expected_estimate(name: str) -> tuple[torch.Tensor, torch.Tensor]:
        estimate = (probs * compute_kl(log_p, log_q, name)).sum()
        return estimate, torch.autograd.grad(estimate, p_logits, retain_graph=True)[0]

    for name in ("k1", "k3", "k3+", "k1+"):  # k1 and k3 are unbiased estimators of the value
        torch.testing.assert_close(expected_estimate(name)[0], kl)
    for name in ("k2", "k3+", "k1+", "low_var_kl+"):  # the k2 gradient is the unbiased gradient of the KL
        torch.testing.assert_close(expected_estimate(name)[1], kl_grad)
    assert not torch.allclose(expected_estimate("k3")[1], kl_grad, atol=1e-3)


def test_full_kl_needs_distributions() -> None:
    p_logits, q_logits = torch.randn(2, 3, 5), torch.randn(2, 3, 5)
    full = compute_kl(torch.log_softmax(p_logits, -1), torch.log_softmax(q_logits, -1), "full")
    torch.testing.assert_close(full, exact_kl(p_logits, q_logits))
    with pytest.raises(ValueError, match="'full' needs full log-distributions"):
        compute_kl(torch.zeros(2, 3), torch.zeros(2, 3), "full")


def test_low_var_kl_is_clamped_and_finite() -> None:
    log_probs = torch.tensor([-40.0, -0.1], requires_grad=True)
    kl = compute_kl(log_probs, torch.tensor([-0.1, -40.0]), "k3")
    kl.sum().backward()
    assert kl[0].item() == 10.0 and torch.isfinite(log_probs.grad).all()


def test_unknown_estimator_lists_valid_names() -> None:
    with pytest.raises(ValueError, match="Unknown algorithm.kl_penalty 'k4'.*low_var_kl"):
        compute_kl(torch.zeros(1), torch.zeros(1), "k4")


def test_fixed_controller_never_changes() -> None:
    ctrl = get_kl_controller("fixed", kl_coef=0.1, kl_target=0.05, kl_horizon=100)
    assert isinstance(ctrl, FixedKLController)
    ctrl.update(current_kl=5.0, n_steps=1000)
    assert ctrl.value == 0.1


def test_adaptive_controller_follows_the_proportional_rule() -> None:
    ctrl = get_kl_controller("adaptive", kl_coef=0.1, kl_target=0.05, kl_horizon=100)
    assert isinstance(ctrl, AdaptiveKLController)
    expected = 0.1
    # (observed KL, error = clip(KL / target - 1, -0.2, 0.2))
    for current_kl, error in [(0.055, 0.1), (0.5, 0.2), (0.0, -0.2), (0.045, -0.1), (0.05, 0.0)]:
        ctrl.update(current_kl=current_kl, n_steps=10)
        expected *= 1 + error * 10 / 100
        assert ctrl.value == pytest.approx(expected, rel=1e-12)
    restored = AdaptiveKLController(0.3, 0.05, 100)
    restored.load_state_dict(ctrl.state_dict())
    assert restored.value == ctrl.value


def test_controller_config_errors() -> None:
    with pytest.raises(ValueError, match="Unknown algorithm.kl_type 'pid'; choose one of fixed, adaptive."):
        get_kl_controller("pid", 0.1, 0.1, 100)
    with pytest.raises(ValueError, match="kl_horizon=0"):
        get_kl_controller("adaptive", 0.1, 0.1, 0)


def test_apply_kl_penalty_subtracts_beta_kl_on_response_tokens_and_updates_the_controller() -> None:
    scores = torch.tensor([[0.0, 0.0, 1.0], [0.0, 1.0, 0.0]])
    mask = torch.tensor([[1.0, 1, 1], [1, 1, 0]])
    log_probs = torch.tensor([[-1.0, -1.0, -1.0], [-2.0, -2.0, -2.0]])
    ref_log_probs = torch.tensor([[-1.5, -0.7, -1.0], [-2.4, -2.0, -9.0]])  # k1 = [.5, -.3, 0], [.4, 0, (pad)]
    ctrl = AdaptiveKLController(init_kl_coef=0.1, target_kl=0.1, horizon=10)
    rewards, metrics = apply_kl_penalty(scores, log_probs, ref_log_probs, mask, ctrl, "kl")
    expected = scores - 0.1 * torch.tensor([[0.5, -0.3, 0.0], [0.4, 0.0, 0.0]])
    torch.testing.assert_close(rewards, expected)
    batch_kl = (0.2 / 3 + 0.4 / 2) / 2  # mean over responses of the per-response token mean
    assert metrics["actor/kl_penalty"] == pytest.approx(batch_kl, rel=1e-6)
    assert metrics["actor/kl_coef"] == 0.1
    error = max(-0.2, min(0.2, batch_kl / 0.1 - 1))
    assert ctrl.value == pytest.approx(0.1 * (1 + error * 2 / 10), rel=1e-6)


def test_a_response_without_tokens_is_left_out_of_the_batch_kl() -> None:
    """A response of no tokens has no token-mean KL: it was averaged in as 0, which lowered actor/kl_penalty and the
    KL the adaptive controller steers by (two responses of KL 0.5 and an empty one: 1/3, not 0.5)."""
    log_probs = torch.zeros(3, 2)
    ref_log_probs = torch.tensor([[-0.5, -0.5], [-0.5, -0.5], [-0.5, -0.5]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [0.0, 0.0]])
    _, metrics = apply_kl_penalty(torch.zeros(3, 2), log_probs, ref_log_probs, mask, FixedKLController(0.1), "kl")
    assert metrics["actor/kl_penalty"] == pytest.approx(0.5)
    _, metrics = apply_kl_penalty(
        torch.zeros(1, 2), log_probs[:1], ref_log_probs[:1], mask[2:], FixedKLController(0.1), "kl"
    )
    assert metrics["actor/kl_penalty"] == 0.0  # no tokens at all: 0, not NaN


def test_kl_loss_is_the_aggregated_estimate() -> None:
    log_probs = torch.tensor([[-1.0, -0.5, -3.0], [-0.2, -0.1, -0.1]], requires_grad=True)
    ref = torch.tensor([[-1.5, -0.2, -0.1], [-0.3, -1.0, -2.0]])
    mask = torch.tensor([[1.0, 1, 0], [1, 1, 1]])
    loss = compute_kl_loss(log_probs, ref, mask, "low_var_kl", "seq-mean-token-mean")
    x = log_probs.detach() - ref
    k3 = torch.exp(-x) - 1 + x
    expected = ((k3[0, :2]).mean() + k3[1].mean()) / 2
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(loss, agg_loss(compute_kl(log_probs, ref, "k3"), mask, "seq-mean-token-mean"))
    assert math.isfinite(loss.item())
