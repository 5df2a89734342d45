# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Edges of the LoRA adapters: exclusions on a vision-language model and all-linear on a Mamba hybrid, the adapters'
seed, refusals at injection (embeddings, fused experts) and the merge's scaling."""

import pytest
import torch

from verl.models.config import LoraConfig, ModelConfig
from verl.models.loading import build_model
from verl.models.lora import apply_lora
from verl.models.tiny_models import get_or_build_tiny_model


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, str]:
    root = str(tmp_path_factory.mktemp("lora_edge_models"))
    return {kind: get_or_build_tiny_model(kind, root) for kind in ("qwen2", "qwen2_5_vl", "qwen3_moe")}


def _adapted_layers(model: torch.nn.Module) -> set[str]:
    return {name.split(".lora_A.")[0] for name, _ in model.named_parameters() if ".lora_A." in name}


def test_exclude_modules_on_a_vision_language_model_keeps_both_the_users_pattern_and_the_tower(models):
    model = build_model(ModelConfig(model_path=models["qwen2_5_vl"]), device="meta")
    apply_lora(model, LoraConfig(rank=4, alpha=8, exclude_modules=".*mlp.*"), True, models["qwen2_5_vl"])
    layers = _adapted_layers(model)
    assert layers and all("language_model" in name for name in layers)  # not the tower
    assert not any(".mlp." in name for name in layers)  # not the excluded MLPs
    assert any(".self_attn." in name for name in layers)


def test_the_adapters_are_the_same_whatever_the_global_random_state(models):
    """Ranks seed their own random streams (dropout masks per rank): the adapters come from LoRA's own seed."""
    adapters = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        model = build_model(ModelConfig(model_path=models["qwen2"]))
        apply_lora(model, LoraConfig(rank=4, alpha=8), False, models["qwen2"])
        adapters.append({name: param.clone() for name, param in model.named_parameters() if ".lora_A." in name})
    assert adapters[0] and adapters[0].keys() == adapters[1].keys()
    assert all(torch.equal(adapters[0][name], adapters[1][name]) for name in adapters[0])


def test_the_merge_scaling_follows_peft_with_and_without_rslora():
    from verl.models.lora import lora_scaling

    assert lora_scaling({"r": 16, "lora_alpha": 32}) == 2.0
    assert lora_scaling({"r": 16, "lora_alpha": 32, "use_rslora": False}) == 2.0
    assert lora_scaling({"r": 16, "lora_alpha": 32, "use_rslora": True}) == 8.0  # alpha / sqrt(rank)


def test_adapters_on_the_embeddings_are_refused_when_injected(models):
    """A hub id's model is not read when the config is checked: apply_lora refuses embedding targets itself."""
    model = build_model(ModelConfig(model_path=models["qwen2"]), device="meta")
    with pytest.raises(NotImplementedError, match=r"^my.lora: .*lora_embedding.*LoRA adapters on an embedding layer"):
        apply_lora(model, LoraConfig(rank=4, alpha=8, target_modules="embed_tokens"), False, None, key="my.lora")


@pytest.mark.filterwarnings("ignore:The following (rank|alpha)_pattern keys did not match:RuntimeWarning")
def test_a_mixture_of_two_experts_is_refused_when_its_experts_get_adapters(models):
    """Two experts are fused as any other count: peft adapts the 3-D tensor, which the merge does not handle."""
    config = ModelConfig(model_path=models["qwen3_moe"], override_config={"num_experts": 2, "num_experts_per_tok": 1})
    model = build_model(config, device="meta")
    with pytest.raises(NotImplementedError, match=r"mixture of experts \(model\.layers\.0\.mlp\.experts"):
        apply_lora(model, LoraConfig(rank=4, alpha=8), False, None)


def test_all_linear_on_a_mamba_hybrid_adapts_every_linear_layer_but_the_mixers_out_proj(tmp_path):
    """Falcon-H1 (Mamba mixers beside attention) with the default target_modules=all-linear: peft's all-linear named
    the mixers' out_proj too and then refused it ("Module 'out_proj' is incompatible with Mamba-based models"), so
    every LoRA run of such a model stopped at the actor's start. It now adapts the other linear layers (the mixers'
    in_proj too); the adapter config it saves loads in peft as the same model."""
    import json

    from peft import PeftModel
    from safetensors.torch import save_file

    from verl.models.lora import adapter_config_dict, peft_adapter_state

    path = get_or_build_tiny_model("falcon_h1", str(tmp_path / "models"))
    model = build_model(ModelConfig(model_path=path))
    apply_lora(model, LoraConfig(rank=4, alpha=8), False, path)
    leaves = {name.rsplit(".", 1)[-1] for name in _adapted_layers(model)}
    assert leaves == {"q_proj", "k_proj", "v_proj", "o_proj", "in_proj", "gate_proj", "up_proj", "down_proj"}
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if ".lora_B." in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.05)  # a trained adapter
    (tmp_path / "adapter").mkdir()
    save_file(peft_adapter_state(model.state_dict()), str(tmp_path / "adapter" / "adapter_model.safetensors"))
    (tmp_path / "adapter" / "adapter_config.json").write_text(json.dumps(adapter_config_dict(model), default=str))
    loaded = PeftModel.from_pretrained(build_model(ModelConfig(model_path=path)), tmp_path / "adapter")
    ids = torch.tensor([[5, 17, 99, 3, 42, 7]])
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids=ids).logits, model(input_ids=ids).logits, rtol=0, atol=1e-5)


def test_all_linear_leaves_an_audio_tower_without_adapters(tmp_path):
    """Gemma 4 E2B/E4B carry an audio tower that no data here reaches: all-linear gave most of its layers adapters
    (135 of 168 on E2B's shape) that never trained. The tiny Gemma 4 has none, so one is added to its config here."""
    from transformers import AutoConfig, AutoModelForImageTextToText
    from transformers.models.gemma4.configuration_gemma4 import Gemma4AudioConfig

    path = get_or_build_tiny_model("gemma4", str(tmp_path))
    config = AutoConfig.from_pretrained(path)
    config.audio_config = Gemma4AudioConfig(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=2, output_proj_dims=32
    )
    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(config)
    assert any("audio_tower" in name for name, _ in model.named_modules())
    apply_lora(model, LoraConfig(rank=4, alpha=8, vision_tower=True), True, path)
    layers = _adapted_layers(model)
    assert not any("audio" in name for name in layers), sorted(name for name in layers if "audio" in name)[:3]
    assert any("vision_tower" in name for name in layers) and any("language_model" in name for name in layers)
