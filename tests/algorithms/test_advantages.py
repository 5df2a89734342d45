# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Advantage estimators against hand-computed values and plain-Python reference loops.

The reference loops for reinforce_plus_plus, remax, opo, gpg and grpo_passk restate verl 0.9's semantics
(verl/trainer/ppo/core_algos.py) in the plainest form, one response at a time, on seeded random inputs.
"""

import math
import statistics

import numpy as np
import pytest
import torch

from verl.algorithms import advantages as adv_module
from verl.algorithms.core_algos import (
    compute_advantage_return,
    compute_gae_advantage_return,
    compute_gpg_outcome_advantage,
    compute_grpo_outcome_advantage,
    compute_grpo_passk_outcome_advantage,
    compute_opo_outcome_advantage,
    compute_reinforce_plus_plus_baseline_outcome_advantage,
    compute_reinforce_plus_plus_outcome_advantage,
    compute_remax_outcome_advantage,
    compute_rloo_outcome_advantage,
    get_adv_estimator,
    is_grouped_adv_estimator,
    register_adv_estimator,
    registered_adv_estimators,
)


def outcome_batch(scores: list[float], lengths: list[int], width: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    """Rewards placed on the last response token, as the reward manager does, and the response mask."""
    rewards = torch.zeros(len(scores), width)
    mask = torch.zeros(len(scores), width)
    for i, (score, length) in enumerate(zip(scores, lengths)):
        mask[i, :length] = 1
        rewards[i, length - 1] = score
    return rewards, mask


def uids(*names: str) -> np.ndarray:
    return np.array(names, dtype=object)


def whiten_reference(values: list[float]) -> list[float]:
    mean, var = statistics.mean(values), statistics.variance(values)
    return [(v - mean) / math.sqrt(var + 1e-8) for v in values]


def per_sequence(advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The advantage of each response, after checking it is constant on its tokens and 0 on padding."""
    first = advantages[:, 0]
    torch.testing.assert_close(advantages, first.unsqueeze(-1) * mask)
    return first


def test_registry_lists_every_estimator_and_marks_the_grouped_ones() -> None:
    # the built-ins: a user's 'file.py:function' joins the registry when a run (another test) names it
    names = [name for name in registered_adv_estimators() if ".py:" not in name]
    assert set(names) >= {"gae", "grpo", "grpo_passk", "rloo", "opo", "gpg", "reinforce_plus_plus", "remax"}
    for name in names:
        assert callable(get_adv_estimator(name))
    grouped = {name for name in names if is_grouped_adv_estimator(name)}
    assert grouped == {"grpo", "grpo_passk", "rloo", "opo", "gpg", "reinforce_plus_plus_baseline"}


def test_unknown_estimator_lists_valid_names() -> None:
    with pytest.raises(ValueError, match="Unknown algorithm.adv_estimator 'ppo'.*grpo.*rloo"):
        get_adv_estimator("ppo")
    with pytest.raises(ValueError, match="'ppo'"):
        compute_advantage_return("ppo", token_level_rewards=torch.zeros(1, 1))


def test_register_rejects_duplicates_and_adds_new_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(adv_module, "_ADV_ESTIMATORS", dict(adv_module._ADV_ESTIMATORS))  # undone after the test
    with pytest.raises(ValueError, match="'grpo' is already registered"):
        register_adv_estimator("grpo")(compute_grpo_outcome_advantage)

    @register_adv_estimator("constant_one")
    def constant_one(token_level_rewards: torch.Tensor, response_mask: torch.Tensor):
        return response_mask.clone(), response_mask.clone()

    rewards, mask = outcome_batch([0.0, 0.0], [2, 1])
    advantages, _ = compute_advantage_return("constant_one", token_level_rewards=rewards, response_mask=mask)
    torch.testing.assert_close(advantages, mask)
    assert not is_grouped_adv_estimator("constant_one")


def test_compute_advantage_return_passes_only_accepted_kwargs_and_names_missing_ones() -> None:
    rewards, mask = outcome_batch([1.0, 0.0], [2, 2])
    everything = {
        "token_level_rewards": rewards,
        "response_mask": mask,
        "index": uids("a", "a"),
        "values": None,
        "reward_baselines": None,
        "gamma": 1.0,
        "lam": 1.0,
        "norm_adv_by_std_in_grpo": False,
    }
    advantages, _ = compute_advantage_return("grpo", **everything)
    torch.testing.assert_close(per_sequence(advantages, mask), torch.tensor([0.5, -0.5]))
    with pytest.raises(ValueError, match="'gae' needs values"):
        compute_advantage_return("gae", **everything)
    with pytest.raises(ValueError, match="'remax' needs reward_baselines"):
        compute_advantage_return("remax", **everything)


