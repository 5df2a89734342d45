# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Edges of verl.models.transformers_compat: every fused expert matrix of a Qwen3-VL-MoE folder in the checkpoint
layout, and the rewritten shards still marked as PyTorch safetensors."""

import torch
from safetensors import safe_open
from transformers import AutoModelForImageTextToText

from verl.models.tiny_models import get_or_build_tiny_model


SMALL = {"hidden_size": 64, "num_layers": 1, "num_heads": 2, "num_kv_heads": 1, "intermediate_size": 64}


def test_qwen3_vl_moe_down_proj_is_stored_transposed_and_loads_back(tmp_path) -> None:
    """Both fused matrices (`gate_up_proj` and `down_proj`) go to the checkpoint layout vLLM loads; the module layout
    comes back on load; the rewritten file keeps safetensors' {"format": "pt"} metadata."""
    model_dir = get_or_build_tiny_model("qwen3_vl_moe", str(tmp_path), **SMALL)
    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32)
    with safe_open(f"{model_dir}/model.safetensors", "pt") as f:
        assert f.metadata() == {"format": "pt"}
        for part in ("gate_up_proj", "down_proj"):
            name = f"model.language_model.layers.0.mlp.experts.{part}"
            module_tensor = model.get_parameter(name).detach()
            assert torch.equal(f.get_tensor(name), module_tensor.transpose(1, 2)), part


def test_a_sharded_save_rewrites_every_shard_and_leaves_the_index(tmp_path) -> None:
    """An export in several shards (the merger's, SFT's max_shard_size): each shard's experts in the checkpoint
    layout, the index file untouched, and the folder loads back to the same weights."""
    import json
    import os

    from verl.models.transformers_compat import save_model_folder

    model = AutoModelForImageTextToText.from_pretrained(
        get_or_build_tiny_model("qwen3_vl_moe", str(tmp_path / "cache"), **SMALL), dtype=torch.float32
    )
    out = str(tmp_path / "sharded")
    save_model_folder(model, out, max_shard_size="200KB")
    shards = sorted(name for name in os.listdir(out) if name.endswith(".safetensors"))
    assert len(shards) > 1
    with open(os.path.join(out, "model.safetensors.index.json")) as f:
        assert set(json.load(f)["weight_map"].values()) == set(shards)
    reloaded = AutoModelForImageTextToText.from_pretrained(out, dtype=torch.float32)
    for name, tensor in model.state_dict().items():
        assert torch.equal(reloaded.state_dict()[name], tensor), name
