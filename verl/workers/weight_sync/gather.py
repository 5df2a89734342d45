# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The source of every weight sync: the FSDP2 actor's parameters as full tensors under their checkpoint names (what
vLLM loads), cast to the engine's dtype, gathered one FSDP unit at a time (one all-gather each, resharded before the
next). `iter_full_weights` yields every weight (LoRA merged), `iter_adapter_weights` the LoRA factors alone."""

import functools
import time
import weakref
from collections.abc import Callable, Iterator
from typing import NamedTuple

import torch
from torch import nn
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor

from verl.models.lora import base_name, is_adapter_param, lora_merge_plan, merge_weight
from verl.models.transformers_compat import checkpoint_layout
from verl.workers.rollout.vllm_rollout import on_gpu


# Prefixes that wrappers insert into parameter names (activation checkpointing, torch.compile, FSDP1).
_WRAPPER_PREFIXES = ("_checkpoint_wrapped_module.", "_orig_mod.", "_fsdp_wrapped_module.")


def _strip_wrappers(name: str) -> str:
    for prefix in _WRAPPER_PREFIXES:
        name = name.replace(prefix, "")
    return name


def _saved_tensors(module: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) of what `save_pretrained` writes and the engine needs: parameters, then persistent
    floating-point buffers (e.g. GLM-4.5V's expert-score correction bias). Integer buffers (position or index tables)
    are left out: the engine builds them itself, and the stream would cast them to its dtype."""
    yield from module.named_parameters(remove_duplicate=False)
    for name, buffer in module.named_buffers(remove_duplicate=False):
        owner_name, _, leaf = name.rpartition(".")
        if buffer.is_floating_point() and leaf not in module.get_submodule(owner_name)._non_persistent_buffers_set:
            yield name, buffer


def checkpoint_names(module: nn.Module) -> dict[str, str]:
    """Map each parameter (and persistent buffer) name to its checkpoint name, reversing transformers 5's load-time
    renames (Qwen2-VL: `model.language_model.layers` is stored as `model.layers`). A fused parameter (MoE experts)
    keeps its own name; the stream splits it (`fused_parameters`)."""
    mapping = {}
    for name, param in _saved_tensors(module):
        if is_adapter_param(name):  # LoRA: merged into its base weight, which keeps the base model's name
            continue
        clean, reverted = _reverted_names(module, name, param)
        mapping[name] = reverted[0] if len(reverted) == 1 else clean
    return mapping


def fused_parameters(module: nn.Module, names: dict[str, str]) -> dict[str, str]:
    """The parameters among `names` that transformers fused from several checkpoint tensors, each with its name as
    transformers' conversion knows it (e.g. `...mlp.experts.gate_up_proj`)."""
    fused = {}
    for name, param in _saved_tensors(module):
        if name in names:
            clean, reverted = _reverted_names(module, name, param)
            if len(reverted) > 1:
                fused[name] = clean
    return fused


ENGINE_MAPS_MODULE_NAMES: tuple[str, ...] = ("internvl", "llava_onevision", "mistral3", "gemma3")
"""Model types sent under their module names: vLLM's hf_to_vllm_mapper maps those itself, while transformers reverts
them only for a model from_pretrained loaded (an FSDP actor is built on the meta device), giving names no checkpoint
has."""


def _reverted_names(module: nn.Module, name: str, param: torch.Tensor) -> tuple[str, list[str]]:
    """A parameter's name without wrapper prefixes, and its checkpoint names from transformers' reverse conversion (one,
    or several for a fused one); shapes only, no data."""
    from transformers.core_model_loading import revert_weight_conversion

    clean = base_name(_strip_wrappers(name))
    if getattr(getattr(module, "config", None), "model_type", None) in ENGINE_MAPS_MODULE_NAMES:
        return clean, [clean]
    return clean, list(revert_weight_conversion(module, {clean: torch.empty(param.shape, device="meta")}))


def _full(param: torch.Tensor) -> torch.Tensor:
    """The whole tensor of a (possibly FSDP-sharded) parameter: an all-gather over its mesh for a DTensor."""
    if not isinstance(param, DTensor):
        return param
    if on_gpu() and param.device.type == "cpu":  # CPU-offloaded shards: gather over NCCL on the device
        param = DTensor.from_local(
            param.to_local().cuda(),
            param.device_mesh,
            param.placements,
            run_check=False,
            shape=param.shape,  # FSDP shards may be uneven: without the global shape each rank would infer its own
            stride=param.stride(),
        )
    return param.full_tensor()


