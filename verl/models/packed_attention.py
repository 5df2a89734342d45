# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Exact attention for packed (padding-free) sequences, registered with transformers as `attn_implementation="varlen"`.
The trainer packs a micro-batch's tokens into one row whose `position_ids` restart at 0 per sequence. transformers'
"sdpa" would build a dense T x T block-diagonal mask; "varlen" runs causal attention inside each sequence without it
and hands every other case (padding, decoding, non-causal) to sdpa unchanged. Kernels: docs/gpu.md."""

import functools
import inspect
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import causal_mask_function, sdpa_mask

from verl.models import ulysses


PACKED_ATTENTION = "varlen"

_VARLEN_DTYPES = (torch.float16, torch.bfloat16)
_MAX_FLASH_HEAD_DIM = 256


# ---------------------------------------------------------------------------------------------- public helpers


def packed_sequence_kwargs(lengths: torch.Tensor | Sequence[int]) -> dict[str, Any]:
    """Model kwargs giving the varlen attention the boundaries of the sequences packed into one row.
    `lengths` (N,): token counts in order. Returns `cu_seq_lens_q/k` (N+1,) int32 offsets and `max_length_q/k`, which
    transformers forwards to every layer's attention; this saves a per-layer derivation (and sync) from `position_ids`.
    """
    lengths = torch.as_tensor(lengths)
    if lengths.dim() != 1 or lengths.is_floating_point():
        raise ValueError(
            f"lengths must be a 1-D integer tensor of sequence lengths, got shape {tuple(lengths.shape)}."
        )
    cu_seq_lens = F.pad(lengths.cumsum(0, dtype=torch.int32), (1, 0))
    max_length = int(lengths.max()) if lengths.numel() else 0
    return {
        "cu_seq_lens_q": cu_seq_lens,
        "cu_seq_lens_k": cu_seq_lens,
        "max_length_q": max_length,
        "max_length_k": max_length,
    }


def register_packed_attention() -> None:
    """Register as `attn_implementation="varlen"` (idempotent)."""
    AttentionInterface.register(PACKED_ATTENTION, packed_attention_forward)
    AttentionMaskInterface.register(PACKED_ATTENTION, packed_attention_mask)


def packed_attention_mask(
    batch_size: int,
    q_length: int,
    kv_length: int,
    q_offset: int = 0,
    kv_offset: int = 0,
    mask_function: Any = causal_mask_function,
    attention_mask: torch.Tensor | None = None,
    **kwargs: Any,
) -> torch.Tensor | None:
    """No mask for a causal batch without padding or KV cache, so a packed row never gets a T x T mask (the forward
    recovers packing from `position_ids` or `cu_seq_lens_q`). Anything else (padding, cache offset, sliding or chunked
    window, `use_vmap`, bidirectional) goes to transformers' `sdpa_mask` unchanged."""
    plain = (
        attention_mask is None
        and q_length == kv_length
        and isinstance(q_offset, int)
        and isinstance(kv_offset, int)
        and q_offset == kv_offset == 0
        and kwargs.get("local_size") is None
        and not kwargs.get("use_vmap", False)
        and "allow_is_bidirectional_skip" not in kwargs
    )
    if plain:
        return None
    return sdpa_mask(
        batch_size=batch_size,
        q_length=q_length,
        kv_length=kv_length,
        q_offset=q_offset,
        kv_offset=kv_offset,
        mask_function=mask_function,
        attention_mask=attention_mask,
        **kwargs,
    )


