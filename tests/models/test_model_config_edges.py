# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Edges of the model section's checks (verl.models.config): overrides as the config checks see them, model folders,
tokenizers, families and the FSDP keys."""

import pytest

from verl.models import config as model_config
from verl.models.tiny_models import get_or_build_tiny_model
from verl.utils.config import ConfigError


@pytest.fixture(scope="module")
def qwen2(tmp_path_factory) -> str:
    return get_or_build_tiny_model("qwen2", str(tmp_path_factory.mktemp("config_edge_models")))


def test_an_override_of_a_field_at_both_levels_goes_to_the_top_level_as_the_workers_place_it():
    """A config.json with the field at its top level and in its text_config: the override sets the top one (as
    resolve_config_overrides does), a field only the text config has goes there."""
    file = {"model_type": "x", "vocab_size": 10, "text_config": {"vocab_size": 10, "hidden_size": 8}}
    got = model_config.with_overrides(file, {"vocab_size": 20, "hidden_size": 16})
    assert got == {"model_type": "x", "vocab_size": 20, "text_config": {"vocab_size": 10, "hidden_size": 16}}
    assert file["vocab_size"] == 10 and file["text_config"]["hidden_size"] == 8  # the file's dict is left as it is


def test_lora_checks_refuse_gpt2_embeddings_and_an_empty_target_list_from_rank_1():
    with pytest.raises(ConfigError, match=r"^m.lora.target_modules names wte: LoRA adapters on an embedding layer"):
        model_config.LoraConfig(rank=8, target_modules="c_attn, wte").validate("m.lora.")
    with pytest.raises(ConfigError, match=r"^m.lora.target_modules is empty"):
        model_config.LoraConfig(rank=1, target_modules=" , ").validate("m.lora.")
    model_config.LoraConfig(rank=0, target_modules=" , ").validate("m.lora.")  # no adapters: nothing to target


def test_a_frozen_vision_tower_with_lora_vision_tower_set_but_no_adapters_is_accepted():
    """lora.vision_tower means nothing at lora.rank=0, so it does not clash with freeze_vision_tower."""
    lora = model_config.LoraConfig(rank=0, vision_tower=True)
    model_config.ModelConfig(freeze_vision_tower=True, lora=lora).validate("m.")
    lora = model_config.LoraConfig(rank=8, vision_tower=True)
    with pytest.raises(ConfigError, match=r"^m.freeze_vision_tower freezes the vision tower"):
        model_config.ModelConfig(freeze_vision_tower=True, lora=lora).validate("m.")


def test_lora_vision_tower_on_a_text_model_is_refused_only_with_adapters(qwen2):
    lora = model_config.LoraConfig(rank=0, vision_tower=True)
    model_config.ModelConfig(model_path=qwen2, lora=lora).check_files("m.")
    lora = model_config.LoraConfig(rank=8, vision_tower=True)
    with pytest.raises(ConfigError, match=r"^m.lora.vision_tower is set, and m.model_path='.*' is a text model"):
        model_config.ModelConfig(model_path=qwen2, lora=lora).check_files("m.")


def test_target_names_match_whole_module_names_or_their_last_parts_as_peft_matches_them():
    modules = {".model.layers.0.self_attn.q_proj", ".model.layers.0.mlp.down_proj"}
    assert model_config.unmatched_names("q_proj, self_attn.q_proj, mlp.down_proj", modules) == []
    assert model_config.unmatched_names("proj, _proj, q_proj, attn.q_proj", modules) == [
        "proj",
        "_proj",
        "attn.q_proj",
    ]
    assert model_config.unmatched_names("all-linear", modules) == []


def test_untying_a_model_whose_weights_are_not_safetensors_is_left_to_the_workers(qwen2, tmp_path):
    """The untied-head check reads the safetensors headers; with .bin weights it cannot tell, and does not refuse."""
    import shutil

    import torch
    from safetensors.torch import load_file

    folder = tmp_path / "bin_weights"
    shutil.copytree(qwen2, folder)
    torch.save(load_file(str(folder / "model.safetensors")), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    untied = model_config.ModelConfig(model_path=str(folder), override_config={"tie_word_embeddings": False})
    untied.check_files("m.")


def test_a_target_given_as_a_whole_module_name_matches(qwen2):
    from verl.models.lora import check_lora_injection

    lora = model_config.LoraConfig(rank=8, target_modules="model.layers.0.self_attn.q_proj, v_proj")
    model_config.ModelConfig(model_path=qwen2, lora=lora).check_files("m.")
    check_lora_injection(model_config.ModelConfig(model_path=qwen2, lora=lora), "m.")
    lora = model_config.LoraConfig(rank=8, target_modules="layers.9.self_attn.q_proj")
    with pytest.raises(ConfigError, match=r"^m.lora.target_modules names layers.9.self_attn.q_proj, which no layer"):
        check_lora_injection(model_config.ModelConfig(model_path=qwen2, lora=lora), "m.")


def test_a_name_with_two_slashes_is_said_to_be_no_hub_id_for_its_slashes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    problem = model_config.model_folder_problem("org/name/extra", "--model")
    assert problem.startswith("--model 'org/name/extra' does not exist here")
    assert "(a hub id is 'name' or 'namespace/name')" in problem
    assert model_config.model_folder_problem("org/name", "--model") is None  # a hub id: left to the loader


def test_a_relative_path_that_does_not_exist_is_no_hub_id(tmp_path, monkeypatch):
    """'./name' and '../org/name' read as paths: a typo there is a missing folder, not a hub id to download."""
    monkeypatch.chdir(tmp_path)
    for path in ("./missing_model", "../org/missing"):
        problem = model_config.model_folder_problem(path, "--model")
        assert problem == f"--model '{path}' does not exist; give a Hugging Face model directory."


def test_a_tokenizer_exactly_as_large_as_the_embedding_fits():
    from types import SimpleNamespace

    assert model_config.tokenizer_beyond_model(SimpleNamespace(vocab_size=100), {"vocab_size": 100}) is None
    assert model_config.tokenizer_beyond_model(SimpleNamespace(vocab_size=100), {"vocab_size": True}) is None
    problem = model_config.tokenizer_beyond_model(SimpleNamespace(vocab_size=101), {"vocab_size": 100})
    assert problem.startswith("the tokenizer's vocabulary has 101 tokens, and the model's embedding 100 rows")


def test_the_vocabulary_refusal_knows_the_model_folder_however_its_path_is_spelt():
    for tokenizer_path in ("/models/x/", "/models/./x"):
        message = model_config.vocabulary_refusal("w.", "/models/x", tokenizer_path, "too many")
        assert message == "w.model_path=/models/x: too many. The folder's tokenizer files are another model's."
    message = model_config.vocabulary_refusal("w.", "/models/x", "/models/y", "too many")
    assert message.startswith("w.tokenizer_path=/models/y does not fit w.model_path=/models/x: too many.")


def test_gemma3_with_its_vision_tower_is_accepted_for_text_data():
    model_config.refuse_unsupported_model("m", {"model_type": "gemma3", "vision_config": {}, "text_config": {}})
    with pytest.raises(NotImplementedError, match=r"^m is a 'paligemma' vision-language model"):
        model_config.refuse_unsupported_model("m", {"model_type": "paligemma", "vision_config": {}})


def test_a_gemma4_pad_token_other_than_0_is_refused_only_with_per_layer_input_embeddings():
    gemma4 = {"model_type": "gemma4", "vision_config": {}, "text_config": {"pad_token_id": 5}}
    model_config.refuse_unsupported_model("m", gemma4)
    gemma4["text_config"]["hidden_size_per_layer_input"] = 256
    with pytest.raises(NotImplementedError, match=r"per-layer input embeddings and text_config.pad_token_id=5"):
        model_config.refuse_unsupported_model("m", gemma4)


def test_one_expert_is_a_dense_model():
    assert model_config.expert_count({"model_type": "x", "num_experts": 1}) is None
    model_config.refuse_unchecked_experts("m", {"model_type": "dbrx_like", "num_experts": 1})
    assert model_config.expert_count({"text_config": {"num_local_experts": 8}}) == ("num_local_experts", 8)


def test_lora_on_mixtrals_expert_names_is_refused(tmp_path):
    import json

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "mixtral", "num_local_experts": 4}))
    for targets in ("q_proj,w1", "w2", "w3"):
        lora = model_config.LoraConfig(rank=8, target_modules=targets)
        with pytest.raises(
            NotImplementedError, match=r"is a mixture-of-experts model \('mixtral', num_local_experts=4"
        ):
            model_config.refuse_lora_on_experts("m.model_path", str(tmp_path), lora)
    model_config.refuse_lora_on_experts(
        "m.model_path", str(tmp_path), model_config.LoraConfig(rank=8, target_modules="q_proj")
    )


def test_trained_positions_scale_per_layer_type_rope_and_never_gemma3s():
    per_layer = {
        "full_attention": {"rope_type": "linear", "factor": 4.0},
        "sliding_attention": {"rope_type": "default"},
    }
    assert model_config.trained_positions({"max_position_embeddings": 100, "rope_parameters": per_layer}) == 400
    gemma3 = {
        "model_type": "gemma3",
        "text_config": {"max_position_embeddings": 100, "rope_scaling": per_layer["full_attention"]},
    }
    assert model_config.trained_positions(gemma3) == 100
    yarn = {"max_position_embeddings": 100, "rope_parameters": {"rope_type": "yarn", "factor": 4.0}}
    assert model_config.trained_positions(yarn) == 100  # the scaled length already


def test_a_sliding_window_switched_off_by_use_sliding_window_is_no_sliding_window():
    """Qwen2-style configs name a sliding_window and switch it off with use_sliding_window: false."""
    assert not model_config.uses_sliding_window({"use_sliding_window": False, "sliding_window": 4096})
    assert model_config.uses_sliding_window({"sliding_window": 4096})
    assert model_config.uses_sliding_window({"layer_types": ["full_attention", "sliding_attention"]})


def test_mamba_and_linear_attention_layers_carry_state():
    layer_types = ["full_attention", "mamba", "linear_attention", "mamba"]
    assert model_config.recurrent_layer_types(layer_types) == ["linear_attention", "mamba"]
    assert model_config.recurrent_layer_types(None) == []


def test_on_a_gpu_with_torch_dtype_set_only_mp_param_dtype_is_unread():
    """The reduce and buffer dtypes still apply when the weights are stored in torch_dtype."""
    inactive = model_config.FSDPConfig(torch_dtype="bf16").inactive("w.", on_cpu=False)
    assert inactive == [(("w.mp_param_dtype",), "w.torch_dtype=bf16 (the weights are stored and computed in it)")]
    assert model_config.FSDPConfig().inactive("w.", on_cpu=False) == []


def test_mixed_precision_dtypes_take_torchs_names_too():
    import torch

    from verl.models.fsdp import to_torch_dtype

    model_config.FSDPConfig(mp_param_dtype="bfloat16", mp_reduce_dtype="float32", mp_buffer_dtype="float16").validate(
        "w."
    )
    assert [to_torch_dtype(name) for name in ("float32", "fp32", "float16", "bf16")] == [
        torch.float32,
        torch.float32,
        torch.float16,
        torch.bfloat16,
    ]


def test_a_shard_group_larger_than_the_devices_is_warned_about_and_shards_over_all(caplog) -> None:
    """fsdp_size above the device count was taken as -1 without a word (a recipe's HSDP group of 8 run on 4 GPUs)."""
    import logging

    with caplog.at_level(logging.WARNING, logger=model_config.__name__):
        model_config.FSDPConfig(fsdp_size=8).check_world("w.", 4)
        model_config.FSDPConfig(fsdp_size=4).check_world("w.", 4)
        model_config.FSDPConfig(fsdp_size=2).check_world("w.", 4)
    assert [record.getMessage() for record in caplog.records] == [
        "w.fsdp_size=8 is more than the 4 devices (trainer.nnodes x trainer.n_gpus_per_node): the model is sharded "
        "over all of them (as -1)."
    ]
