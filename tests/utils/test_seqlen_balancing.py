# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
import random

import numpy as np
import pytest
import torch

from verl.protocol import DataProto
from verl.utils import seqlen_balancing
from verl.utils.seqlen_balancing import (
    balance_batch,
    dynamic_micro_batches,
    karmarkar_karp,
    padded_micro_batches,
    restore_order,
)


def sums(sizes, partitions):
    return [sum(sizes[i] for i in part) for part in partitions]


def test_karmarkar_karp_balances_sums():
    # {10, 1} / {9, 2}; a split into contiguous halves would give 19 vs 3
    partitions = karmarkar_karp([10, 9, 2, 1], 2)
    assert sorted(i for part in partitions for i in part) == list(range(4))
    assert sorted(sums([10, 9, 2, 1], partitions)) == [11, 11]
    # The textbook case where differencing is 2 off the optimum (15 / 15): {8, 6} / {7, 5, 4}
    assert sorted(sums([8, 7, 6, 5, 4], karmarkar_karp([8, 7, 6, 5, 4], 2))) == [14, 16]


def test_karmarkar_karp_equal_size_keeps_counts_and_balances():
    rng = random.Random(0)
    sizes = [rng.randint(10, 500) for _ in range(32)]
    partitions = karmarkar_karp(sizes, 4, equal_size=True)
    assert [len(part) for part in partitions] == [8, 8, 8, 8]
    assert sorted(i for part in partitions for i in part) == list(range(32))
    totals = sums(sizes, partitions)
    naive = sums(sizes, [list(range(r * 8, (r + 1) * 8)) for r in range(4)])
    assert max(totals) - min(totals) < max(naive) - min(naive)
    assert max(totals) - min(totals) <= max(sizes) // 2


def test_karmarkar_karp_never_returns_empty_groups():
    for k in range(1, 6):
        partitions = karmarkar_karp([1000, 1, 1, 1, 1], k)
        assert len(partitions) == k and all(partitions)


def test_karmarkar_karp_rejects_impossible_requests():
    with pytest.raises(ValueError, match="non-empty"):
        karmarkar_karp([1, 2], 3)
    with pytest.raises(ValueError, match="multiple of k"):
        karmarkar_karp([1, 2, 3], 2, equal_size=True)


def test_dynamic_micro_batches_respect_budget_and_restore_order():
    lens = [30, 5, 12, 28, 3, 9, 17, 22]
    partitions = dynamic_micro_batches(lens, max_token_len=40)
    assert all(total <= 40 for total in sums(lens, partitions))
    assert len(partitions) == 4  # 126 tokens need at least ceil(126 / 40) = 4
    assert sums(lens, partitions) == sorted(sums(lens, partitions), reverse=True)  # longest first
    rows = torch.tensor(lens)
    shuffled = torch.cat([rows[part] for part in partitions])
    assert torch.equal(shuffled[restore_order(partitions)], rows)


def test_dynamic_micro_batches_errors_name_the_fix():
    with pytest.raises(ValueError, match="token budget"):
        dynamic_micro_batches([50, 3], max_token_len=40)
    with pytest.raises(ValueError, match="at least one"):
        dynamic_micro_batches([], max_token_len=40)


def test_balance_batch_reorders_rows_and_reports_metrics():
    lengths = [16, 15, 14, 13, 2, 2, 1, 1]  # contiguous chunks would give 58 vs 6 tokens
    mask = torch.zeros(8, 16, dtype=torch.long)
    for row, length in enumerate(lengths):
        mask[row, :length] = 1
    data = DataProto.from_dict(tensors={"attention_mask": mask}, non_tensors={"row": list(range(8))})
    metrics = balance_batch(data, world_size=2)
    assert metrics["global_seqlen/minmax_diff"] == 52
    assert metrics["global_seqlen/balanced_max"] - metrics["global_seqlen/balanced_min"] <= 2
    chunks = data.chunk(2)
    assert [int(chunk.batch["attention_mask"].sum()) for chunk in chunks] == [32, 32]
    rows = data.non_tensor_batch["row"].tolist()
    assert sorted(rows) == list(range(8))
    assert all(int(data.batch["attention_mask"][i].sum()) == lengths[row] for i, row in enumerate(rows))
    assert rows[:4] == sorted(rows[:4]) and rows[4:] == sorted(rows[4:])  # stable within a rank


def test_balance_batch_needs_even_split():
    data = DataProto.from_dict(tensors={"attention_mask": torch.ones(3, 4, dtype=torch.long)})
    with pytest.raises(ValueError, match="split evenly"):
        balance_batch(data, world_size=2)


def test_balance_batch_accepts_numpy_permutation_on_dataproto():
    data = DataProto.from_dict(tensors={"attention_mask": torch.ones(4, 2, dtype=torch.long)})
    balance_batch(data, world_size=4)
    assert len(data) == 4 and np.all(data.batch["attention_mask"].numpy() == 1)


