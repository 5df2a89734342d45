# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
import os
import random

import numpy as np
import pytest
import torch

from tests.workers.fsdp_testing import init_rank, spawn
from verl.utils import device


@pytest.fixture(autouse=True)
def restore_device_type():
    saved = device._device_type
    yield
    device._device_type = saved


def test_auto_follows_cuda_availability_and_bad_values_fail():
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert device.resolve_device_type("auto") == expected
    assert device.resolve_device_type("cpu") == "cpu"
    with pytest.raises(ValueError, match="trainer.device='tpu'"):
        device.resolve_device_type("tpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on machines without a GPU")
def test_cuda_without_gpu_fails_with_the_fix():
    from verl.utils.config import ConfigError

    with pytest.raises(ConfigError, match="set trainer.device=cpu"):
        device.set_device_type("cuda")


def test_cpu_device_uses_gloo_and_cpu_no_ops():
    assert device.set_device_type("cpu") == "cpu"
    assert device.is_cpu() and device.get_local_device(3) == torch.device("cpu")
    assert device.get_dist_backend() == "gloo" and device.get_dist_backend("cuda") == "cpu:gloo,cuda:nccl"
    device.synchronize()
    device.empty_cache()
    stats = device.memory_metrics()  # no CUDA figures; no group: this process's own
    assert sorted(stats) == ["perf/cpu_max_rss_gb", "perf/cpu_memory_used_gb"]
    assert 0 < stats["perf/cpu_max_rss_gb"] < stats["perf/cpu_memory_used_gb"]


def _memory_metrics_rank(rank: int, world_size: int, port: int) -> None:
    import resource

    import torch.distributed as dist

    init_rank(rank, world_size, port)
    # rank 1's peak outgrows the other's by ~0.25 GiB (bytes filled, so that its pages are resident)
    ballast = b"x" * ((256 * 2**20 + resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024) if rank == 1 else 0)
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 2**30
    stats = device.memory_metrics()
    peaks = [None] * world_size
    dist.all_gather_object(peaks, own)
    both = [None] * world_size
    dist.all_gather_object(both, stats)
    assert both[0] == both[1] and stats["perf/cpu_max_rss_gb"] >= max(peaks) > min(peaks) + 0.2, (peaks, both)
    del ballast
    dist.destroy_process_group()


def test_memory_metrics_are_the_largest_over_the_ranks():
    spawn(_memory_metrics_rank, 2)


def test_init_distributed_names_missing_environment(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    device.set_device_type("cpu")
    with pytest.raises(RuntimeError, match="RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT"):
        device.init_distributed()


def test_environment_defaults_set_only_what_is_missing_and_take_it_away_again(monkeypatch):
    monkeypatch.setenv("VERL_TEST_KEPT", "mine")
    monkeypatch.delenv("VERL_TEST_ADDED", raising=False)
    with device.environment_defaults({"VERL_TEST_KEPT": "theirs", "VERL_TEST_ADDED": "1"}):
        assert (os.environ["VERL_TEST_KEPT"], os.environ["VERL_TEST_ADDED"]) == ("mine", "1")
    assert os.environ["VERL_TEST_KEPT"] == "mine" and "VERL_TEST_ADDED" not in os.environ
    with pytest.raises(KeyError), device.environment_defaults({"VERL_TEST_ADDED": "1"}):
        raise KeyError("the block failed")
    assert "VERL_TEST_ADDED" not in os.environ


def test_rng_state_round_trip_covers_python_numpy_torch():
    device.set_device_type("cpu")
    state = device.get_rng_state()
    first = (random.random(), np.random.rand(), torch.rand(2))
    random.seed(123), np.random.seed(123), torch.manual_seed(123)
    device.set_rng_state(state)
    second = (random.random(), np.random.rand(), torch.rand(2))
    assert first[:2] == second[:2] and torch.equal(first[2], second[2])


def test_seeded_rng_draws_dropout_masks_from_its_key_and_leaves_the_stream_alone():
    """The RL and SFT updates run under seeded_rng(seed, rank, step): their dropout drew from the process's default
    generator, the same masks on every rank and for every seed (torch seeds it alike in every process)."""
    device.set_device_type("cpu")
    dropout = torch.nn.Dropout(0.5)

    def masks(*key):
        with device.seeded_rng(*key):
            return dropout(torch.ones(64)) != 0

    torch.manual_seed(7)
    outside = torch.rand(3)
    torch.manual_seed(7)
    step = masks(1, 0, 5)
    assert torch.equal(torch.rand(3), outside)  # the stream outside is where it was
    assert torch.equal(masks(1, 0, 5), step)  # a resumed run's step draws what the unbroken run's drew
    others = [masks(1, 1, 5), masks(2, 0, 5), masks(1, 0, 6)]  # another rank, seed, step
    assert all(not torch.equal(mask, step) for mask in others)


def test_one_process_group_is_a_world_of_one_and_leaves_nothing_behind(monkeypatch):
    import os

    import torch.distributed as dist

    names = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "VERL_DIST_INIT_METHOD", "MASTER_PORT")
    for name in names:  # setenv first: delenv of an unset variable records nothing to restore
        monkeypatch.setenv(name, "x")
        monkeypatch.delenv(name)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "7")  # a value of the caller's, put back on exit
    device.set_device_type("cpu")
    assert not dist.is_initialized()
    with device.one_process_group(timeout_seconds=60):
        assert (dist.get_rank(), dist.get_world_size(), dist.get_backend()) == (0, 1, "gloo")
        store = os.environ["VERL_DIST_INIT_METHOD"]
        assert store.startswith("file://") and "MASTER_PORT" not in os.environ  # no port opened
        tensor = torch.ones(2)
        dist.all_reduce(tensor)
        assert tensor.tolist() == [1.0, 1.0]
        with device.one_process_group():  # a group that is up is used as it is
            assert dist.get_world_size() == 1
        assert dist.is_initialized()
    assert not dist.is_initialized()
    assert {name: os.environ.get(name) for name in names} == dict.fromkeys(names) | {"LOCAL_WORLD_SIZE": "7"}
    assert not os.path.exists(os.path.dirname(store.removeprefix("file://")))  # the store's folder is gone
