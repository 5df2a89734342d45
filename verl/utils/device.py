# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The one place that knows whether we compute on CUDA or on the CPU: device, collective backend, RNG states, memory
numbers, cache flushes. `set_device_type` fixes it once per process (`trainer.device`); until then "auto" applies."""

import contextlib
import os
import random
import resource
import tempfile
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import numpy as np
import psutil
import torch
import torch.distributed as dist


DEVICE_CHOICES: tuple[str, ...] = ("auto", "cpu", "cuda")

_device_type: str | None = None


def is_cuda_available() -> bool:
    return torch.cuda.is_available()


def resolve_device_type(requested: str = "auto") -> str:
    """Turn a `trainer.device` value into "cuda" or "cpu"; asking for cuda without a GPU is an error."""
    if requested not in DEVICE_CHOICES:
        raise ValueError(f"trainer.device={requested!r} is not one of {', '.join(DEVICE_CHOICES)}.")
    if requested == "auto":
        return "cuda" if is_cuda_available() else "cpu"
    if requested == "cuda" and not is_cuda_available():
        from verl.utils.config import ConfigError  # a value of the config, named as the loader names one

        raise ConfigError(
            "trainer.device=cuda but torch sees no CUDA device in this process; set trainer.device=cpu (or auto), "
            "or check CUDA_VISIBLE_DEVICES and the torch build."
        )
    return requested


def set_device_type(requested: str = "auto") -> str:
    """Fix the device type of this process (once, early, e.g. in the worker constructor); returns it."""
    global _device_type
    _device_type = resolve_device_type(requested)
    return _device_type


def get_device_type() -> str:
    """ "cuda" or "cpu": the value set by `set_device_type`, else the "auto" choice."""
    return _device_type if _device_type is not None else resolve_device_type("auto")


def is_cpu() -> bool:
    return get_device_type() == "cpu"


def get_dist_backend(device_type: str | None = None) -> str:
    """The torch.distributed backend: gloo on the CPU; on CUDA "cpu:gloo,cuda:nccl", so small bookkeeping reductions
    stay on the host (one code path); sub-groups inherit the pair."""
    return "cpu:gloo,cuda:nccl" if (device_type or get_device_type()) == "cuda" else "gloo"


def get_local_device(local_rank: int | None = None) -> torch.device:
    """The device this rank computes on: the CPU, or cuda:<LOCAL_RANK modulo the visible devices> (torchrun shows
    every GPU; Ray shows each worker its own GPU as cuda:0)."""
    if get_device_type() == "cpu":
        return torch.device("cpu")
    if local_rank is None:
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    return torch.device("cuda", local_rank % max(torch.cuda.device_count(), 1))


def init_distributed(timeout_seconds: float = 600.0) -> None:
    """Initialise the default process group from RANK and WORLD_SIZE, through VERL_DIST_INIT_METHOD if a worker group
    set it (a file store), else env://. On CUDA the rank is bound to its GPU first (nccl communicators land there).
    The timeout bounds waits for a dead peer (gloo's 30-minute default turns a crash into a silent hang)."""
    if dist.is_initialized():
        return
    init_method = os.environ.get("VERL_DIST_INIT_METHOD")
    required = ("RANK", "WORLD_SIZE") if init_method else ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    missing = [name for name in required if name not in os.environ]
    if missing:
        raise RuntimeError(
            f"Cannot initialise torch.distributed: environment variable(s) {', '.join(missing)} are not set; the "
            "worker group sets them, or export them before starting the process."
        )
    if get_device_type() == "cuda":
        torch.cuda.set_device(get_local_device())
    timeout = timedelta(seconds=timeout_seconds)
    if init_method:
        rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        dist.init_process_group(
            get_dist_backend(), init_method=init_method, rank=rank, world_size=world_size, timeout=timeout
        )
    else:
        dist.init_process_group(backend=get_dist_backend(), timeout=timeout)


@contextlib.contextmanager
def environment_defaults(values: dict[str, str]) -> Iterator[None]:
    """Set each of `values` that the environment lacks, for the block only: on exit the names it set are removed
    again (a process that builds an engine or a group and goes on keeps no rank of a world it has left)."""
    added = [name for name in values if name not in os.environ]
    os.environ.update({name: values[name] for name in added})
    try:
        yield
    finally:
        for name in added:
            os.environ.pop(name, None)


@contextlib.contextmanager
def one_process_group(timeout_seconds: float = 600.0) -> Iterator[None]:
    """This process as a world of its own (rank 0 of 1, meeting through a file store: no port is opened), for a script
    or benchmark run outside a worker group; on exit the group is ended and the environment restored. Where a group
    is up already it is used as it is; under torchrun (RANK set) this process joins torchrun's group and ends it on
    exit."""
    if dist.is_initialized():
        yield
        return
    with tempfile.TemporaryDirectory(prefix="verl_process_group_") as store_dir:
        world = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}
        world["VERL_DIST_INIT_METHOD"] = f"file://{os.path.join(store_dir, 'store')}"
        with environment_defaults({} if "RANK" in os.environ else world):
            try:
                init_distributed(timeout_seconds)
                yield
            finally:
                if dist.is_initialized():
                    dist.destroy_process_group()


