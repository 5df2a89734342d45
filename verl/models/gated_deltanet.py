# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Exact Gated DeltaNet (linear attention) layers for packed (padding-free) sequences, as in Qwen3.5 and Qwen3-Next.

The layer's causal convolution and gated delta recurrence must restart at every sequence boundary of a packed row.
transformers' layer does so only with its CUDA kernels and the boundaries passed (its CPU fallbacks drop
`cu_seqlens`, and nothing derives the convolution's `seq_idx`), so later sequences come out wrong.

`use_packed_linear_attention(model)` swaps each layer's class for a subclass whose forward, on a packed row (given
`cu_seq_lens_q` from `packed_attention.packed_sequence_kwargs`), runs the layer's own forward either once with
`cu_seqlens` and `seq_idx` (CUDA, flash-linear-attention and causal-conv1d installed), or over the sequences as a
right-padded batch, packed back after. Every other call is the layer's own forward."""

import functools
import importlib
from typing import Any

import torch
from torch import nn

from verl.models import ulysses
from verl.models.config import SEQUENCE_PARALLEL_REFUSAL
from verl.models.packed_attention import packed_bounds
from verl.models.structure import get_language_model


GATED_DELTANET_CLASSES: tuple[tuple[str, str], ...] = (
    ("transformers.models.qwen3_5.modeling_qwen3_5", "Qwen3_5GatedDeltaNet"),
    ("transformers.models.qwen3_5_moe.modeling_qwen3_5_moe", "Qwen3_5MoeGatedDeltaNet"),
    ("transformers.models.qwen3_next.modeling_qwen3_next", "Qwen3NextGatedDeltaNet"),
)
"""(module, class) of the transformers Gated DeltaNet layers made exact; each zeroes hidden states where the 2-D
`attention_mask` is 0 and passes `cu_seq_lens_q` (as `cu_seqlens`) and other kwargs to its kernels."""

_RECURRENT_LAYER_NAMES = ("GatedDeltaNet", "DeltaNet", "Mamba", "LinearAttention")
"""Class-name parts of state-carrying token mixers; one not made exact forbids packing."""

_BOUNDARY_KWARGS = ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k")


@functools.lru_cache(maxsize=1)
def _stock_classes() -> tuple[type, ...]:
    classes = []
    for module_name, class_name in GATED_DELTANET_CLASSES:
        try:
            classes.append(getattr(importlib.import_module(module_name), class_name))
        except (ImportError, AttributeError):  # an older transformers without this family
            continue
    return tuple(classes)


@functools.lru_cache(maxsize=1)
def _varlen_kernels_installed() -> bool:
    """Whether flash-linear-attention's gated delta rule (`cu_seqlens`) and causal-conv1d (`seq_idx`) import, as
    transformers imports them; otherwise its torch fallback would drop the boundaries."""
    kernels = (("fla.ops.gated_delta_rule", "chunk_gated_delta_rule"), ("causal_conv1d", "causal_conv1d_fn"))
    try:
        return all(callable(getattr(importlib.import_module(module), name)) for module, name in kernels)
    except Exception:  # not installed, or a broken install (a CUDA or ABI mismatch fails on import)
        return False


