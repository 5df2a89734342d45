# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Token-level tensor helpers for the workers: log-probs and entropy from logits, padding removal and restoration.

Log-probs are always computed in float32, whatever the model's dtype: PPO's ratio exp(log pi - log pi_old) scales
every gradient, and a bf16 log-softmax over a large vocabulary is too coarse.
"""

import torch


def log_probs_from_logits(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[labels] in float32, for logits (..., V) and integer labels (...), as logit[label] -
    logsumexp(logits) (no full log-softmax). Divide the logits by the sampling temperature first.
    """
    logits = logits.float()
    picked = torch.gather(logits, -1, labels.long().unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) over the last dim in float32: H = logsumexp(z) - sum_v p_v z_v."""
    logits = logits.float()
    probs = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(dim=-1)


def unpad_input(attention_mask: torch.Tensor) -> torch.Tensor:
    """Flat indices (into a (B*L,) view) of the valid tokens of a (B, L) mask, in row-major order: the packed
    sequence's tokens; `pad_input` puts values computed on it back.
    """
    return torch.nonzero(attention_mask.reshape(-1), as_tuple=False).flatten()


def pad_input(packed: torch.Tensor, indices: torch.Tensor, batch_size: int, seq_len: int) -> torch.Tensor:
    """Scatter per-token values (T, ...) of a packed sequence back to (batch_size, seq_len, ...), zeros elsewhere."""
    out = packed.new_zeros((batch_size * seq_len, *packed.shape[1:]))
    out[indices] = packed
    return out.reshape(batch_size, seq_len, *packed.shape[1:])


def positions_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position of each token within its row's valid tokens (0, 1, 2, ...), 0 on padding: the positions the model saw
    in generation (left-padded prompt, right-padded response), restarting at 0 per sequence once packed.
    """
    mask = attention_mask.long()
    return ((mask.cumsum(dim=-1) - 1) * mask).clamp(min=0)
