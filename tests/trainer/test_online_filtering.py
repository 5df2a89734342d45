# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The generation rounds every rollout mode fills a step with (`RayPPOTrainer._fill_batch`) and the admission that
counts a dropped group as consumed (`Admission`), on hand-made rounds; the trainers run them end to end in
test_e2e.py, test_async_e2e.py and test_disaggregated_e2e.py."""

import itertools

import numpy as np
import pytest
import torch

from verl.protocol import DataProto
from verl.trainer.async_trainer import Admission
from verl.trainer.checkpointing import CheckpointTracker
from verl.trainer.config import PPOConfig
from verl.trainer.metrics import new_metric_store
from verl.trainer.ray_trainer import OnlineFilteringError, RayPPOTrainer


N = 2
MIXED, FLAT = (0.0, 1.0), (1.0, 1.0)


def trainer(rollout_batch_size: int, online_filtering: bool, max_try: int = 20) -> RayPPOTrainer:
    """A driver with only what `_fill_batch` reads (no workers)."""
    config = PPOConfig()
    config.data.rollout_batch_size = rollout_batch_size
    config.worker.rollout.n = N
    config.algorithm.online_filtering = online_filtering
    config.trainer.max_try_make_batch = max_try
    driver = RayPPOTrainer.__new__(RayPPOTrainer)
    driver.config, driver.global_step, driver.flat_reward_steps = config, 1, 0
    driver.ckpt_tracker = CheckpointTracker()
    return driver


def rounds(*groups_per_round: tuple[tuple[float, ...], ...]):
    """A generate_round that returns the given rounds, scored (as streamed rewards are), then fails."""
    uids = itertools.count()
    it = iter(groups_per_round)

    def generate_round() -> DataProto:
        groups = next(it)
        names = [f"g{next(uids)}" for _ in groups]
        rewards = [reward for group in groups for reward in group]
        return DataProto.from_dict(
            tensors={"token_level_scores": torch.tensor(rewards).unsqueeze(-1)},
            non_tensors={
                "uid": np.array([name for name in names for _ in range(N)], dtype=object),
                "reward/overall": np.array(rewards, dtype=object),
            },
        )

    return generate_round


def uids(batch: DataProto) -> list[str]:
    return list(dict.fromkeys(batch.non_tensor_batch["uid"]))


def test_filtered_rounds_top_the_step_up_and_drop_the_surplus():
    metrics = new_metric_store()
    generate = rounds((MIXED, FLAT), (FLAT, FLAT), (MIXED, MIXED))
    batch = trainer(rollout_batch_size=2, online_filtering=True)._fill_batch(generate, metrics)
    assert uids(batch) == ["g0", "g4"]  # g5, the last round's surplus, is dropped
    assert metrics["online_filtering/kept_ratio"] == [0.5, 0.0, 1.0]
    # every generated response (as EasyR1 logs them): the policy's accuracy, not the kept groups' (about 0.5)
    assert metrics["reward/overall"] == [0.0, 1.0, 1.0, 1.0] + [1.0] * 4 + [0.0, 1.0, 0.0, 1.0]


def test_rounds_fill_the_step_without_filtering_too():
    """data.mini_rollout_batch_size below rollout_batch_size: rounds until the step is full, as in EasyR1."""
    batch = trainer(rollout_batch_size=3, online_filtering=False)._fill_batch(
        rounds((FLAT, MIXED), (MIXED, FLAT)), new_metric_store()
    )
    assert uids(batch) == ["g0", "g1", "g2"]


def test_max_try_make_batch_bounds_the_rounds():
    driver = trainer(rollout_batch_size=2, online_filtering=True, max_try=2)
    first = r"kept 1 of 2 prompts after 2 generation rounds .* in step 1;.* or set it <= 0 for no limit.$"
    with pytest.raises(OnlineFilteringError, match=first):
        driver._fill_batch(rounds((MIXED, FLAT), (FLAT, FLAT), (MIXED, MIXED)), new_metric_store())


def test_a_filter_key_the_reward_does_not_return_is_named():
    """It used to stop the run with a KeyError's stack trace at the first step; now the CLI's error for online
    filtering, with the scores there are."""
    driver = trainer(rollout_batch_size=2, online_filtering=True)
    driver.config.algorithm.filter_key = "acc"
    with pytest.raises(OnlineFilteringError, match=r"filter_key='acc' is not a score .* returns \['overall'\]"):
        driver._fill_batch(rounds((MIXED, MIXED)), new_metric_store())


def test_a_dropped_group_is_consumed_like_a_trained_one():
    """At most max_staleness + 1 rounds in flight, whatever happened to the groups taken out."""
    admission = Admission(round_size=4, max_staleness=1)
    assert admission.rounds_to_admit(0) == 2
    assert admission.rounds_to_admit(8) == 0
    assert admission.rounds_to_admit(4) == 1  # a round taken (trained or dropped): one more admitted
    assert admission.rounds_to_admit(6) == 0  # never more than (max_staleness + 1) x round_size in flight


def test_the_reward_models_metrics_are_logged_when_online_filtering_scores_the_batch():
    """A reward model's `reward_model/*` came only with the reward phase, which online filtering's own scoring skips;
    the reward model here is an object with the worker group's `submit` (the real one runs in test_model_rewards)."""
    from types import SimpleNamespace

    from verl.rewards.scoring import BatchScorer
    from verl.trainer.metrics import reduce_metrics

    class RewardModelGroup:
        def submit(self, method, batch):
            scores = torch.tensor([0.0, 1.0, 1.0, 1.0])
            metrics = {"reward_model/truncated_ratio": 0.25, "reward_model/score_mean": 0.75}
            output = DataProto.from_dict(tensors={"rm_scores": scores}, meta_info={"metrics": metrics})
            return SimpleNamespace(get=lambda: output)

    driver = trainer(rollout_batch_size=2, online_filtering=True)
    reward = SimpleNamespace(rule_weight=1.0, model=SimpleNamespace(weight=1.0), judge=SimpleNamespace(weight=1.0))
    driver.scorer = BatchScorer(reward, None, None, RewardModelGroup(), None, lambda handle, part: handle)
    responses = torch.ones(4, 3, dtype=torch.long)
    tensors = {"responses": responses, "response_mask": responses, "attention_mask": torch.ones(4, 5).long()}
    batch = DataProto.from_dict(tensors=tensors, non_tensors={"uid": np.array(["a", "a", "b", "b"], dtype=object)})
    metrics = new_metric_store()
    kept = driver._filter_groups(batch, metrics)
    assert uids(kept) == ["a"] and len(kept) == 2  # the mixed group
    assert reduce_metrics(metrics)["reward_model/truncated_ratio"] == 0.25


