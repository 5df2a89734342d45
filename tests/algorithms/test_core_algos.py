# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Policy, value and entropy losses, loss aggregation and its split invariance, masked statistics, filtering."""

import math

import numpy as np
import pytest
import torch

from verl.algorithms.core_algos import (
    agg_loss,
    compute_entropy_loss,
    compute_gae_advantage_return,
    compute_policy_loss,
    compute_value_loss,
    default_loss_avg_mode,
    entropy_from_logits,
    explained_variance,
    filter_groups_by_reward,
    high_entropy_mask,
    loss_token_counts,
    masked_mean,
    masked_var,
    masked_whiten,
    registered_loss_avg_modes,
    registered_policy_losses,
)
from verl.algorithms.policy_losses import GSPO_LOG_RATIO_MAX


CLIP = {"clip_ratio_low": 0.2, "clip_ratio_high": 0.28, "clip_ratio_dual": 3.0}
LOSS_TYPES = registered_policy_losses()
LOSS_AVG_MODES = registered_loss_avg_modes()


# ---------------------------------------------------------------- masked statistics


def test_masked_mean_var_whiten() -> None:
    values = torch.tensor([[1.0, 2.0, 100.0], [3.0, 6.0, -50.0]])
    mask = torch.tensor([[1.0, 1, 0], [1, 1, 0]])
    kept = torch.tensor([1.0, 2.0, 3.0, 6.0])
    assert masked_mean(values, mask).item() == 3.0
    torch.testing.assert_close(masked_mean(values, mask, dim=-1), torch.tensor([1.5, 4.5]))
    torch.testing.assert_close(masked_var(values, mask), kept.var())
    torch.testing.assert_close(masked_var(values, mask, unbiased=False), kept.var(unbiased=False))
    whitened = masked_whiten(values, mask)[mask.bool()]
    torch.testing.assert_close(whitened, (kept - 3.0) / torch.sqrt(kept.var() + 1e-8))
    torch.testing.assert_close(masked_whiten(values, mask, shift_mean=False)[mask.bool()].mean(), torch.tensor(3.0))
    assert masked_mean(values, torch.zeros_like(mask)).item() == 0.0
    with pytest.raises(ValueError, match="mask is all zeros"):
        masked_var(values, torch.zeros_like(mask))


# ---------------------------------------------------------------- aggregation

LOSS_MAT = torch.tensor([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 100.0, 100.0], [7.0, 100.0, 100.0, 100.0]])
LOSS_MASK = torch.tensor([[1.0, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]])


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("token-mean", 28 / 7),  # all 7 tokens weigh the same
        ("token-sum", 28),  # no normaliser
        ("seq-mean-token-mean", (2.5 + 5.5 + 7) / 3),  # each sequence weighs the same
        ("seq-mean-token-sum", (10 + 11 + 7) / 3),
        ("seq-mean-token-sum-norm", 28 / (3 * 8)),  # constant normaliser: S * max_response_length
    ],
)
def test_agg_loss_modes(mode: str, expected: float) -> None:
    assert agg_loss(LOSS_MAT, LOSS_MASK, mode, max_response_length=8).item() == pytest.approx(expected)


def test_agg_loss_defaults_and_errors() -> None:
    # the Dr.GRPO normaliser falls back to the padded width
    assert agg_loss(LOSS_MAT, LOSS_MASK, "seq-mean-token-sum-norm").item() == pytest.approx(28 / 12)
    # an empty micro-batch contributes 0, not NaN
    assert agg_loss(LOSS_MAT, torch.zeros_like(LOSS_MASK), "token-mean").item() == 0.0
    assert agg_loss(LOSS_MAT, torch.zeros_like(LOSS_MASK), "seq-mean-token-mean").item() == 0.0
    with pytest.raises(ValueError, match="Unknown loss_avg_mode 'token'; choose one of token-mean"):
        agg_loss(LOSS_MAT, LOSS_MASK, "token")
    with pytest.raises(ValueError, match="global_token_count must be positive, got 0"):
        agg_loss(LOSS_MAT, LOSS_MASK, "token-mean", global_token_count=0)


def random_batch(seed: int, batch: int = 6, width: int = 7) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, width + 1, (batch,), generator=generator)
    mask = (torch.arange(width) < lengths.unsqueeze(-1)).float()
    old = -torch.rand(batch, width, generator=generator) * 2 - 0.1
    return {
        "old_log_probs": old,
        "log_probs": old + 0.4 * torch.randn(batch, width, generator=generator),
        "advantages": torch.randn(batch, 1, generator=generator)
        + 0.3 * torch.randn(batch, width, generator=generator),
        "response_mask": mask,
    }


