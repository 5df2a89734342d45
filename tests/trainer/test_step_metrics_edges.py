# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""More of a step's logged figures (verl/trainer/metrics.py): the critic's values, every model phase's time per token,
the MFU of a critic-warmup step, and dataset columns that only look like an environment's. Each expected figure is
worked out from the batch of tests/trainer/test_step_metrics.py; a mutation audit changed each line these pin and no
other test failed."""

import numpy as np
import pytest

from tests.trainer.test_step_metrics import step_batch
from verl.trainer import metrics as trainer_metrics


def test_the_critics_values_are_its_own_not_the_returns():
    # response-mask tokens of `values`: 1.5, 2, 3, 4 | 1, 2 | 4, 1 (the returns there: 1, 2, 3, 4 | 1, 2 | 4, 1)
    metrics = trainer_metrics.compute_data_metrics(step_batch(), use_critic=True)
    assert metrics["critic/values/mean"] == pytest.approx(18.5 / 8)
    assert metrics["critic/returns/mean"] == pytest.approx(18.0 / 8)


@pytest.mark.parametrize("phase", ["ref", "old", "values", "adv", "update_critic", "update_actor"])
def test_every_model_phase_is_timed_per_token_over_all_tokens(phase):
    batch = step_batch()  # 16 tokens (prompts and responses), 8 of them the model's
    metrics = trainer_metrics.compute_timing_metrics(batch, {phase: 1.6})
    assert metrics == pytest.approx({f"timing_s/{phase}": 1.6, f"timing_per_token_ms/{phase}": 100.0})


def test_a_critic_warmup_step_logs_the_critics_mfu_alone():
    """During trainer.critic_warmup the actor does not update: no update_actor time, and no actor MFU (not a
    division by zero)."""
    batch = step_batch()  # 16 tokens, 8 response tokens
    info = {"flops_per_token": 1.0, "head_flops_per_token": 0.0, "peak_flops": 4.0, "ppo_epochs": 1}
    flops = {"actor": dict(info), "critic": dict(info)}
    metrics = trainer_metrics.compute_mfu_metrics(batch, {"update_critic": 2.0}, 1, flops)
    assert metrics == {"perf/mfu_critic": pytest.approx(16.0 / 2.0 / 4.0)}


def test_a_dataset_column_that_only_starts_with_env_is_no_environment_figure():
    batch = step_batch()
    batch.non_tensor_batch["environment"] = np.array([1.0, 2.0, 3.0], dtype=object)  # a dataset's own number column
    assert trainer_metrics.compute_env_metrics(batch) == {}
    batch.non_tensor_batch["env_turns"] = np.array([1.0, 2.0, 3.0], dtype=object)
    assert set(trainer_metrics.compute_env_metrics(batch)) == {"env/turns/mean", "env/env_tokens/mean"}
