# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The CLI's mapping of a run's errors to one line and an exit status (verl/trainer/main.py), for the errors the
fast tests do not reach: a checkpoint that cannot be written, a dead worker, Ray's wrapped task errors, a bad row
found late, a stop on a signal. `run` is replaced by a function raising the error a run raises (the real exception
classes, Ray's included); nothing else is faked."""

import signal

import pytest
import ray

from verl.trainer import main as trainer_main
from verl.trainer.checkpointing import CheckpointSaveError, resume_hint
from verl.trainer.config import PPOConfig


def cli(monkeypatch, capsys, tmp_path, error: BaseException, config: PPOConfig | None = None) -> tuple[int, str]:
    """main() on a config whose run raises `error`; its exit status and stderr."""
    config = config or PPOConfig()
    config.trainer.save_checkpoint_path = str(tmp_path / "run")

    def failing_run(config: PPOConfig) -> None:  # stand-in for the run: raises what a run would
        raise error

    monkeypatch.setattr(trainer_main, "load_config_or_exit", lambda *args: config)
    monkeypatch.setattr(trainer_main, "run", failing_run)
    capsys.readouterr()
    rc = trainer_main.main([])
    return rc, capsys.readouterr().err


def test_a_checkpoint_that_cannot_be_written_is_one_line_and_exit_1(monkeypatch, capsys, tmp_path):
    rc, err = cli(monkeypatch, capsys, tmp_path, CheckpointSaveError("No space left on device writing step_3"))
    assert (rc, err) == (1, "Error: No space left on device writing step_3\n")


def test_a_dead_worker_is_one_line_with_where_the_same_command_resumes(monkeypatch, capsys, tmp_path):
    from verl.single_controller.ray import WorkerDiedError

    died = WorkerDiedError("Worker wg rank 1 died (killed, or out of memory); the run cannot continue.")
    rc, err = cli(monkeypatch, capsys, tmp_path, died)
    hint = resume_hint(str(tmp_path / "run"), True, None)
    assert rc == 1 and err == f"Error: {died}\n{hint}\n", err


def test_a_dead_reward_actor_is_one_line_and_exit_1(monkeypatch, capsys, tmp_path):
    rc, err = cli(monkeypatch, capsys, tmp_path, ray.exceptions.RayActorError())
    assert rc == 1 and err.startswith("Error: ") and "Traceback" not in err


def test_a_users_error_inside_rays_task_error_is_its_own_text(monkeypatch, capsys, tmp_path):
    """A reward function's error reaches the driver wrapped in Ray's RayTaskError (with the worker's traceback): the
    line is the user's message alone, then the resume hint."""
    from verl.rewards.function import RewardFunctionError

    cause = RewardFunctionError("compute_score raised KeyError: 'answer'")
    wrapped = ray.exceptions.RayTaskError("score", "Traceback (most recent call last):\n  ...", cause)
    rc, err = cli(monkeypatch, capsys, tmp_path, wrapped.as_instanceof_cause())
    assert rc == 1 and err.splitlines()[0] == "Error: compute_score raised KeyError: 'answer'", err
    assert len(err.splitlines()) == 2


def test_a_bad_row_found_when_its_batch_is_built_is_one_line(monkeypatch, capsys, tmp_path):
    from verl.data.dataset import DatasetRowError

    rc, err = cli(monkeypatch, capsys, tmp_path, DatasetRowError("train.jsonl, row 7: image a.png not found"))
    assert rc == 1 and err.splitlines()[0] == "Error: train.jsonl, row 7: image a.png not found", err


def test_a_stop_on_a_signal_exits_128_plus_its_number(monkeypatch, capsys, tmp_path):
    from verl.trainer.preemption import TrainingInterrupted

    stop = TrainingInterrupted(signal.SIGTERM, 3, str(tmp_path / "run" / "global_step_3"))
    rc, err = cli(monkeypatch, capsys, tmp_path, stop)
    assert rc == 128 + signal.SIGTERM and err == f"{stop}\n", err


def test_a_reward_model_on_several_nodes_keeps_ray_off_loopback(monkeypatch, capsys, tmp_path):
    """A reward model pool of 2 nodes needs a Ray reachable from another node, even with the actor on one."""
    seen = []
    real = trainer_main.keep_local_ray_on_loopback
    monkeypatch.setattr(trainer_main, "keep_local_ray_on_loopback", lambda nodes: seen.append(nodes) or real(nodes))
    config = PPOConfig()
    config.worker.reward.model.nnodes = 2
    cli(monkeypatch, capsys, tmp_path, CheckpointSaveError("x"), config)
    assert seen == [2]


def test_the_setup_errors_ray_is_stopped_only_when_the_run_started_it(monkeypatch):
    """Bad data found after Ray is up: the CLI stops the Ray the run started, but not one it joined (a notebook's)."""
    from verl.trainer import runner
    from verl.trainer.ray_setup import SetupError

    def run_ppo(config: PPOConfig) -> None:
        if not ray.is_initialized():
            ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
        raise SetupError("row 1 has no 'answer'")

    monkeypatch.setattr(runner, "run_ppo", run_ppo)
    try:
        with pytest.raises(SetupError):
            trainer_main.run(PPOConfig())
        assert not ray.is_initialized()
        ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
        with pytest.raises(SetupError):
            trainer_main.run(PPOConfig())
        assert ray.is_initialized()
    finally:
        ray.shutdown()


def test_a_cache_directory_that_cannot_be_written_exits_2_before_the_run(monkeypatch, capsys, tmp_path):
    """use_writable_dirs is replaced by one refusing as it does for a user's unwritable choice."""
    from verl.utils import writable_dirs

    def refuse(starts_ray: bool) -> None:
        raise writable_dirs.UnwritableDirectoryError("HF_HOME=/ro/hf cannot be written")

    monkeypatch.setattr(writable_dirs, "use_writable_dirs", refuse)
    rc, err = cli(monkeypatch, capsys, tmp_path, AssertionError("the run must not start"))
    assert (rc, err) == (2, "Error: HF_HOME=/ro/hf cannot be written\n")
