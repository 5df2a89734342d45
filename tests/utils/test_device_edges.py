# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Edges of verl.utils.device: a second init in a process whose group is up, torchrun's group joined as it is, the
timeout that bounds a wait for a dead peer, and the matmul peak that MFU divides by."""

import os
from datetime import timedelta
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist

from tests.workers.fsdp_testing import free_port, init_rank, spawn
from verl.utils import device


@pytest.fixture(autouse=True)
def cpu_device():
    saved = device._device_type
    device.set_device_type("cpu")
    yield
    device._device_type = saved


@pytest.fixture
def init_calls(monkeypatch):
    """The keyword arguments of each dist.init_process_group call (the group is still made)."""
    calls = []
    real = dist.init_process_group

    def recording(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(device.dist, "init_process_group", recording)
    return calls


def _clear_world(monkeypatch) -> None:
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "VERL_DIST_INIT_METHOD"):
        monkeypatch.setenv(name, "x")
        monkeypatch.delenv(name)


def test_a_second_init_in_a_process_whose_group_is_up_is_a_no_op(monkeypatch, init_calls):
    """The second role of a colocated worker process calls init_distributed again: it keeps the group it has. The
    group's timeout is the one asked for (gloo's 30-minute default would turn a dead peer into a long hang)."""
    _clear_world(monkeypatch)
    with device.one_process_group(timeout_seconds=42):
        group = dist.group.WORLD
        device.init_distributed(timeout_seconds=5)
        assert dist.group.WORLD is group and dist.get_world_size() == 1
    assert len(init_calls) == 1 and init_calls[0]["timeout"] == timedelta(seconds=42)


def test_under_torchrun_the_process_joins_torchruns_group(monkeypatch, init_calls):
    """With RANK set (torchrun), one_process_group joins the group the environment names (env://), not a file store
    of its own: every rank of torchrun's world meets there."""
    _clear_world(monkeypatch)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    with device.one_process_group(timeout_seconds=30):
        assert "VERL_DIST_INIT_METHOD" not in os.environ and "LOCAL_WORLD_SIZE" not in os.environ
        assert dist.get_world_size() == 1
    assert not dist.is_initialized()
    assert len(init_calls) == 1 and "init_method" not in init_calls[0]
    assert init_calls[0]["timeout"] == timedelta(seconds=30)


def test_the_peak_is_twice_the_cube_over_the_fastest_repeat(monkeypatch):
    """A size x size matmul is 2 size^3 FLOPs; the peak divides them by the fastest of the repeats (timed here by a
    stand-in clock: 0.5 s, 0.25 s and 1 s), and is measured once per process."""
    clock = iter([0.0, 0.5, 10.0, 10.25, 20.0, 21.0])
    monkeypatch.setattr(device, "time", SimpleNamespace(perf_counter=lambda: next(clock)))
    monkeypatch.setattr(device, "_peak_flops", None)
    assert device.measure_peak_flops(size=8, repeats=3) == 2 * 8**3 / 0.25
    assert device.measure_peak_flops(size=16, repeats=3) == 2 * 8**3 / 0.25  # cached: the clock is not read again
    assert torch.get_default_dtype() == torch.float32


def test_the_backend_follows_the_device_type_this_process_set(monkeypatch):
    """init_distributed asks get_dist_backend() without arguments: a CUDA process gets NCCL for its device tensors."""
    monkeypatch.setattr(device, "_device_type", "cuda")  # no GPU needed: nothing is started
    assert device.get_dist_backend() == "cpu:gloo,cuda:nccl"
    monkeypatch.setattr(device, "_device_type", "cpu")
    assert device.get_dist_backend() == "gloo"


def _memory_rank(rank: int, world_size: int, port: int) -> None:
    import resource

    init_rank(rank, world_size, port)
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 2**30
    stats = device.memory_metrics()
    peaks = [None] * world_size
    dist.all_gather_object(peaks, own)
    # the largest over the ranks, not their total (each rank is a few hundred MiB: a sum would exceed it)
    assert max(peaks) <= stats["perf/cpu_max_rss_gb"] < sum(peaks), (peaks, stats)
    dist.destroy_process_group()


def test_memory_figures_are_the_largest_over_the_ranks_not_their_sum():
    spawn(_memory_rank, 2)
