# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The opt-in sinks that have never run on a GPU: the direct copy and the adapters-only LoRA sync.

`weight_sync=direct` (`EngineCopy`, docs/gpu.md) copies the actor's tensors into the engine's own parameters, not
through vLLM's loader; fused projections (`packed_modules_mapping`: q/k/v, gate/up) stack their parts along dim 0 in
the mapping's order, and a tied head has no parameter. Text models with tensor_parallel_size=1 only; the CPU engine
repacks its linear weights, so there the layout is refused.

`lora_sync=adapters` (`EngineAdapter`): the base goes once through the loader, then only LoRA factors. vLLM loads
adapters only from a PEFT folder: each sync writes one under TMPDIR, loads it under a new id (vLLM keys its adapter
and prefix caches by id) and deletes it at once (vLLM keeps the adapter in memory), so a killed worker leaves no files.
"""

import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from verl.models.lora import ADAPTER_CONFIG_FILE, ADAPTER_WEIGHTS_FILE, adapter_config_dict, is_adapter_param
from verl.utils import device as device_utils
from verl.workers.rollout import vllm_compat
from verl.workers.weight_sync import Weights


@dataclass(frozen=True)
class Placement:
    """Rows [offset, offset + rows) of the engine parameter `engine_name` hold one actor parameter."""

    engine_name: str
    offset: int
    rows: int


def engine_placements(
    actor_shapes: Mapping[str, Sequence[int]],
    engine_names: Iterable[str],
    packed: Mapping[str, Sequence[str]],
    tied_head: bool,
) -> dict[str, Placement]:
    """The placement of every actor parameter (a tied `lm_head.weight` has none); KeyError naming one that lands on
    no engine parameter (an unknown model: vLLM's loader must sync it)."""
    names = set(engine_names)
    part_of = {part: (fused, list(parts)) for fused, parts in packed.items() for part in parts}
    placements: dict[str, Placement] = {}
    for name, shape in actor_shapes.items():
        module, _, leaf = name.rpartition(".")
        parent, _, projection = module.rpartition(".")
        if projection in part_of:
            fused, parts = part_of[projection]
            before = parts[: parts.index(projection)]
            offset = sum(int(actor_shapes[f"{parent}.{part}.{leaf}"][0]) for part in before)
            placement = Placement(f"{parent}.{fused}.{leaf}", offset, int(shape[0]))
        else:
            placement = Placement(name, 0, int(shape[0]) if len(shape) else 1)
        if placement.engine_name not in names:
            if tied_head and name.endswith("lm_head.weight"):
                continue
            raise KeyError(
                f"The actor's parameter {name} lands on no parameter of the engine ({placement.engine_name}); "
                "this model's layout is not known to the direct weight copy: vLLM's loader must sync it."
            )
        placements[name] = placement
    return placements


def layout_gaps(placements: Mapping[str, Placement], engine_shapes: Mapping[str, Sequence[int]]) -> list[str]:
    """Engine parameters the placements do not fill exactly: none lands there, or (where it has rows, unlike the CPU
    engine's repacked weights) the parts do not tile its rows."""
    rows: dict[str, list[tuple[int, int]]] = {}
    for placement in placements.values():
        rows.setdefault(placement.engine_name, []).append((placement.offset, placement.rows))
    gaps = []
    for name, shape in engine_shapes.items():
        parts = sorted(rows.get(name, []))
        if not parts:
            gaps.append(f"{name}: no actor parameter")
            continue
        if not shape or int(shape[0]) == 0:
            continue
        ends = [offset + count for offset, count in parts]
        tiles = parts[0][0] == 0 and all(end == nxt for end, (nxt, _) in zip(ends, parts[1:]))
        if not tiles or ends[-1] != int(shape[0]):
            gaps.append(f"{name}: rows {parts} do not tile its {int(shape[0])} rows")
    return gaps


class LayoutError(KeyError):
    """The engine's parameters do not take the actor's tensors by rows: the sync must use vLLM's loader."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def _check_rows(
    placements: Mapping[str, Placement], actor_shapes: Mapping[str, Sequence[int]], engine: Mapping
) -> None:
    for name, placement in placements.items():
        target = tuple(engine[placement.engine_name].shape)
        shape = tuple(int(size) for size in actor_shapes[name])
        if not target or target[1:] != shape[1:] or placement.offset + placement.rows > target[0]:
            raise LayoutError(
                f"The engine parameter {placement.engine_name} (shape {list(target)}) cannot take the actor's {name} "
                f"(shape {list(shape)}) at rows {placement.offset}..{placement.offset + placement.rows}: the engine "
                "keeps it in another layout (the CPU engine repacks its linear weights)."
            )


class EngineCopy:
    """The direct weight copy into one engine's parameters; `parameters()` gives them live by name (looked up each
    sync: never stale across sleep and wake). Raises LayoutError where the tensors do not fit by rows."""

    def __init__(
        self,
        parameters: Any,
        packed: Mapping[str, Sequence[str]],
        actor_shapes: Mapping[str, Sequence[int]],
        tied_head: bool,
    ) -> None:
        self.parameters = parameters
        engine = parameters()
        try:
            self.placements = engine_placements(actor_shapes, engine.keys(), packed, tied_head)
        except KeyError as error:
            raise LayoutError(error.args[0]) from None
        gaps = layout_gaps(self.placements, {name: tuple(param.shape) for name, param in engine.items()})
        if gaps:
            raise LayoutError(f"The actor's tensors do not fill the engine's parameters: {'; '.join(gaps[:3])}.")
        _check_rows(self.placements, actor_shapes, engine)
        self.skipped = {name for name in actor_shapes if name not in self.placements}  # a tied head

    @torch.no_grad()
    def load(self, weights: Weights) -> dict[str, float]:
        """Copy each (actor name, full tensor) into its rows of the engine's parameters and wait for the copies, so
        a sync's time includes them."""
        engine = self.parameters()
        for name, tensor in weights:
            if name in self.skipped:
                continue
            placement = self.placements[name]
            target = engine[placement.engine_name].data
            target = target.narrow(0, placement.offset, placement.rows) if target.dim() else target
            target.copy_(tensor.view(target.shape), non_blocking=True)
        device_utils.synchronize()
        return {}