def micro_batches(data: dict[str, torch.Tensor], sizes: list[int]) -> list[dict[str, torch.Tensor]]:
    """Split by rows and trim each micro-batch to its own longest response, as dynamic batching does."""
    out, start = [], 0
    for size in sizes:
        rows = {key: value[start : start + size] for key, value in data.items()}
        width = int(rows["response_mask"].sum(-1).max().item())
        out.append({key: value[:, :width] for key, value in rows.items()})
        start += size
    return out


def loss_and_grad(
    data: dict[str, torch.Tensor], sizes: list[int], loss_type: str, mode: str, use_global: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sum of micro-batch policy losses (e.g. 2 ranks x 2 micro-batches) and the gradient on the full batch."""
    leaf = data["log_probs"].clone().requires_grad_(True)
    data = {**data, "log_probs": leaf}
    counts = [loss_token_counts(m["response_mask"]) for m in micro_batches(data, sizes)]
    global_counts = {
        "global_token_count": sum(tokens for tokens, _ in counts),
        "global_seq_count": sum(seqs for _, seqs in counts),
    }
    total = torch.zeros(())
    for micro in micro_batches(data, sizes):
        extra = {**CLIP, **(global_counts if use_global else {})}
        loss, _ = compute_policy_loss(**micro, loss_type=loss_type, loss_avg_mode=mode, max_response_length=7, **extra)
        total = total + loss
    total.backward()
    return total.detach(), leaf.grad


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
@pytest.mark.parametrize("mode", LOSS_AVG_MODES)
def test_loss_and_gradient_do_not_depend_on_the_micro_batch_split(loss_type: str, mode: str) -> None:
    data = random_batch(seed=1)
    full_loss, full_grad = loss_and_grad(data, [6], loss_type, mode, use_global=False)
    assert full_grad.abs().sum() > 0
    for sizes in ([3, 3], [1, 2, 3], [2, 1, 1, 2], [1] * 6):
        loss, grad = loss_and_grad(data, sizes, loss_type, mode, use_global=True)
        torch.testing.assert_close(loss, full_loss, msg=f"split {sizes}")
        torch.testing.assert_close(grad, full_grad, msg=f"split {sizes}")


def test_split_matters_without_global_counts() -> None:
    """Guard for the test above: summing per-micro-batch means is not the full-batch loss."""
    data = random_batch(seed=1)
    full_loss, _ = loss_and_grad(data, [6], "default", "token-mean", use_global=False)
    split_loss, _ = loss_and_grad(data, [1, 2, 3], "default", "token-mean", use_global=False)
    assert not torch.allclose(split_loss, full_loss)


# ---------------------------------------------------------------- policy losses


def policy_inputs(ratios: list[float], advantages: list[float]) -> dict[str, torch.Tensor]:
    old = torch.full((1, len(ratios)), math.log(0.1))
    return {
        "old_log_probs": old,
        "log_probs": (old + torch.tensor([ratios]).log()).requires_grad_(True),
        "advantages": torch.tensor([advantages]),
        "response_mask": torch.ones(1, len(ratios)),
    }


def run_policy_loss(
    inputs: dict[str, torch.Tensor], loss_type: str, **overrides: float
) -> tuple[float, torch.Tensor, dict[str, float]]:
    kwargs = {**CLIP, "loss_avg_mode": "token-mean", **overrides}
    loss, metrics = compute_policy_loss(**inputs, loss_type=loss_type, **kwargs)
    loss.backward()
    grad = inputs["log_probs"].grad
    assert all(value.dim() == 0 and not value.requires_grad for value in metrics.values())  # summed without a sync
    return (
        loss.item(),
        grad[0] if grad.shape[0] == 1 else grad,
        {name: value.item() for name, value in metrics.items()},
    )


def test_ppo_clip_higher_and_dual_clip_values_gradients_and_metrics() -> None:
    ratios = [1.1, 1.5, 0.5, 4.0, 2.0, 0.5]
    advantages = [1.0, 1.0, -1.0, -1.0, -1.0, 1.0]
    # per token: inside; held at 1 + 0.28; held at 1 - 0.2; dual clip at C = 3; A < 0 and r > 1 is not clipped
    # below C; A > 0 and r < 1 - eps_l is not clipped
    token_losses = [-1.1, -1.28, 0.8, 3.0, 2.0, -0.5]
    token_grads = [-1.1, 0.0, 0.0, 0.0, 2.0, -0.5]  # d(-A r)/d log p = -A r where no bound is active
    loss, grad, metrics = run_policy_loss(policy_inputs(ratios, advantages), "default")
    assert loss == pytest.approx(sum(token_losses) / 6, rel=1e-5)
    torch.testing.assert_close(grad, torch.tensor(token_grads) / 6)
    assert metrics["pg_clipfrac"] == pytest.approx(2 / 6)  # held at 1 + eps_h or 1 - eps_l
    # a token of weight 0 (icepop, top_entropy_quantile) is left out of the fractions: they counted it (2 / 6 here)
    weights = torch.tensor([[1.0, 0.0, 1.0, 1.0, 1.0, 1.0]])
    _, _, weighted = run_policy_loss(policy_inputs(ratios, advantages), "default", token_weights=weights)
    assert weighted["pg_clipfrac"] == pytest.approx(1 / 5) and weighted["pg_clipfrac_higher"] == 0.0
    assert weighted["pg_clipfrac_lower"] == pytest.approx(1 / 5)
    assert metrics["pg_clipfrac_higher"] == pytest.approx(1 / 6)
    assert metrics["pg_clipfrac_lower"] == pytest.approx(1 / 6)  # verl's name for the dual-clip fraction
    assert metrics["ppo_kl"] == pytest.approx(-sum(math.log(r) for r in ratios) / 6, rel=1e-5)


@pytest.mark.parametrize("advantage", [2.5, 1.0, -1.0, -2.5])
def test_clip_and_dual_clip_bound_the_effective_ratio(advantage: float) -> None:
    ratios = [0.05, 0.5, 0.79, 0.8, 0.81, 1.0, 1.27, 1.28, 1.29, 2.0, 2.99, 3.0, 3.5, 10.0]
    inputs = policy_inputs(ratios, [advantage] * len(ratios))
    loss, _ = compute_policy_loss(**inputs, loss_type="default", loss_avg_mode="token-mean", **CLIP)
    per_token = []  # each token's loss alone, through a one-hot mask
    for t in range(len(ratios)):
        mask = torch.zeros(1, len(ratios))
        mask[0, t] = 1
        token_loss, _ = compute_policy_loss(
            **{**inputs, "response_mask": mask}, loss_type="default", loss_avg_mode="token-mean", **CLIP
        )
        per_token.append(token_loss.item() / -advantage)
    if advantage > 0:
        expected = [min(r, 1.28) for r in ratios]
    else:
        expected = [min(max(r, 0.8), 3.0) for r in ratios]
    assert per_token == pytest.approx(expected, rel=1e-5)
    assert loss.item() == pytest.approx(-advantage * sum(expected) / len(ratios), rel=1e-5)


def test_dual_clip_can_be_disabled_and_bad_ranges_are_rejected() -> None:
    _, grad, metrics = run_policy_loss(policy_inputs([10.0], [-1.0]), "default", clip_ratio_dual=float("inf"))
    torch.testing.assert_close(grad, torch.tensor([10.0]))
    assert metrics["pg_clipfrac_lower"] == 0.0
    with pytest.raises(ValueError, match="clip_ratio_dual must be greater than 1, got 0.9"):
        run_policy_loss(policy_inputs([1.0], [1.0]), "default", clip_ratio_dual=0.9)
    with pytest.raises(ValueError, match="clip_ratio_low must be in \\[0, 1\\)"):
        run_policy_loss(policy_inputs([1.0], [1.0]), "default", clip_ratio_low=1.0)
    with pytest.raises(ValueError, match="Unknown actor.loss_type 'ppo'; choose one of default, gspo"):
        run_policy_loss(policy_inputs([1.0], [1.0]), "ppo")


def test_extreme_log_ratios_give_finite_losses_and_gradients() -> None:
    inputs = policy_inputs([1.0, 1.0], [1.0, -1.0])
    inputs["log_probs"] = (inputs["old_log_probs"] + torch.tensor([[60.0, -60.0]])).requires_grad_(True)
    for loss_type in LOSS_TYPES:
        inputs["log_probs"].grad = None
        loss, grad, _ = run_policy_loss(inputs, loss_type)
        assert math.isfinite(loss) and torch.isfinite(grad).all(), loss_type


def gspo_inputs(advantages: torch.Tensor) -> dict[str, torch.Tensor]:
    old = torch.tensor([[-1.0, -2.0, -0.5], [-1.5, -0.3, -4.0]])
    shift = torch.tensor([[0.1, -0.05, 0.15], [0.6, 0.4, 9.0]])  # sequence log-ratios 0.2/3 and 0.5 (pad ignored)
    return {
        "old_log_probs": old,
        "log_probs": (old + shift).requires_grad_(True),
        "advantages": advantages,
        "response_mask": torch.tensor([[1.0, 1, 1], [1, 1, 0]]),
    }


def test_gspo_uses_the_clipped_sequence_ratio() -> None:
    inputs = gspo_inputs(torch.tensor([[2.0, 2.0, 2.0], [1.0, 1.0, 0.0]]))
    loss, grad, metrics = run_policy_loss(inputs, "gspo", loss_avg_mode="seq-mean-token-mean")
    s0 = math.exp(0.2 / 3)
    assert math.exp(0.5) > 1.28  # the second sequence's ratio is held at 1 + eps_h
    assert loss == pytest.approx((-2.0 * s0 - 1.28) / 2, rel=1e-5)
    # d/d log p_t of -A s / S = -A s / (|y| S) on every token of an unclipped sequence; 0 for the clipped one
    torch.testing.assert_close(grad, torch.tensor([[-2.0 * s0 / 6] * 3, [0.0, 0.0, 0.0]]))
    assert metrics["pg_clipfrac"] == metrics["pg_clipfrac_higher"] == pytest.approx(2 / 5)


def test_gspo_token_matches_gspo_for_sequence_advantages_and_keeps_token_advantages() -> None:
    constant = torch.tensor([[2.0, 2.0, 2.0], [-1.0, -1.0, 0.0]])
    runs = {
        name: run_policy_loss(gspo_inputs(constant), name, loss_avg_mode="seq-mean-token-mean")
        for name in ("gspo", "gspo_token")
    }
    assert runs["gspo"][0] == pytest.approx(runs["gspo_token"][0])
    torch.testing.assert_close(runs["gspo"][1], runs["gspo_token"][1])

    per_token = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]])
    _, grad, _ = run_policy_loss(gspo_inputs(per_token), "gspo_token", loss_avg_mode="seq-mean-token-mean")
    s0 = math.exp(0.2 / 3)
    torch.testing.assert_close(grad[0], -per_token[0] * s0 / 6)  # token t gets its own advantage
    _, grad, _ = run_policy_loss(gspo_inputs(per_token), "gspo", loss_avg_mode="seq-mean-token-mean")
    torch.testing.assert_close(grad[0], torch.full((3,), -2.0 * s0 / 6))  # gspo spreads the mean advantage


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_a_token_of_weight_zero_gets_no_gradient_and_leaves_the_sequence_ratio(loss_type: str) -> None:
    """icepop's and top_entropy_quantile's masked tokens: no gradient, also through gspo's and geo_mean's sequence
    statistic, which equals that of the sequence without the token."""
    data = random_batch(seed=5, batch=3, width=5)
    data["response_mask"] = torch.ones(3, 5)
    weights = torch.ones(3, 5)
    weights[0, 2] = weights[1, 0] = 0.0
    data["log_probs"].requires_grad_(True)
    mode = default_loss_avg_mode(loss_type)
    _, grad, _ = run_policy_loss(data, loss_type, loss_avg_mode=mode, token_weights=weights)
    assert grad[0, 2] == 0 and grad[1, 0] == 0
    assert grad[2].abs().sum() > 0 and grad[0, [0, 1, 3, 4]].abs().sum() > 0
    # the first sequence without its masked token: the same gradient on the tokens that remain (seq-mean modes count
    # the sequence's masked token in its length, so compare sequence-level losses on sum-aggregation)
    kept = [0, 1, 3, 4]
    whole = {key: value.detach()[:1].clone() for key, value in data.items()}
    whole["log_probs"].requires_grad_(True)
    _, grad_whole, _ = run_policy_loss(whole, loss_type, loss_avg_mode="token-sum", token_weights=weights[:1])
    part = {key: value.detach()[:1, kept].clone() for key, value in data.items()}
    part["log_probs"].requires_grad_(True)
    _, grad_part, _ = run_policy_loss(part, loss_type, loss_avg_mode="token-sum")
    torch.testing.assert_close(grad_whole[kept], grad_part)


def test_cispo_weights_the_log_prob_gradient_by_the_stopped_clipped_ratio() -> None:
    ratios, advantages = [1.1, 1.5, 0.5, 0.5], [1.0, 1.0, -1.0, 2.0]
    inputs = policy_inputs(ratios, advantages)
    log_probs = inputs["log_probs"].detach()[0]
    loss, grad, metrics = run_policy_loss(inputs, "cispo")
    weights = torch.tensor([1.1, 1.28, 0.8, 0.8])
    advantage = torch.tensor(advantages)
    assert loss == pytest.approx((-advantage * weights * log_probs).mean().item(), rel=1e-5)
    # clipped tokens keep a gradient (unlike PPO): -A * clip(r)
    torch.testing.assert_close(grad, -advantage * weights / 4)
    assert metrics["pg_clipfrac"] == pytest.approx(3 / 4)  # verl: r != clip(r), whatever the advantage's sign
    assert metrics["pg_clipfrac_higher"] == pytest.approx(1 / 4)
    assert metrics["pg_clipfrac_lower"] == 0.0
    # clip_ratio_low >= 1: no floor (MiniMax-M1's), the weights below 1 - 0.2 are the ratios themselves
    inputs = policy_inputs(ratios, advantages)
    _, grad, metrics = run_policy_loss(inputs, "cispo", clip_ratio_low=1.0)
    torch.testing.assert_close(grad, -advantage * torch.tensor([1.1, 1.28, 0.5, 0.5]) / 4)
    assert metrics["pg_clipfrac"] == pytest.approx(1 / 4)


def test_gpg_is_the_plain_policy_gradient_whatever_the_ratio() -> None:
    """verl's loss_mode=gpg: -A log pi. Missing, a GPG recipe ran the PPO clip, which held these tokens (no
    gradient) once the update was off-policy."""
    inputs = policy_inputs([1.5, 0.5], [1.0, -1.0])
    log_probs = inputs["log_probs"].detach()[0]
    loss, grad, metrics = run_policy_loss(inputs, "gpg")
    assert loss == pytest.approx((-torch.tensor([1.0, -1.0]) * log_probs).mean().item(), rel=1e-6)
    torch.testing.assert_close(grad, torch.tensor([-0.5, 0.5]))
    assert metrics["pg_clipfrac"] == 0.0


def test_sapo_soft_gate_value_and_gradient() -> None:
    ratios, advantages = [1.0, 1.0, 1.6, 0.4, 2.5], [1.0, -1.0, 1.0, -2.0, -1.0]
    loss, grad, metrics = run_policy_loss(
        policy_inputs(ratios, advantages), "sapo", tau_positive=1.0, tau_negative=1.05
    )
    values, grads = [], []
    for r, a in zip(ratios, advantages):
        tau = 1.0 if a > 0 else 1.05
        sig = 1 / (1 + math.exp(-tau * (r - 1)))
        values.append(-a * 4 / tau * sig)
        grads.append(-a * 4 * sig * (1 - sig) * r / len(ratios))
    assert loss == pytest.approx(sum(values) / len(ratios), rel=1e-5)
    torch.testing.assert_close(grad, torch.tensor(grads))
    # on-policy the gate passes the plain policy gradient -A (times r = 1)
    assert grad[0].item() == pytest.approx(-1.0 / 5) and grad[1].item() == pytest.approx(1.0 / 5)
    assert metrics["pg_clipfrac"] == metrics["pg_clipfrac_higher"] == metrics["pg_clipfrac_lower"] == 0.0


@pytest.mark.parametrize("loss_type", ["gspo", "gspo_token"])
def test_gspo_clamps_the_sequence_log_ratio_at_verls_bound(loss_type: str) -> None:
    old = torch.zeros(2, 2)
    inputs = {
        "old_log_probs": old,
        "log_probs": (old + torch.tensor([[11.0, 13.0], [9.0, 10.0]])).requires_grad_(True),  # means 12 and 9.5
        "advantages": -torch.ones(2, 2),  # A < 0: the unclipped branch -A s is the larger one
        "response_mask": torch.ones(2, 2),
    }
    loss, grad, _ = run_policy_loss(inputs, loss_type, loss_avg_mode="seq-mean-token-mean")
    assert GSPO_LOG_RATIO_MAX == 10.0
    # hand-checked: e^10 = 22026.4658 (held at the bound, no gradient) and e^9.5 = 13359.7268
    assert loss == pytest.approx((22026.4658 + 13359.7268) / 2, rel=1e-6)
    torch.testing.assert_close(grad, torch.tensor([[0.0, 0.0], [13359.7268 / 4, 13359.7268 / 4]]))


def test_ppo_loss_and_metrics_equal_a_plain_loop_with_verls_definitions() -> None:
    """verl 0.9's vanilla loss, one token at a time: pg_clipfrac counts tokens where the clipped term is larger,
    pg_clipfrac_lower the negative-advantage tokens whose clipped loss exceeds the dual-clip bound -A C."""
    generator = torch.Generator().manual_seed(11)
    mask = (torch.arange(9) < torch.tensor([[9], [4], [7], [1], [6]])).float()
    old = -torch.rand(5, 9, generator=generator) - 0.1
    inputs = {
        "old_log_probs": old,
        "log_probs": (old + 0.9 * torch.randn(5, 9, generator=generator)).requires_grad_(True),
        "advantages": torch.randn(5, 9, generator=generator),
        "response_mask": mask,
    }
    loss, _, metrics = run_policy_loss(inputs, "default")
    losses, clipped, dual, higher, kl = [], 0, 0, 0, 0.0
    for i, t in mask.nonzero().tolist():
        log_ratio = inputs["log_probs"][i, t].item() - old[i, t].item()
        ratio, advantage = math.exp(log_ratio), inputs["advantages"][i, t].item()
        unclipped, clip_term = -advantage * ratio, -advantage * min(max(ratio, 0.8), 1.28)
        token_loss = max(unclipped, clip_term)
        clipped += clip_term > unclipped
        higher += clip_term > unclipped and advantage > 0
        dual += token_loss > -advantage * 3.0 and advantage < 0
        losses.append(min(token_loss, -advantage * 3.0) if advantage < 0 else token_loss)
        kl -= log_ratio
    tokens = len(losses)
    assert 0 < clipped < tokens and 0 < dual and 0 < higher < clipped  # the seed exercises every bound
    assert loss == pytest.approx(sum(losses) / tokens, rel=1e-5)
    assert metrics["pg_clipfrac"] == pytest.approx(clipped / tokens)
    assert metrics["pg_clipfrac_higher"] == pytest.approx(higher / tokens)
    assert metrics["pg_clipfrac_lower"] == pytest.approx(dual / tokens)
    assert metrics["ppo_kl"] == pytest.approx(kl / tokens, rel=1e-5)


def test_sapo_defaults_to_the_papers_seq_mean_token_mean_and_equals_a_plain_loop() -> None:
    for loss_type in ("sapo", "gspo", "gspo_token", "geo_mean"):  # the papers' objectives (verl's for gspo too)
        assert default_loss_avg_mode(loss_type) == "seq-mean-token-mean"
    assert default_loss_avg_mode("default") == default_loss_avg_mode("cispo") == "token-mean"
    data = random_batch(seed=12)
    data["log_probs"].requires_grad_(True)
    loss, _, _ = run_policy_loss(data, "sapo", loss_avg_mode=default_loss_avg_mode("sapo"))
    sequence_losses = []
    for i in range(data["response_mask"].shape[0]):
        token_losses = []
        for t in data["response_mask"][i].nonzero().flatten().tolist():
            ratio = math.exp(data["log_probs"][i, t].item() - data["old_log_probs"][i, t].item())
            advantage = data["advantages"][i, t].item()
            tau = 1.0 if advantage > 0 else 1.05
            token_losses.append(-advantage * 4 / tau / (1 + math.exp(-tau * (ratio - 1))))
        sequence_losses.append(sum(token_losses) / len(token_losses))
    assert loss == pytest.approx(sum(sequence_losses) / len(sequence_losses), rel=1e-5)
    token_mean, _, _ = run_policy_loss({**data, "log_probs": data["log_probs"].detach().requires_grad_(True)}, "sapo")
    assert token_mean != pytest.approx(loss, rel=1e-3)  # the aggregation matters on these lengths


def test_geo_mean_is_gmpos_clipped_geometric_mean_ratio_per_sequence() -> None:
    """GMPO as a plain loop: each sequence's -A exp(mean_t log r_t'), where log r_t' = sgn(A) min(sgn(A) log r_t,
    sgn(A) clip(log r_t, -eps_l, eps_h)) and A is the sequence's mean advantage; then the mean over sequences."""
    assert default_loss_avg_mode("geo_mean") == "seq-mean-token-mean"
    data = random_batch(seed=13)
    data["log_probs"].requires_grad_(True)
    eps = 0.2
    loss, grad, metrics = run_policy_loss(
        data, "geo_mean", loss_avg_mode="seq-mean-token-mean", clip_ratio_low=eps, clip_ratio_high=eps
    )
    sequence_losses, clipped = [], 0
    for i in range(data["response_mask"].shape[0]):
        tokens = data["response_mask"][i].nonzero().flatten().tolist()
        advantage = sum(data["advantages"][i, t].item() for t in tokens) / len(tokens)
        logs = []
        for t in tokens:
            log_ratio = data["log_probs"][i, t].item() - data["old_log_probs"][i, t].item()
            sign = math.copysign(1.0, data["advantages"][i, t].item())
            bounded = min(max(log_ratio, -eps), eps)
            logs.append(sign * min(sign * log_ratio, sign * bounded))
            clipped += (sign > 0 and log_ratio > eps) or (sign < 0 and log_ratio < -eps)
        sequence_losses.append(-advantage * math.exp(sum(logs) / len(logs)))
    assert loss == pytest.approx(sum(sequence_losses) / len(sequence_losses), rel=1e-5)
    assert metrics["pg_clipfrac"] == pytest.approx(clipped / data["response_mask"].sum().item())
    assert 0 < clipped < data["response_mask"].sum().item()  # both clipped and free tokens in this batch
    assert torch.isfinite(grad).all() and (grad[data["response_mask"] == 0] == 0).all()


