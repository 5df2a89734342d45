# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The driver names the reward function when a step's rewards are all equal or its scoring outlasts the timeout."""

import logging
from types import SimpleNamespace

import torch

from verl.trainer.ray_trainer import RayPPOTrainer
from verl.workers.config import RewardConfig


def driver(step: int = 3, reward: RewardConfig | None = None) -> SimpleNamespace:
    reward = reward or RewardConfig(reward_function="rewards/task.py:score")
    return SimpleNamespace(
        flat_reward_steps=0,
        global_step=step,
        config=SimpleNamespace(worker=SimpleNamespace(reward=reward)),
        reward_fn=None,
    )


def scores(values: list[float]) -> torch.Tensor:
    out = torch.zeros(len(values), 4)
    out[:, -1] = torch.tensor(values)
    return out


def flat(values: list[float]) -> tuple[torch.Tensor, torch.Tensor]:
    """Scores and the all-zero advantages a group-relative estimator gives them when they are equal."""
    return scores(values), torch.zeros(len(values), 4)


def test_flat_rewards_are_warned_about_with_the_function_name(caplog):
    state = driver()
    with caplog.at_level(logging.WARNING, logger="verl.trainer.ray_trainer"):
        RayPPOTrainer._check_reward_spread(state, *flat([0.0, 1.0, 0.0, 0.0]))
        assert state.flat_reward_steps == 0 and not caplog.records
        RayPPOTrainer._check_reward_spread(state, *flat([0.0] * 8))
    assert state.flat_reward_steps == 1
    assert "Step 3: all 8 samples got the same reward 0 from reward function rewards/task.py:score" in caplog.text
    assert "every advantage is 0, so this step does not change the policy" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="verl.trainer.ray_trainer"):
        for _ in range(8):  # throttled: the 2nd..9th flat steps are counted, not printed
            RayPPOTrainer._check_reward_spread(state, *flat([1.0] * 8))
        assert not caplog.records
        RayPPOTrainer._check_reward_spread(state, *flat([1.0] * 8))
    assert "(10 such step(s) so far)" in caplog.text


def test_flat_rewards_with_advantages_from_a_critic_or_a_kl_penalty_are_not_warned_about(caplog):
    """GAE's values (or a KL penalty in the reward) give equal rewards non-zero advantages: the step trains."""
    state = driver()
    values, _ = flat([0.0] * 8)
    with caplog.at_level(logging.WARNING, logger="verl.trainer.ray_trainer"):
        RayPPOTrainer._check_reward_spread(state, values, torch.full((8, 4), -0.1))
    assert state.flat_reward_steps == 0 and not caplog.records


def test_flat_rewards_name_a_reward_model_or_judge_when_there_is_no_function(caplog):
    reward = RewardConfig()
    reward.model.model_path, reward.judge.model_path = "models/rm", "models/judge"
    state = driver(reward=reward)
    with caplog.at_level(logging.WARNING, logger="verl.trainer.ray_trainer"):
        RayPPOTrainer._check_reward_spread(state, *flat([0.5] * 4))
    assert "from reward model models/rm + judge models/judge (" in caplog.text
    assert "None" not in caplog.text


def test_a_hanging_reward_function_is_cut_off_and_named():
    import time

    import pytest
    import ray

    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:

        @ray.remote
        def hangs() -> None:
            time.sleep(60)

        @ray.remote
        def scores_fast() -> str:
            return "scored"

        state = driver(step=5)
        # A result that arrives within the timeout is returned. The timeout is generous here: the first task also
        # starts a Ray worker process, which took over a second on a loaded CI machine.
        state.config.worker.reward.timeout_s = 60.0
        assert RayPPOTrainer._get_reward(state, scores_fast.remote(), "rule") == "scored"
        state.config.worker.reward.timeout_s = 1.0
        start = time.monotonic()
        with pytest.raises(TimeoutError, match=r"rewards/task.py:score did not score step 5's batch within .*=1 s"):
            RayPPOTrainer._get_reward(state, hangs.remote(), "rule")
        assert time.monotonic() - start < 10
        # a hung judge is named as the judge, not as the functions (which may have finished, or be routes)
        state.config.worker.reward.judge.model_path = "models/judge"
        state.config.worker.reward.reward_function, state.config.worker.reward.routes = None, {"math": "m.py:f"}
        with pytest.raises(TimeoutError, match=r"^The judge models/judge did not score step 5's batch within"):
            RayPPOTrainer._get_reward(state, hangs.remote(), "judge")
        with pytest.raises(TimeoutError, match=r"^The routed reward functions math: m.py:f did not score step 5's"):
            RayPPOTrainer._get_reward(state, hangs.remote(), "rule")
    finally:
        ray.shutdown()


def test_mfu_is_model_flops_over_time_and_measured_peak():
    from verl.protocol import DataProto
    from verl.trainer.metrics import compute_mfu_metrics
    from verl.utils.device import measure_peak_flops

    mask = torch.ones(4, 250, dtype=torch.long)  # 1000 tokens, of which 400 responses'
    batch = DataProto.from_dict(tensors={"attention_mask": mask, "response_mask": mask[:, 150:]})
    # the LM head scores the response tokens only: counting it on the prompts overstated MFU
    flops = {"actor": {"flops_per_token": 6e6, "head_flops_per_token": 1e6, "peak_flops": 1e12, "ppo_epochs": 2}}
    metrics = compute_mfu_metrics(batch, {"update_actor": 0.5}, 2, flops)
    assert metrics == {"perf/mfu_actor": (6e6 * 1000 + 1e6 * 400) * 2 / 0.5 / (2 * 1e12)}
    assert compute_mfu_metrics(batch, {}, 2, flops) == {}  # no update this step (critic warm-up)
    rng = torch.get_rng_state()
    peak = measure_peak_flops(size=128, repeats=2)
    assert 1e7 < peak < 1e14 and measure_peak_flops() == peak  # measured once, then cached
    assert torch.equal(torch.get_rng_state(), rng)  # a resumed run's random streams are not shifted by it