def test_a_filter_key_some_routes_do_not_return_is_named():
    """With reward routes, a key only some routes return is NaN on the others' rows: their groups were dropped every
    step without a word (and a round of only those prompts stopped the run naming the key as unknown)."""
    driver = trainer(rollout_batch_size=2, online_filtering=True)
    driver.config.algorithm.filter_key = "accuracy"
    route_key = driver.config.worker.reward.route_key

    def generate_round() -> DataProto:
        batch = rounds((MIXED, MIXED))()
        batch.non_tensor_batch["reward/accuracy"] = np.array([0.0, 1.0, float("nan"), float("nan")], dtype=object)
        batch.non_tensor_batch[route_key] = np.array(["math", "math", "chat", "chat"], dtype=object)
        return batch

    with pytest.raises(
        OnlineFilteringError, match=r"filter_key='accuracy' is not a score of the rows of .* \['chat'\]"
    ):
        driver._fill_batch(generate_round, new_metric_store())

    def scattered() -> DataProto:  # a value missing now and then (a judge's unparsed grade): that group is dropped
        batch = rounds((MIXED, MIXED))()
        batch.non_tensor_batch["reward/accuracy"] = np.array([0.0, 1.0, 1.0, float("nan")], dtype=object)
        batch.non_tensor_batch[route_key] = np.array(["math", "math", "chat", "chat"], dtype=object)
        return batch

    driver.config.data.rollout_batch_size = 1
    assert uids(driver._fill_batch(scattered, new_metric_store())) == ["g0"]
