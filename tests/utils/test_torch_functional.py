# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
import math

import torch

from verl.utils.torch_functional import (
    entropy_from_logits,
    log_probs_from_logits,
    pad_input,
    positions_from_mask,
    unpad_input,
)


def test_log_probs_match_log_softmax_gather():
    logits = torch.randn(3, 5, 11, generator=torch.Generator().manual_seed(0)) * 4
    labels = torch.randint(0, 11, (3, 5), generator=torch.Generator().manual_seed(1))
    expected = torch.log_softmax(logits, dim=-1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(log_probs_from_logits(logits, labels), expected, rtol=0, atol=1e-6)


def test_log_probs_of_uniform_logits_and_bf16_input_are_fp32():
    logits = torch.zeros(2, 8, dtype=torch.bfloat16)
    out = log_probs_from_logits(logits, torch.tensor([0, 7]))
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, torch.full((2,), -math.log(8)))


def test_entropy_of_known_distributions():
    uniform = torch.zeros(4)
    peaked = torch.tensor([100.0, 0.0, 0.0, 0.0])
    two_way = torch.tensor([0.0, 0.0, -1e4, -1e4])
    out = entropy_from_logits(torch.stack([uniform, peaked, two_way]))
    torch.testing.assert_close(out, torch.tensor([math.log(4), 0.0, math.log(2)]), rtol=0, atol=1e-5)


def test_unpad_and_pad_round_trip_left_and_right_padding():
    mask = torch.tensor([[0, 1, 1, 1, 0], [1, 1, 1, 1, 1], [0, 0, 1, 0, 0]])
    values = torch.arange(15).reshape(3, 5)
    indices = unpad_input(mask)
    packed = values.reshape(-1)[indices]
    assert packed.tolist() == [1, 2, 3, 5, 6, 7, 8, 9, 12]
    assert torch.equal(pad_input(packed, indices, 3, 5), values * mask)
    packed_2d = torch.stack([packed, -packed], dim=-1)  # trailing feature dims are carried along
    assert pad_input(packed_2d, indices, 3, 5).shape == (3, 5, 2)


def test_positions_restart_per_row_and_are_zero_on_padding():
    mask = torch.tensor([[0, 0, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]])
    assert positions_from_mask(mask).tolist() == [[0, 0, 0, 1, 2, 0], [0, 1, 2, 3, 4, 5]]