def engine_copy(fsdp_module: torch.nn.Module, llm: Any, names: dict[str, str]) -> EngineCopy:
    """The direct weight copy from `fsdp_module` into `llm`; raises LayoutError or RuntimeError (engine in another
    process), naming why."""
    shapes = {
        names[name]: tuple(param.shape)
        for name, param in fsdp_module.named_parameters(remove_duplicate=False)
        if name in names
    }
    tied = bool(getattr(getattr(fsdp_module, "config", None), "tie_word_embeddings", False))
    return EngineCopy(lambda: vllm_compat.engine_parameters(llm), vllm_compat.packed_modules(llm), shapes, tied)


# ---------------------------------------------------------------------------- lora_sync=adapters

_PEFT_PREFIX = "base_model.model."


def adapter_checkpoint_names(parameter_names: list[str], names: dict[str, str]) -> dict[str, str]:
    """Map each LoRA factor among `parameter_names` to its PEFT name, from the checkpoint name of the weight it adapts
    (`names`: `gather.checkpoint_names`), so transformers' load-time renames are reverted as for the weights."""
    mapping = {}
    for name in parameter_names:
        if not is_adapter_param(name):
            continue
        layer, part = name.rsplit(".lora_", 1)  # "...q_proj", "A.default.weight"
        weight = f"{layer}.base_layer.weight"
        if weight not in names:
            raise KeyError(f"LoRA factor {name!r} adapts {weight!r}, which is not among the synced parameters.")
        stem = names[weight].removesuffix(".weight")
        mapping[name] = f"{_PEFT_PREFIX}{stem}.lora_{part[0]}.weight"
    return mapping


def engine_adapter_config(peft_config: dict[str, Any]) -> dict[str, Any]:
    """The actor's peft config (vLLM scales the adapter as peft does) marked for inference."""
    return {**peft_config, "inference_mode": True}


def write_peft_adapter(directory: str, config: dict[str, Any], tensors: Iterable[tuple[str, torch.Tensor]]) -> int:
    """Write a PEFT adapter folder; returns the bytes of its tensors."""
    from safetensors.torch import save_file

    os.makedirs(directory, exist_ok=True)
    state = {name: tensor.detach().contiguous().cpu() for name, tensor in tensors}
    if not state:
        raise ValueError("No LoRA adapter tensors to write: the actor has no adapters (worker.actor.model.lora.rank).")
    save_file(state, os.path.join(directory, ADAPTER_WEIGHTS_FILE))
    with open(os.path.join(directory, ADAPTER_CONFIG_FILE), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2, sort_keys=True, default=str)
    return sum(tensor.numel() * tensor.element_size() for tensor in state.values())


class EngineAdapter:
    """The one LoRA adapter an engine serves, replaced at each sync; `request` is the `LoRARequest` every generate
    call must pass (None until the first `load`)."""

    def __init__(self, llm: Any, peft_config: dict[str, Any]) -> None:
        self.llm = llm
        self.config = engine_adapter_config(peft_config)
        self.request: Any = None
        self._next_id = 1

    def load(self, weights: Weights) -> dict[str, float]:
        """Write `weights` (PEFT name, tensor) as a new adapter and load it under a new id; the engine drops the old."""
        from vllm.lora.request import LoRARequest

        adapter_id = self._next_id
        self._next_id += 1
        directory = tempfile.mkdtemp(prefix=f"verl-lora-{adapter_id}-")
        try:
            write_peft_adapter(directory, self.config, weights)
            request = LoRARequest(lora_name=f"actor_{adapter_id}", lora_int_id=adapter_id, lora_path=directory)
            previous = None if self.request is None else self.request.lora_int_id
            vllm_compat.load_lora_adapter(self.llm, request, previous)
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        self.request = request
        return {}


def peft_config_of(module: torch.nn.Module) -> dict[str, Any]:
    """The peft adapter config of a model `verl.models.lora.apply_lora` adapted (possibly FSDP-wrapped)."""
    if getattr(module, "lora_peft_config", None) is None:
        raise ValueError(
            "worker.rollout.lora_sync=adapters needs an actor with LoRA adapters (worker.actor.model.lora.rank > 0)."
        )
    return adapter_config_dict(module)
