# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Edges of model loading: path errors, the weights-vs-config report, the critic's start from a reward model, and
what an export writes."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from verl.models.config import ModelConfig
from verl.models.loading import build_model, load_model_config, weights_config_mismatch
from verl.models.tiny_models import get_or_build_tiny_model


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory) -> dict[str, str]:
    root = str(tmp_path_factory.mktemp("tiny_models"))
    return {kind: get_or_build_tiny_model(kind, root) for kind in ("qwen2", "qwen2_rm", "qwen2_5_vl", "gemma3")}


def _copy(source: str, target) -> str:
    shutil.copytree(source, target)
    return str(target)


def test_a_relative_model_path_that_does_not_exist_is_named_as_a_missing_directory(tmp_path, monkeypatch):
    """A typo in a relative path is said to be a missing folder, not taken for a Hub id."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"model.model_path './no_such_model' is not a directory"):
        load_model_config(ModelConfig(model_path="./no_such_model"))


def test_the_mismatch_report_leaves_out_saved_tensors_the_model_does_not_build(model_dirs, tmp_path):
    """A saved tensor under a name the model does not build (one the loader maps, or drops) is no mismatch."""
    folder = _copy(model_dirs["qwen2"], tmp_path / "extra")
    weights = load_file(f"{folder}/model.safetensors")
    weights["model.legacy_extra.weight"] = torch.zeros(3, 5)
    save_file(weights, f"{folder}/model.safetensors", metadata={"format": "pt"})
    assert weights_config_mismatch(folder) is None


def test_a_load_error_other_than_a_size_mismatch_is_raised_as_it_is(model_dirs, monkeypatch):
    from transformers import AutoModelForCausalLM

    def fail(*args, **kwargs):
        raise RuntimeError("out of host memory")

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", fail)
    with pytest.raises(RuntimeError, match="out of host memory"):
        build_model(ModelConfig(model_path=model_dirs["qwen2"]))


def test_a_critic_from_a_two_label_classifier_gets_a_fresh_value_head(model_dirs, tmp_path):
    """Only a one-label classifier is a reward model whose score head a critic starts from; a two-label one's head
    (2 x hidden) cannot be a value head, and the critic starts from its own seeded head."""
    folder = _copy(model_dirs["qwen2_rm"], tmp_path / "two_labels")
    config = json.loads(open(f"{folder}/config.json").read())
    config.update(id2label={"0": "A", "1": "B"}, label2id={"A": 0, "B": 1})
    open(f"{folder}/config.json", "w").write(json.dumps(config))
    weights = load_file(f"{folder}/model.safetensors")
    weights["score.weight"] = torch.ones(2, config["hidden_size"])
    save_file(weights, f"{folder}/model.safetensors", metadata={"format": "pt"})
    critic = build_model(ModelConfig(model_path=folder, enable_gradient_checkpointing=False), value_head=True)
    plain = build_model(
        ModelConfig(model_path=model_dirs["qwen2"], enable_gradient_checkpointing=False), value_head=True
    )
    assert critic.lm_head.weight.shape == (1, config["hidden_size"])
    torch.testing.assert_close(critic.lm_head.weight, plain.lm_head.weight)  # the seeded head, not the score's


def test_a_critic_starts_from_the_score_heads_bias_where_the_reward_model_has_one(model_dirs, tmp_path):
    folder = _copy(model_dirs["qwen2_rm"], tmp_path / "biased")
    weights = load_file(f"{folder}/model.safetensors")
    weights["score.bias"] = torch.tensor([3.5])
    save_file(weights, f"{folder}/model.safetensors", metadata={"format": "pt"})
    critic = build_model(ModelConfig(model_path=folder, enable_gradient_checkpointing=False), value_head=True)
    torch.testing.assert_close(critic.lm_head.bias, torch.tensor([3.5]))
    torch.testing.assert_close(critic.lm_head.weight, weights["score.weight"])


def test_the_declared_dtype_is_the_text_configs_where_the_top_level_has_none_and_float32_where_neither_has_one():
    from transformers import Qwen2_5_VLConfig, Qwen2Config

    from verl.models.loading import declared_dtype

    assert declared_dtype(Qwen2Config()) == torch.float32
    assert declared_dtype(Qwen2Config(dtype="bfloat16")) == torch.bfloat16
    assert declared_dtype(Qwen2_5_VLConfig(text_config={"dtype": "bfloat16"})) == torch.bfloat16
    assert declared_dtype(Qwen2_5_VLConfig(dtype="float16", text_config={"dtype": "bfloat16"})) == torch.float16


def test_an_exported_vision_language_config_has_use_cache_where_its_folder_had_it(model_dirs):
    """Training switches use_cache off on both levels; the export writes the folder's value back to the text config
    and none at a top level that had none."""
    from verl.models.loading import exported_config

    folder = model_dirs["qwen2_5_vl"]
    saved = json.loads(open(f"{folder}/config.json").read())
    model = build_model(ModelConfig(model_path=folder), device="meta")
    assert model.config.use_cache is False and model.config.get_text_config().use_cache is False
    assert "use_cache" not in saved and saved["text_config"]["use_cache"] is True  # the tiny folder's
    config = exported_config(model)
    assert "use_cache" not in vars(config) and config.get_text_config().use_cache is True
    assert model.config.use_cache is False  # the training model's own config is left as it is


def test_the_value_heads_bias_starts_at_zero_and_its_weight_at_the_models_initializer_range(model_dirs):
    """Every rank that builds the critic gets the same head: a zero bias (nn.Linear's own is random) and a weight of
    the model's initializer_range scale."""
    first = build_model(ModelConfig(model_path=model_dirs["qwen2"]), value_head=True)
    second = build_model(ModelConfig(model_path=model_dirs["qwen2"]), value_head=True)
    assert torch.equal(first.lm_head.bias, torch.zeros(1)) and torch.equal(second.lm_head.bias, torch.zeros(1))
    scale = first.config.initializer_range
    assert scale != 0.02  # the tiny model's own, so the check tells it from the fallback
    assert 0.8 * scale < first.lm_head.weight.std().item() < 1.2 * scale


def test_a_model_trained_on_text_only_gets_no_vision_tower_hooks(model_dirs):
    """Gemma 3 takes no images here: no rank runs its tower, so no dummy image is needed (nor written for it)."""
    from verl.models.loading import get_vision_tower, run_vision_tower_in_every_forward

    model = build_model(ModelConfig(model_path=model_dirs["gemma3"]), device="meta")
    assert get_vision_tower(model) is not None
    assert run_vision_tower_in_every_forward(model) is False


def test_every_text_only_forward_runs_the_vision_tower_not_only_the_first(model_dirs):
    """The FSDP lockstep hook runs the tower in each forward without images: after the first (whose dummy image ran
    the tower) the next must run it too, or the ranks with images would wait for this one's all-gathers."""
    from verl.models.loading import get_vision_tower, run_vision_tower_in_every_forward

    model = build_model(ModelConfig(model_path=model_dirs["qwen2_5_vl"], enable_gradient_checkpointing=False))
    assert run_vision_tower_in_every_forward(model)
    calls = []
    get_vision_tower(model).register_forward_hook(lambda module, args, output: calls.append(1))
    input_ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        for forward in range(1, 4):
            model(input_ids=input_ids)
            assert len(calls) == forward


def test_build_model_refuses_a_device_other_than_cpu_or_meta(model_dirs):
    with pytest.raises(ValueError, match=r"build_model device must be 'cpu' or 'meta', got 'cuda'"):
        build_model(ModelConfig(model_path=model_dirs["qwen2"]), device="cuda")


def test_a_meta_build_keeps_the_folders_generation_config(model_dirs, tmp_path):
    """Rank-0 init builds on the meta device: the model still carries the folder's stop tokens and sampling defaults,
    as from_pretrained gives them (the export writes them)."""
    folder = _copy(model_dirs["qwen2"], tmp_path / "generation")
    (tmp_path / "generation" / "generation_config.json").write_text(
        json.dumps({"eos_token_id": [7, 9], "temperature": 0.3, "do_sample": True})
    )
    loaded = build_model(ModelConfig(model_path=folder))
    meta = build_model(ModelConfig(model_path=folder), device="meta")
    for model in (loaded, meta):
        assert model.generation_config.temperature == 0.3 and model.generation_config.eos_token_id == [7, 9]


def test_model_flops_per_token_leave_out_an_untied_input_embedding(model_dirs):
    """An untied input embedding is a lookup: no matmul FLOPs; its untied LM head counts as the head."""
    from verl.models.structure import matmul_flops_per_token

    config = ModelConfig(model_path=model_dirs["qwen2"], override_config={"tie_word_embeddings": False})
    model = build_model(config, device="meta")
    embedding, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    assert embedding is not head
    body = sum(param.numel() for param in model.parameters()) - embedding.numel() - head.numel()
    assert matmul_flops_per_token(model) == (6 * body, 6 * head.numel())
