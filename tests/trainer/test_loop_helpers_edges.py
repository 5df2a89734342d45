# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The fit loop's helpers that need no workers (verl/trainer/ray_trainer.py): how a rollout is joined to its prompts,
what the engines get, the step count, the data order across epochs, the phase timer, the reward columns a step logs,
and the save of the step before a failed one. A mutation audit changed each line these pin and no test failed."""

import time

import numpy as np
import pytest
import torch

from verl.protocol import DataProto
from verl.trainer import ray_trainer
from verl.trainer.config import PPOConfig
from verl.trainer.metrics import new_metric_store


def _prompts() -> DataProto:
    return DataProto.from_dict(
        tensors={
            "input_ids": torch.tensor([[1, 2], [3, 4]]),
            "attention_mask": torch.ones(2, 2, dtype=torch.long),
            "position_ids": torch.tensor([[0, 1], [0, 1]]),
        },
        non_tensors={
            "ground_truth": ["a", "b"],
            "raw_prompt_ids": [[1, 2], [3, 4]],
            "multi_modal_data": [{"images": ["x.png"]}, {"images": ["y.png"]}],
            "data_source": ["math", "code"],
        },
    )


def test_a_rollout_joins_each_prompts_n_samples_to_that_prompt():
    prompts = _prompts()
    gen = ray_trainer.split_generation_inputs(prompts)
    assert "input_ids" not in prompts.batch.keys()  # the engines return prompt + response
    assert set(gen.batch.keys()) == {"input_ids", "attention_mask", "position_ids"}
    assert set(gen.non_tensor_batch) == {"raw_prompt_ids", "multi_modal_data"}  # what the engine reads
    output = DataProto.from_dict(  # the engine's rows: prompt a's two samples, then prompt b's
        tensors={"responses": torch.tensor([[10], [11], [20], [21]])},
        non_tensors={"raw_prompt_ids": [[9], [9], [9], [9]]},  # echoed back: the prompts' own are kept
    )
    joined = ray_trainer.join_rollout(prompts, output, 2)
    assert list(joined.non_tensor_batch["ground_truth"]) == ["a", "a", "b", "b"]
    assert joined.batch["responses"][:, 0].tolist() == [10, 11, 20, 21]
    assert [list(ids) for ids in joined.non_tensor_batch["raw_prompt_ids"]] == [[1, 2], [1, 2], [3, 4], [3, 4]]
    assert "multi_modal_data" in joined.non_tensor_batch


def test_an_environments_images_replace_the_prompts_media():
    prompts = _prompts()
    ray_trainer.split_generation_inputs(prompts)
    output = DataProto.from_dict(
        tensors={"responses": torch.zeros(2, 1, dtype=torch.long)},
        non_tensors={"multi_modal_inputs": [{"pixel_values": 1}, {"pixel_values": 2}]},
    )
    joined = ray_trainer.join_rollout(prompts, output, 1)
    assert "multi_modal_data" not in joined.non_tensor_batch and "multi_modal_inputs" in joined.non_tensor_batch


def test_a_multi_turn_environment_gets_every_column_of_the_row():
    gen = ray_trainer.split_generation_inputs(_prompts(), all_columns=True)
    assert set(gen.non_tensor_batch) == {"ground_truth", "raw_prompt_ids", "multi_modal_data", "data_source"}


def test_a_phase_timed_twice_in_a_step_counts_both_times():
    """The reward is timed where it starts and where the step waits for it: timing_s/reward is their sum."""
    timing: dict[str, float] = {}
    for _ in range(2):
        with ray_trainer.timer("reward", timing):
            time.sleep(0.05)
    assert timing["reward"] >= 0.1


def test_a_reward_key_that_applies_to_no_row_of_a_route_is_left_out_of_its_mean():
    batch = DataProto.from_dict(
        tensors={"responses": torch.zeros(3, 1)},
        non_tensors={"reward/accuracy": [1.0, float("nan"), 0.0], "uid": ["a", "b", "c"]},
    )
    metrics = new_metric_store()
    ray_trainer._append_reward_metrics(metrics, batch)
    assert dict(metrics) == {"reward/accuracy": [1.0, 0.0]}


@pytest.mark.parametrize(
    "batches, mini, rollout, epochs, max_steps, steps",
    [
        (5, None, 2, 3, None, 15),  # one step a batch
        (5, 2, 4, 2, None, 4),  # two generation rounds a step: 10 prompts make 2 steps of 4 (the tail dropped)
        (1, 2, 4, 3, None, 3),  # fewer prompts than a step: at least one step an epoch
        (5, None, 2, 3, 7, 7),  # trainer.max_steps decides
    ],
)
def test_the_run_counts_its_steps_from_the_epochs_or_max_steps(batches, mini, rollout, epochs, max_steps, steps):
    config = PPOConfig()
    config.data.mini_rollout_batch_size, config.data.rollout_batch_size = mini, rollout
    config.trainer.total_epochs, config.trainer.max_steps = epochs, max_steps
    assert ray_trainer.count_training_steps(config, batches) == steps


def _driver(**attributes) -> ray_trainer.RayPPOTrainer:
    """A driver with only what the tested method reads (no workers)."""
    driver = ray_trainer.RayPPOTrainer.__new__(ray_trainer.RayPPOTrainer)
    driver.config = PPOConfig()
    driver.__dict__.update(attributes)
    return driver


def test_the_next_batch_starts_a_new_epoch_when_one_ends():
    driver = _driver(train_dataloader=["b1", "b2"], _data_iter=None)
    assert [driver._next_batch() for _ in range(5)] == ["b1", "b2", "b1", "b2", "b1"]


@pytest.mark.parametrize(
    "failed_step, last_saved, saved",
    [(3, 1, [(2, {"position": "before step 3"})]), (3, 2, []), (1, -1, [])],
    ids=["saves_the_step_before", "already_saved", "nothing_trained_yet"],
)
def test_a_step_failed_in_the_users_code_saves_the_step_before_once(tmp_path, failed_step, last_saved, saved):
    writes: list[tuple[int, dict]] = []
    driver = _driver(global_step=failed_step, _loader_state_to_save=None)
    driver.config.trainer.save_checkpoint_path = str(tmp_path)
    driver._save_checkpoint = lambda score: writes.append((driver.global_step, driver._loader_state_to_save))
    driver._save_before_failed_step({"position": "before step 3"}, last_saved)
    assert writes == saved and driver._loader_state_to_save is None


def test_messages_name_each_reward_part_as_what_it_is():
    reward = PPOConfig().worker.reward
    reward.reward_function, reward.model.model_path, reward.judge.model_path = "r.py:score", "rm", "jm"
    assert ray_trainer.reward_parts(reward) == {
        "rule": "reward function r.py:score",
        "model": "reward model rm",
        "judge": "judge jm",
    }


def test_a_batch_that_does_not_split_over_the_ranks_is_left_in_its_order():
    class Group:
        world_size = 2

    batch = DataProto.from_dict(
        tensors={"attention_mask": torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 0, 0]])},
        non_tensors={"uid": np.array(["a", "b", "c"], dtype=object)},
    )
    metrics = new_metric_store()
    _driver(actor_rollout_ref_wg=Group())._balance_batch(batch, metrics)
    assert list(batch.non_tensor_batch["uid"]) == ["a", "b", "c"] and dict(metrics) == {}
