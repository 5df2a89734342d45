# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""worker.reward.run_in=driver: the reward scored in a background thread of the trainer's process, collected
through the trainer's own timeout check."""

import os
import threading
import time
from types import SimpleNamespace

import pytest
import torch

from verl.rewards.function import RewardFunctionError
from verl.rewards.local import LocalReward
from verl.rewards.manager import FunctionRewardManager
from verl.rewards.scoring import BatchScorer
from verl.trainer.config import ConfigError, PPOConfig, validate_config
from verl.trainer.ray_trainer import RayPPOTrainer
from verl.workers.config import RewardConfig


REWARD = """
import os
import threading
import time

def score(sample, target="yes"):
    if sample["response"] == "boom":
        raise ValueError("exploded")
    if sample["response"] == "late":
        raise TimeoutError("the grader's server did not answer")
    if sample["response"] == "hang":
        time.sleep(60)
    return {
        "overall": float(sample["response"] == target),
        "thread": float(threading.current_thread().name == "reward"),
        "pid": float(os.getpid()),
    }
"""


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory, tokenizer) -> str:
    path = tmp_path_factory.mktemp("tokenizer")
    tokenizer.save_pretrained(path)
    return str(path)


def trainer_state(timeout_s: float, runner: LocalReward | None = None) -> SimpleNamespace:
    config = SimpleNamespace(worker=SimpleNamespace(reward=RewardConfig(reward_function="reward.py:score")))
    config.worker.reward.timeout_s = timeout_s
    return SimpleNamespace(global_step=7, config=config, reward_fn=runner)


def collect(state: SimpleNamespace, runner: LocalReward, batch) -> tuple[torch.Tensor, dict[str, list[float]]]:
    """Score `batch` as the trainer does: launch, then collect through RayPPOTrainer._get_reward."""
    scorer = BatchScorer(state.config.worker.reward, None, runner, None, None, lambda ref, part: get(state, ref, part))
    return scorer.collect(batch, scorer.launch(batch))


def get(state: SimpleNamespace, ref, part: str):
    return RayPPOTrainer._get_reward(state, ref, part)


@pytest.mark.parametrize("num_cpus", [1, 2])
def test_scores_match_the_manager_in_a_background_thread(
    num_cpus, tokenizer_dir, tokenizer, make_batch, write_reward_file
):
    spec = f"{write_reward_file(REWARD)}:score"
    runner = LocalReward(RewardConfig(reward_function=spec, num_cpus=num_cpus), tokenizer_dir)
    try:
        batch = make_batch(["Q0", "Q1", "Q2"], ["yes", "no", "yes indeed"], stop=[True, True, False])
        scores, columns = collect(trainer_state(60.0), runner, batch)
        expected, expected_columns = FunctionRewardManager(
            RewardConfig(reward_function=spec), tokenizer
        ).compute_reward(batch)
        torch.testing.assert_close(scores, expected, rtol=0, atol=0)
        assert columns["overall"] == expected_columns["overall"] == [1.0, 0.0, 0.0]
        if num_cpus == 1:  # scored in the runner's thread of this process
            assert columns["thread"] == [1.0] * 3 and set(columns["pid"]) == {float(os.getpid())}
        else:  # scored by the parallel pool's processes
            assert float(os.getpid()) not in columns["pid"]
    finally:
        runner.close()


def test_errors_and_hangs_reach_the_trainer_named(tokenizer_dir, make_batch, write_reward_file):
    runner = LocalReward(RewardConfig(reward_function=f"{write_reward_file(REWARD)}:score"), tokenizer_dir)
    state = trainer_state(60.0)
    with pytest.raises(RewardFunctionError, match="raised ValueError on sample 1"):
        collect(state, runner, make_batch(["Q", "Q"], ["yes", "boom"]))
    # The function's own TimeoutError is its error, not the trainer's timeout.
    with pytest.raises(RewardFunctionError, match="raised TimeoutError on sample 0"):
        collect(state, runner, make_batch(["Q"], ["late"]))

    state = trainer_state(0.5, runner)
    start = time.monotonic()
    with pytest.raises(TimeoutError, match=r"reward.py:score did not score step 7's batch within .*=0.5 s") as info:
        collect(state, runner, make_batch(["Q"], ["hang"]))
    assert time.monotonic() - start < 10
    # the error shows where the function waits: the scoring thread's stack, down to the hanging line
    where = str(info.value).split("Where it was when the time ran out:\n")[1]
    assert where.startswith("Thread reward (most recent call last):") and "in score" in where, where
    assert where.rstrip().endswith("time.sleep(60)") and where.count("Thread ") == 1, where
    lines = where.splitlines()  # from the function on: no frame of the trainer, threading or Ray
    line = REWARD.splitlines().index("        time.sleep(60)") + 1
    assert (
        len(lines) == 3 and lines[1].startswith('  File "') and lines[1].endswith(f'reward.py", line {line}, in score')
    )
    hung = [thread for thread in threading.enumerate() if thread.name == "reward"]
    assert hung and all(thread.daemon for thread in hung)  # the process can still exit


def test_run_in_is_validated():
    config = PPOConfig()
    config.worker.reward.run_in = "process"
    with pytest.raises(ConfigError, match="worker.reward.run_in' is 'process'; choose one of: driver, actor"):
        validate_config(config)


def test_a_hang_in_the_pool_says_where_each_process_waits(tokenizer_dir, make_batch, write_reward_file):
    path = write_reward_file(REWARD)
    runner = LocalReward(RewardConfig(reward_function=f"{path}:score", num_cpus=2), tokenizer_dir)
    try:
        with pytest.raises(TimeoutError, match="did not score step 7's batch") as info:
            collect(trainer_state(10.0, runner), runner, make_batch(["Q", "Q"], ["hang", "hang"]))
        where = str(info.value).split("Where it was when the time ran out:\n")[1]
        assert where.startswith("Thread reward (most recent call last):"), where  # the trainer's side: the pool
        processes = where.split("Reward pool process ")[1:]
        assert len(processes) == 2, where  # each worker, in the function: faulthandler's lines, innermost first
        line = REWARD.splitlines().index("        time.sleep(60)") + 1
        assert all(process.splitlines()[1].strip() == f'File "{path}", line {line} in score' for process in processes)
    finally:
        runner.close()
