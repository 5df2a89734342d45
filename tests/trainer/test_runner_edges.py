# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""More of the runner (verl/trainer/runner.py) without Ray: the resource check at its bounds, the prompts in flight a
resume keeps, the folder's lock released when a run fails, and what the run's end frees. A mutation audit changed
each line these pin and no other test failed."""

import logging

import pytest
import torch

from verl.protocol import DataProto
from verl.single_controller.ray.resource import NodeResources
from verl.trainer import runner
from verl.trainer.async_trainer import IN_FLIGHT_FILE
from verl.trainer.config import PPOConfig
from verl.trainer.ray_setup import SetupError
from verl.trainer.run_lock import LOCK_FILE


def _cluster(monkeypatch, cpus: float, gpus: float = 0.0) -> None:
    monkeypatch.setattr(runner, "cluster_nodes", lambda: [NodeResources("n1", "10.0.0.2", cpus, gpus)])
    monkeypatch.delenv("RAY_ADDRESS", raising=False)


def _two_process_run() -> PPOConfig:
    config = PPOConfig()
    config.trainer.nnodes, config.trainer.n_gpus_per_node, config.trainer.device = 1, 2, "cpu"
    config.worker.reward.reward_function = "reward.py:score"
    return config


def test_a_run_that_takes_every_cpu_of_the_cluster_fits(monkeypatch):
    config = _two_process_run()  # 2 worker processes, the reward in the driver
    _cluster(monkeypatch, cpus=2)
    runner.check_run_fits(config, "cpu")
    _cluster(monkeypatch, cpus=1)
    with pytest.raises(SetupError, match=r"needs 2 CPU at once .* but the Ray cluster has 1"):
        runner.check_run_fits(config, "cpu")


def test_the_reward_actor_and_the_judge_take_cpus_of_their_own(monkeypatch):
    config = _two_process_run()
    config.worker.reward.run_in, config.worker.reward.num_cpus = "actor", 1
    _cluster(monkeypatch, cpus=2)
    with pytest.raises(SetupError, match=r"the reward actor \(worker.reward.num_cpus\): 1"):
        runner.check_run_fits(config, "cpu")
    config.worker.reward.run_in = "driver"
    config.worker.reward.judge.model_path, config.worker.reward.judge.num_cpus = "judge-model", 1  # a judge
    with pytest.raises(SetupError, match=r"the judge \(worker.reward.judge.num_cpus\): 1"):
        runner.check_run_fits(config, "cpu")


def test_a_judges_share_of_a_gpu_needs_a_whole_gpu_no_pool_takes(monkeypatch):
    config = _two_process_run()
    config.worker.reward.judge.model_path, config.worker.reward.judge.num_gpus = "judge-model", 0.5  # a judge
    config.worker.reward.judge.num_cpus = 0
    _cluster(monkeypatch, cpus=8, gpus=2)
    with pytest.raises(
        SetupError, match=r"needs 3 GPU at once .*the judge \(worker.reward.judge.num_gpus, rounded up\): 1"
    ):
        runner.check_run_fits(config, "cuda")


def _in_flight(tmp_path, count: int) -> str:
    step = tmp_path / "global_step_2"
    step.mkdir(parents=True, exist_ok=True)
    torch.save(DataProto.from_dict(non_tensors={"uid": [str(i) for i in range(count)]}), step / IN_FLIGHT_FILE)
    return str(step)


def test_a_resume_keeps_as_many_prompts_in_flight_as_the_run_keeps_and_no_more(tmp_path, caplog):
    config = PPOConfig()
    config.trainer.nnodes, config.trainer.n_gpus_per_node = 1, 2
    config.data.rollout_batch_size, config.worker.rollout.max_staleness = 2, 1
    config.worker.rollout.mode = "colocated"  # up to (1 + 1) rounds of 2 prompts in flight
    with caplog.at_level(logging.WARNING, logger="verl.trainer.runner"):
        runner._check_in_flight(config, _in_flight(tmp_path, 4))
    assert caplog.text == ""  # kept, and nothing said: this mode regenerates them
    with pytest.raises(ValueError, match=r"holds 6 prompts in flight, more than this run keeps"):
        runner._check_in_flight(config, _in_flight(tmp_path, 6))


def test_prompts_in_flight_padded_to_another_prompt_length_are_refused(tmp_path):
    """The saved prompts are padded to the saved run's data.max_prompt_length: resumed with another, the first step
    joined them with the loader's and failed in torch.cat ("Sizes of tensors must match"), after every worker had
    started. Refused, naming the key; mode=sync drops them, so it may change there."""
    config = PPOConfig()
    config.trainer.nnodes, config.trainer.n_gpus_per_node = 1, 2
    config.data.rollout_batch_size, config.data.max_prompt_length = 2, 48
    config.worker.rollout.mode, config.worker.rollout.max_staleness = "colocated", 1
    step = tmp_path / "global_step_2"
    step.mkdir()
    ids = torch.zeros(4, 64, dtype=torch.long)
    rows = {"input_ids": ids, "attention_mask": ids, "position_ids": ids}
    torch.save(DataProto.from_dict(rows, non_tensors={"uid": list("abcd")}), step / IN_FLIGHT_FILE)
    with pytest.raises(ValueError, match=r"its 4 prompts in flight are padded to data.max_prompt_length=64, and this"):
        runner._check_in_flight(config, str(step))
    config.data.max_prompt_length = 64
    runner._check_in_flight(config, str(step))
    config.data.max_prompt_length, config.worker.rollout.mode, config.worker.rollout.max_staleness = 48, "sync", 0
    runner._check_in_flight(config, str(step))


def test_a_failed_run_frees_its_checkpoint_folder(tmp_path, monkeypatch):
    def failing(config, signals, record):
        raise RuntimeError("a worker died")

    monkeypatch.setattr(runner, "_train", failing)
    config = PPOConfig()
    config.trainer.save_checkpoint_path = str(tmp_path / "run")
    with pytest.raises(RuntimeError, match="a worker died"):
        runner.run_ppo(config)
    assert (tmp_path / "run" / LOCK_FILE).read_text() == ""  # released: no holder recorded


def test_a_checkpoint_folder_that_cannot_be_made_is_a_setup_error(tmp_path):
    (tmp_path / "a_file").write_text("")
    config = PPOConfig()
    config.trainer.save_checkpoint_path = str(tmp_path / "a_file" / "run")
    with pytest.raises(SetupError, match=r"cannot be used: Not a directory"):
        runner.run_ppo(config)


class _Recorder:
    def __init__(self, name: str, calls: list, fail: bool = False) -> None:
        self.name, self.calls, self.fail = name, calls, fail

    def __getattr__(self, method: str):
        def call(*args, **kwargs):
            self.calls.append(f"{self.name}.{method}")
            if self.fail:
                raise RuntimeError(f"{self.name}.{method} failed")

        return call


def test_the_runs_end_frees_the_groups_last_made_first():
    calls: list[str] = []
    groups = runner.WorkerGroups(actor=None)
    groups.owned = [(_Recorder(f"group{i}", calls), _Recorder(f"pool{i}", calls)) for i in (1, 2)]
    groups.shutdown()
    assert calls == ["group2.shutdown", "pool2.remove", "group1.shutdown", "pool1.remove"]


def test_a_group_that_cannot_start_gives_its_devices_back(monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(runner, "RayResourcePool", lambda **kwargs: _Recorder("pool", calls))

    def failing_group(*args, **kwargs):
        raise RuntimeError("placement group timed out")

    monkeypatch.setattr(runner, "RayWorkerGroup", failing_group)
    groups = runner.WorkerGroups(actor=None)
    with pytest.raises(RuntimeError, match="placement group timed out"):
        runner._new_group(groups, [2], "cpu", "run", None)
    assert calls == ["pool.remove"] and groups.owned == []


def test_a_reward_that_fails_to_close_still_lets_the_judge_stop(monkeypatch, caplog):
    stopped: list[str] = []
    monkeypatch.setattr(runner, "stop_actor", stopped.append)
    with caplog.at_level(logging.WARNING, logger="verl.trainer.runner"):
        runner._release(_Recorder("reward", [], fail=True), "judge")
    assert stopped == ["judge"] and "Closing the reward's processes failed." in caplog.text


def test_prompts_in_flight_that_are_not_whole_rounds_are_refused_at_staleness_zero(tmp_path):
    """A run one round ahead saved 2 prompts in flight (rounds of 2); resumed at max_staleness=0 with rounds of 4, a
    round admits whole rounds only while none is in flight: the first round held 2 prompts and quota 4, and every
    engine failed it ("A request loop holding 1 groups cannot complete 2 of them") under Ray's traceback. Refused
    before Ray starts; one round ahead the next round tops them up, and whole rounds resume at 0."""
    config = PPOConfig()
    config.trainer.nnodes, config.trainer.n_gpus_per_node = 1, 2
    config.data.rollout_batch_size, config.worker.rollout.mode = 4, "colocated"
    with pytest.raises(ValueError, match=r"its 2 prompts in flight are not whole rounds of data.rollout_batch_size=4"):
        runner._check_in_flight(config, _in_flight(tmp_path, 2))
    config.worker.rollout.mode = "disaggregated"
    with pytest.raises(ValueError, match=r"with worker.rollout.max_staleness=0 a round admits new prompts only"):
        runner._check_in_flight(config, _in_flight(tmp_path, 2))
    config.worker.rollout.max_staleness = 1
    assert len(runner._check_in_flight(config, _in_flight(tmp_path, 2))) == 2
    config.worker.rollout.max_staleness, config.data.mini_rollout_batch_size = 0, 2
    assert len(runner._check_in_flight(config, _in_flight(tmp_path, 2))) == 2