def test_grpo_normalises_by_group_mean_and_unbiased_std() -> None:
    rewards, mask = outcome_batch([1.0, 0.0, 2.0, 2.0, 5.0], [3, 2, 4, 1, 2])
    advantages, returns = compute_grpo_outcome_advantage(rewards, mask, uids("a", "a", "b", "b", "b"))
    root3 = math.sqrt(3.0)  # group b: mean 3, unbiased std sqrt((1 + 1 + 4) / 2)
    expected = torch.tensor([0.5 / math.sqrt(0.5), -0.5 / math.sqrt(0.5), -1 / root3, -1 / root3, 2 / root3])
    torch.testing.assert_close(per_sequence(advantages, mask), expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(returns, advantages)
    # zero mean within each group
    seq = per_sequence(advantages, mask)
    assert abs(seq[:2].sum().item()) < 1e-6 and abs(seq[2:].sum().item()) < 1e-6


def test_grpo_with_the_batch_std_keeps_the_group_mean() -> None:
    """grpo_std_scope=batch (Lite PPO, TRL's scale_rewards="batch"): s_i - mean_g(s), over the std of all scores."""
    scores = [1.0, 0.0, 2.0, 2.0, 5.0]
    rewards, mask = outcome_batch(scores, [3, 2, 4, 1, 2])
    index = uids("a", "a", "b", "b", "b")
    advantages, _ = compute_grpo_outcome_advantage(rewards, mask, index, grpo_std_scope="batch")
    batch_std = torch.tensor(scores, dtype=torch.float64).std().item()  # unbiased, over the five
    expected = torch.tensor([0.5, -0.5, -1.0, -1.0, 2.0]) / (batch_std + 1e-6)
    torch.testing.assert_close(per_sequence(advantages, mask), expected, atol=1e-5, rtol=1e-5)
    group_scoped, _ = compute_grpo_outcome_advantage(rewards, mask, index)
    assert not torch.allclose(group_scoped, advantages)  # the groups' stds differ from the batch's
    alone, _ = compute_grpo_outcome_advantage(*outcome_batch([1.0], [2]), uids("a"), grpo_std_scope="batch")
    assert torch.equal(alone, torch.zeros_like(alone))  # one response: no std, and nothing to compare with


def test_grpo_is_scale_invariant_and_dr_grpo_is_not() -> None:
    rewards, mask = outcome_batch([1.0, 0.0, 0.25, 0.75], [2, 2, 3, 1])
    index = uids("a", "a", "b", "b")
    grpo, _ = compute_grpo_outcome_advantage(rewards, mask, index)
    grpo_scaled, _ = compute_grpo_outcome_advantage(10 * rewards, mask, index)
    torch.testing.assert_close(grpo, grpo_scaled, atol=1e-5, rtol=1e-5)

    dr_grpo, _ = compute_grpo_outcome_advantage(rewards, mask, index, norm_adv_by_std_in_grpo=False)
    torch.testing.assert_close(per_sequence(dr_grpo, mask), torch.tensor([0.5, -0.5, -0.25, 0.25]))
    dr_scaled, _ = compute_grpo_outcome_advantage(10 * rewards, mask, index, norm_adv_by_std_in_grpo=False)
    torch.testing.assert_close(dr_scaled, 10 * dr_grpo)


def test_grpo_sums_token_rewards_and_handles_flat_and_singleton_groups() -> None:
    rewards = torch.tensor([[0.5, 0.5, 0.0], [0.0, 0.0, 0.0], [0.1, 0.0, 0.0], [0.1, 0.0, 0.0], [3.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 1], [1, 0, 0]])
    advantages, _ = compute_grpo_outcome_advantage(rewards, mask, ["a", "a", "flat", "flat", "alone"])
    seq = per_sequence(advantages, mask)
    torch.testing.assert_close(seq[:2], torch.tensor([1.0, -1.0]) / math.sqrt(2.0), atol=1e-5, rtol=1e-5)
    # identical scores give exactly zero, not a float residue amplified by the tiny std
    assert seq[2:].tolist() == [0.0, 0.0, 0.0]


def test_grpo_passk_credits_only_the_best_response() -> None:
    rewards, mask = outcome_batch([0.2, 0.9, 0.5, 1.0, 1.0, 0.0, 7.0], [2, 3, 1, 2, 2, 2, 1])
    advantages, returns = compute_grpo_passk_outcome_advantage(rewards, mask, uids("a", "a", "a", "b", "b", "b", "c"))
    seq = per_sequence(advantages, mask)
    best_a = (0.9 - 0.5) / (statistics.stdev([0.2, 0.9, 0.5]) + 1e-6)
    # group b ties at the top: the first best gets s_max - s_second = 0; the singleton c gets 0
    torch.testing.assert_close(seq, torch.tensor([0.0, best_a, 0.0, 0.0, 0.0, 0.0, 0.0]))
    torch.testing.assert_close(returns, advantages)


def test_rloo_is_the_leave_one_out_baseline() -> None:
    scores = [1.0, 0.0, 0.0, 1.0, 0.3, 0.6, 2.0]
    index = uids("a", "a", "a", "a", "b", "b", "c")
    rewards, mask = outcome_batch(scores, [1, 2, 3, 4, 2, 2, 1])
    advantages, returns = compute_rloo_outcome_advantage(rewards, mask, index)
    expected = []
    for i, uid in enumerate(index):
        others = [s for j, s in enumerate(scores) if index[j] == uid and j != i]
        expected.append(scores[i] - statistics.mean(others) if others else 0.0)
    torch.testing.assert_close(per_sequence(advantages, mask), torch.tensor(expected))
    torch.testing.assert_close(per_sequence(advantages, mask)[:4], torch.tensor([2 / 3, -2 / 3, -2 / 3, 2 / 3]))
    torch.testing.assert_close(returns, advantages)


def gae_reference(rewards: list[float], values: list[float], gamma: float, lam: float) -> list[float]:
    """GAE over the response tokens only, written as the textbook loop."""
    advantages, running = [0.0] * len(rewards), 0.0
    for t in reversed(range(len(rewards))):
        next_value = values[t + 1] if t + 1 < len(values) else 0.0
        running = rewards[t] + gamma * next_value - values[t] + gamma * lam * running
        advantages[t] = running
    return advantages


def test_gae_hand_computed_single_response() -> None:
    rewards, mask = torch.tensor([[0.0, 0.0, 1.0]]), torch.ones(1, 3)
    values = torch.tensor([[0.5, 0.6, 0.7]])
    _, returns = compute_gae_advantage_return(rewards, values, mask, gamma=0.9, lam=0.8)
    # deltas 0.04, 0.03, 0.3; A2 = 0.3, A1 = 0.03 + 0.72 * 0.3, A0 = 0.04 + 0.72 * A1; returns = A + V
    torch.testing.assert_close(returns, torch.tensor([[0.21712 + 0.5, 0.246 + 0.6, 1.0]]))


def test_gae_equals_a_plain_loop_and_ignores_padding_and_mask_holes() -> None:
    torch.manual_seed(0)
    mask = torch.tensor([[1.0, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 0, 1, 1, 0]])  # row 2 has a hole (e.g. a tool output)
    rewards = torch.randn(3, 5) * mask
    values = torch.randn(3, 5)  # padding values are garbage on purpose: they must not leak in
    gamma, lam = 0.95, 0.7
    advantages, returns = compute_gae_advantage_return(rewards, values, mask, gamma=gamma, lam=lam)

    raw, expected_returns = [], torch.zeros(3, 5)
    for i in range(3):
        positions = [t for t in range(5) if mask[i, t] == 1]
        seq_adv = gae_reference(rewards[i, positions].tolist(), values[i, positions].tolist(), gamma, lam)
        raw.extend(seq_adv)
        for t, a in zip(positions, seq_adv):
            expected_returns[i, t] = a + values[i, t]
    torch.testing.assert_close(returns, expected_returns)
    torch.testing.assert_close(advantages[mask.bool()], torch.tensor(whiten_reference(raw)), atol=1e-5, rtol=1e-5)
    assert (advantages[~mask.bool()] == 0).all()


def test_reinforce_plus_plus_returns_are_discounted_and_whitened() -> None:
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 2.0, 0.0]])
    mask = torch.tensor([[1.0, 1, 1], [1, 1, 0]])
    advantages, returns = compute_reinforce_plus_plus_outcome_advantage(rewards, mask, gamma=0.5)
    torch.testing.assert_close(returns, torch.tensor([[0.25, 0.5, 1.0], [1.0, 2.0, 0.0]]))
    expected = whiten_reference([0.25, 0.5, 1.0, 1.0, 2.0])
    torch.testing.assert_close(advantages[mask.bool()], torch.tensor(expected))
    assert advantages[1, 2] == 0


