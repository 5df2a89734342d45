# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Low-rank adapters (LoRA): injection, switching off, merging and the peft file layout.
peft's LoRA layers are injected in place, so the model keeps its HF class and FSDP2 shards it as usual; only
`lora_A` / `lora_B` train. The engine gets merged weights (W + alpha / rank x B @ A) under the original names, or
with `worker.rollout.lora_sync=adapters` the adapters in peft's layout; checkpoints hold the adapter only."""

import contextlib
import dataclasses
import json
import os
import re
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from verl.models.config import (
    FUSED_EXPERTS_LORA,
    VISION_SIDE_PATTERN,
    LoraConfig,
    ModelConfig,
    unmatched_names,
    vision_side_targets,
)
from verl.utils.config import ConfigError


ADAPTER_NAME = "default"

ADAPTER_CONFIG_FILE = "adapter_config.json"
ADAPTER_WEIGHTS_FILE = "adapter_model.safetensors"
LORA_SETTINGS_FILE = "lora_settings.json"
"""A checkpoint's copy of the run's lora section (peft's adapter_config.json has "all-linear" resolved), which a
resumed run's settings must equal."""

LORA_INIT_SEED = 1234
"""Ranks that build the model independently get the same adapters."""

_LORA_PARAM = re.compile(rf"^(?P<prefix>.*)\.lora_(?P<part>[AB])\.{ADAPTER_NAME}\.weight$")

MAMBA_MODEL_TYPES = frozenset({"falcon_h1", "mamba", "mamba2", "falcon_mamba", "nemotron_h"})
"""Model types whose Mamba mixers' `out_proj` peft refuses to adapt (peft.tuners.tuners_utils'
_check_lora_target_modules_mamba)."""
MAMBA_OUT_PATTERN = r".*\.out_proj"
"""What `all-linear` leaves out on a MAMBA_MODEL_TYPES model: peft's all-linear names every linear layer, the Mamba
mixers' out_proj included, then refuses that one, so the default targets failed every LoRA run of such a model."""


AUDIO_SIDE_PATTERN = r".*(audio_tower|embed_audio).*"
"""What `all-linear` leaves out everywhere: an audio tower and its projector (Gemma 4 E2B/E4B), which no data here
reaches: their adapters never trained, yet took most of the adapted layers of such a model (135 of 168 on E2B's
shape), their memory and their optimizer state."""


def _peft_config(
    lora: LoraConfig, vision_language: bool, base_model_path: str | None, model_type: str | None = None
) -> Any:
    from peft import LoraConfig as PeftLoraConfig

    targets: str | list[str] = lora.target_modules
    if targets != "all-linear":
        targets = [name.strip() for name in targets.split(",") if name.strip()]
    exclude = lora.exclude_modules
    if vision_language and not lora.vision_tower:
        exclude = VISION_SIDE_PATTERN if exclude is None else f"(?:{exclude})|(?:{VISION_SIDE_PATTERN})"
    if targets == "all-linear" and model_type in MAMBA_MODEL_TYPES:
        exclude = MAMBA_OUT_PATTERN if exclude is None else f"(?:{exclude})|(?:{MAMBA_OUT_PATTERN})"
    if targets == "all-linear":
        exclude = AUDIO_SIDE_PATTERN if exclude is None else f"(?:{exclude})|(?:{AUDIO_SIDE_PATTERN})"
    return PeftLoraConfig(
        r=lora.rank,
        lora_alpha=lora.alpha,
        target_modules=targets,
        exclude_modules=exclude,
        lora_dropout=0.0,
        bias="none",
        base_model_name_or_path=base_model_path,
    )


def check_lora_injection(model: ModelConfig, prefix: str) -> None:
    """Before any worker starts: `model.lora.target_modules` must name layers peft adapts (a norm layer has weights
    too), and its exclude_modules (a regular expression over module names, which the weight names do not always give)
    must leave an adapter on every one of them. The adapters are injected into the local model built on the meta
    device (no weights read), as the workers inject them: peft's refusals ("All modules were excluded", "Target module
    Qwen2RMSNorm() is not supported") came from every worker after Ray had started. The names are checked against the
    module names of that model, the actor's: the weight names of a VL checkpoint differ ("model.layers.0..." for the
    module "model.language_model.layers.0..."), so a check on them refused the actor's names and passed names no
    actor layer has. `all-linear` without exclusions and hub ids are left to the workers."""
    lora = model.lora
    if lora.rank <= 0 or (lora.target_modules == "all-linear" and lora.exclude_modules is None):
        return
    if not os.path.isdir(model.model_path or ""):
        return
    from verl.models.loading import build_model
    from verl.models.structure import get_vision_tower

    try:
        built = build_model(model, device="meta")
    except Exception:  # a config transformers cannot build here: the workers say what is wrong with it
        return
    vision_language = get_vision_tower(built) is not None
    layers = {"." + name for name, _ in built.named_modules() if name}
    key = f"{prefix}model_path='{model.model_path}'"
    if unmatched := unmatched_names(lora.target_modules, layers):
        like = next(filter(None, (_module_like(name, layers) for name in unmatched)), None)
        raise ConfigError(
            f"{prefix}lora.target_modules names {', '.join(unmatched)}, which no layer of {key} has as transformers "
            f"builds it{f' (a layer it has: {like})' if like else ''}; check the spelling against the model's module "
            "names."
        )
    if vision_language and not lora.vision_tower and (tower_only := vision_side_targets(lora.target_modules, layers)):
        raise ConfigError(
            f"{prefix}lora.target_modules names {', '.join(tower_only)}, which only the vision tower or projector "
            f"of {key} has, and they get no adapters unless {prefix}lora.vision_tower=true: set it, or leave those "
            "names out."
        )
    try:
        apply_lora(built, lora, vision_language, model.model_path, f"{prefix}lora")
    except ValueError as error:
        raise ConfigError(str(error)) from None
    except NotImplementedError:  # adapters on fused experts: the sections' mixture-of-experts checks say it
        return


