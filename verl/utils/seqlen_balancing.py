# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Balanced partitions of sequences by token count, across data-parallel ranks and into micro-batches (response
lengths vary widely): Karmarkar-Karp largest differencing, with equal item counts (`balance_batch`) or without
(`dynamic_micro_batches`)."""

import heapq
import itertools
import math
from collections.abc import Sequence

import numpy as np
import torch
import torch.distributed as dist

from verl.protocol import DataProto


def karmarkar_karp(sizes: Sequence[int], k: int, equal_size: bool = False) -> list[list[int]]:
    """Split item indices into k groups with nearly equal size sums: the two partial partitions with the largest
    spread are merged, largest group of one with smallest of the other. `equal_size` seeds items k at a time in sorted
    order (needs len(sizes) % k == 0). Indices in a group are sorted; no group is empty when len(sizes) >= k."""
    n = len(sizes)
    if k < 1 or k > n:
        raise ValueError(f"Cannot split {n} items into {k} non-empty groups; use 1 <= k <= {n}.")
    if equal_size and n % k != 0:
        raise ValueError(f"Equal-size partitions need the item count ({n}) to be a multiple of k ({k}).")
    order = sorted(range(n), key=lambda i: (sizes[i], i))
    heap: list[tuple[int, int, list[tuple[int, list[int]]]]] = []
    counter = itertools.count()  # ties broken by age

    def push(groups: list[tuple[int, list[int]]]) -> None:  # a partial partition, keyed by its spread
        groups.sort(key=lambda group: group[0])
        heapq.heappush(heap, (-(groups[-1][0] - groups[0][0]), next(counter), groups))

    seed_size = k if equal_size else 1
    for start in range(0, n, seed_size):
        seed = order[start : start + seed_size]
        push([(sizes[i], [i]) for i in seed] + [(0, []) for _ in range(k - len(seed))])
    while len(heap) > 1:
        _, _, first = heapq.heappop(heap)
        _, _, second = heapq.heappop(heap)
        push([(a + b, a_items + b_items) for (a, a_items), (b, b_items) in zip(reversed(first), second)])  # big+small
    partitions = [sorted(items) for _, items in heap[0][2]]
    for group in partitions:  # an empty group (tiny, skewed inputs) takes an item from the fullest
        if not group:
            group.append(max(partitions, key=len).pop())
    return partitions


def _ints(values: Sequence[int] | torch.Tensor) -> list[int]:
    return [int(x) for x in (values.tolist() if isinstance(values, torch.Tensor) else values)]


def _check_fits(tokens: int, max_token_len: int) -> None:
    if tokens > max_token_len:
        raise ValueError(
            f"A sample has {tokens} tokens but the micro-batch token budget is {max_token_len}; raise "
            "micro_batch_size_per_device_for_update / _for_experience (the budget is that times the max length)."
        )


def dynamic_micro_batches(
    seq_lens: Sequence[int] | torch.Tensor,
    max_token_len: int,
    group: dist.ProcessGroup | None = None,
) -> list[list[int]]:
    """Split samples into the fewest balanced micro-batches whose token sums stay within `max_token_len`, with the
    group's largest count on every rank (FSDP runs collectives in every forward). Longest first (a memory problem
    shows at once); `restore_order` undoes the permutation."""
    lens = _ints(seq_lens)
    if not lens:
        raise ValueError("dynamic_micro_batches got no samples; every rank needs at least one.")
    _check_fits(max(lens), max_token_len)
    num = min(len(lens), math.ceil(sum(lens) / max_token_len))
    partitions = karmarkar_karp(lens, num)
    while num < len(lens) and max(sum(lens[i] for i in part) for part in partitions) > max_token_len:
        num += 1
        partitions = karmarkar_karp(lens, num)
    target = _group_max_count(num, len(lens), group)
    if target != num:
        partitions = karmarkar_karp(lens, target)
    partitions.sort(key=lambda part: -sum(lens[i] for i in part))
    return partitions


def padded_micro_batches(
    prompt_lens: Sequence[int] | torch.Tensor,
    response_lens: Sequence[int] | torch.Tensor,
    max_token_len: int,
    group: dist.ProcessGroup | None = None,
) -> list[list[int]]:
    """Micro-batches for a padded forward, each costing rows x (longest prompt + longest response) <= `max_token_len`:
    rows taken longest first; every rank then splits its most expensive ones up to the group's largest count (as FSDP
    needs). Most expensive first; `restore_order` undoes the permutation."""
    prompts, responses = _ints(prompt_lens), _ints(response_lens)
    if not prompts:
        raise ValueError("padded_micro_batches got no samples; every rank needs at least one.")

    def cost(part: list[int]) -> int:
        return len(part) * (max(prompts[i] for i in part) + max(responses[i] for i in part))

    order = sorted(range(len(prompts)), key=lambda i: (-(prompts[i] + responses[i]), i))
    partitions: list[list[int]] = []
    for index in order:
        if partitions and cost(partitions[-1] + [index]) <= max_token_len:
            partitions[-1].append(index)
        else:
            _check_fits(prompts[index] + responses[index], max_token_len)
            partitions.append([index])
    target = _group_max_count(len(partitions), len(prompts), group)
    while len(partitions) < target:  # halve the most expensive splittable micro-batch
        largest = max((part for part in partitions if len(part) > 1), key=cost)
        partitions.remove(largest)
        partitions += [largest[: len(largest) // 2], largest[len(largest) // 2 :]]
    partitions.sort(key=lambda part: -cost(part))
    return [sorted(part) for part in partitions]


def _group_max_count(count: int, num_samples: int, group: dist.ProcessGroup | None) -> int:
    """The largest micro-batch count of the process group (this rank's count outside torch.distributed)."""
    if not (dist.is_available() and dist.is_initialized()):
        return count
    total = torch.tensor([count], dtype=torch.int64)
    dist.all_reduce(total, op=dist.ReduceOp.MAX, group=group)
    largest = int(total.item())
    if largest > num_samples:
        raise ValueError(
            f"Another rank needs {largest} micro-batches but this rank has only {num_samples} samples; "
            "give every rank the same number of samples."
        )
    return largest


def restore_order(partitions: Sequence[Sequence[int]]) -> torch.Tensor:
    """The permutation that puts rows concatenated in partition order back into the original order."""
    flat = torch.tensor([i for part in partitions for i in part], dtype=torch.long)
    inverse = torch.empty_like(flat)
    inverse[flat] = torch.arange(len(flat))
    return inverse


def balance_batch(data: DataProto, world_size: int, key: str = "attention_mask") -> dict[str, float]:
    """Reorder `data` in place so each of the `world_size` contiguous chunks (one per rank) holds a similar number of
    tokens, rows keeping their relative order; returns the `global_seqlen/*` metrics (before, after, mean)."""
    if len(data) % world_size != 0:
        raise ValueError(
            f"balance_batch got {len(data)} samples for {world_size} ranks; the batch must split evenly (pad it or "
            "change the batch size)."
        )
    seq_lens = data.batch[key].sum(dim=-1).tolist()
    chunk = len(data) // world_size
    before = [sum(seq_lens[r * chunk : (r + 1) * chunk]) for r in range(world_size)]
    partitions = karmarkar_karp(seq_lens, world_size, equal_size=True)
    after = [sum(seq_lens[i] for i in part) for part in partitions]
    data.reorder(np.array([i for part in partitions for i in part], dtype=np.int64))
    return {
        "global_seqlen/min": float(min(before)),
        "global_seqlen/max": float(max(before)),
        "global_seqlen/minmax_diff": float(max(before) - min(before)),
        "global_seqlen/balanced_min": float(min(after)),
        "global_seqlen/balanced_max": float(max(after)),
        "global_seqlen/mean": float(sum(before) / world_size),
    }
