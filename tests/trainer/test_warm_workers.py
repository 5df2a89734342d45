# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""verl/trainer/warm_workers.py on a real local Ray: a CPU run's workers are forked from the server, which has
imported torch and vLLM; a worker whose environment differs in a variable read at import starts plainly. Fails when
a Ray release changes how it starts workers (what the raylet puts in their environment, `py_executable`)."""

import os
import sys

import psutil
import pytest
import ray

from verl.trainer import ray_setup, warm_workers


@ray.remote(num_cpus=0)
class Probe:
    def __init__(self) -> None:
        self.preloaded = "vllm" in sys.modules and "torch" in sys.modules  # before this actor imported either

    def report(self) -> dict:
        import torch

        parent = psutil.Process(os.getppid()).cmdline()
        return {
            "preloaded": self.preloaded,
            "from_server": "verl.utils.warm_python" in parent,
            "rank": os.environ.get("RANK"),
            "threads": torch.get_num_threads(),
        }


@pytest.fixture(scope="module")
def warm_ray():
    if ray.is_initialized():
        ray.shutdown()
    with pytest.MonkeyPatch.context() as patch:  # this process's environment is as it was afterwards
        patch.setenv("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "1"))
        patch.delenv("RAY_ADDRESS", raising=False)
        ray_setup.start_ray("cpu", 2, 300.0)
        yield
        ray.shutdown()


def test_workers_start_as_forks_of_the_server_with_their_own_rank(warm_ray):
    probes = [Probe.options(runtime_env={"env_vars": {"RANK": str(rank)}}).remote() for rank in range(2)]
    reports = ray.get([probe.report.remote() for probe in probes], timeout=180)
    assert reports == [
        {"preloaded": True, "from_server": True, "rank": str(rank), "threads": int(os.environ["OMP_NUM_THREADS"])}
        for rank in range(2)
    ]


def test_a_worker_with_another_thread_count_starts_plainly_and_keeps_it(warm_ray):
    threads = int(os.environ["OMP_NUM_THREADS"]) + 1
    probe = Probe.options(runtime_env={"env_vars": {"OMP_NUM_THREADS": str(threads)}}).remote()
    assert ray.get(probe.report.remote(), timeout=180) == {
        "preloaded": False,
        "from_server": False,
        "rank": None,
        "threads": threads,
    }


def test_off_on_cuda_without_a_thread_count_or_when_asked(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert warm_workers.warm_enabled("cpu") and not warm_workers.warm_enabled("cuda")
    monkeypatch.setenv("VERL_WARM_PYTHON", "0")
    assert not warm_workers.warm_enabled("cpu")
    monkeypatch.delenv("VERL_WARM_PYTHON")
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert not warm_workers.warm_enabled("cpu")


def test_without_a_temp_folder_for_the_socket_the_workers_start_plainly(monkeypatch):
    import tempfile

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setattr(tempfile, "tempdir", "/nonexistent/temp")
    runtime_env = {"env_vars": {"A": "1"}}
    assert warm_workers.with_warm_workers(runtime_env, "cpu") == runtime_env
    monkeypatch.undo()
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert "py_executable" in warm_workers.with_warm_workers(runtime_env, "cpu")
    assert warm_workers.with_warm_workers(runtime_env, "cuda") == runtime_env
