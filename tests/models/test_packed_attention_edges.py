# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Edges of the packed ("varlen") attention: the boundaries it accepts, and the cases it hands to sdpa's mask."""

import pytest
import torch
import torch.nn.functional as F

from verl.models.packed_attention import packed_attention_forward, packed_sequence_kwargs


def _qkv(total: int, heads: int = 4, head_dim: int = 16, seed: int = 0) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(1, heads, total, head_dim, generator=generator) for _ in range(3)]


class _Attention(torch.nn.Module):
    """The attributes transformers' attention functions read from the calling module."""

    def __init__(self, is_causal: bool = True) -> None:
        super().__init__()
        self.is_causal = is_causal
        self.num_key_value_groups = 1


def test_sequence_lengths_must_be_integers() -> None:
    with pytest.raises(ValueError, match="lengths must be a 1-D integer tensor"):
        packed_sequence_kwargs(torch.tensor([2.0, 3.5]))
    assert packed_sequence_kwargs([2, 3])["cu_seq_lens_q"].tolist() == [0, 2, 5]


@pytest.mark.parametrize(
    "bounds",
    [[0, 6, 3, 10], [2, 5, 10], [0, 4, 9]],
    ids=["falling", "not_from_zero", "short_of_the_row"],
)
def test_boundaries_that_do_not_split_the_row_are_refused(bounds) -> None:
    query, key, value = _qkv(10)
    cu_seq = torch.tensor(bounds, dtype=torch.int32)
    with pytest.raises(ValueError, match=r"cu_seq_lens_q=.* does not split the packed row of 10 tokens"):
        packed_attention_forward(_Attention(), query, key, value, None, cu_seq_lens_q=cu_seq, cu_seq_lens_k=cu_seq)


def test_key_boundaries_other_than_the_query_boundaries_are_refused() -> None:
    query, key, value = _qkv(10)
    cu_q, cu_k = torch.tensor([0, 3, 10], dtype=torch.int32), torch.tensor([0, 5, 10], dtype=torch.int32)
    with pytest.raises(ValueError, match="cu_seq_lens_k differs from cu_seq_lens_q"):
        packed_attention_forward(_Attention(), query, key, value, None, cu_seq_lens_q=cu_q, cu_seq_lens_k=cu_k)


def test_a_non_causal_module_called_without_is_causal_attends_across_the_text_boundaries() -> None:
    """A vision tower's attention module says it is not causal (module.is_causal): without an is_causal argument its
    call is still bidirectional over the whole block."""
    query, key, value = _qkv(10)
    out, _ = packed_attention_forward(
        _Attention(is_causal=False), query, key, value, None, **packed_sequence_kwargs([3, 7])
    )
    expected = F.scaled_dot_product_attention(query, key, value).transpose(1, 2)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-6)


def test_position_ids_of_another_length_than_the_row_do_not_split_it() -> None:
    """position_ids that do not cover the row (a slice's, under sequence parallelism) say nothing of its boundaries:
    the row is one causal sequence."""
    query, key, value = _qkv(10)
    position_ids = torch.tensor([[0, 1, 2, 0, 1, 2]])
    out, _ = packed_attention_forward(_Attention(), query, key, value, None, position_ids=position_ids)
    expected = F.scaled_dot_product_attention(query, key, value, is_causal=True).transpose(1, 2)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-6)