def test_reinforce_plus_plus_baseline_subtracts_group_mean_then_whitens() -> None:
    rewards, mask = outcome_batch([1.0, 0.0, 3.0, 0.5, 0.5], [2, 1, 2, 1, 1], width=2)
    advantages, returns = compute_reinforce_plus_plus_baseline_outcome_advantage(
        rewards, mask, uids("a", "a", "b", "c", "c")
    )
    centred_tokens = [0.5, 0.5, -0.5, 0.0, 0.0, 0.0, 0.0]  # per token: a (2 tokens, 1 token), b singleton, c flat
    torch.testing.assert_close(advantages[mask.bool()], torch.tensor(whiten_reference(centred_tokens)))
    torch.testing.assert_close(returns, advantages)


def test_remax_subtracts_the_greedy_baseline() -> None:
    rewards, mask = outcome_batch([1.0, 0.0, 0.7], [2, 3, 1])
    advantages, returns = compute_remax_outcome_advantage(rewards, mask, torch.tensor([0.5, 0.5, 1.0]))
    torch.testing.assert_close(per_sequence(advantages, mask), torch.tensor([0.5, -0.5, -0.3]))
    torch.testing.assert_close(returns, torch.tensor([1.0, 0.0, 0.7]).unsqueeze(-1) * mask)
    with pytest.raises(ValueError, match="reward_baselines must have shape \\(3,\\)"):
        compute_remax_outcome_advantage(rewards, mask, torch.tensor([0.5, 0.5]))


