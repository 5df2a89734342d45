# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Ulysses sequence parallelism: each packed row is split across the ranks of a sequence-parallel group.
Each rank runs embeddings, MLPs and norms on its slice; around attention an all-to-all trades (token slice, all heads)
for (all tokens, a share of heads), so activations shrink by the group size and attention stays exact."""

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist

from verl.models.config import (
    SEQUENCE_PARALLEL_REFUSAL,
    SLIDING_WINDOW_SEQUENCE_PARALLEL_REFUSAL,
    recurrent_layer_types,
    uses_sliding_window,
)
from verl.models.structure import get_language_model
from verl.protocol import DataProto


_GROUP: dist.ProcessGroup | None = None
"""This process's group while `sequence_parallel` is active."""


def check_split(module: Any, sp_size: int, padding_free: bool, role: str) -> None:
    """Raise ValueError unless `role`'s model can be split over `sp_size` ranks: no recurrent or sliding-window
    layers, the group divides the attention and KV heads (each rank gets whole heads), and rows are packed."""
    if sp_size == 1:
        return
    text_config = module.config.get_text_config() if hasattr(module, "config") else None
    recurrent = recurrent_layer_types(getattr(text_config, "layer_types", None))
    if recurrent:
        raise ValueError(
            f"{role}.ulysses_size={sp_size}: the model has {'/'.join(recurrent)} layers. {SEQUENCE_PARALLEL_REFUSAL}; "
            "set it to 1."
        )
    if text_config is not None and uses_sliding_window(text_config.to_dict()):
        raise ValueError(
            f"{role}.ulysses_size={sp_size}: the model has sliding-window layers. "
            f"{SLIDING_WINDOW_SEQUENCE_PARALLEL_REFUSAL}; set it to 1."
        )
    for name in ("num_attention_heads", "num_key_value_heads"):
        heads = getattr(text_config, name, None)
        if heads is not None and heads % sp_size != 0:
            raise ValueError(f"{role}.ulysses_size={sp_size} must divide the model's {name}={heads}.")
    if not padding_free:
        raise ValueError(
            f"{role}.ulysses_size={sp_size} splits packed rows: it needs padding_free=true, an "
            "attn_implementation with a varlen kernel (auto), and a model without state-carrying token mixers that "
            "cannot be packed (Mamba, short convolutions: these run padded rows); set it to 1."
        )


