# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Turning the engine's ragged token lists into the padded tensors of the rollout contract (docs/data_flow.md).
Pure torch, no vLLM."""

from collections.abc import Iterable, Sequence

import torch


def pad_rows(rows: Sequence[Sequence[float]], length: int, pad_value: float, dtype: torch.dtype) -> torch.Tensor:
    """Right-pad (and cut) variable-length rows to a (len(rows), length) tensor."""
    out = torch.full((len(rows), length), pad_value, dtype=dtype)
    for i, row in enumerate(rows):
        row = list(row)[:length]
        if row:
            out[i, : len(row)] = torch.tensor(row, dtype=dtype)
    return out


def response_mask_through_eos(
    responses: torch.Tensor, lengths: torch.Tensor, eos_token_ids: Iterable[int]
) -> torch.Tensor:
    """1 for every generated token up to and including the first EOS, 0 after it and on padding (`lengths`: tokens
    per row). The cut holds with `ignore_eos` too: what follows EOS is not part of the answer.
    """
    positions = torch.arange(responses.shape[1]).unsqueeze(0)
    generated = positions < lengths.unsqueeze(1)
    eos_ids = torch.tensor(sorted(set(eos_token_ids)), dtype=responses.dtype)
    is_eos = torch.isin(responses, eos_ids) & generated
    # Number of EOS strictly before each position: 0 means "not past the first EOS yet".
    eos_before = torch.cumsum(is_eos.long(), dim=1) - is_eos.long()
    return (generated & (eos_before == 0)).long()


def extend_position_ids(position_ids: torch.Tensor, response_length: int) -> torch.Tensor:
    """Continue the prompt's position ids over `response_length` response tokens, +1 per token from the last.

    Text: (B, P) -> (B, P + R). mrope (Qwen2-VL): (B, 3, P) -> (B, 3, P + R), all three rows equal for the (text)
    response, starting at the largest last-token row + 1, as the model's `get_rope_index` does.
    """
    delta = torch.arange(1, response_length + 1, dtype=position_ids.dtype, device=position_ids.device)
    if position_ids.dim() == 2:
        return torch.cat([position_ids, position_ids[:, -1:] + delta], dim=-1)
    if position_ids.dim() == 3:
        last = position_ids[:, :, -1:].amax(dim=1, keepdim=True)  # (B, 1, 1)
        response = (last + delta).expand(-1, position_ids.shape[1], -1)
        return torch.cat([position_ids, response], dim=-1)
    raise ValueError(
        f"position_ids must have shape (batch, prompt_length) or (batch, 3, prompt_length), got "
        f"{tuple(position_ids.shape)}; check the dataset's position_ids."
    )
