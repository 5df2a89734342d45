# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
import random

import numpy as np
import pytest
import torch

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
    with pytest.raises(RuntimeError, match="set trainer.device=cpu"):
        device.set_device_type("cuda")


def test_cpu_device_uses_gloo_and_cpu_no_ops():
    assert device.set_device_type("cpu") == "cpu"
    assert device.is_cpu() and device.get_local_device(3) == torch.device("cpu")
    assert device.get_dist_backend() == "gloo" and device.get_dist_backend("cuda") == "cpu:gloo,cuda:nccl"
    device.synchronize()
    device.empty_cache()
    stats = device.memory_stats()
    assert list(stats) == ["cpu_max_rss_gb"] and stats["cpu_max_rss_gb"] > 0


def test_init_distributed_names_missing_environment(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    device.set_device_type("cpu")
    with pytest.raises(RuntimeError, match="RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT"):
        device.init_distributed()


def test_rng_state_round_trip_covers_python_numpy_torch():
    device.set_device_type("cpu")
    device.manual_seed(7)
    state = device.get_rng_state()
    first = (random.random(), np.random.rand(), torch.rand(2))
    device.manual_seed(123)
    device.set_rng_state(state)
    second = (random.random(), np.random.rand(), torch.rand(2))
    assert first[:2] == second[:2] and torch.equal(first[2], second[2])