def _module_like(name: str, layers: set[str]) -> str | None:
    """A module of `layers` with the last part of `name` (e.g. the module path of a checkpoint's weight name)."""
    last = "." + name.rsplit(".", 1)[-1]
    return next(
        (layer[1:] for layer in sorted(layers, key=lambda layer: (len(layer), layer)) if layer.endswith(last)), None
    )


def apply_lora(
    model: nn.Module,
    lora: LoraConfig,
    vision_language: bool,
    base_model_path: str | None,
    key: str = "worker.actor.model.lora",
) -> int:
    """Inject LoRA adapters in place and freeze everything else; returns the adapter parameter count. On real weights
    lora_A comes from a fixed seed (lora_B is zero, so the model is unchanged); on meta they come from rank 0. Errors
    name the config section `key`."""
    from peft import inject_adapter_in_model
    from peft.tuners.lora.layer import ParamWrapper

    model_type = getattr(getattr(model, "config", None), "model_type", None)
    peft_config = _peft_config(lora, vision_language, base_model_path, model_type)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(LORA_INIT_SEED)
        try:
            inject_adapter_in_model(peft_config, model, adapter_name=ADAPTER_NAME)
        except ValueError as error:  # peft: "Target modules ... not found in the base model"
            raise ValueError(
                f"{key}: {error} Check lora.target_modules ({lora.target_modules!r}) and "
                f"lora.exclude_modules ({lora.exclude_modules!r})."
            ) from error
    fused = [
        name for name, module in model.named_modules() if isinstance(module, ParamWrapper) and module.num_experts > 1
    ]
    if fused:  # a hub id's mixture of experts (a local one is refused when the config loads)
        raise NotImplementedError(
            f"The model is a mixture of experts ({fused[0]}, ...) and the run has LoRA adapters: {FUSED_EXPERTS_LORA}"
        )
    model.lora_peft_config = peft_config  # read by save_adapter_config
    model.lora_settings = dataclasses.asdict(lora)
    embedding = next((name for name in _adapter_names(model) if "lora_embedding" in name), None)
    if embedding:  # a hub id's (a local model's embedding targets are refused when the config loads)
        raise NotImplementedError(f"{key}: {embedding}: {EMBEDDING_LORA}")
    for name, param in model.named_parameters():
        param.requires_grad_(is_adapter_param(name))
    trainable = sum(param.numel() for param in model.parameters() if param.requires_grad)
    if trainable == 0:
        raise ValueError(
            f"{key}: no layer matched target_modules={lora.target_modules!r} (after "
            f"exclude_modules={lora.exclude_modules!r}); no adapter would train."
        )
    layers = {"." + name.split(".lora_A.")[0] for name in _adapter_names(model) if ".lora_A." in name}
    if unmatched := unmatched_names(lora.target_modules, layers):  # peft refuses only a list none of whose names match
        raise ValueError(
            f"{key}: target_modules names {', '.join(unmatched)}, which no layer of the model has (after "
            f"exclude_modules={lora.exclude_modules!r}); check the spelling against the model's module names."
        )
    return trainable


EMBEDDING_LORA = (
    "LoRA adapters on an embedding layer are not trained, synced or exported here; leave the embeddings out of "
    "lora.target_modules."
)


def _adapter_names(model: nn.Module) -> list[str]:
    return [name for name, _ in model.named_parameters() if ".lora_" in name]


def is_adapter_param(name: str) -> bool:
    return _LORA_PARAM.match(name) is not None


