# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Where the project reaches into transformers' internals, each because a run is wrong without it; a test per entry
(tests/models/test_transformers_compat.py) fails when transformers changes under it."""

from typing import Any


def keep_output_capture(module: Any, model_class: type) -> None:
    """Let a submodel that `fully_shard` gave an FSDP subclass still record its layers' outputs (transformers 5.19).

    transformers records `output_hidden_states` through hooks chosen by the model's class, looked up by the class's
    name in a registry filled when the model is built (`output_capturing._CAN_RECORD_REGISTRY`); fully_shard then swaps
    the class, so the lookup misses and `hidden_states` comes back None. LLaVA-OneVision's SigLIP tower is read that way
    (`get_image_features` takes `hidden_states[vision_feature_layer]`): without this its sharded forward fails."""
    from transformers.utils import output_capturing

    flags = output_capturing._CAN_RECORD_REGISTRY.get(str(model_class))
    if flags is not None:
        output_capturing._CAN_RECORD_REGISTRY[str(type(module))] = flags


TRANSPOSED_EXPERT_CHECKPOINTS: tuple[str, ...] = ("qwen3_vl_moe",)
"""Model types whose checkpoints store each layer's fused experts transposed from transformers' module layout:
Qwen3-VL-MoE's published checkpoints hold `experts.gate_up_proj` as (experts, hidden, 2 x moe width) and
`experts.down_proj` as (experts, moe width, hidden), and vLLM 0.32's loader transposes every fused expert tensor of the
model as it reads it. transformers 5.19 transposes them on load, but not back on save: the reverse of its `Transpose`
(check_dims) keeps a tensor whose shape equals the module's, so `save_pretrained` and `revert_weight_conversion` give
the module's layout, which vLLM would load transposed (a square one silently, others failing)."""


def checkpoint_layout(model_type: str | None, name: str, tensor: Any) -> Any:
    """`tensor` (the parameter `name` in transformers' layout) in the layout its checkpoint stores and vLLM loads."""
    if model_type in TRANSPOSED_EXPERT_CHECKPOINTS and name.endswith(
        ("mlp.experts.gate_up_proj", "mlp.experts.down_proj")
    ):
        return tensor.transpose(1, 2).contiguous()
    return tensor


def write_checkpoint_layout(model_dir: str) -> None:
    """Rewrite the safetensors files `save_pretrained` wrote in `model_dir` into the checkpoint layout
    (`checkpoint_layout`); nothing to do for a model type not in TRANSPOSED_EXPERT_CHECKPOINTS."""
    import json
    import os

    from safetensors import safe_open
    from safetensors.torch import save_file

    with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
        model_type = json.load(f).get("model_type")
    if model_type not in TRANSPOSED_EXPERT_CHECKPOINTS:
        return
    for file_name in sorted(os.listdir(model_dir)):
        if not file_name.endswith(".safetensors"):
            continue
        path = os.path.join(model_dir, file_name)
        with safe_open(path, "pt") as f:
            metadata = f.metadata()
            tensors = {name: checkpoint_layout(model_type, name, f.get_tensor(name)) for name in f.keys()}
        save_file(tensors, path, metadata=metadata)