class PackedGatedDeltaNet(nn.Module):
    """Mixin in front of a transformers Gated DeltaNet class: restarts convolution and recurrence at a packed row's
    boundaries; anything else goes to the layer's own forward."""

    def forward(
        self,
        hidden_states: torch.Tensor,
        cache_params: Any = None,
        attention_mask: torch.Tensor | None = None,
        **kwargs: Any,
    ) -> torch.Tensor:
        cu_seqlens = kwargs.get("cu_seq_lens_q")
        if cu_seqlens is None or cache_params is not None or attention_mask is not None or hidden_states.shape[0] != 1:
            return super().forward(hidden_states, cache_params=cache_params, attention_mask=attention_mask, **kwargs)
        if ulysses.active_group() is not None:
            raise NotImplementedError(
                f"{type(self).__name__}: {SEQUENCE_PARALLEL_REFUSAL}; set worker.actor.ulysses_size=1 for hybrid "
                "linear-attention models."
            )
        if hidden_states.is_cuda and _varlen_kernels_installed():  # one call, the kernels told the boundaries
            cu_seqlens = cu_seqlens.to(device=hidden_states.device, dtype=torch.long)
            seq_idx = _sequence_index(cu_seqlens, hidden_states.shape[1])
            return super().forward(hidden_states, **{**kwargs, "cu_seq_lens_q": cu_seqlens, "seq_idx": seq_idx})
        return self._padded_forward(hidden_states, cu_seqlens, kwargs)

    def _padded_forward(
        self, hidden_states: torch.Tensor, cu_seqlens: torch.Tensor, kwargs: dict[str, Any]
    ) -> torch.Tensor:
        bounds = packed_bounds(cu_seqlens, "cu_seq_lens_q", hidden_states.shape[1])
        lengths = [b - a for a, b in zip(bounds[:-1], bounds[1:]) if b > a]
        if len(lengths) == 1:  # one sequence: nothing to restart
            return super().forward(hidden_states, **_without_boundaries(kwargs))
        device, width = hidden_states.device, max(lengths)
        sizes = torch.tensor(lengths, device=device)
        # (N, L): which cells of the padded batch hold tokens; their row-major order is the packed order
        valid = torch.arange(width, device=device).unsqueeze(0) < sizes.unsqueeze(1)
        rows = hidden_states.new_zeros(len(lengths), width, hidden_states.shape[-1])
        rows = rows.index_put((valid,), hidden_states[0])
        output = super().forward(rows, attention_mask=valid.to(hidden_states.dtype), **_without_boundaries(kwargs))
        return output[valid].unsqueeze(0)


def _without_boundaries(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in kwargs.items() if key not in _BOUNDARY_KWARGS}


def _sequence_index(cu_seqlens: torch.Tensor, length: int) -> torch.Tensor:
    """(1, T) int32 sequence index of each token of the packed row (causal-conv1d's seq_idx)."""
    starts = torch.zeros(length + 1, dtype=torch.int32, device=cu_seqlens.device)
    starts.index_add_(0, cu_seqlens[1:-1], torch.ones_like(cu_seqlens[1:-1], dtype=torch.int32))
    return starts[:length].cumsum(0, dtype=torch.int32).unsqueeze(0)


@functools.cache
def _packed_class(stock: type) -> type:
    return type(f"Packed{stock.__name__}", (PackedGatedDeltaNet, stock), {"__module__": __name__})


def use_packed_linear_attention(model: nn.Module) -> int:
    """Give every Gated DeltaNet layer the packed-exact forward (idempotent); returns how many it changed. Only the
    class changes, so parameters, state-dict keys, FSDP wrapping and weight loading are as before."""
    layers = [module for module in model.modules() if type(module) in _stock_classes()]
    for module in layers:
        module.__class__ = _packed_class(type(module))
    return len(layers)


def packed_linear_attention_layers(model: nn.Module) -> int:
    return sum(isinstance(module, PackedGatedDeltaNet) for module in model.modules())


def linear_attention_is_exact(model: nn.Module) -> bool:
    """False when a state-carrying token mixer of the language model lacks the packed-exact forward: packing would
    leak its state across sequence boundaries. Such a mixer is named as one (Gated DeltaNet, Mamba, ...) or holds a
    1-D convolution along the sequence (Falcon-H1's and Bamba's Mamba mixers, LFM2's short convolutions); a vision or
    audio tower's never sees the packed row."""
    decoder = get_language_model(model) or model
    exact = {
        id(sub) for module in decoder.modules() if isinstance(module, PackedGatedDeltaNet) for sub in module.modules()
    }
    return not any(
        any(part in type(module).__name__ for part in _RECURRENT_LAYER_NAMES) or isinstance(module, nn.Conv1d)
        for module in decoder.modules()
        if id(module) not in exact
    )
