# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The metrics of a training step as users plot them (verl/trainer/metrics.py): lengths, scores, advantages over the
response mask only, environment tokens, timings, throughput and MFU, and how values reduce. Each expected figure is
worked out from the small batch below; a mutation audit changed each line these pin and no test failed."""

import numpy as np
import pytest
import torch

from verl.protocol import DataProto
from verl.trainer import metrics as trainer_metrics


def step_batch():
    """3 rows, 2 prompt + 4 response columns; row 2 has environment tokens (attention 1, response mask 0)."""
    response_mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 1]])
    attention = torch.cat(
        [torch.ones(3, 2, dtype=torch.long), torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 1]])], -1
    )
    scores = torch.tensor([[0.0, 0, 0, 1], [0, 1, 0, 0], [0, 0, 0, 0]])
    tensors = {
        "responses": torch.zeros(3, 4, dtype=torch.long),
        "response_mask": response_mask,
        "attention_mask": attention,
        "token_level_scores": scores,
        "token_level_rewards": scores - 0.1,
        "advantages": torch.tensor([[1.0, 1, 1, 1], [1, 1, 5, 5], [1, 5, 5, 1]]),
        "returns": torch.tensor([[1.0, 2, 3, 4], [1, 2, 50, 50], [4, 50, 50, 1]]),
        "values": torch.tensor([[1.5, 2, 3, 4], [1, 2, -50, -50], [4, -50, -50, 1]]),
    }
    return DataProto.from_dict(tensors=tensors)


def test_a_validation_metric_is_averaged_over_its_rows():
    assert trainer_metrics.reduce_metrics({"val/max_len_penalty": [0.0, -1.0]}) == {"val/max_len_penalty": -0.5}


def test_a_reward_key_no_row_applies_to_is_left_out_not_nan():
    assert trainer_metrics.reduce_metrics(
        trainer_metrics.applicable_values({"reward/pass_rate": [float("nan"), float("nan")], "a": [1.0]})
    ) == {"a": 1.0}


def test_append_metrics_takes_lists_scalars_arrays_and_skips_none():
    store = trainer_metrics.new_metric_store()
    trainer_metrics.append_metrics(store, [{"a": [1.0, 2.0]}, None, {"a": 3.0, "b": np.array([4.0])}])
    assert dict(store) == {"a": [1.0, 2.0, 3.0], "b": [4.0]}


def test_a_step_whose_responses_are_all_masked_logs_no_advantage_and_zero_length():
    batch = step_batch()
    batch.batch["response_mask"] = torch.zeros(3, 4, dtype=torch.long)  # every response masked out
    metrics = trainer_metrics.compute_data_metrics(batch, use_critic=False)
    assert "critic/advantages/mean" not in metrics and metrics["response_length/mean"] == 0.0


def test_the_step_logs_the_shortest_response_and_lowest_score():
    metrics = trainer_metrics.compute_data_metrics(step_batch(), use_critic=False)
    assert metrics["response_length/min"] == 2.0 and metrics["critic/score/min"] == 0.0


def test_prompt_lengths_and_their_clip_ratio_come_from_the_prompt_columns():
    metrics = trainer_metrics.compute_data_metrics(step_batch(), use_critic=False)
    assert metrics["prompt_length/mean"] == 2.0 and metrics["prompt_length/max"] == 2.0
    assert metrics["prompt_length/clip_ratio"] == 1.0  # every prompt fills its 2 columns


def test_response_length_counts_the_models_tokens_not_the_environments():
    assert trainer_metrics.compute_data_metrics(step_batch(), use_critic=False)[
        "response_length/mean"
    ] == pytest.approx(8 / 3)


def test_score_and_reward_are_each_rows_sum():
    metrics = trainer_metrics.compute_data_metrics(step_batch(), use_critic=False)
    assert metrics["critic/score/mean"] == pytest.approx(2 / 3) and metrics["critic/score/max"] == 1.0
    assert metrics["critic/rewards/mean"] == pytest.approx((0.6 + 0.6 - 0.4) / 3)


def test_advantages_returns_and_values_are_taken_over_the_response_mask_only():
    metrics = trainer_metrics.compute_data_metrics(step_batch(), use_critic=True)
    assert metrics["critic/advantages/max"] == 1.0  # the 5s sit on masked tokens
    assert metrics["critic/returns/max"] == 4.0
    assert metrics["critic/values/min"] == 1.0


def test_environment_figures_reach_the_step_metrics():
    batch = step_batch()
    batch.non_tensor_batch["env_turns"] = np.array([1.0, 1.0, 2.0], dtype=object)
    metrics = trainer_metrics.compute_data_metrics(batch, use_critic=False)
    assert metrics["env/turns/mean"] == pytest.approx(4 / 3)


def test_environment_tokens_are_the_valid_tokens_the_model_did_not_write():
    batch = step_batch()
    batch.non_tensor_batch["env_turns"] = np.array([1.0, 1.0, 2.0], dtype=object)
    # valid response tokens 4, 2, 4; the model's 4, 2, 2: row 2 has 2 environment tokens
    assert trainer_metrics.compute_env_metrics(batch)["env/env_tokens/mean"] == pytest.approx(2 / 3)


def test_timing_metrics_in_seconds_and_per_token():
    batch = step_batch()  # 8 response tokens, 16 tokens in all
    timing = {"gen": 0.8, "update_actor": 1.6, "step": 3.0}
    assert trainer_metrics.compute_timing_metrics(batch, timing) == pytest.approx(
        {
            "timing_s/gen": 0.8,
            "timing_s/update_actor": 1.6,
            "timing_s/step": 3.0,
            "timing_per_token_ms/gen": 100.0,
            "timing_per_token_ms/update_actor": 100.0,
        }
    )


def test_no_per_token_time_without_response_tokens():
    batch = step_batch()
    batch.batch["response_mask"] = torch.zeros(3, 4, dtype=torch.long)
    assert "timing_per_token_ms/gen" not in trainer_metrics.compute_timing_metrics(batch, {"gen": 1.0})


def test_throughput_is_tokens_per_second_per_device():
    batch = step_batch()  # 16 tokens
    assert trainer_metrics.compute_throughput_metrics(batch, {"step": 2.0}, 2) == {
        "perf/total_num_tokens": 16.0,
        "perf/time_per_step": 2.0,
        "perf/throughput": 4.0,
    }
    assert trainer_metrics.compute_throughput_metrics(batch, {}, 2) == {
        "perf/total_num_tokens": 16.0,
        "perf/time_per_step": 0.0,
    }


def test_without_a_response_mask_the_head_flops_count_every_token():
    batch = DataProto.from_dict(tensors={"attention_mask": torch.ones(2, 5, dtype=torch.long)})
    flops = {"actor": {"flops_per_token": 0.0, "head_flops_per_token": 1.0, "peak_flops": 1.0, "ppo_epochs": 1}}
    assert trainer_metrics.compute_mfu_metrics(batch, {"update_actor": 1.0}, 1, flops) == {"perf/mfu_actor": 10.0}


def test_skipped_rows_lower_the_actors_mfu():
    mask = torch.ones(4, 250, dtype=torch.long)
    batch = DataProto.from_dict(tensors={"attention_mask": mask, "response_mask": mask[:, 150:]})
    flops = {"actor": {"flops_per_token": 6e6, "head_flops_per_token": 1e6, "peak_flops": 1e12, "ppo_epochs": 2}}
    metrics = trainer_metrics.compute_mfu_metrics(batch, {"update_actor": 0.5}, 2, flops, skipped={"actor": 0.25})
    assert metrics["perf/mfu_actor"] == pytest.approx((6e6 * 1000 + 1e6 * 400) * 2 * 0.75 / 0.5 / (2 * 1e12))


def test_a_key_naming_both_min_and_max_is_averaged():
    assert trainer_metrics.reduce_metrics({"x/min_max_gap": [1.0, 3.0]}) == {
        "x/min_max_gap": 2.0
    }  # both words: a mean