def packed_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers attention function: q (B, H, L, D), k/v (B, H_kv, L, D) -> output (B, L, H, D) and no weights.
    A packed row (batch 1, no mask, causal, no KV cache, boundaries known) attends inside each sequence; all else is
    `sdpa_attention_forward`. Under Ulysses each rank holds a slice of the row: q, k, v are exchanged so each rank
    attends over the whole row for its share of heads, and the output is exchanged back."""
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    group = ulysses.active_group() if causal else None  # a vision tower's attention is never split
    if group is not None:
        query, key, value = (ulysses.exchange(tensor, group) for tensor in (query, key, value))
    packed = (
        causal
        and attention_mask is None
        and query.shape[0] == 1
        and query.shape[2] == key.shape[2] > 1
        and kwargs.get("sliding_window") is None
        and kwargs.get("position_bias") is None
        and kwargs.get("cache") is None
    )
    segments = _segments(query.shape[2], kwargs) if packed else None
    if segments is None and group is not None:  # a mask or window built for this rank's slice: wrong on the row
        raise NotImplementedError(
            f"Ulysses sequence parallelism needs packed rows without a mask or sliding window in every causal "
            f"attention, and {type(module).__name__} got {'a sliding window' if kwargs.get('sliding_window') else 'a mask'}"
            "; set ulysses_size=1 for this model."
        )
    if segments is None:
        output, _ = sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs
        )
    elif dropout == 0.0 and _can_use_varlen(query):
        output = _varlen_forward(query, key, value, *segments, scaling)  # (cu_seq_q, cu_seq_k, max_q, max_k)
    else:
        output = _per_sequence_forward(query, key, value, *segments[:2], dropout, scaling)  # (cu_seq_q, cu_seq_k)
    return (output if group is None else ulysses.exchange(output, group)), None


def _segments(length: int, kwargs: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, int | None, int | None] | None:
    """(cu_seq_q, cu_seq_k, max_q, max_k) of a packed row, from kwargs or `position_ids`; None for a single sequence.
    The max lengths may be None (only the CUDA kernel needs them)."""
    cu_seq_q = kwargs.get("cu_seq_lens_q")
    if cu_seq_q is not None:
        cu_seq_k = kwargs.get("cu_seq_lens_k")
        cu_seq_k = cu_seq_q if cu_seq_k is None else cu_seq_k
        return cu_seq_q, cu_seq_k, kwargs.get("max_length_q"), kwargs.get("max_length_k")
    position_ids = kwargs.get("position_ids")
    if position_ids is None or position_ids.dim() != 2 or position_ids.shape != (1, length):
        return None
    positions = position_ids[0]
    starts = torch.nonzero(positions[1:] - positions[:-1] != 1).flatten() + 1  # a device-to-host sync on a GPU
    if starts.numel() == 0:
        return None
    cu_seq = torch.cat([starts.new_zeros(1), starts, starts.new_full((1,), length)]).to(torch.int32)
    return cu_seq, cu_seq, None, None


def _per_sequence_forward(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    cu_seq_q: torch.Tensor,
    cu_seq_k: torch.Tensor,
    dropout: float,
    scaling: float | None,
) -> torch.Tensor:
    """One causal `scaled_dot_product_attention` per sequence, concatenated: (1, T, H, D)."""
    bounds = packed_bounds(cu_seq_q, "cu_seq_lens_q", query.shape[2])
    if cu_seq_k is not cu_seq_q and packed_bounds(cu_seq_k, "cu_seq_lens_k", key.shape[2]) != bounds:
        raise ValueError("cu_seq_lens_k differs from cu_seq_lens_q: packed self-attention needs the same boundaries.")
    gqa = query.shape[1] != key.shape[1]
    if gqa and query.shape[-1] > _MAX_FLASH_HEAD_DIM:  # as transformers: GQA in sdpa only where a fused kernel has it
        groups = query.shape[1] // key.shape[1]
        key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
        gqa = False
    outputs = []
    for start, end in zip(bounds[:-1], bounds[1:]):
        if end == start:
            continue
        q, k, v = (tensor[:, :, start:end] for tensor in (query, key, value))
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True, scale=scaling, enable_gqa=gqa)
        outputs.append(out.transpose(1, 2))
    return torch.cat(outputs, dim=1)


def packed_bounds(cu_seq: torch.Tensor, name: str, length: int) -> list[int]:
    bounds = cu_seq.tolist()
    if bounds[0] != 0 or bounds[-1] != length or any(b < a for a, b in zip(bounds[:-1], bounds[1:])):
        raise ValueError(
            f"{name}={bounds} does not split the packed row of {length} tokens: it must rise from 0 to {length}; "
            "build it with verl.models.packed_attention.packed_sequence_kwargs(lengths)."
        )
    return bounds


# ---------------------------------------------------------------------------------------------- CUDA kernel


@functools.lru_cache(maxsize=1)
def _varlen_parameters() -> frozenset[str]:
    """Parameter names of torch's varlen_attn (empty if absent); its keywords changed across releases."""
    try:
        from torch.nn.attention.varlen import varlen_attn

        return frozenset(inspect.signature(varlen_attn).parameters)
    except (ImportError, TypeError, ValueError):  # no varlen_attn, or no signature to read
        return frozenset()


@functools.lru_cache(maxsize=16)
def _is_ampere_or_newer(device_index: int) -> bool:
    return torch.cuda.get_device_capability(device_index) >= (8, 0)


def _can_use_varlen(query: torch.Tensor) -> bool:
    """Whether torch's flash varlen kernel takes these inputs (CUDA sm80+, fp16/bf16, head dim <= 256, usable API)."""
    if not (query.is_cuda and query.dtype in _VARLEN_DTYPES and query.shape[-1] <= _MAX_FLASH_HEAD_DIM):
        return False
    parameters = _varlen_parameters()
    if "scale" not in parameters or not ({"window_size", "is_causal"} & parameters):
        return False
    return _is_ampere_or_newer(query.device.index if query.device.index is not None else torch.cuda.current_device())


def _varlen_forward(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    cu_seq_q: torch.Tensor,
    cu_seq_k: torch.Tensor,
    max_q: int | None,
    max_k: int | None,
    scaling: float | None,
) -> torch.Tensor:
    """All sequences in one flash varlen call: (1, T, H, D)."""
    from torch.nn.attention.varlen import varlen_attn

    parameters = _varlen_parameters()
    same_keys = cu_seq_k is cu_seq_q
    cu_seq_q = cu_seq_q.to(device=query.device, dtype=torch.int32, non_blocking=True)
    cu_seq_k = cu_seq_q if same_keys else cu_seq_k.to(device=query.device, dtype=torch.int32, non_blocking=True)
    if max_q is None:
        max_q = int((cu_seq_q[1:] - cu_seq_q[:-1]).max())  # a sync; callers avoid it with packed_sequence_kwargs
    if max_k is None:
        max_k = max_q if same_keys else int((cu_seq_k[1:] - cu_seq_k[:-1]).max())
    q, k, v = (tensor[0].transpose(0, 1).contiguous() for tensor in (query, key, value))  # (T, H, D)
    options: dict[str, Any] = {"scale": scaling}
    if "window_size" in parameters:
        options["window_size"] = (-1, 0)  # causal: every key up to the query, none after
    else:
        options["is_causal"] = True
    if q.shape[1] != k.shape[1]:
        if "enable_gqa" in parameters:
            options["enable_gqa"] = True
        else:
            groups = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    out = varlen_attn(q, k, v, cu_seq_q, cu_seq_k, int(max_q), int(max_k), **options)
    return out.unsqueeze(0)


register_packed_attention()
