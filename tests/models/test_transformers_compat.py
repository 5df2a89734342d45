# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""verl.models.transformers_compat: each entry's reason, checked against the installed transformers."""

import torch

from verl.models.tiny_models import get_or_build_tiny_model
from verl.models.transformers_compat import keep_output_capture


def test_a_tower_whose_class_is_swapped_records_hidden_states_only_with_keep_output_capture(tmp_path) -> None:
    """As fully_shard does, swap a SigLIP tower's class for a subclass: transformers finds no capture flags for the
    new class and returns no hidden states (what LLaVA-OneVision's image features read) until the flags are copied.
    When transformers stops keying its registry by class name, the first assertion fails and the entry can go."""
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(get_or_build_tiny_model("llava_onevision", str(tmp_path)))
    tower = model.model.vision_tower
    size = model.config.vision_config.image_size
    pixels = torch.zeros(1, 3, size, size)
    assert tower(pixels, output_hidden_states=True).hidden_states is not None
    original = type(tower)
    tower.__class__ = type(f"Sharded{original.__name__}", (original,), {})
    assert tower(pixels, output_hidden_states=True).hidden_states is None  # the class lookup misses
    keep_output_capture(tower, original)
    assert tower(pixels, output_hidden_states=True).hidden_states is not None


def test_qwen3_vl_moe_experts_are_saved_in_the_module_layout_and_loaded_from_the_checkpoint_layout(tmp_path) -> None:
    """The tiny Qwen3-VL-MoE is written in its checkpoints' layout (experts transposed) and transformers loads it back
    exactly, but transformers' own reverse conversion (what save_pretrained writes) keeps the module's layout. When it
    transposes back itself, the last assertion fails and TRANSPOSED_EXPERT_CHECKPOINTS can go."""
    from safetensors import safe_open
    from transformers import AutoModelForImageTextToText
    from transformers.core_model_loading import revert_weight_conversion

    from verl.models.transformers_compat import checkpoint_layout

    model_dir = get_or_build_tiny_model("qwen3_vl_moe", str(tmp_path))
    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32)
    name = "model.language_model.layers.0.mlp.experts.gate_up_proj"
    module_tensor = model.get_parameter(name)
    with safe_open(f"{model_dir}/model.safetensors", "pt") as f:
        stored = f.get_tensor(name)
    experts, width, hidden = module_tensor.shape  # (experts, 2 x moe width, hidden) in the module
    assert stored.shape == (experts, hidden, width)
    assert torch.equal(checkpoint_layout("qwen3_vl_moe", name, module_tensor), stored)
    assert torch.equal(checkpoint_layout("qwen3_moe", name, module_tensor), module_tensor)
    assert revert_weight_conversion(model, {name: module_tensor.detach()})[name].shape == module_tensor.shape


def test_model_folders_are_readable_as_the_umask_allows(tmp_path) -> None:
    """safetensors writes its files 0600: an export (the merger's, SFT's) could not be read by a server or a
    colleague under another user on a shared cluster."""
    import os

    from verl.models.tiny_models import get_or_build_tiny_model

    folder = get_or_build_tiny_model("qwen2", str(tmp_path))
    mask = os.umask(0)
    os.umask(mask)
    weights = [name for name in os.listdir(folder) if name.endswith(".safetensors")]
    assert weights and all(os.stat(os.path.join(folder, name)).st_mode & 0o777 == 0o666 & ~mask for name in weights)
