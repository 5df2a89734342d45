# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Weight sync: the actor's weights into the rollout engines, every path through one interface.

The source (gather.py) yields (checkpoint name, full tensor) pairs one FSDP unit at a time; a sink takes them with its
one method `load`; `sync` streams one into the other and counts what went. The sinks:

    sinks.EngineLoader    vLLM's loader into this process's engine (colocated sync, rollout pool's receive)
    sinks.PoolBroadcast   the trainer's broadcast to the rollout pool (rollout.mode=disaggregated)
    opt_in.EngineCopy     rollout.weight_sync=direct: a copy into the engine's own parameters (never run on a GPU)
    opt_in.EngineAdapter  rollout.lora_sync=adapters: the LoRA factors as a vLLM adapter (never run on a GPU)

`colocated.FSDPVLLMShardingManager` picks the colocated sink once and wakes, syncs, checks and sleeps the engine.
"""

import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

import torch
from torch import nn


Weights = Iterable[tuple[str, torch.Tensor]]


class WeightSink(Protocol):
    """Where a weight sync's (name, full tensor) pairs go."""

    def load(self, weights: Weights) -> dict[str, float]:
        """Consume `weights` (lazily: each tensor may be freed once taken); returns the sink's own figures."""
        ...


def sync(
    sink: WeightSink,
    source: Callable[..., Iterator[tuple[str, torch.Tensor]]],
    module: nn.Module,
    dtype: torch.dtype,
    names: dict[str, str],
    **kwargs: Any,
) -> dict[str, float]:
    """Stream `source` (gather.iter_full_weights or iter_adapter_weights) into `sink`; returns num_params, bytes,
    max_param_bytes, gather_seconds, seconds and the sink's own figures. Collective over the FSDP mesh."""
    stats = {"num_params": 0, "bytes": 0, "max_param_bytes": 0, "gather_seconds": 0.0}
    start = time.perf_counter()
    with torch.no_grad():
        stats.update(sink.load(source(module, dtype, names, stats, **kwargs)))
    stats["seconds"] = time.perf_counter() - start
    return stats