# ---------------------------------------------------------------- entropy, value loss, explained variance


def test_entropy_from_logits_and_its_aggregation() -> None:
    logits = torch.tensor([[[0.0, 0.0], [2.0, -1.0]], [[1.0, 1.0], [5.0, 5.0]]])
    entropy = entropy_from_logits(logits)
    torch.testing.assert_close(entropy, torch.distributions.Categorical(logits=logits).entropy())
    mask = torch.tensor([[1.0, 1], [1, 0]])
    loss = compute_entropy_loss(entropy, mask, "token-mean")
    torch.testing.assert_close(loss, (entropy[0, 0] + entropy[0, 1] + entropy[1, 0]) / 3)


@pytest.mark.parametrize(
    ("keep", "kept"),
    [
        (1.0, [0.1, 0.5, 0.9, 0.3, 0.7, 0.2]),
        (0.5, [0.5, 0.9, 0.7]),  # the median of the six is 0.4
        (0.2, [0.9, 0.7]),  # the 0.8 quantile is 0.7, kept (ties stay)
        (0.0, [0.9]),
    ],
)
def test_high_entropy_mask_keeps_the_top_fraction_of_the_response_tokens(keep: float, kept: list[float]) -> None:
    entropy = torch.tensor([[0.1, 0.5, 0.9, 0.3], [0.7, 0.2, 5.0, 6.0]])  # the padding holds the largest values
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    selected = high_entropy_mask(entropy, mask, keep)
    assert selected.dtype == torch.float32 and selected.shape == entropy.shape
    assert sorted(entropy[selected.bool()].tolist()) == pytest.approx(sorted(kept))
    assert not high_entropy_mask(entropy, torch.zeros_like(mask), 0.2).any()


