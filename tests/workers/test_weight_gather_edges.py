# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Edges of the weight stream's source (verl/workers/weight_sync/gather.py) on a plain module (no FSDP unit: every
tensor is taken whole): what it sends besides parameters, and the figures it counts for the sync's metrics."""

import torch

from verl.workers.weight_sync.gather import checkpoint_names, iter_full_weights


def _module() -> torch.nn.Module:
    module = torch.nn.Module()
    module.proj = torch.nn.Linear(3, 4)  # 48 + 16 bytes in float32
    module.norm = torch.nn.LayerNorm(5)  # 20 + 20
    module.register_buffer("score_bias", torch.linspace(0, 1, 6))  # persistent, floating point: the engine needs it
    module.register_buffer("positions", torch.arange(7))  # integer: the engine builds it itself
    module.register_buffer("cache", torch.ones(2), persistent=False)  # not in a checkpoint
    return module


def _stream(module: torch.nn.Module, dtype: torch.dtype) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
    stats = {"num_params": 0, "bytes": 0, "max_param_bytes": 0}
    return dict(iter_full_weights(module, dtype, checkpoint_names(module), stats)), stats


def test_parameters_and_persistent_floating_point_buffers_are_sent_integer_ones_are_not():
    module = _module()
    streamed, _ = _stream(module, torch.float32)
    assert sorted(streamed) == ["norm.bias", "norm.weight", "proj.bias", "proj.weight", "score_bias"]
    assert torch.equal(streamed["score_bias"], module.score_bias)


def test_the_stream_counts_its_tensors_bytes_and_largest_tensor_in_the_engines_dtype():
    module = _module()
    for dtype, size in ((torch.float32, 4), (torch.bfloat16, 2)):
        streamed, stats = _stream(module, dtype)
        numels = [tensor.numel() for tensor in streamed.values()]
        assert all(tensor.dtype == dtype for tensor in streamed.values())
        assert stats["num_params"] == 5
        assert stats["bytes"] == size * (12 + 4 + 5 + 5 + 6) == size * sum(numels)
        assert stats["max_param_bytes"] == size * 12  # proj.weight, the first and largest: not the last one
        assert stats["gather_seconds"] >= 0.0