class _Slot(NamedTuple):
    name: str  # parameter name in the FSDP module
    owner: nn.Module  # the module that registers it: FSDP2 swaps its sharded and gathered tensors there
    leaf: str  # its attribute name on `owner`


class _StreamPlan(NamedTuple):
    units: list[tuple[FSDPModule | None, list[_Slot]]]  # FSDP units (outermost first) and what each gathers
    merge_plan: dict[str, tuple[str, str, float]]  # LoRA: base weight -> (A, B, scaling)
    exact: set[str]  # names that are never taken from a rounded all-gather (LoRA factors and bases)
    fused: dict[str, str]  # parameters sent as several checkpoint tensors (fused_parameters)


def _stream_plan(module: nn.Module, names: dict[str, str]) -> _StreamPlan:
    """Which FSDP unit (the innermost containing it; None for none, last) gathers which streamed parameter. Holds no
    tensor (looked up through the owner at each use), so offloading or checkpoint loading never makes it stale."""
    params = [name for name, _ in _saved_tensors(module)]
    merge_plan = lora_merge_plan(module) if any(is_adapter_param(name) for name in params) else {}
    exact = {name for base, (a_name, b_name, _) in merge_plan.items() for name in (base, a_name, b_name)}
    needed = [name for name in params if name in names]
    needed += sorted({name for base in needed if base in merge_plan for name in merge_plan[base][:2]} - set(needed))
    units = [(prefix, unit) for prefix, unit in module.named_modules() if isinstance(unit, FSDPModule)]
    owned: dict[int, list[_Slot]] = {index: [] for index in range(len(units))}
    loose: list[_Slot] = []
    for name in needed:
        owner_name, _, leaf = name.rpartition(".")
        slot = _Slot(name, module.get_submodule(owner_name), leaf)
        owners = [i for i, (prefix, _) in enumerate(units) if not prefix or name.startswith(prefix + ".")]
        (owned[max(owners, key=lambda i: len(units[i][0]))] if owners else loose).append(slot)
    plan: list[tuple[FSDPModule | None, list[_Slot]]] = [(unit, owned[i]) for i, (_, unit) in enumerate(units)]
    return _StreamPlan(
        [(unit, group) for unit, group in plan if group] + ([(None, loose)] if loose else []),
        merge_plan,
        exact,
        fused_parameters(module, names),
    )


_PLANS: "weakref.WeakKeyDictionary[nn.Module, tuple[tuple[tuple[str, str], ...], _StreamPlan]]" = (
    weakref.WeakKeyDictionary()
)


def _cached_stream_plan(module: nn.Module, names: dict[str, str]) -> _StreamPlan:
    key = tuple(names.items())
    cached = _PLANS.get(module)
    if cached is None or cached[0] != key:
        cached = (key, _stream_plan(module, names))
        _PLANS[module] = cached
    return cached[1]


def _unit_tensor(gathered: torch.Tensor, master: torch.Tensor, exact: bool, dtype: torch.dtype) -> torch.Tensor:
    """The full tensor of a parameter while its FSDP unit is unsharded (see `_gathered`): `gathered` is what the
    module holds now, `master` the sharded parameter it held before."""
    if isinstance(gathered, DTensor):  # not part of this unit's all-gather
        return _full(gathered)
    if gathered.dtype == master.dtype or (gathered.dtype == dtype and not exact):
        # `reshard` frees the gathered storage while the engine may still hold the tensor: hand out a copy, unless
        # the cast to `dtype` makes one anyway
        return gathered.detach().clone() if gathered.dtype == dtype else gathered.detach()
    return _full(master)


def _gathered(plan: _StreamPlan, dtype: torch.dtype) -> Iterator[tuple[list[str], Callable[[str], torch.Tensor]]]:
    """(parameter names, name -> full tensor) per FSDP unit, gathered by one all-gather (`unshard`) in the compute
    dtype, used where that loses nothing (the parameter's dtype, or `dtype` outside `plan.exact`); others are gathered
    alone. Collective: every rank must ask for the same tensors in the same order."""
    for unit, group in plan.units:
        slots = {slot.name: slot for slot in group}
        masters = {slot.name: getattr(slot.owner, slot.leaf) for slot in group}  # before the unit is gathered
        if unit is None:
            yield list(slots), functools.partial(_loose_tensor, masters)
            continue
        unit.unshard()
        try:
            yield list(slots), functools.partial(_gathered_tensor, slots, masters, plan.exact, dtype)
        finally:
            unit.reshard()


