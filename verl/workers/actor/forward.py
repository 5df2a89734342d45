# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""From a DataProto of rollouts to per-response-token model outputs, for the actor, the reference and the critic:
`make_micro_batches` splits by rows or by a token budget (same count on every rank, order restorable);
`forward_response` runs padded (all-padding columns trimmed) or packed (one row, varlen attention only) and returns
(B, R) values, zero on padding, computing logits only at response-predicting positions."""

from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from verl.algorithms.core_algos import loss_token_counts
from verl.data.multimodal import process_media
from verl.models import ulysses
from verl.models.gated_deltanet import linear_attention_is_exact
from verl.models.glm_video import frames_as_images, needs_frames_as_images
from verl.models.packed_attention import packed_sequence_kwargs
from verl.protocol import DataProto, to_object_array
from verl.utils import device as device_utils
from verl.utils.seqlen_balancing import dynamic_micro_batches, padded_micro_batches, restore_order
from verl.utils.torch_functional import positions_from_mask, unpad_input


MODEL_INPUT_KEYS: tuple[str, ...] = ("input_ids", "attention_mask", "position_ids", "responses")
"""Tensor columns every forward needs (docs/data_flow.md)."""

PACKING_EXACT_ATTENTION: tuple[str, ...] = ("varlen", "flash_attention_2", "flash_attention_3")
"""Attention implementations with a variable-length kernel, where packed sequences are exact and cost only their own
tokens (sdpa and eager would need a dense block-diagonal mask, slower than padding: they run padded)."""


def process_multi_modal_inputs(data: DataProto, processor: Any, kept: dict[Any, Any] | None = None) -> None:
    """Add the non-tensor column `multi_modal_inputs`: per row, the processor's tensors for its `multi_modal_data`,
    once per prompt (`uid`); a batch that has the column already is left as is (reused by later phases). `kept`, a
    worker's own, holds them from one call to the next by uid (a step's log-prob, reference and update calls each get
    the batch afresh, and processed every image again); it is emptied by a batch none of whose prompts it holds (the
    next step's)."""
    if "multi_modal_data" not in data.non_tensor_batch or "multi_modal_inputs" in data.non_tensor_batch:
        return
    if processor is None:
        if any(row for row in data.non_tensor_batch["multi_modal_data"]):
            raise ValueError(
                "The batch has images or videos in multi_modal_data but the worker has no processor; use a "
                "vision-language model whose directory has a preprocessor_config.json."
            )
        return  # a text model with an all-empty multi_modal_data column
    uids = data.non_tensor_batch.get("uid")
    cache: dict[Any, dict[str, torch.Tensor]] = {} if kept is None or uids is None else kept
    if cache and not any(uid in cache for uid in uids):
        cache.clear()
    rows = []
    for index, multi_modal_data in enumerate(data.non_tensor_batch["multi_modal_data"]):
        key = uids[index] if uids is not None else index
        if key not in cache:
            cache[key] = process_media(multi_modal_data or {}, processor)
        rows.append(cache[key])
    data.non_tensor_batch["multi_modal_inputs"] = to_object_array(rows)


def _batch_multi_modal_inputs(micro: DataProto, device: torch.device, model_config: Any) -> dict[str, torch.Tensor]:
    """The rows' vision inputs concatenated in row order (the order the model fills image tokens), on `device`;
    GLM-4.xV's videos as their frames' images when the micro-batch also has images (verl.models.glm_video)."""
    if "multi_modal_inputs" not in micro.non_tensor_batch:
        if any(row for row in micro.non_tensor_batch.get("multi_modal_data", ())):
            raise ValueError(
                "The batch has multi_modal_data but no multi_modal_inputs; call "
                "verl.workers.actor.forward.process_multi_modal_inputs(data, processor) before the forward."
            )
        return {}
    rows = list(micro.non_tensor_batch["multi_modal_inputs"])
    if needs_frames_as_images(model_config, rows):
        input_ids, attention_mask = micro.batch["input_ids"], micro.batch["attention_mask"].bool()
        rows = [
            frames_as_images(model_config, input_ids[index][attention_mask[index]], row, index) if row else row
            for index, row in enumerate(rows)
        ]
    parts: dict[str, list[torch.Tensor]] = defaultdict(list)
    for row in rows:
        for key, value in (row or {}).items():
            parts[key].append(value)
    return {key: _concat_rows(values).to(device, non_blocking=True) for key, values in parts.items()}


def _concat_rows(values: list[torch.Tensor]) -> torch.Tensor:
    """The rows' tensors of one input end to end, each zero-padded at the end of every dimension but the first to the
    largest row's, as the processors pad a batch: LLaVA-OneVision's tiles per image, Pixtral's image heights and
    widths (its `image_sizes` say what is real)."""
    sizes = [max(value.shape[dim] for value in values) for dim in range(1, values[0].dim())]
    padded = []
    for value in values:
        pads = [(0, size - value.shape[dim + 1]) for dim, size in enumerate(sizes)]
        padded.append(
            F.pad(value, [side for pad in reversed(pads) for side in pad]) if any(p for _, p in pads) else value
        )
    return torch.cat(padded, dim=0)


def packing_obstacle(module: nn.Module) -> str:
    """Why the model cannot run packed sequences exactly, or "" when it can: that needs varlen attention
    (PACKING_EXACT_ATTENTION) and recurrent mixers (Qwen3.5's Gated DeltaNet) that restart at every boundary."""
    attention = getattr(getattr(module, "config", None), "_attn_implementation", None)
    if attention not in PACKING_EXACT_ATTENTION:
        return (
            f"attention {attention!r} has no varlen kernel for packed sequences (model.attn_implementation=auto has)"
        )
    if not linear_attention_is_exact(module):
        return (
            "the model has token mixers that carry state along the row (Mamba, short convolutions), which packing "
            "would leak from one sequence into the next"
        )
    return ""


def packing_is_exact(module: nn.Module) -> bool:
    return not packing_obstacle(module)


UPDATE_MICRO_BATCH_DEFAULTS = {"cpu": 8, "cuda": 4}
"""Rows per update micro-batch when the config leaves it unset, by device (see ActorConfig's docstring)."""

CPU_PER_MICRO_BATCH_GATHER_DEFAULT = 16
"""The CPU's default with fsdp.gather_once_per_pass off: larger micro-batches spread the per-micro-batch gathers."""


def update_micro_batch_size(configured: int | None, samples: int, dynamic: bool, gather_once: bool = True) -> int:
    """The configured update micro-batch size, or this device's default (`gather_once`: fsdp.gather_once_per_pass
    resolved); without dynamic batching the default is lowered to a divisor of `samples` (this rank's mini-batch)."""
    if configured is not None:
        return configured
    device_type = device_utils.get_device_type()
    size = UPDATE_MICRO_BATCH_DEFAULTS.get(device_type, 4)
    if device_type == "cpu" and not gather_once:
        size = CPU_PER_MICRO_BATCH_GATHER_DEFAULT
    if dynamic or samples < 1:
        return size
    return max(d for d in range(1, min(size, samples) + 1) if samples % d == 0)


def make_micro_batches(
    data: DataProto, micro_batch_size: int, dynamic: bool, group: dist.ProcessGroup | None = None, padded: bool = False
) -> tuple[list[DataProto], torch.Tensor | None]:
    """Split into micro-batches of `micro_batch_size` rows, or dynamically by a budget of micro_batch_size x padded
    length tokens (valid tokens when packed, rows x trimmed width when padded); returns them and, when dynamic, the
    permutation restoring the original order of concatenated outputs."""
    if micro_batch_size < 1:
        raise ValueError(f"micro_batch_size_per_device must be positive, got {micro_batch_size}.")
    if not dynamic:
        return data.split(micro_batch_size), None
    attention_mask = data.batch["attention_mask"]
    budget = micro_batch_size * attention_mask.shape[-1]
    if padded:
        response_len = data.batch["responses"].shape[-1]
        prompt_lens = attention_mask[:, :-response_len].sum(dim=-1)
        response_lens = attention_mask[:, -response_len:].sum(dim=-1)
        partitions = padded_micro_batches(prompt_lens, response_lens, budget, group=group)
    else:
        partitions = dynamic_micro_batches(attention_mask.sum(dim=-1), budget, group=group)
    micro_batches = [data[np.asarray(part, dtype=np.int64)] for part in partitions]
    return micro_batches, restore_order(partitions)


def select_model_inputs(data: DataProto, extra_keys: tuple[str, ...]) -> DataProto:
    """The columns a forward (plus `extra_keys`) needs, with an error naming a missing one; shares the tensors."""
    keys = list(MODEL_INPUT_KEYS) + list(extra_keys)
    missing = [key for key in keys if data.batch is None or key not in data.batch.keys()]
    if missing:
        raise KeyError(f"The batch is missing column(s) {', '.join(missing)}; see docs/data_flow.md for the keys.")
    non_tensor_keys = [key for key in ("multi_modal_inputs", "multi_modal_data") if key in data.non_tensor_batch]
    return data.select(batch_keys=keys, non_tensor_batch_keys=non_tensor_keys)


def global_loss_counts(micro_batches: list[DataProto], group: dist.ProcessGroup | None = None) -> tuple[float, float]:
    """Response tokens and sequences of a mini-batch over all micro-batches and data-parallel ranks."""
    counts = torch.zeros(2, dtype=torch.float64)
    for micro in micro_batches:
        tokens, sequences = loss_token_counts(micro.batch["response_mask"])
        counts += torch.tensor([tokens, sequences], dtype=torch.float64)
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(counts, op=dist.ReduceOp.SUM, group=group)
    return float(counts[0]), float(counts[1])


Head = Callable[[torch.Tensor, torch.Tensor], dict[str, torch.Tensor]]


def _position_ids_for_model(position_ids: torch.Tensor) -> torch.Tensor:
    """Batch-first (B, 3, L) mrope positions from the DataProto become the model's (3, B, L)."""
    return position_ids.transpose(0, 1) if position_ids.dim() == 3 else position_ids


DENSE_ROWS_RUN_PADDED: frozenset[str] = frozenset({"cuda"})
"""Devices where a packed micro-batch without padding in its computed columns runs as padded rows instead: on CUDA
such full rows run faster padded (cuDNN's fused sdpa) than packed; on the CPU the two are even."""


def runs_padded(micro: DataProto, padding_free: bool) -> bool:
    """Whether `forward_response` runs this micro-batch padded: always without `padding_free`; with it, only on a
    DENSE_ROWS_RUN_PADDED device, outside Ulysses, when no row has padding within the computed columns."""
    return _padded_columns(micro, padding_free) is not None


def _padded_columns(micro: DataProto, padding_free: bool) -> tuple[int, int] | None:
    """The [start, end) columns of the padded forward that `runs_padded` chooses, or None for the packed one."""
    if padding_free and (
        device_utils.get_device_type() not in DENSE_ROWS_RUN_PADDED or ulysses.active_group() is not None
    ):
        return None
    attention_mask = micro.batch["attention_mask"]
    start, end = _trimmed_columns(attention_mask, micro.batch["responses"].shape[-1])
    if padding_free and not bool(attention_mask[:, start:end].bool().all()):
        return None
    return start, end


def computed_tokens_mask(micro: DataProto, padding_free: bool) -> torch.Tensor | None:
    """Which of the tokens `forward_response` runs the model on are real: the attention mask of the padded forward's
    columns, None for the packed one (it holds valid tokens only). Per-token statistics of the forward (MoE router
    counts) leave padding out with it."""
    columns = _padded_columns(micro, padding_free)
    return None if columns is None else micro.batch["attention_mask"][:, columns[0] : columns[1]]


def forward_response(module: nn.Module, micro: DataProto, padding_free: bool, head: Head) -> dict[str, torch.Tensor]:
    """Run the model on a micro-batch and apply `head(logits (N, V), labels (N,)) -> values (N,)` at the positions
    predicting response tokens; returns name -> (B, R), zero on padding, the same in padded and packed modes."""
    extra = _batch_multi_modal_inputs(micro, micro.batch["input_ids"].device, getattr(module, "config", None))
    columns = _padded_columns(micro, padding_free)
    if columns is not None:
        return _forward_padded(module, micro, head, extra, columns)
    return _forward_packed(module, micro, head, extra)


def _trimmed_columns(attention_mask: torch.Tensor, response_len: int) -> tuple[int, int]:
    """[start, end) of the columns a padded forward computes: those with a valid token in some row, and at least the
    last prompt column (it predicts the first response token) and the first response column."""
    prompt_len = attention_mask.shape[-1] - response_len
    valid_columns = torch.nonzero(attention_mask.any(dim=0)).flatten().tolist()
    return min(valid_columns[0], prompt_len - 1), max(valid_columns[-1] + 1, prompt_len + 1)


def _forward_padded(
    module: nn.Module, micro: DataProto, head: Head, extra: dict, columns: tuple[int, int]
) -> dict[str, torch.Tensor]:
    """Padded rows cut to the `columns` with a valid token in some row; only response-predicting positions reach the
    LM head."""
    batch = micro.batch
    attention_mask, responses = batch["attention_mask"], batch["responses"]
    num_rows, seq_len = attention_mask.shape
    response_len = responses.shape[-1]
    prompt_len = seq_len - response_len
    start, end = columns  # _trimmed_columns
    kept = end - prompt_len  # response columns computed; the rest are padding in every row
    output = module(
        input_ids=batch["input_ids"][:, start:end],
        attention_mask=attention_mask[:, start:end],
        position_ids=_position_ids_for_model(batch["position_ids"][..., start:end]),
        use_cache=False,
        # position t predicts token t + 1: the columns before each kept response token
        logits_to_keep=torch.arange(prompt_len - 1 - start, end - 1 - start, device=attention_mask.device),
        **extra,
    )
    logits = output.logits  # (B, kept, V), contiguous: flattening it is a view
    values = head(logits.reshape(-1, logits.shape[-1]), responses[:, :kept].reshape(-1))
    response_valid = attention_mask[:, -response_len:].bool()
    zeros_after = (0, response_len - kept)  # the response columns not computed
    return {name: F.pad(value.reshape(num_rows, kept), zeros_after) * response_valid for name, value in values.items()}


def _forward_packed(module: nn.Module, micro: DataProto, head: Head, extra: dict) -> dict[str, torch.Tensor]:
    """All valid tokens in one row, positions restarting per sequence, no attention mask or KV cache; the varlen
    kernel reads the boundaries from `cu_seq_lens_*`."""
    batch = micro.batch
    input_ids, attention_mask = batch["input_ids"], batch["attention_mask"]
    position_ids, responses = batch["position_ids"], batch["responses"]
    num_rows, seq_len = input_ids.shape
    response_len = responses.shape[-1]
    indices = unpad_input(attention_mask)  # flat positions of the valid tokens in the (B * L) grid
    columns = indices % seq_len
    keep = (columns >= seq_len - response_len - 1) & (columns < seq_len - 1)  # positions predicting a response token
    text_positions = positions_from_mask(attention_mask).reshape(-1)[indices].unsqueeze(0)
    if position_ids.dim() == 3:  # mrope: (4, 1, T) = text positions (they mark the packing) + the 3 rope rows
        rope_positions = position_ids.transpose(0, 1).reshape(position_ids.shape[1], -1)[:, indices]
        packed_positions = torch.cat([text_positions, rope_positions], dim=0).unsqueeze(1)
    else:
        packed_positions = text_positions
    targets = indices[keep]
    labels = input_ids.reshape(-1)[targets + 1]
    packed_ids = input_ids.reshape(-1)[indices].unsqueeze(0)
    group = ulysses.active_group()
    if group is not None:
        values = _sequence_parallel_values(
            module, packed_ids, packed_positions, keep, labels, attention_mask, head, group, extra
        )
    else:
        output = module(
            input_ids=packed_ids,
            position_ids=packed_positions,
            use_cache=False,
            logits_to_keep=torch.nonzero(keep).flatten(),
            **packed_sequence_kwargs(attention_mask.sum(dim=-1)),
            **extra,
        )
        values = head(output.logits[0], labels)
    response_valid = attention_mask[:, -response_len:].bool()
    result = {}
    for name, value in values.items():
        full = value.new_zeros(num_rows * seq_len)
        full[targets] = value
        padded = full.reshape(num_rows, seq_len)[:, -response_len - 1 : -1]
        result[name] = padded * response_valid
    return result


def _sequence_parallel_values(
    module: nn.Module,
    packed_ids: torch.Tensor,
    positions: torch.Tensor,
    keep: torch.Tensor,
    labels: torch.Tensor,
    attention_mask: torch.Tensor,
    head: Head,
    group: dist.ProcessGroup,
    extra: dict,
) -> dict[str, torch.Tensor]:
    """`head`'s values at the kept positions of a packed row shared by the ranks of `group` (Ulysses): the row is
    padded to a multiple of the group size (as a sequence of its own), each rank runs its slice, and the values are
    gathered. A VLM gets the whole row to embed its images; its language model takes the slice (a ulysses hook)."""
    size, rank = dist.get_world_size(group), dist.get_rank(group)
    total = packed_ids.shape[1]
    pad = -total % size
    lengths = attention_mask.sum(dim=-1)
    if pad:
        packed_ids = torch.cat([packed_ids, packed_ids.new_zeros(1, pad)], dim=1)
        filler = torch.arange(pad, device=positions.device).expand(*positions.shape[:-1], pad)
        positions = torch.cat([positions, filler], dim=-1)
        keep = torch.cat([keep, keep.new_zeros(pad)])
        lengths = torch.cat([lengths, lengths.new_full((1,), pad)])
    width = (total + pad) // size
    local = slice(rank * width, (rank + 1) * width)
    local_keep = keep[local]
    all_labels = labels.new_zeros(total + pad)
    all_labels[keep] = labels
    common = {
        "use_cache": False,
        "logits_to_keep": torch.nonzero(local_keep).flatten(),
        **packed_sequence_kwargs(lengths),
    }
    if positions.dim() == 3 or extra:
        with ulysses.language_model_slice(module, local):
            output = module(input_ids=packed_ids, position_ids=positions, **common, **extra)
    else:
        output = module(input_ids=packed_ids[:, local], position_ids=positions[:, local], **common)
    local_values = head(output.logits[0], all_labels[local][local_keep])
    values = {}
    for name, value in local_values.items():
        slot = value.new_zeros(width)
        slot[local_keep] = value
        values[name] = ulysses.gather_slices(slot, group)[keep]
    return values
