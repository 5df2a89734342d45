# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Exact Gated DeltaNet (linear attention) layers for packed (padding-free) sequences, as in Qwen3.5.

A Gated DeltaNet layer runs a causal depthwise convolution and then a recurrence (the gated delta rule) along the
row. In a packed row both must restart at every sequence boundary, or each sequence reads the convolution window and
the recurrent state its predecessor left. transformers' layer only does that where its CUDA kernels are installed
and are handed the boundaries: its CPU fallbacks drop `cu_seqlens`, and nothing derives the convolution's `seq_idx`,
so every sequence after the first is wrong (by several logits on the tiny Qwen3.5).

`use_packed_linear_attention(model)` gives each Gated DeltaNet layer of a model this module's forward (the layer's
class becomes a subclass of its own; parameters, state-dict keys and `isinstance` checks are unchanged). For a packed
row, recognised by the `cu_seq_lens_q` that `packed_attention.packed_sequence_kwargs` supplies, it runs:

- on CUDA with flash-linear-attention and causal-conv1d installed, the layer's own forward once over the row, with
  `cu_seqlens` for the recurrence and `seq_idx` for the convolution, which those kernels honour;
- otherwise the layer's own forward over the sequences laid out as a right-padded batch (one row each, padding
  masked), so the convolution and the recurrence start from zero in every sequence and each one's outputs are
  those of its separate forward; the tokens are then packed back into one row.

Every other call (padded batches, decoding with a cache, rows without boundaries) is the layer's own forward.
"""

import functools
import importlib
from typing import Any

import torch
from torch import nn

from verl.models import ulysses
from verl.models.config import SEQUENCE_PARALLEL_REFUSAL


__all__ = [
    "GATED_DELTANET_CLASSES",
    "PackedGatedDeltaNet",
    "SEQUENCE_PARALLEL_REFUSAL",
    "linear_attention_is_exact",
    "packed_linear_attention_layers",
    "use_packed_linear_attention",
]

GATED_DELTANET_CLASSES: tuple[tuple[str, str], ...] = (
    ("transformers.models.qwen3_5.modeling_qwen3_5", "Qwen3_5GatedDeltaNet"),
    ("transformers.models.qwen3_5_moe.modeling_qwen3_5_moe", "Qwen3_5MoeGatedDeltaNet"),
)
"""(module, class) of the transformers Gated DeltaNet layers this module makes exact. Each takes
`forward(hidden_states, cache_params=None, attention_mask=None, **kwargs)`, zeroes the hidden states where the 2-D
`attention_mask` is 0, and passes `cu_seq_lens_q` (as `cu_seqlens`) and its other kwargs to its kernels."""

_RECURRENT_LAYER_NAMES = ("GatedDeltaNet", "DeltaNet", "Mamba", "LinearAttention")
"""Class-name parts of token mixers that carry state along the row; a model with one this module has not made exact
cannot be packed."""

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
    """Whether the kernels that take sequence boundaries import: flash-linear-attention's chunked gated delta rule
    (`cu_seqlens`) and causal-conv1d's convolution (`seq_idx`). transformers' layer calls them when they import (it
    imports them the same way); where either does not, its torch fallback would drop the boundaries."""
    kernels = (("fla.ops.gated_delta_rule", "chunk_gated_delta_rule"), ("causal_conv1d", "causal_conv1d_fn"))
    try:
        return all(callable(getattr(importlib.import_module(module), name)) for module, name in kernels)
    except Exception:  # not installed, or a broken install (a CUDA or ABI mismatch fails on import)
        return False


class PackedGatedDeltaNet(nn.Module):
    """Mixin put in front of a transformers Gated DeltaNet class: its forward restarts the convolution and the
    recurrence at the boundaries of a packed row (see the module docstring); anything else goes to the layer's own
    forward unchanged."""

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
        if hidden_states.is_cuda and _varlen_kernels_installed():
            return self._varlen_kernel_forward(hidden_states, cu_seqlens, kwargs)
        return self._padded_forward(hidden_states, cu_seqlens, kwargs)

    def _varlen_kernel_forward(
        self, hidden_states: torch.Tensor, cu_seqlens: torch.Tensor, kwargs: dict[str, Any]
    ) -> torch.Tensor:
        """The layer's own forward over the row, with the boundaries its CUDA kernels take."""
        length = hidden_states.shape[1]
        cu_seqlens = cu_seqlens.to(device=hidden_states.device, dtype=torch.long)
        kwargs = {**kwargs, "cu_seq_lens_q": cu_seqlens, "seq_idx": _sequence_index(cu_seqlens, length)}
        return super().forward(hidden_states, **kwargs)

    def _padded_forward(
        self, hidden_states: torch.Tensor, cu_seqlens: torch.Tensor, kwargs: dict[str, Any]
    ) -> torch.Tensor:
        """The layer's own forward over the sequences as a right-padded batch, packed back into one row."""
        length = hidden_states.shape[1]
        bounds = cu_seqlens.tolist()
        if bounds[0] != 0 or bounds[-1] != length or any(b < a for a, b in zip(bounds[:-1], bounds[1:])):
            raise ValueError(
                f"cu_seq_lens_q={bounds} does not split the packed row of {length} tokens: it must rise from 0 to "
                f"{length}; build it with verl.models.packed_attention.packed_sequence_kwargs(lengths)."
            )
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
    """(1, T) int32: the index of the sequence each token of the packed row belongs to (causal-conv1d's seq_idx)."""
    starts = torch.zeros(length + 1, dtype=torch.int32, device=cu_seqlens.device)
    starts.index_add_(0, cu_seqlens[1:-1], torch.ones_like(cu_seqlens[1:-1], dtype=torch.int32))
    return starts[:length].cumsum(0, dtype=torch.int32).unsqueeze(0)


@functools.cache
def _packed_class(stock: type) -> type:
    return type(f"Packed{stock.__name__}", (PackedGatedDeltaNet, stock), {"__module__": __name__})


def use_packed_linear_attention(model: nn.Module) -> int:
    """Give every Gated DeltaNet layer of `model` the packed-exact forward; returns how many layers it changed.

    Only the layer's class changes (to a subclass of its own), so parameters, buffers, state-dict keys, FSDP wrapping
    and weight loading are as before. Calling it again changes nothing.
    """
    stock = _stock_classes()
    count = 0
    for module in model.modules():
        if type(module) in stock:
            module.__class__ = _packed_class(type(module))
            count += 1
    return count


def packed_linear_attention_layers(model: nn.Module) -> int:
    """The number of layers of `model` that run the packed-exact Gated DeltaNet forward."""
    return sum(isinstance(module, PackedGatedDeltaNet) for module in model.modules())


def _is_recurrent(module: nn.Module) -> bool:
    return isinstance(module, PackedGatedDeltaNet) or any(
        part in type(module).__name__ for part in _RECURRENT_LAYER_NAMES
    )


def linear_attention_is_exact(model: nn.Module) -> bool:
    """False when `model` has a token mixer that carries state along the row (Gated DeltaNet, Mamba, ...) without
    the packed-exact forward: packing its sequences into one row would leak that state across their boundaries."""
    return all(isinstance(module, PackedGatedDeltaNet) for module in model.modules() if _is_recurrent(module))
