# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The sinks that have run on a GPU: vLLM's loader into this process's engine, and the broadcast to the rollout pool.

`EngineLoader` hands the weights to vLLM's own loader (vllm_compat.load_weights), for the colocated sync and the pool's
receive; the caller resets the engine's caches once per sync, unless the engine slept since its last request.

`PoolBroadcast` (mode=disaggregated): the trainer's rank 0 and every rollout process form a group of their own
(`create_group`: TCP store on the trainer's node; gloo on CPU, NCCL on GPU), outside each pool's world. Weights are
broadcast in buckets of `weight_bucket_mb`, each a header, a name/shape table and one flat tensor, so receivers need
no manifest agreed beforehand.
"""

import datetime
import json
import math
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from verl.workers.rollout import vllm_compat
from verl.workers.weight_sync import Weights


class EngineLoader:
    """vLLM's loader into `llm` (engine in this process): in place via `reload_weights` on the CPU (the only working
    path), the model's `load_weights` on the woken GPU engine."""

    def __init__(self, llm: Any) -> None:
        from verl.workers.rollout.vllm_rollout import on_gpu

        self.llm = llm
        self.in_place_reload = not on_gpu()

    def load(self, weights: Weights) -> dict[str, float]:
        vllm_compat.load_weights(self.llm, weights, self.in_place_reload)
        return {}


DTYPES = (torch.float32, torch.bfloat16, torch.float16)
"""Weight dtypes a bucket may carry (the engine's dtype), by their index in the header."""

_HEADER = 4
"""int64 header: table bytes, bucket elements, dtype index, 1 on the last bucket."""


def create_group(
    host: str, port: int, rank: int, world_size: int, backend: str, timeout_s: float = 1800.0
) -> dist.ProcessGroup:
    """Join the weight-transfer group (rank 0, the trainer, hosts the TCP store at host:port); blocks until all
    `world_size` members have joined."""
    timeout = datetime.timedelta(seconds=timeout_s)
    store = dist.TCPStore(host, port, world_size, rank == 0, timeout=timeout, wait_for_workers=False)
    if backend == "nccl":
        options = dist.ProcessGroupNCCL.Options()
        options._timeout = timeout
        return dist.ProcessGroupNCCL(store, rank, world_size, options)
    if backend != "gloo":
        raise ValueError(f"Weight transfer backend must be gloo or nccl, got {backend!r}.")
    return dist.ProcessGroupGloo(store, rank, world_size, timeout)


@dataclass
class TransferStats:
    bytes: int = 0
    buckets: int = 0
    seconds: float = 0.0
    """Time inside the broadcasts (on the sender, also waiting for the receivers)."""


def _broadcast(group: dist.ProcessGroup, tensor: torch.Tensor, stats: TransferStats) -> None:
    start = time.perf_counter()
    group.broadcast(tensor, 0).wait()
    stats.seconds += time.perf_counter() - start


def _send_bucket(
    group: dist.ProcessGroup,
    items: list[tuple[str, torch.Tensor]],
    last: bool,
    device: torch.device,
    stats: TransferStats,
) -> None:
    dtype = items[0][1].dtype if items else DTYPES[0]
    table = json.dumps([[name, list(tensor.shape)] for name, tensor in items]).encode()
    flat = (
        torch.cat([tensor.reshape(-1) for _, tensor in items]).to(device)
        if items
        else torch.empty(0, dtype=dtype, device=device)
    )
    header = torch.tensor([len(table), flat.numel(), DTYPES.index(dtype), int(last)], dtype=torch.long, device=device)
    _broadcast(group, header, stats)
    _broadcast(group, torch.frombuffer(bytearray(table), dtype=torch.uint8).to(device), stats)
    if flat.numel():
        _broadcast(group, flat, stats)
    stats.buckets += 1
    stats.bytes += flat.numel() * flat.element_size()


class PoolBroadcast:
    """The broadcast from the trainer's rank 0 to the rollout pool over `group` (None on the other ranks: they take
    part in the gathers only), in buckets of at most `bucket_bytes` (a larger tensor goes alone) on `device`."""

    def __init__(self, group: dist.ProcessGroup | None, bucket_bytes: int, device: torch.device) -> None:
        self.group = group
        self.bucket_bytes = bucket_bytes
        self.device = device

    def load(self, weights: Weights) -> dict[str, float]:
        """Broadcast (name, tensor) pairs, one dtype per bucket, the last flagged; returns the broadcast's figures
        (broadcast_seconds: on the sender, also waiting for the receivers)."""
        if self.group is None:
            for _ in weights:
                pass
            return {"broadcast_seconds": 0.0}
        stats = TransferStats()
        bucket: list[tuple[str, torch.Tensor]] = []
        size = 0
        for name, tensor in weights:
            nbytes = tensor.numel() * tensor.element_size()
            if tensor.dtype not in DTYPES:
                raise TypeError(f"Cannot send weight {name} of dtype {tensor.dtype}; the engine dtypes are {DTYPES}.")
            if bucket and (size + nbytes > self.bucket_bytes or tensor.dtype != bucket[0][1].dtype):
                _send_bucket(self.group, bucket, False, self.device, stats)
                bucket, size = [], 0
            bucket.append((name, tensor.detach()))
            size += nbytes
        _send_bucket(self.group, bucket, True, self.device, stats)
        return {"broadcast_seconds": stats.seconds, "broadcast_buckets": stats.buckets, "broadcast_bytes": stats.bytes}


def receive_weights(
    group: dist.ProcessGroup, device: torch.device
) -> tuple[list[tuple[str, torch.Tensor]], TransferStats]:
    """Receive what `PoolBroadcast` sent: every (name, tensor), as views of the buckets on `device`, in order."""
    stats = TransferStats()
    weights: list[tuple[str, torch.Tensor]] = []
    while True:
        header = torch.empty(_HEADER, dtype=torch.long, device=device)
        _broadcast(group, header, stats)
        table_bytes, numel, dtype_index, last = (int(value) for value in header.tolist())
        table_tensor = torch.empty(table_bytes, dtype=torch.uint8, device=device)
        _broadcast(group, table_tensor, stats)
        table = json.loads(table_tensor.cpu().numpy().tobytes().decode())
        flat = torch.empty(numel, dtype=DTYPES[dtype_index], device=device)
        if numel:
            _broadcast(group, flat, stats)
        offset = 0
        for name, shape in table:
            count = math.prod(shape)
            weights.append((name, flat[offset : offset + count].view(shape)))
            offset += count
        stats.buckets += 1
        stats.bytes += flat.numel() * flat.element_size()
        if last:
            return weights, stats