def _loose_tensor(masters: dict[str, torch.Tensor], name: str) -> torch.Tensor:
    return _full(masters[name])


def _gathered_tensor(
    slots: dict[str, _Slot], masters: dict[str, torch.Tensor], exact: set[str], dtype: torch.dtype, name: str
) -> torch.Tensor:
    slot = slots[name]
    return _unit_tensor(getattr(slot.owner, slot.leaf), masters[name], name in exact, dtype)


def _counted(tensor: torch.Tensor, stats: dict[str, float], since: float) -> torch.Tensor:
    """`tensor`, counted into a weight stream's `stats` (tensors, bytes, largest, gather time since `since`)."""
    nbytes = tensor.numel() * tensor.element_size()
    stats["num_params"] += 1
    stats["bytes"] += nbytes
    stats["max_param_bytes"] = max(stats["max_param_bytes"], nbytes)
    stats["gather_seconds"] = stats.get("gather_seconds", 0.0) + time.perf_counter() - since
    return tensor


def iter_full_weights(
    module: nn.Module, dtype: torch.dtype, names: dict[str, str], stats: dict[str, float], merge_lora: bool = True
) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield (checkpoint name, full tensor in `dtype`, or float32 for what the model keeps in float32) one parameter
    (or buffer) at a time; count into `stats`.

    A tied parameter goes under each name (vLLM's CPU lm_head copy is refreshed only by `lm_head.weight`). LoRA
    weights go merged (W + scaling x B @ A) under the base name, or as the base alone (`merge_lora=False`). Fused
    parameters (MoE experts) are split by transformers' reverse conversion; one stored transposed is sent transposed
    (checkpoint_layout)."""
    from transformers.core_model_loading import revert_weight_conversion

    plan = _cached_stream_plan(module, names)
    model_type = getattr(getattr(module, "config", None), "model_type", None)
    # what transformers (and vLLM) keep in float32 whatever the model's dtype: a router's correction bias, whose
    # rounding would change which experts are picked
    fp32 = set(getattr(module, "_keep_in_fp32_modules_strict", None) or ())
    clock = time.perf_counter()
    for group, full in _gathered(plan, dtype):
        for name in group:
            if name not in names:  # a LoRA factor, merged into its base weight
                continue
            tensor = full(name)
            if merge_lora and name in plan.merge_plan:
                a_name, b_name, scaling = plan.merge_plan[name]
                tensor = merge_weight(tensor, full(a_name), full(b_name), scaling)
            if name in plan.fused:
                pieces = revert_weight_conversion(module, {plan.fused[name]: tensor.detach()}).items()
            else:  # Qwen3-VL-MoE's experts: transposed, as its checkpoints store them
                pieces = [(names[name], checkpoint_layout(model_type, names[name], tensor))]
            for checkpoint_name, piece in pieces:
                wire = torch.float32 if fp32.intersection(checkpoint_name.split(".")) else dtype
                yield checkpoint_name, _counted(piece.detach().to(wire), stats, clock)
                clock = time.perf_counter()
    stats["gather_seconds"] = stats.get("gather_seconds", 0.0) + time.perf_counter() - clock


def iter_adapter_weights(
    module: nn.Module, dtype: torch.dtype, names: dict[str, str], stats: dict[str, float]
) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield (PEFT name, full tensor in `dtype`) for every LoRA factor (`names`: opt_in.adapter_checkpoint_names);
    collective. Factors come from the gather in the compute dtype (the engine rounds them to its dtype anyway)."""
    plan = _cached_stream_plan(module, names)._replace(exact=set())
    clock = time.perf_counter()
    for group, full in _gathered(plan, dtype):
        for name in group:
            tensor = _counted(full(name).detach().to(dtype), stats, clock)
            yield names[name], tensor
            clock = time.perf_counter()
    stats["gather_seconds"] = stats.get("gather_seconds", 0.0) + time.perf_counter() - clock
