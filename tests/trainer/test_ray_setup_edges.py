# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""More of starting (or joining) Ray for a run (verl/trainer/ray_setup.py), without starting one: the workers'
environment under `ray job submit` and with a relative PYTHONPATH, the logical CPUs a run asks for, and the addresses
refused before ray.init."""

import json
import os
import re

import pytest
import ray

from verl.trainer import ray_setup
from verl.trainer.config import PPOConfig
from verl.trainer.ray_setup import JOB_CONFIG_ENV, SetupError, start_ray, worker_env


def test_a_submitted_jobs_own_variables_are_left_to_its_runtime_env(monkeypatch):
    """Ray refuses a worker runtime_env that sets a variable the job's runtime_env sets too."""
    monkeypatch.setenv("HF_HOME", "/driver/hf")
    monkeypatch.setenv("NCCL_DEBUG", "INFO")
    job = {"runtime_env": {"env_vars": {"HF_HOME": "/job/hf", "TOKENIZERS_PARALLELISM": "true"}}}
    monkeypatch.setenv(JOB_CONFIG_ENV, json.dumps(job))
    env = worker_env("cpu")
    assert "HF_HOME" not in env and "TOKENIZERS_PARALLELISM" not in env
    assert env["NCCL_DEBUG"] == "INFO"  # the driver's setting over the default
    monkeypatch.setenv(JOB_CONFIG_ENV, "not json")
    assert worker_env("cpu")["HF_HOME"] == "/driver/hf"


def test_a_relative_pythonpath_reaches_the_workers_absolute(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(JOB_CONFIG_ENV, raising=False)
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)  # set by earlier tests in this process
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["src", "", "/abs/lib"]))
    env = worker_env("cuda")
    assert env["PYTHONPATH"] == os.pathsep.join([str(tmp_path / "src"), "/abs/lib"])
    assert env[ray_setup.DRIVER_CWD_ENV] == str(tmp_path)
    assert "VLLM_ENABLE_V1_MULTIPROCESSING" not in env and env["TORCH_NCCL_AVOID_RECORD_STREAMS"] == "1"


def test_a_run_asks_for_a_cpu_per_process_rollout_engine_and_reward_actor(monkeypatch):
    """The spy replaces start_ray (this project's function) to read what init_ray asks of it; no Ray starts."""
    asked = []
    monkeypatch.setattr(
        ray_setup, "start_ray", lambda device, cpu_slots, grace, profile=False: asked.append(cpu_slots)
    )
    config = PPOConfig()
    config.trainer.nnodes, config.trainer.n_gpus_per_node = 1, 2
    config.worker.reward.num_cpus = 3
    ray_setup.init_ray(config, "cpu")
    config.worker.rollout.mode, config.worker.rollout.nnodes, config.worker.rollout.n_gpus_per_node = (
        "disaggregated",
        1,
        2,
    )
    ray_setup.init_ray(config, "cpu")
    reward_pool = config.worker.reward.model.nnodes * config.worker.reward.model.n_gpus_per_node
    assert asked == [2 + reward_pool + 2 * 3, 2 + reward_pool + 2 + 2 * 3]


CLIENT_ADDRESS = "is a Ray Client or job-submission address"
NO_PORT = "is no HOST:PORT: give the address `ray start"


@pytest.mark.parametrize(
    ("address", "said"),
    [
        *((address, CLIENT_ADDRESS) for address in ("https://head:8265", "ray://head:10001", "http://head:8265")),
        # a head's name without its port (the port forgotten) was Ray's `ValueError: Invalid address format`
        *((address, NO_PORT) for address in ("headnode", "10.0.0.1", "head:port", ":6379")),
    ],
)
def test_an_address_ray_cannot_join_is_one_error_before_ray_starts(monkeypatch, address, said):
    monkeypatch.setenv("RAY_ADDRESS", address)
    if ray.is_initialized():
        pytest.skip("this process is connected to a Ray already")
    with pytest.raises(SetupError, match=rf"RAY_ADDRESS={address} {re.escape(said)}"):
        start_ray("cpu", 1, 5.0)
    assert not ray.is_initialized()


@pytest.mark.slow
def test_a_local_cpu_ray_has_a_cpu_per_process_and_outlives_a_lost_store_by_the_grace(monkeypatch):
    """More worker processes than cores: the local Ray still gives each a logical CPU (else their actors wait forever);
    its processes wait the run's grace beyond Ray's default before they end after losing the control store."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv(ray_setup.GCS_LOSS_ENV, raising=False)
    monkeypatch.delenv(ray_setup.TASK_EVENTS_ENV, raising=False)
    if ray.is_initialized():
        pytest.skip("this process is connected to a Ray already")
    slots = (os.cpu_count() or 1) + 3
    try:
        start_ray("cpu", slots, 7.0)
        assert ray.cluster_resources()["CPU"] == slots
        assert os.environ[ray_setup.GCS_LOSS_ENV] == str(7 + ray_setup.RAY_GCS_LOSS_S)
    finally:
        ray.shutdown()


def test_each_local_ray_of_one_process_gets_its_own_run_s_settings(monkeypatch):
    """A second local Ray in one process (a notebook's next run after ray.shutdown(), the CLI's next run after a failed
    setup) gets its own run's timeline and grace: what the first start wrote is not taken for the user's setting (a
    run with trainer.ray_timeline got no task events, an empty timeline). A value the user sets still wins. ray.init is
    replaced by a recorder of the environment Ray's processes would inherit (no Ray starts)."""
    names = (ray_setup.TASK_EVENTS_ENV, ray_setup.PROFILING_ENV, ray_setup.GCS_LOSS_ENV)
    seen = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kwargs: seen.append([os.environ.get(name) for name in names]))
    monkeypatch.setattr(ray_setup, "start_reaper", lambda: None)
    monkeypatch.setattr(ray_setup, "watch_control_store", lambda: None)
    monkeypatch.setattr(ray_setup, "_ray_defaults_set", {})
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    for name in (*names, ray_setup.PRESTART_ENV):
        monkeypatch.setenv(name, "")  # restored (unset) after the test
        monkeypatch.delenv(name)
    start_ray("cpu", 1, 5.0, profile=False)
    start_ray("cpu", 1, 30.0, profile=True)
    start_ray("cpu", 1, 5.0, profile=False)
    lost = ray_setup.RAY_GCS_LOSS_S
    interval = str(ray_setup.TASK_EVENTS_INTERVAL_MS)
    assert seen == [["0", None, str(5 + lost)], [interval, "1", str(30 + lost)], ["0", None, str(5 + lost)]]
    monkeypatch.setenv(ray_setup.TASK_EVENTS_ENV, "500")
    monkeypatch.setenv(ray_setup.PROFILING_ENV, "1")
    start_ray("cpu", 1, 5.0, profile=True)
    start_ray("cpu", 1, 5.0, profile=False)
    assert seen[3:] == [["500", "1", str(5 + lost)], ["500", "1", str(5 + lost)]]
