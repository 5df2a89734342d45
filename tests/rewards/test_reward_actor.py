# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The reward Ray actor, for real: a local Ray instance, the tiny tokenizer on disk, a parallel sequential function."""

import os
import time

import pytest
import ray
import torch

from verl.rewards.function import RewardFunctionError, RewardFunctionLoadError
from verl.rewards.manager import FunctionRewardManager
from verl.rewards.ray_actor import ActorReward, create_reward_actor
from verl.utils.module_loading import user_error_message
from verl.workers.config import RewardConfig


pytestmark = pytest.mark.slow

REWARD = """
import os

def score(sample, target="yes"):
    if sample["response"] == "boom":
        raise ValueError("exploded")
    return {
        "overall": float(sample["response"] == target) - 0.01 * sample["response_length"],
        "difficulty": float(sample["extra_info"]["difficulty"]),
        "pid": float(os.getpid()),
    }
"""


@pytest.fixture(scope="module")
def ray_local(local_ray):
    """The suite's shared Ray (tests/conftest.py)."""


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory, tokenizer) -> str:
    path = tmp_path_factory.mktemp("tokenizer")
    tokenizer.save_pretrained(path)
    return str(path)


def test_actor_scores_asynchronously_with_a_process_pool(
    ray_local, tokenizer_dir, tokenizer, make_batch, write_reward_file
) -> None:
    config = RewardConfig(
        reward_function=f"{write_reward_file(REWARD)}:score", reward_function_kwargs={"target": "yes"}, num_cpus=2
    )
    batch = make_batch(
        ["Q0", "Q1", "Q2", "Q3"],
        ["yes", "no", "yes indeed", "yes"],
        stop=[True, True, False, True],
        non_tensors={"uid": ["a", "a", "b", "b"], "difficulty": [1, 2, 3, 4], "ground_truth": ["yes"] * 4},
    )
    actor = create_reward_actor(config, tokenizer_dir)
    try:
        future = actor.compute_reward.remote(batch)  # the trainer does other work here and collects later
        reward_tensor, metrics = ray.get(future, timeout=120)

        expected_tensor, expected = FunctionRewardManager(
            RewardConfig(reward_function=config.reward_function, reward_function_kwargs={"target": "yes"}), tokenizer
        ).compute_reward(batch)
        torch.testing.assert_close(reward_tensor, expected_tensor, rtol=0, atol=0)
        assert metrics["overall"] == expected["overall"]
        assert metrics["difficulty"] == [1.0, 2.0, 3.0, 4.0]
        actor_pid = ray.get(actor.__ray_call__.remote(lambda self: os.getpid()))
        assert actor_pid not in metrics["pid"]  # scored in the actor's worker processes, not in the actor itself

        bad_batch = make_batch(["Q", "Q"], ["yes", "boom"], non_tensors={"difficulty": [1, 2]})
        with pytest.raises(RewardFunctionError, match="raised ValueError on sample 1") as info:
            ray.get(actor.compute_reward.remote(bad_batch), timeout=120)
        assert info.value.sample_index == 1
        # through a pool process and Ray, the message a person sees still ends where the function raised
        message = user_error_message(info.value)
        assert message.startswith("reward function 'score' in ") and "ray::" not in message, message
        assert message.endswith('raise ValueError("exploded")\nValueError: exploded'), message
    finally:
        ray.get(actor.close.remote())
        ray.kill(actor)


def test_a_hung_function_says_where_it_waits_and_does_not_hold_up_the_close(
    ray_local, tokenizer_dir, make_batch, write_reward_file
) -> None:
    path = write_reward_file("""
        import time

        def score(sample):
            time.sleep(600)  # hangs
            return {"overall": 1.0}
    """)
    reward = ActorReward(create_reward_actor(RewardConfig(reward_function=f"{path}:score"), tokenizer_dir))
    try:
        assert reward.where() == ""  # nothing is being scored
        pending = reward.submit(make_batch(["Q"], ["a"]))
        deadline, where = time.monotonic() + 60, ""
        while "time.sleep" not in where and time.monotonic() < deadline:  # answered while the batch is scored
            time.sleep(0.2)
            where = reward.where()
        assert "in score" in where and where.rstrip().endswith("time.sleep(600)  # hangs"), where
        assert ray.wait([pending], timeout=0)[0] == []  # still scoring
    finally:
        start = time.monotonic()
        reward.close()
    assert time.monotonic() - start < 10  # the close did not wait behind the hung call


def test_bad_spec_fails_in_the_caller(ray_local, tokenizer_dir, write_reward_file) -> None:
    config = RewardConfig(reward_function=f"{write_reward_file(REWARD)}:compute_score")
    with pytest.raises(RewardFunctionLoadError, match="has no function 'compute_score'"):
        create_reward_actor(config, tokenizer_dir)