def synchronize() -> None:
    """Wait for queued device work (a no-op on the CPU, where every op is synchronous)."""
    if get_device_type() == "cuda":
        torch.cuda.synchronize()


def empty_cache() -> None:
    """Return cached device memory to the driver (for vLLM colocation); a no-op on the CPU."""
    if get_device_type() == "cuda":
        torch.cuda.empty_cache()


def memory_metrics() -> dict[str, float]:
    """The step's memory figures in GiB, each the largest over the ranks of the process group (a collective: every
    rank calls it): `perf/max_memory_allocated_gb` and `perf/max_memory_reserved_gb`, the peaks of torch's CUDA
    allocator since the previous call (everything this process did in between: generation, log-probs, the update;
    CUDA only); `perf/cpu_memory_used_gb`, the host's used memory; `perf/cpu_max_rss_gb`, the process's peak resident
    memory since it started."""
    gib = 1024**3
    stats = {
        "perf/cpu_memory_used_gb": psutil.virtual_memory().used / gib,
        # ru_maxrss is in KiB on Linux
        "perf/cpu_max_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / gib,
    }
    if get_device_type() == "cuda":
        stats["perf/max_memory_allocated_gb"] = torch.cuda.max_memory_allocated() / gib
        stats["perf/max_memory_reserved_gb"] = torch.cuda.max_memory_reserved() / gib
        torch.cuda.reset_peak_memory_stats()
    if dist.is_initialized() and dist.get_world_size() > 1:
        values = torch.tensor(list(stats.values()), dtype=torch.float64)
        dist.all_reduce(values, op=dist.ReduceOp.MAX)
        stats = dict(zip(stats, values.tolist()))
    return stats


def get_rng_state() -> dict[str, Any]:
    """Every random generator this process uses, so a resumed run draws the same numbers."""
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch_cpu": torch.get_rng_state(),
    }
    if get_device_type() == "cuda":
        state["torch_cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore the generators saved by `get_rng_state` (the CUDA one only when both sides ran on CUDA)."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch_cpu"])
    if get_device_type() == "cuda" and "torch_cuda" in state:
        torch.cuda.set_rng_state(state["torch_cuda"])


@contextlib.contextmanager
def seeded_rng(*key: int) -> Iterator[None]:
    """Torch's generators (the CPU's, and this process's CUDA device's on CUDA) seeded from `key` inside and restored
    on exit. An update under `seeded_rng(seed, rank, step)` draws dropout masks that differ across ranks, seeds and
    steps, and a resumed run draws the ones the unbroken run drew; the stream outside is untouched."""
    devices = [torch.cuda.current_device()] if get_device_type() == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(int(np.random.SeedSequence(list(key)).generate_state(1)[0]))
        yield


_peak_flops: float | None = None


def measure_peak_flops(size: int | None = None, repeats: int = 10) -> float:
    """Dense matmul FLOP/s of this device in the training compute dtype (bf16 on CUDA, fp32 on CPU), measured once
    per process and cached: the denominator of the MFU metrics."""
    global _peak_flops
    if _peak_flops is None:
        device = get_local_device()
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
        size = size or (8192 if device.type == "cuda" else 512)
        generator = torch.Generator(device=device).manual_seed(0)  # its own: the training RNG streams stay untouched
        a = torch.randn(size, size, device=device, dtype=dtype, generator=generator)
        b = torch.randn(size, size, device=device, dtype=dtype, generator=generator)
        a @ b  # warm-up
        synchronize()
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            a @ b
            synchronize()
            best = min(best, time.perf_counter() - start)
        _peak_flops = 2.0 * size**3 / best
    return _peak_flops