def test_value_loss_clips_the_prediction_around_the_old_value() -> None:
    vpreds = torch.tensor([[1.0, 1.4, -0.5, 9.0]], requires_grad=True)
    values = torch.tensor([[0.8, 0.0, 0.5, 0.0]])
    returns = torch.tensor([[1.5, 1.5, 1.5, 0.0]])
    mask = torch.tensor([[1.0, 1, 1, 0]])
    loss, metrics = compute_value_loss(vpreds, returns, values, mask, cliprange_value=0.5, loss_avg_mode="token-mean")
    # token 0 inside the range: 0.5 * 0.25; token 1 moved 1.4 > 0.5 towards R, so the clipped error (0.5 - 1.5)^2
    # counts; token 2 moved away from R: the unclipped error (-0.5 - 1.5)^2 is larger
    assert loss.item() == pytest.approx((0.125 + 0.5 + 2.0) / 3)
    loss.backward()
    torch.testing.assert_close(vpreds.grad, torch.tensor([[-0.5, 0.0, -2.0, 0.0]]) / 3)
    assert metrics["vf_clipfrac"].item() == pytest.approx(1 / 3)
    assert metrics["vpred_mean"].item() == pytest.approx(1.9 / 3)


def test_explained_variance() -> None:
    returns = torch.tensor([[1.0, 2.0, 3.0, 4.0, 50.0]])
    mask = torch.tensor([[1.0, 1, 1, 1, 0]])
    assert explained_variance(returns, returns, mask) == 1.0
    assert explained_variance(returns, torch.zeros_like(returns), mask) == pytest.approx(0.0, abs=1e-6)
    residual = torch.tensor([[0.5, -0.5, 0.5, -0.5, 0.0]])
    assert explained_variance(returns, returns + residual, mask) == pytest.approx(1 - 0.25 / 1.25)
    assert math.isnan(explained_variance(torch.ones(1, 3), torch.zeros(1, 3), torch.ones(1, 3)))