def new_sequence_parallel_group(ulysses_size: int) -> dist.ProcessGroup | None:
    """Create the groups of `ulysses_size` consecutive ranks and return this rank's (None for 1). Collective: every
    rank must call it. The groups take the default group's backends."""
    if ulysses_size == 1:
        return None
    world, rank = dist.get_world_size(), dist.get_rank()
    if world % ulysses_size != 0:
        raise ValueError(f"ulysses_size={ulysses_size} must divide the world size {world}.")
    groups = [dist.new_group(list(range(start, start + ulysses_size))) for start in range(0, world, ulysses_size)]
    return groups[rank // ulysses_size]


@contextlib.contextmanager
def sequence_parallel(group: dist.ProcessGroup | None) -> Iterator[None]:
    """Within the block, packed forwards split their rows across `group` (no-op for None)."""
    global _GROUP
    previous, _GROUP = _GROUP, group
    try:
        yield
    finally:
        _GROUP = previous


def active_group() -> dist.ProcessGroup | None:
    return _GROUP


# ---------------------------------------------------------------------------------------------- vision-language models

_LANGUAGE_MODEL_SLICE: slice | None = None
"""While set, a VLM's language model gets only this slice of its input embeddings and position ids."""


@contextlib.contextmanager
def language_model_slice(model: Any, local: slice) -> Iterator[None]:
    """Within the block, a VLM's language model (via a pre-hook installed once) receives only this rank's `local`
    slice of the whole row's input embeddings (vision features already scattered in) and position ids."""
    global _LANGUAGE_MODEL_SLICE
    language_model = get_language_model(model)
    if language_model is None:
        raise NotImplementedError(f"{type(model).__name__} has no language_model to give a slice of the row.")
    if not getattr(language_model, "_verl_ulysses_hook", False):
        language_model.register_forward_pre_hook(_slice_language_model_inputs, with_kwargs=True)
        language_model._verl_ulysses_hook = True
    previous, _LANGUAGE_MODEL_SLICE = _LANGUAGE_MODEL_SLICE, local
    try:
        yield
    finally:
        _LANGUAGE_MODEL_SLICE = previous


def _slice_language_model_inputs(module: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
    local = _LANGUAGE_MODEL_SLICE
    if local is None:
        return None
    if kwargs.get("inputs_embeds") is None:
        raise NotImplementedError(f"{type(module).__name__} is called without inputs_embeds; it cannot be sliced.")
    kwargs["inputs_embeds"] = kwargs["inputs_embeds"][:, local]
    if kwargs.get("position_ids") is not None:
        kwargs["position_ids"] = kwargs["position_ids"][..., local]
    visual = kwargs.get("visual_pos_masks")
    if visual is not None:  # Qwen3-VL's deepstack: vision features added to the visual tokens of early layers
        if visual.shape[0] != 1:
            raise NotImplementedError("Ulysses splits one packed row; this forward has several rows.")
        # the features are listed in token order: this slice's are those after the visual tokens before it
        before, inside = int(visual[:, : local.start].sum()), int(visual[:, local].sum())
        kwargs["visual_pos_masks"] = visual[:, local]
        kwargs["deepstack_visual_embeds"] = [
            features[before : before + inside] for features in kwargs.get("deepstack_visual_embeds") or []
        ]
    return args, kwargs


# ---------------------------------------------------------------------------------------------- collectives


def _all_to_all(x: torch.Tensor, scatter_dim: int, gather_dim: int, group: dist.ProcessGroup) -> torch.Tensor:
    """Chunk `x` along `scatter_dim`, send chunk i to rank i, concatenate the received chunks along `gather_dim`."""
    size = dist.get_world_size(group)
    inputs = [chunk.contiguous() for chunk in x.chunk(size, dim=scatter_dim)]
    outputs = [torch.empty_like(inputs[0]) for _ in range(size)]
    dist.all_to_all(outputs, inputs, group=group)
    return torch.cat(outputs, dim=gather_dim)


class _AllToAll(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor, scatter_dim: int, gather_dim: int, group: dist.ProcessGroup
    ) -> torch.Tensor:
        ctx.dims, ctx.group = (scatter_dim, gather_dim), group
        return _all_to_all(x, scatter_dim, gather_dim, group)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:
        scatter_dim, gather_dim = ctx.dims
        return _all_to_all(grad, gather_dim, scatter_dim, ctx.group), None, None, None


def exchange(x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
    """Dim 1 scattered over the n ranks, dim 2 gathered: q, k or v (B, H, T/n, D) -> (B, H/n, T, D), the whole row
    for a share of the heads; the attention output (B, T, H/n, D) -> (B, T/n, H, D), all heads for this rank's slice."""
    return _AllToAll.apply(x, 1, 2, group)


class _GatherSlices(torch.autograd.Function):
    """All-gather of slices along dim 0; backward keeps each rank's own slice of the gradient (every rank computes the
    same loss from the gathered tensor)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
        ctx.group, ctx.length = group, x.shape[0]
        parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, x.contiguous(), group=group)
        return torch.cat(parts, dim=0)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        rank = dist.get_rank(ctx.group)
        return grad[rank * ctx.length : (rank + 1) * ctx.length].contiguous(), None


def gather_slices(x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
    return _GatherSlices.apply(x, group)


# ---------------------------------------------------------------------------------------------- rows of the trainer


def gather_rows(data: Any, group: dist.ProcessGroup | None, slices: int = 1) -> Any:
    """The DataProto rows of every rank of `group`, in rank order (own rows when group is None). With `slices`, each
    rank's rows are cut into that many equal slices and joined slice by slice (every rank's first slice, in rank
    order, then every rank's second, ...): an update's mini-batches of the joined rows then hold the rows the ranks'
    own mini-batches hold without the group, so the optimizer steps are those of ulysses_size=1."""
    if group is None:
        return data
    device = data.batch.device if data.batch is not None else None
    parts: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(parts, data.to("cpu") if device is not None else data, group=group)
    if slices > 1:
        pieces = [part.chunk(slices) for part in parts]
        parts = [piece[index] for index in range(slices) for piece in pieces]
    joined = DataProto.concat(parts)
    return joined.to(device) if device is not None else joined


def own_rows(data: Any, group: dist.ProcessGroup | None) -> Any:
    """This rank's share of rows gathered by `gather_rows`."""
    if group is None:
        return data
    return data.chunk(dist.get_world_size(group))[dist.get_rank(group)]
