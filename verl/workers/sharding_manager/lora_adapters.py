# Copyright 2026 The verl-compact Authors. All rights reserved.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
"""`worker.rollout.lora_sync=adapters`: the actor's LoRA adapters go into the engine through vLLM's LoRA support.

A merged sync sends every adapted weight in full (W + alpha / rank x B @ A) before each rollout; with adapters only
rank x (in + out) numbers per adapted layer travel, and the frozen base weights go to the engine once. vLLM 0.32
loads an adapter only from a PEFT folder (adapter_config.json + adapter_model.safetensors), so each sync writes one
to a fresh folder under the process's temporary directory (TMPDIR) and loads it under a new adapter id: vLLM keys
its adapter cache and its prefix cache by that id, so nothing computed with the previous adapter is reused. The
folder is deleted as soon as the engine has read it: vLLM keeps the adapter in memory and, serving this one adapter
(max_loras=1), never reads it again; so a worker that is killed leaves no files behind.

The PEFT names are the base weights' checkpoint names (`base_model.model.model.layers.0.self_attn.q_proj.lora_A.
weight`), the names vLLM's loader expects; it packs q/k/v and gate/up adapters into its fused layers itself.
"""

import json
import os
import shutil
import tempfile
from collections.abc import Iterable
from typing import Any

import torch

from verl.models.lora import ADAPTER_CONFIG_FILE, ADAPTER_WEIGHTS_FILE, adapter_config_dict, is_adapter_param
from verl.workers.rollout import vllm_compat


_PEFT_PREFIX = "base_model.model."


def adapter_checkpoint_names(parameter_names: list[str], names: dict[str, str]) -> dict[str, str]:
    """Map each LoRA factor among `parameter_names` (the FSDP module's names) to its PEFT saved name.

    `names` maps base parameters to their checkpoint names (`fsdp_vllm.checkpoint_names`); a factor takes the name of
    the weight it adapts, so the renames transformers applies at load time (Qwen2-VL's `model.language_model`) are
    reverted for the adapters as for the weights.
    """
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
    """The adapter_config.json for the engine: the actor's peft config (rank, alpha, rsLoRA: vLLM scales the adapter
    as peft does) marked for inference."""
    config = dict(peft_config)
    config["inference_mode"] = True
    return config


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
    """The one LoRA adapter an engine serves, replaced at each sync (see the module docstring).

    `request` is the `LoRARequest` every generate call must pass; None until the first `load`.
    """

    def __init__(self, llm: Any, peft_config: dict[str, Any]) -> None:
        self.llm = llm
        self.config = engine_adapter_config(peft_config)
        self.request: Any = None
        self._next_id = 1

    def load(self, tensors: Iterable[tuple[str, torch.Tensor]]) -> int:
        """Write `tensors` (PEFT name, tensor) as a new adapter, load it into the engine under a new id and make it
        `request`; the engine drops the previous one. Returns the bytes written."""
        from vllm.lora.request import LoRARequest

        adapter_id = self._next_id
        self._next_id += 1
        directory = tempfile.mkdtemp(prefix=f"verl-lora-{adapter_id}-")
        try:
            written = write_peft_adapter(directory, self.config, tensors)
            request = LoRARequest(lora_name=f"actor_{adapter_id}", lora_int_id=adapter_id, lora_path=directory)
            previous = None if self.request is None else self.request.lora_int_id
            vllm_compat.load_lora_adapter(self.llm, request, previous)
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        self.request = request
        return written


def peft_config_of(module: torch.nn.Module) -> dict[str, Any]:
    """The peft adapter config of a model `verl.models.lora.apply_lora` adapted (possibly FSDP-wrapped)."""
    if getattr(module, "lora_peft_config", None) is None:
        raise ValueError(
            "worker.rollout.lora_sync=adapters needs an actor with LoRA adapters (worker.actor.model.lora.rank > 0)."
        )
    return adapter_config_dict(module)