def test_padded_micro_batches_budget_padded_tokens_and_group_similar_lengths():
    rng = random.Random(0)
    prompts = [rng.randint(4, 32) for _ in range(40)]
    responses = [rng.choice([2, 3, 60, 64]) for _ in range(40)]
    budget = 4 * 96
    parts = padded_micro_batches(prompts, responses, budget)
    assert sorted(i for part in parts for i in part) == list(range(40))
    costs = [len(part) * (max(prompts[i] for i in part) + max(responses[i] for i in part)) for part in parts]
    assert max(costs) <= budget and costs == sorted(costs, reverse=True)
    # Short rows are grouped apart from long ones, so the padded cost is far below 40 rows x the longest row.
    assert sum(costs) < 0.75 * 40 * max(p + r for p, r in zip(prompts, responses))
    order = restore_order(parts)
    flat = torch.tensor([i for part in parts for i in part])
    assert torch.equal(flat[order], torch.arange(40))


def test_padded_micro_batches_errors_name_the_fix():
    with pytest.raises(ValueError, match="raise micro_batch_size_per_device"):
        padded_micro_batches([10], [100], 64)
    with pytest.raises(ValueError, match="no samples"):
        padded_micro_batches([], [], 64)


# Edges a mutation audit found unpinned: exact budgets, top-ups to a group's count, the equal-count rule.


def test_karmarkar_karp_refuses_zero_groups():
    with pytest.raises(ValueError, match="non-empty"):
        seqlen_balancing.karmarkar_karp([1, 2], 0)


def test_a_row_exactly_at_the_token_budget_is_a_micro_batch_of_its_own():
    assert sorted(seqlen_balancing.dynamic_micro_batches([40, 40], max_token_len=40)) == [
        [0],
        [1],
    ]  # each fills the budget exactly


def test_rows_under_the_budget_share_one_micro_batch():
    assert seqlen_balancing.dynamic_micro_batches([5, 3], max_token_len=40) == [[0, 1]]


def test_rows_that_fill_the_budget_exactly_are_not_split():
    assert seqlen_balancing.dynamic_micro_batches([20, 20], max_token_len=40) == [
        [0, 1]
    ]  # 40 tokens fit a budget of 40


def test_padded_rows_that_fill_the_budget_exactly_are_not_split():
    assert seqlen_balancing.padded_micro_batches([2, 2], [2, 2], max_token_len=8) == [[0, 1]]  # 2 rows x (2 + 2) = 8


def balance_data(lengths):
    mask = torch.zeros(len(lengths), max(lengths), dtype=torch.long)
    for row, length in enumerate(lengths):
        mask[row, :length] = 1
    return DataProto.from_dict(tensors={"attention_mask": mask})


def test_balance_batch_reports_the_rows_length_spread():
    metrics = seqlen_balancing.balance_batch(balance_data([16, 15, 14, 13, 2, 2, 1, 1]), world_size=2)
    assert metrics["global_seqlen/min"] == 6.0 and metrics["global_seqlen/max"] == 58.0
    assert metrics["global_seqlen/mean"] == 32.0


def test_balance_batch_reports_the_best_equal_count_split():
    metrics = seqlen_balancing.balance_batch(
        balance_data([5, 4, 3, 1]), world_size=2
    )  # best equal-count split: {5, 1} / {4, 3}
    assert metrics["global_seqlen/balanced_min"] == 6.0 and metrics["global_seqlen/balanced_max"] == 7.0


def test_balance_batch_sorts_before_it_partitions():
    metrics = seqlen_balancing.balance_batch(balance_data([1, 3, 2, 2]), world_size=2)
    assert metrics["global_seqlen/balanced_min"] == 4.0 and metrics["global_seqlen/balanced_max"] == 4.0


def test_balance_batch_keeps_equal_row_counts_and_reports_what_each_rank_gets():
    data = balance_data([3, 1, 1, 1])
    metrics = seqlen_balancing.balance_batch(data, world_size=2)
    ranks = [int(chunk.batch["attention_mask"].sum()) for chunk in data.chunk(2)]
    assert sorted(ranks) == [2, 4]  # 2 rows a rank: {3, 1} / {1, 1} is the best there is
    assert [metrics["global_seqlen/balanced_min"], metrics["global_seqlen/balanced_max"]] == [min(ranks), max(ranks)]


def test_karmarkar_karp_leaves_no_group_empty_with_zero_sized_items():
    partitions = seqlen_balancing.karmarkar_karp([0, 1], 2)  # documented: no group is empty when len(sizes) >= k
    assert sorted(partitions) == [[0], [1]]


def test_dynamic_micro_batches_top_up_to_the_groups_largest_count(monkeypatch):
    monkeypatch.setattr(
        seqlen_balancing, "_group_max_count", lambda count, num_samples, group: 3
    )  # another rank needs 3
    assert len(seqlen_balancing.dynamic_micro_batches([10, 10, 10], max_token_len=40)) == 3


def test_padded_micro_batches_top_up_by_splitting_a_splittable_batch(monkeypatch):
    monkeypatch.setattr(seqlen_balancing, "_group_max_count", lambda count, num_samples, group: 3)
    # alone: [[0], [1, 2]] (row 0 costs 20); the splittable [1, 2] is halved, never the single row
    assert sorted(seqlen_balancing.padded_micro_batches([10, 1, 1], [10, 1, 1], max_token_len=20)) == [[0], [1], [2]]
