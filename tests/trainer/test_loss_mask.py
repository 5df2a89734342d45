# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Which response tokens the actor trains on (`RayPPOTrainer._actor_update_batch`): all of them, the rollout
correction's `rollout_loss_mask`, and without the truncated responses under algorithm.mask_truncated_responses; the
batch itself keeps every token for the step's metrics."""

import pytest
import torch

from verl.protocol import DataProto
from verl.trainer.config import PPOConfig
from verl.trainer.metrics import compute_data_metrics
from verl.trainer.ray_trainer import RayPPOTrainer


def trainer(mask_truncated: bool) -> RayPPOTrainer:
    """A driver with only what `_actor_update_batch` reads (no workers)."""
    config = PPOConfig()
    config.algorithm.mask_truncated_responses = mask_truncated
    driver = RayPPOTrainer.__new__(RayPPOTrainer)
    driver.config = config
    return driver


def rollout(correction: bool) -> DataProto:
    response_mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 1]])
    tensors = {
        "response_mask": response_mask,
        "rollout_truncated": torch.tensor([True, False, False]),
    }
    if correction:  # the rollout correction masked one token of the last response
        tensors["rollout_loss_mask"] = response_mask * torch.tensor([1, 1, 1, 0])
    return DataProto.from_dict(tensors=tensors)


@pytest.mark.parametrize("correction", [False, True])
def test_truncated_responses_leave_the_actors_loss_only_when_asked(correction):
    batch = rollout(correction)
    kept = batch.batch["rollout_loss_mask"] if correction else batch.batch["response_mask"]
    update = trainer(mask_truncated=False)._actor_update_batch(batch)
    assert torch.equal(update.batch["response_mask"], kept)
    update = trainer(mask_truncated=True)._actor_update_batch(batch)
    assert update.batch["response_mask"].tolist() == [[0, 0, 0, 0], kept[1].tolist(), kept[2].tolist()]
    assert torch.equal(batch.batch["response_mask"][0], torch.ones(4, dtype=torch.long))  # the batch keeps them


def test_the_truncated_share_is_logged():
    batch = rollout(correction=False)
    batch.batch["responses"] = torch.zeros(3, 4, dtype=torch.long)
    batch.batch["attention_mask"] = torch.cat([torch.ones(3, 2, dtype=torch.long), batch.batch["response_mask"]], -1)
    for key in ("token_level_scores", "token_level_rewards", "advantages", "returns"):
        batch.batch[key] = torch.zeros(3, 4)
    metrics = compute_data_metrics(batch, use_critic=False)
    assert metrics["response_length/truncated_ratio"] == pytest.approx(1 / 3)
    assert metrics["response_length/clip_ratio"] == pytest.approx(2 / 3)  # it counts the full-width responses
    # an episode whose environment tokens (response mask 0) filled the rest of the budget reached it too
    batch.batch["response_mask"][1] = torch.tensor([1, 0, 0, 1])
    batch.batch["attention_mask"][1] = 1
    assert compute_data_metrics(batch, use_critic=False)["response_length/clip_ratio"] == pytest.approx(1.0)


def test_a_dataset_column_named_env_is_not_taken_for_an_episode_count():
    """A dataset's own env_* column of text passes through to the batch (it failed the step's metrics after its
    update)."""
    import numpy as np

    from verl.trainer.metrics import compute_env_metrics

    batch = rollout(correction=False)
    batch.non_tensor_batch["env_name"] = np.array(["gsm8k", "gsm8k", "math"], dtype=object)
    assert compute_env_metrics(batch) == {}
    batch.non_tensor_batch["env_tool_calls"] = np.array([1.0, np.nan, 3.0], dtype=object)  # some workers lack it
    assert compute_env_metrics(batch) == {"env/tool_calls/mean": 2.0}
    batch.non_tensor_batch["env_solved"] = np.array([np.nan] * 3, dtype=object)  # no kept episode reported it
    assert compute_env_metrics(batch) == {"env/tool_calls/mean": 2.0}  # left out (it was NaN)


def test_evaluate_means_an_episode_number_over_the_episodes_that_report_it_as_training_does():
    """`solved` reported by one of two episodes: training logs env/solved/mean 1.0; evaluate printed 0.5."""
    from verl.envs.evaluate import summarize

    summary = summarize([{"row": 0, "turns": 2, "solved": 1.0}, {"row": 1, "turns": 4, "bad": float("nan")}], [])
    assert summary == {"episodes": 2, "turns/mean": 3.0, "solved/mean": 1.0}


def test_the_critics_explained_variance_is_over_response_tokens_and_left_out_when_returns_are_constant():
    """One formula (core_algos.explained_variance); constant returns gave 1 - Var[R - V] / 1e-5 (-2.5e4 here)."""
    batch = rollout(correction=False)
    batch.batch["responses"] = torch.zeros(3, 4, dtype=torch.long)
    batch.batch["attention_mask"] = torch.cat([torch.ones(3, 2, dtype=torch.long), batch.batch["response_mask"]], -1)
    for key in ("token_level_scores", "token_level_rewards", "advantages"):
        batch.batch[key] = torch.zeros(3, 4)
    returns = torch.tensor([[1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 99.0, -99.0], [4.0, 3.0, 2.0, 1.0]])
    batch.batch["returns"] = returns
    batch.batch["values"] = returns + torch.tensor([0.5, -0.5, 0.5, -0.5])
    batch.batch["values"][1, 2:] = 1000.0  # padding (response mask 0): far off, not counted
    tokens = batch.batch["response_mask"].bool()
    residual, kept = (returns - batch.batch["values"])[tokens], returns[tokens]
    expected = 1 - residual.var(unbiased=False) / kept.var(unbiased=False)
    metrics = compute_data_metrics(batch, use_critic=True)
    assert metrics["critic/vf_explained_var"] == pytest.approx(expected.item()) and 0 < expected < 1
    batch.batch["returns"] = torch.ones(3, 4)
    assert "critic/vf_explained_var" not in compute_data_metrics(batch, use_critic=True)