@pytest.mark.parametrize("length", [8, 1024])
def test_explained_variance_of_a_step_without_rewards_is_left_out(length: int) -> None:
    """GAE's returns A + V of a step whose rewards are all 0 (a hard batch, the KL in the loss) are 0 up to float32
    rounding; that residue is no variation of the returns: a PPO run with the critic logged
    critic/vf_explained_var = -1.4e14 there. Returns that do vary a little are still measured."""
    generator = torch.Generator().manual_seed(0)
    mask = torch.ones(16, length)
    mask[::3, length // 2 :] = 0
    values = torch.randn(16, length, generator=generator) * 3 * mask
    _, returns = compute_gae_advantage_return(torch.zeros(16, length), values, mask)
    assert 0 < returns.abs().max() < 1e-4  # the rounding residue
    assert math.isnan(explained_variance(returns, values, mask))
    rewards = torch.zeros(16, length)
    rewards[1, -1] = 1.0  # one response solved: its tokens' returns are 1
    _, returns = compute_gae_advantage_return(rewards, values, mask)
    residual, kept = (returns - values)[mask.bool()], returns[mask.bool()]
    expected = 1 - residual.var(unbiased=False) / kept.var(unbiased=False)
    assert explained_variance(returns, values, mask) == pytest.approx(expected.item(), rel=1e-4)


# ---------------------------------------------------------------- online filtering


def test_filter_keeps_groups_whose_mean_is_strictly_inside_and_whose_scores_differ() -> None:
    """All-equal groups have zero advantage: dropped also where their mean lies inside the bounds (d, a key that is
    not 0/1 such as `overall` with a format term: it was kept, diluting the batch as DAPO's filter is to avoid)."""
    scores = [1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.5, 0.5, 0.25, 0.75]
    group_ids = np.array(["a", "b", "a", "b", "c", "c", "d", "d", "e", "e"], dtype=object)  # interleaved on purpose
    kept = filter_groups_by_reward(scores, group_ids, low=0.01, high=0.99)
    assert kept.tolist() == [1, 3, 8, 9]  # a (all right), c (all wrong) and d (all 0.5) are dropped
    assert filter_groups_by_reward(torch.tensor(scores), group_ids, 0.5, 0.99).tolist() == []  # strict bounds
    assert filter_groups_by_reward(np.array(scores), group_ids, 0.49, 1.01).tolist() == [1, 3, 8, 9]
    with pytest.raises(ValueError, match="got 10 scores but 2 uids"):
        filter_groups_by_reward(scores, ["a", "b"], 0.0, 1.0)


def test_easyr1_import_path_is_an_alias_of_the_algorithms_package():
    from verl.algorithms import core_algos as algorithms
    from verl.trainer import core_algos as easyr1_path

    assert easyr1_path.__all__ == algorithms.__all__
    assert all(getattr(easyr1_path, name) is getattr(algorithms, name) for name in algorithms.__all__)


@pytest.mark.parametrize("loss_type", ["default", "gspo", "gspo_token", "cispo", "gpg", "sapo", "geo_mean"])
def test_the_settings_a_policy_loss_is_said_to_read_are_those_that_change_its_loss(loss_type):
    """policy_loss_options (the actor config refuses a setting the loss does not read by it) against what each
    built-in loss computes, its value and its gradient."""
    from verl.algorithms.policy_losses import POLICY_LOSS_OPTIONS, compute_policy_loss, policy_loss_options

    generator = torch.Generator().manual_seed(0)
    old = torch.randn(4, 6, generator=generator) * 0.1 - 1.0
    start = old + torch.randn(4, 6, generator=generator) * 0.8  # ratios far outside every clip
    advantages = torch.randn(4, 6, generator=generator)
    mask = torch.ones(4, 6)
    settings = {"clip_ratio_low": 0.2, "clip_ratio_high": 0.3, "clip_ratio_dual": 3.0}
    settings |= {"tau_positive": 1.0, "tau_negative": 1.05}
    changed = {"clip_ratio_low": 0.05, "clip_ratio_high": 0.05, "clip_ratio_dual": 1.5}
    changed |= {"tau_positive": 3.0, "tau_negative": 3.0}
    assert set(changed) == set(POLICY_LOSS_OPTIONS)

    def loss_and_grad(values):
        log_probs = start.clone().requires_grad_(True)
        loss, _ = compute_policy_loss(
            old, log_probs, advantages, mask, loss_type, values["clip_ratio_low"], values["clip_ratio_high"],
            values["clip_ratio_dual"], "token-mean", values["tau_positive"], values["tau_negative"],
        )  # fmt: skip
        loss.backward()
        return loss.detach(), log_probs.grad

    base = loss_and_grad(settings)
    for key, value in changed.items():
        other = loss_and_grad({**settings, key: value})
        differs = not (torch.equal(base[0], other[0]) and torch.equal(base[1], other[1]))
        assert differs == (key in policy_loss_options(loss_type)), (loss_type, key)