@contextlib.contextmanager
def adapters_disabled(model: nn.Module) -> Iterator[None]:
    """Inside the block every LoRA layer skips its adapter: the base model (the reference policy)."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    layers = [module for module in model.modules() if isinstance(module, BaseTunerLayer)]
    trainable = [param for param in model.parameters() if param.requires_grad]
    for layer in layers:
        layer.enable_adapters(False)
    # peft also freezes the adapters: undo it. FSDP2 takes a unit's gradient dtypes from the parameters needing
    # gradients at the first forward; if that is the reference's, the fp32 adapters would later get bf16 gradients.
    for param in trainable:
        param.requires_grad_(True)
    try:
        yield
    finally:
        for layer in layers:
            layer.enable_adapters(True)


def base_name(name: str) -> str:
    """`q_proj.base_layer.weight` -> `q_proj.weight`."""
    return name.replace(".base_layer.", ".")


def lora_merge_plan(model: nn.Module) -> dict[str, tuple[str, str, float]]:
    """base weight name -> (lora_A name, lora_B name, scaling) for every adapted layer."""
    plan = {}
    parameters = dict(model.named_parameters(remove_duplicate=False))
    for name, (a_name, b_name) in lora_merge_plan_from_names(parameters).items():
        prefix = name.removesuffix(".weight")
        scaling = float(model.get_submodule(prefix).scaling[ADAPTER_NAME])
        plan[f"{prefix}.base_layer.weight"] = (a_name, b_name, scaling)
    return plan


def lora_merge_plan_from_names(state: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """plain weight name -> (lora_A name, lora_B name) for every adapter in a state dict."""
    matches = [match for match in map(_LORA_PARAM.match, state) if match is not None and match["part"] == "A"]
    return {f"{m['prefix']}.weight": (m.string, f"{m['prefix']}.lora_B.{ADAPTER_NAME}.weight") for m in matches}


def merge_weight(base: torch.Tensor, lora_a: torch.Tensor, lora_b: torch.Tensor, scaling: float) -> torch.Tensor:
    """W + scaling x B @ A, computed in float32, returned in the base dtype."""
    delta = (lora_b.float() @ lora_a.float()) * scaling
    return (base.float() + delta).to(base.dtype)


def merged_state_dict(state: dict[str, torch.Tensor], scaling: float) -> dict[str, torch.Tensor]:
    """A state dict with adapters (peft names) -> the plain model's, adapters merged in."""
    merged = {base_name(name): tensor for name, tensor in state.items() if not is_adapter_param(name)}
    for name, (a_name, b_name) in lora_merge_plan_from_names(state).items():
        merged[name] = merge_weight(merged[name], state[a_name], state[b_name], scaling)
    return merged


def peft_adapter_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The adapter tensors of `state` under peft's saved names."""
    matches = filter(None, map(_LORA_PARAM.match, state))
    return {f"base_model.model.{m['prefix']}.lora_{m['part']}.weight": state[m.string] for m in matches}


def adapter_config_dict(model: nn.Module) -> dict[str, Any]:
    """peft's adapter_config.json content for a model `apply_lora` adapted."""
    config = model.lora_peft_config.to_dict()
    return {key: sorted(value) if isinstance(value, set) else value for key, value in config.items()}


def save_adapter_config(model: nn.Module, directory: str) -> None:
    """peft's adapter_config.json, and LORA_SETTINGS_FILE."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, ADAPTER_CONFIG_FILE), "w", encoding="utf-8") as f:
        json.dump(adapter_config_dict(model), f, indent=2, sort_keys=True, default=str)
    with open(os.path.join(directory, LORA_SETTINGS_FILE), "w", encoding="utf-8") as f:
        json.dump(model.lora_settings, f, indent=2, sort_keys=True)


def changed_lora_settings(actor_dir: str, lora: LoraConfig) -> list[str]:
    """The lora settings (`key: here vs there`) in which a LoRA checkpoint's actor folder differs from `lora`: all of
    them where it has LORA_SETTINGS_FILE, else rank and alpha, from its adapter_config.json (older checkpoints)."""
    here = dataclasses.asdict(lora)
    path = os.path.join(actor_dir, LORA_SETTINGS_FILE)
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            there = json.load(f)
    else:
        peft = read_adapter_config(actor_dir) or {}
        there = {key: peft[name] for key, name in (("rank", "r"), ("alpha", "lora_alpha")) if name in peft}
    return [
        f"{key}={here[key]!r} here, {there[key]!r} there"
        for key in here
        if key in there and _setting(key, there[key]) != _setting(key, here[key])
    ]


def _setting(key: str, value: Any) -> Any:
    """A lora setting as it acts: target_modules as the set of names it lists (`q_proj, v_proj` is `v_proj,q_proj`:
    a resume with the same targets spelt otherwise was refused)."""
    if key == "target_modules" and isinstance(value, str) and value != "all-linear":
        return frozenset(name.strip() for name in value.split(",") if name.strip())
    return value


def read_adapter_config(actor_dir: str) -> dict[str, Any] | None:
    """The adapter config of a LoRA checkpoint's actor folder (None for a full model's): in the folder itself, or in
    its huggingface/ in checkpoints written before it moved out (a merged export there would load as an adapter)."""
    for folder in (actor_dir, os.path.join(actor_dir, "huggingface")):
        path = os.path.join(folder, ADAPTER_CONFIG_FILE)
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                return json.load(f)
    return None


def lora_scaling(adapter_config: dict[str, Any]) -> float:
    """alpha / rank (alpha / sqrt(rank) with rsLoRA), as peft scales the adapter."""
    rank, alpha = adapter_config["r"], adapter_config["lora_alpha"]
    return alpha / rank**0.5 if adapter_config.get("use_rslora") else alpha / rank
