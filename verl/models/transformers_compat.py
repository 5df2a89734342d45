# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Where the project reaches into transformers' internals, each because a run is wrong without it; a test per entry
fails when transformers changes under it."""

from typing import Any


def keep_output_capture(module: Any, model_class: type) -> None:
    """Let a submodel that `fully_shard` gave an FSDP subclass still record its layers' outputs (transformers 5.19).
    transformers finds its output-capture hooks by class name (`_CAN_RECORD_REGISTRY`); fully_shard swaps the class,
    so `hidden_states` would come back None, and e.g. LLaVA-OneVision's `get_image_features` fails."""
    from transformers.utils import output_capturing

    flags = output_capturing._CAN_RECORD_REGISTRY.get(str(model_class))
    if flags is not None:
        output_capturing._CAN_RECORD_REGISTRY[str(type(module))] = flags


TRANSPOSED_EXPERT_CHECKPOINTS: tuple[str, ...] = ("qwen3_vl_moe",)
"""Model types whose checkpoints store fused experts transposed from transformers' module layout (Qwen3-VL-MoE:
`gate_up_proj` (experts, hidden, 2 x width), `down_proj` (experts, width, hidden)), which vLLM's loader expects.
transformers 5.19 transposes on load but not back on save, so a saved model would load into vLLM transposed."""


def checkpoint_layout(model_type: str | None, name: str, tensor: Any) -> Any:
    """`tensor` (parameter `name` in transformers' layout) in the layout its checkpoint stores and vLLM loads."""
    if model_type in TRANSPOSED_EXPERT_CHECKPOINTS and name.endswith(
        ("mlp.experts.gate_up_proj", "mlp.experts.down_proj")
    ):
        return tensor.transpose(1, 2).contiguous()
    return tensor


def save_model_folder(model: Any, model_dir: str, **kwargs: Any) -> None:
    """`model.save_pretrained(model_dir, **kwargs)` with its weights in `checkpoint_layout`: every model folder the
    project writes (tiny models, the SFT export, the merger) loads into vLLM and transformers as the hub's would, its
    files readable as the umask allows (0644, not safetensors' 0600)."""
    from verl.utils.files import open_as_umask

    model.save_pretrained(model_dir, **kwargs)
    write_checkpoint_layout(model_dir)
    open_as_umask(model_dir)  # safetensors writes 0600: a server under another user could not read the export


def write_checkpoint_layout(model_dir: str) -> None:
    """Rewrite the safetensors `save_pretrained` wrote in `model_dir` into `checkpoint_layout`."""
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