def test_group_ids_must_match_the_batch() -> None:
    rewards, mask = outcome_batch([1.0, 0.0], [1, 1])
    with pytest.raises(ValueError, match="index has 3 group ids but the batch has 2"):
        compute_grpo_outcome_advantage(rewards, mask, uids("a", "a", "b"))


# ---------------------------------------------------------------- differential tests against plain loops (verl 0.9)


def holey_batch(seed: int, batch: int = 6, width: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """Random rewards on every position and a mask with trailing padding and interior holes (tool outputs)."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(3, width + 1, (batch,), generator=generator)
    positions = torch.arange(width)
    mask = (positions < lengths.unsqueeze(-1)).float()
    interior = (positions > 0) & (positions < (lengths - 1).unsqueeze(-1))
    mask[interior & (torch.rand(batch, width, generator=generator) < 0.4)] = 0.0
    assert (mask[:, 1:-1] == 0).logical_and(interior[:, 1:-1]).any(), "the seed must give interior holes"
    return torch.randn(batch, width, generator=generator), mask


def reward_to_go_reference(rewards: torch.Tensor, mask: torch.Tensor, gamma: float) -> torch.Tensor:
    """verl 0.9: G_t = r_t + gamma * G of the next response token, over each response's own tokens; masked
    positions (and their rewards) are skipped and hold 0."""
    returns = torch.zeros_like(rewards)
    for i in range(rewards.shape[0]):
        running = 0.0
        for t in reversed(range(rewards.shape[1])):
            if mask[i, t] == 1:
                running = rewards[i, t].item() + gamma * running
                returns[i, t] = running
    return returns


def test_reinforce_plus_plus_carries_the_return_over_holes_in_the_mask() -> None:
    # hand-checked: the first token still sees the reward behind the hole, discounted once
    rewards, mask = torch.tensor([[0.0, 5.0, 1.0]]), torch.tensor([[1.0, 0, 1]])
    _, returns = compute_reinforce_plus_plus_outcome_advantage(rewards, mask, gamma=0.5)
    torch.testing.assert_close(returns, torch.tensor([[0.5, 0.0, 1.0]]))

    rewards, mask = holey_batch(seed=3)
    advantages, returns = compute_reinforce_plus_plus_outcome_advantage(rewards, mask, gamma=0.9)
    expected = reward_to_go_reference(rewards, mask, gamma=0.9)
    torch.testing.assert_close(returns, expected)
    torch.testing.assert_close(advantages[mask.bool()], torch.tensor(whiten_reference(expected[mask.bool()].tolist())))
    assert (advantages[~mask.bool()] == 0).all()


def test_remax_carries_the_return_over_holes_in_the_mask() -> None:
    rewards, mask = holey_batch(seed=4)
    baselines = torch.randn(rewards.shape[0], generator=torch.Generator().manual_seed(40))
    advantages, returns = compute_remax_outcome_advantage(rewards, mask, baselines)
    expected = reward_to_go_reference(rewards, mask, gamma=1.0)
    torch.testing.assert_close(returns, expected)
    torch.testing.assert_close(advantages, (expected - baselines.unsqueeze(-1)) * mask)


GROUPS = uids("a", "b", "a", "c", "b", "a", "d", "c", "b", "d")  # interleaved, sizes 3, 3, 2, 2


def grouped_batch(seed: int) -> tuple[torch.Tensor, torch.Tensor, list[float], list[int]]:
    """Outcome rewards in {0, 0.5, 1} (so some scores are 0) on random-length responses."""
    generator = torch.Generator().manual_seed(seed)
    scores = (torch.randint(0, 3, (len(GROUPS),), generator=generator) * 0.5).tolist()
    lengths = torch.randint(1, 7, (len(GROUPS),), generator=generator).tolist()
    rewards, mask = outcome_batch(scores, lengths, width=6)
    return rewards, mask, scores, lengths


def members(i: int) -> list[int]:
    return [j for j, uid in enumerate(GROUPS) if uid == GROUPS[i]]


def test_opo_uses_the_length_weighted_group_baseline() -> None:
    rewards, mask, scores, lengths = grouped_batch(seed=5)
    advantages, returns = compute_opo_outcome_advantage(rewards, mask, GROUPS)
    expected = []
    for i in range(len(GROUPS)):
        group = members(i)
        baseline = sum(lengths[j] * scores[j] for j in group) / sum(lengths[j] for j in group)
        expected.append(scores[i] - baseline)
    torch.testing.assert_close(per_sequence(advantages, mask), torch.tensor(expected))
    torch.testing.assert_close(returns, advantages)
    # hand-checked: lengths 1 and 3, scores 1 and 0: baseline 1/4
    rewards, mask = outcome_batch([1.0, 0.0], [1, 3])
    advantages, _ = compute_opo_outcome_advantage(rewards, mask, uids("x", "x"))
    torch.testing.assert_close(per_sequence(advantages, mask), torch.tensor([0.75, -0.25]))


def test_gpg_centres_by_the_group_mean_and_rescales_by_the_non_zero_share() -> None:
    rewards, mask, scores, _ = grouped_batch(seed=6)
    nonzero = sum(score != 0 for score in scores)
    assert 0 < nonzero < len(scores)
    alpha = len(scores) / nonzero
    expected = [alpha * (scores[i] - statistics.mean(scores[j] for j in members(i))) for i in range(len(scores))]
    advantages, returns = compute_gpg_outcome_advantage(rewards, mask, GROUPS)
    torch.testing.assert_close(per_sequence(advantages, mask), torch.tensor(expected))
    torch.testing.assert_close(returns, advantages)


@pytest.mark.parametrize("norm_adv_by_std_in_grpo", [True, False])
def test_grpo_passk_with_and_without_std_normalisation(norm_adv_by_std_in_grpo: bool) -> None:
    generator = torch.Generator().manual_seed(7)
    scores = torch.rand(len(GROUPS), generator=generator).tolist()  # no ties
    rewards, mask = outcome_batch(scores, [2] * len(GROUPS))
    advantages, _ = compute_grpo_passk_outcome_advantage(rewards, mask, GROUPS, norm_adv_by_std_in_grpo)
    expected = [0.0] * len(scores)
    for uid in dict.fromkeys(GROUPS):
        group = [j for j, other in enumerate(GROUPS) if other == uid]
        best, second = sorted(group, key=lambda j: scores[j], reverse=True)[:2]
        gap = scores[best] - scores[second]
        std = statistics.stdev(scores[j] for j in group)
        expected[best] = gap / (std + 1e-6) if norm_adv_by_std_in_grpo else gap
    torch.testing.assert_close(per_sequence(advantages, mask), torch.tensor(expected))
