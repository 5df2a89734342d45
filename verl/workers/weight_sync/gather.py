# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The source of every weight sync: the FSDP2 actor's parameters as full tensors under their checkpoint names.

Parameters are gathered one FSDP unit at a time (one all-gather each), cast to the engine's dtype and renamed to the
names of a saved checkpoint, which is what vLLM loads; the unit is resharded before the next is gathered, so the extra
memory is about one gathered layer. `iter_full_weights` yields every weight (a LoRA layer's merged with its adapters),
`iter_adapter_weights` the LoRA factors alone (rollout.lora_sync=adapters); `verl.workers.weight_sync.sync` streams
either into a sink.
"""

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
    """(name, tensor) of what `save_pretrained` writes and the engine needs: every parameter, then the persistent
    floating-point buffers (GLM-4.5V's routers keep their expert-score correction bias in one, Gemma 4 its layer
    scalars; the engine must get them). Integer buffers (position or index tables) are constants the engine builds
    itself, and the stream casts what it sends to the engine's dtype."""
    yield from module.named_parameters(remove_duplicate=False)
    for name, buffer in module.named_buffers(remove_duplicate=False):
        owner_name, _, leaf = name.rpartition(".")
        if buffer.is_floating_point() and leaf not in module.get_submodule(owner_name)._non_persistent_buffers_set:
            yield name, buffer


def checkpoint_names(module: nn.Module) -> dict[str, str]:
    """Map each parameter (and persistent buffer) name of `module` to the name it has in a saved checkpoint, which is
    what vLLM loads.

    transformers 5 renames some architectures' modules at load time (Qwen2-VL: `model.layers` is stored but the
    module is `model.language_model.layers`, `visual` becomes `model.visual`) and reverts that on save. The same
    reversal is applied here, one name at a time. A parameter that transformers fused from several checkpoint tensors
    (a mixture-of-experts layer's experts, one tensor per layer) keeps its own name here: the stream splits it into
    the checkpoint's tensors (`fused_parameters`).
    """
    mapping = {}
    for name, param in _saved_tensors(module):
        if is_adapter_param(name):  # LoRA: merged into its base weight, which keeps the base model's name
            continue
        clean, reverted = _reverted_names(module, name, param)
        mapping[name] = reverted[0] if len(reverted) == 1 else clean
    return mapping


def fused_parameters(module: nn.Module, names: dict[str, str]) -> dict[str, str]:
    """The parameters among `names` that transformers fused from several checkpoint tensors, each with its name as
    transformers' conversion knows it (e.g. `model.layers.0.mlp.experts.gate_up_proj`, from every expert's gate and
    up projections)."""
    fused = {}
    for name, param in _saved_tensors(module):
        if name in names:
            clean, reverted = _reverted_names(module, name, param)
            if len(reverted) > 1:
                fused[name] = clean
    return fused


ENGINE_MAPS_MODULE_NAMES: tuple[str, ...] = ("internvl", "llava_onevision")
"""Model types whose parameters go to the engine under their module names: vLLM's class maps those itself
(`model.language_model.`, `model.vision_tower.`, ... in its hf_to_vllm_mapper), while transformers 5.19 reverts them
only for a model that from_pretrained loaded. The actor of an FSDP run is built on the meta device (rank-0
initialisation), and its reverted names are found in no checkpoint (`model.language_model.model.layers.`)."""


def _reverted_names(module: nn.Module, name: str, param: torch.Tensor) -> tuple[str, list[str]]:
    """A parameter's name without wrapper prefixes, and the checkpoint names transformers' reverse conversion gives
    it (one for a renamed parameter, several for a fused one); shapes only, no data."""
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
    """Which FSDP unit gathers which of the streamed parameters, found once per module and set of names.

    A parameter belongs to the innermost unit whose module contains it. Names outside every unit (a module that is
    not sharded at all) come last, under None. Parameters are looked up through their owning module at each use,
    so the plan holds no tensor and stays valid when offloading or loading a checkpoint replaces them.
    """
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
    """(parameter names, name -> full tensor) for one FSDP unit at a time, gathered by one all-gather (`unshard`).

    FSDP2 gathers a unit's parameters in its compute dtype. A gathered tensor is used when that loses nothing: it is
    in the parameter's own dtype, or in the target `dtype` (the same rounding as casting the full tensor) and the
    name is not in `plan.exact` (LoRA factors and bases, merged in float32). Any other parameter is gathered on its
    own, in its own dtype. Each unit is resharded before the next one is gathered, so the extra memory is about one
    gathered unit. Collective: every rank must ask for the same tensors in the same order.
    """
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
    """Yield (checkpoint name, full tensor in `dtype`) one parameter (or persistent buffer) at a time; count bytes
    into `stats`.

    Parameters are gathered one FSDP unit (a decoder layer, the root) at a time, one all-gather each, rather than one
    collective per parameter. A tied parameter (the embedding reused as lm_head) is sent under each of its names: on
    CPU vLLM keeps a repacked copy of lm_head for its matmul that only a load of `lm_head.weight` refreshes. A LoRA
    layer's weight is sent merged (W + scaling x B @ A, under the base model's name), or with `merge_lora=False` as
    the base weight alone; its adapters are not sent on their own. A parameter transformers fused from several
    checkpoint tensors (mixture-of-experts experts) is sent as those tensors, split by transformers' own reverse
    conversion (what `save_pretrained` writes, the names vLLM loads); one its checkpoints store transposed
    (transformers_compat.checkpoint_layout) is sent transposed. The time spent here (gathering, casting,
    merging, splitting) is added to `stats["gather_seconds"]`, so the engine's share of a sync is the rest.
    """
    from transformers.core_model_loading import revert_weight_conversion

    plan = _cached_stream_plan(module, names)
    model_type = getattr(getattr(module, "config", None), "model_type", None)
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
                yield checkpoint_name, _counted(piece.detach().to(dtype), stats, clock)
                clock = time.perf_counter()
    stats["gather_seconds"] = stats.get("gather_seconds", 0.0) + time.perf_counter() - clock


def iter_adapter_weights(
    module: nn.Module, dtype: torch.dtype, names: dict[str, str], stats: dict[str, float]
) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield (PEFT name, full tensor in `dtype`) for every LoRA factor; `names` maps the factors to their PEFT names
    (opt_in.adapter_checkpoint_names). Collective, one all-gather per FSDP unit as `iter_full_weights`.

    The factors are taken from the unit's gather in the compute dtype when that is `dtype`: the engine holds its
    adapters in its own dtype, so this rounds them as loading would.
    """
    plan = _cached_stream_plan(module, names)._replace(exact=set())
    clock = time.perf_counter()
    for group, full in _gathered(plan, dtype):
        for name in group:
            tensor = _counted(full(name).detach().to(dtype), stats, clock)
            yield names[name], tensor
            clock = time.perf_counter()
    stats["gather_seconds"] = stats.get("gather_seconds", 0.0) + time.perf_counter() - clock
