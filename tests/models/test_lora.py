# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""verl.models.lora on plain (unsharded) tiny models: which layers get adapters, the merge against peft's own, the
peft file layout, and the errors for targets that match nothing."""

import pytest
import torch

from verl.models.config import LoraConfig, ModelConfig
from verl.models.loading import build_model
from verl.models.lora import (
    adapter_config_dict,
    adapters_disabled,
    apply_lora,
    lora_scaling,
    merged_state_dict,
    peft_adapter_state,
)
from verl.models.tiny_models import get_or_build_tiny_model


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("lora_models"))
    return {kind: get_or_build_tiny_model(kind, root) for kind in ("qwen2", "qwen2_5_vl")}


def _adapted(path: str, vision_language: bool = False, **lora) -> torch.nn.Module:
    model = build_model(ModelConfig(model_path=path))
    apply_lora(model, LoraConfig(**{"rank": 4, "alpha": 8, **lora}), vision_language, path)
    return model


def _adapted_layers(model: torch.nn.Module) -> set[str]:
    return {name.split(".lora_A.")[0] for name, _ in model.named_parameters() if ".lora_A." in name}


def test_targets_and_the_vision_tower(models):
    text = _adapted(models["qwen2"])
    layers = _adapted_layers(text)
    kinds = {name.rsplit(".", 1)[-1] for name in layers}
    assert kinds == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}  # no lm_head
    assert kinds == {
        n.rsplit(".", 1)[-1] for n in _adapted_layers(_adapted(models["qwen2"], target_modules="all-linear"))
    }
    only = _adapted_layers(_adapted(models["qwen2"], target_modules="q_proj, v_proj"))
    assert {name.rsplit(".", 1)[-1] for name in only} == {"q_proj", "v_proj"}
    assert not _adapted_layers(_adapted(models["qwen2"], exclude_modules=".*mlp.*")) & {
        name for name in layers if ".mlp." in name
    }

    vl = _adapted_layers(_adapted(models["qwen2_5_vl"], vision_language=True))
    assert vl and not any("visual" in name for name in vl)  # the vision tower stays frozen by default
    with_tower = _adapted_layers(_adapted(models["qwen2_5_vl"], vision_language=True, vision_tower=True))
    assert any("visual" in name for name in with_tower)


@pytest.mark.parametrize("kind", ["internvl", "mistral3", "gemma4"])
def test_the_projector_beside_the_vision_tower_gets_no_adapters_by_default(tmp_path, kind):
    """InternVL, LLaVA and Mistral 3 keep their projector into the language model beside the tower
    (multi_modal_projector), Gemma 4 in embed_vision: it got adapters under all-linear, which vLLM's adapter sync
    refuses ("expected target modules in {...}"), and Qwen's, inside `visual`, never did."""
    path = get_or_build_tiny_model(kind, str(tmp_path))
    language = _adapted_layers(_adapted(path, vision_language=True))
    assert language and all("language_model" in name for name in language)
    whole = _adapted_layers(_adapted(path, vision_language=True, vision_tower=True))
    assert any("multi_modal_projector" in name or "embed_vision" in name for name in whole)


def test_only_adapters_train_and_start_as_the_base_model(models):
    model = _adapted(models["qwen2"])
    trainable = [name for name, param in model.named_parameters() if param.requires_grad]
    assert trainable and all(".lora_" in name for name in trainable)
    base = build_model(ModelConfig(model_path=models["qwen2"]))
    ids = torch.tensor([[5, 17, 99, 3, 42]])
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids).logits, base(input_ids=ids).logits)  # lora_B starts at zero
    again = _adapted(models["qwen2"])  # the adapters are drawn from a fixed seed: ranks agree
    for (name, a), (_, b) in zip(model.named_parameters(), again.named_parameters()):
        assert torch.equal(a, b), name


def test_merge_equals_peft_merge_and_the_layout_loads_in_peft(models, tmp_path):
    from peft import PeftModel
    from safetensors.torch import save_file

    model = _adapted(models["qwen2"], rank=4, alpha=12)
    generator = torch.Generator().manual_seed(0)  # not the global RNG: the same adapter whatever ran before
    with torch.no_grad():
        for name, param in model.named_parameters():
            if ".lora_B." in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.05)  # a trained adapter
    ids = torch.tensor([[5, 17, 99, 3, 42, 7]])
    with torch.no_grad():
        adapted_logits = model(input_ids=ids).logits
        with adapters_disabled(model):
            base_logits = model(input_ids=ids).logits
    config = adapter_config_dict(model)
    assert lora_scaling(config) == 3.0
    merged = build_model(ModelConfig(model_path=models["qwen2"]))
    missing, unexpected = merged.load_state_dict(merged_state_dict(model.state_dict(), 3.0), strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}
    with torch.no_grad():
        # W + s B A against W x + s B (A x): equal up to float32 rounding (a wrong scale or layout is off by >1e-2)
        torch.testing.assert_close(merged(input_ids=ids).logits, adapted_logits, rtol=0, atol=5e-5)
    assert not torch.allclose(adapted_logits, base_logits, atol=1e-3)

    # peft reads the adapter from our layout and computes the same model (its own merge included)
    import json

    (tmp_path / "adapter").mkdir()
    save_file(peft_adapter_state(model.state_dict()), str(tmp_path / "adapter" / "adapter_model.safetensors"))
    (tmp_path / "adapter" / "adapter_config.json").write_text(json.dumps(config, default=str))
    peft_model = PeftModel.from_pretrained(build_model(ModelConfig(model_path=models["qwen2"])), tmp_path / "adapter")
    with torch.no_grad():
        torch.testing.assert_close(peft_model(input_ids=ids).logits, adapted_logits, rtol=0, atol=5e-5)
        peft_merged = peft_model.merge_and_unload()
        torch.testing.assert_close(peft_merged(input_ids=ids).logits, adapted_logits, rtol=0, atol=5e-5)


def _lora_run_args(tmp_path, model: str) -> list[str]:
    """A GRPO run's arguments with LoRA rank 8 on `model`, its one-row data and reward written to `tmp_path`."""
    (tmp_path / "data.jsonl").write_text('{"prompt": "1+1?", "answer": "2"}\n')
    (tmp_path / "reward.py").write_text("def compute_score(sample):\n    return {'overall': 1.0}\n")
    return [
        f"data.train_files={tmp_path / 'data.jsonl'}",
        f"worker.actor.model.model_path={model}",
        f"worker.reward.reward_function={tmp_path / 'reward.py'}:compute_score",
        *("data.rollout_batch_size=8", "worker.actor.global_batch_size=4", "worker.rollout.n=2"),
        *("trainer.n_gpus_per_node=2", "worker.actor.model.lora.rank=8"),
    ]


def test_targets_that_match_nothing_name_the_keys(models, tmp_path):
    """In the workers, and (since they failed there, inside Ray) already when the config is checked, on the model
    built on the meta device; SFT's errors name its own section."""
    from verl.sft.config import load_sft_config
    from verl.trainer.config import load_config
    from verl.utils.config import ConfigError

    with pytest.raises(ValueError, match="lora.target_modules"):
        _adapted(models["qwen2"], target_modules="no_such_proj")
    rl = _lora_run_args(tmp_path, models["qwen2"])
    with pytest.raises(ValueError, match=r"target_modules names v_prj, which no layer of the model has"):
        _adapted(models["qwen2"], target_modules="q_proj,v_prj")  # peft refuses a list only if no name matches
    for targets in ("no_such_proj", "q_proj,v_prj"):
        with pytest.raises(ConfigError, match=r"^worker.actor.model.lora.target_modules names (no_such_proj|v_prj),"):
            load_config([*rl, f"worker.actor.model.lora.target_modules={targets}"])
    for targets in ("q_proj", "self_attn.q_proj, mlp.down_proj", "all-linear"):
        assert load_config([*rl, f"worker.actor.model.lora.target_modules={targets}"]).worker.actor.model.lora.rank
    sft = [f"data.train_files={tmp_path / 'data.jsonl'}", f"worker.model.model_path={models['qwen2']}"]
    with pytest.raises(ConfigError, match=r"^worker.model.lora.target_modules names no_such_proj, which no layer"):
        load_sft_config([*sft, "worker.model.lora.rank=8", "worker.model.lora.target_modules=no_such_proj"])


def test_targets_only_the_vision_side_has_are_refused_unless_it_gets_adapters(models, tmp_path):
    """Qwen2.5-VL's `qkv` is a layer of its vision blocks only, which get no adapters unless lora.vision_tower: the
    config check passed it (the weights have it), and each worker stopped in a Ray traceback saying that no layer of
    the model had it ("check the spelling")."""
    from verl.trainer.config import load_config
    from verl.utils.config import ConfigError

    rl = _lora_run_args(tmp_path, models["qwen2_5_vl"])
    with pytest.raises(ValueError, match=r"target_modules names qkv, which no layer of the model has"):
        _adapted(models["qwen2_5_vl"], vision_language=True, target_modules="q_proj,qkv")  # as the workers failed
    for targets in ("q_proj,qkv", "q_proj,merger.mlp.0"):
        with pytest.raises(ConfigError, match=r"names (qkv|merger.mlp.0), which only the vision tower or projector"):
            load_config([*rl, f"worker.actor.model.lora.target_modules={targets}"])
    vision = load_config(
        [*rl, "worker.actor.model.lora.target_modules=q_proj,qkv", "worker.actor.model.lora.vision_tower=true"]
    )
    assert vision.worker.actor.model.lora.vision_tower
    layers = _adapted_layers(
        _adapted(models["qwen2_5_vl"], vision_language=True, target_modules="q_proj,qkv", vision_tower=True)
    )
    assert any(layer.endswith("attn.qkv") for layer in layers) and any(layer.endswith("q_proj") for layer in layers)


def test_a_vl_model_s_whole_module_names_are_checked_as_the_actor_injects_them(models, tmp_path):
    """Qwen2.5-VL's checkpoint stores the layer model.language_model.layers.0.self_attn.q_proj as
    model.layers.0.self_attn.q_proj. The config check matched the weight names: it refused the layer's whole name,
    which the actor adapts, and passed the stored one, which no layer of the actor's model has. Now one rule, the
    built model's module names, decides both."""
    from verl.trainer.config import load_config
    from verl.utils.config import ConfigError

    rl = _lora_run_args(tmp_path, models["qwen2_5_vl"])
    module, stored = "model.language_model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.q_proj"
    for targets in (module, f"{module},v_proj", "language_model.layers.1.mlp.down_proj"):
        assert load_config([*rl, f"worker.actor.model.lora.target_modules={targets}"]).worker.actor.model.lora.rank
    assert _adapted_layers(_adapted(models["qwen2_5_vl"], vision_language=True, target_modules=module)) == {module}
    with pytest.raises(ValueError):  # as the actor fails on it
        _adapted(models["qwen2_5_vl"], vision_language=True, target_modules=stored)
    for targets in (stored, r".*language_model.*\.q_proj"):  # (no regular expressions: names, as peft's lists)
        with pytest.raises(ConfigError, match=r"^worker.actor.model.lora.target_modules names .*, which no layer"):
            load_config([*rl, f"worker.actor.model.lora.target_modules={targets}"])
    with pytest.raises(ConfigError, match=rf"\(a layer it has: {module}\)"):
        load_config([*rl, f"worker.actor.model.lora.target_modules={stored}"])


@pytest.mark.filterwarnings("ignore:The following (rank|alpha)_pattern keys did not match:RuntimeWarning")
def test_a_mixture_of_experts_is_refused_before_training(tmp_path):
    """peft adapts the fused 3-D expert tensors of a transformers MoE, which the merge does not handle: LoRA SFT of a
    tiny Qwen3-MoE used to train and then fail at the export with a KeyError. A local model is refused when the
    config loads (tests/sft, tests/trainer); a hub id here, when the adapters are injected."""
    moe = get_or_build_tiny_model("qwen3_moe", str(tmp_path))
    with pytest.raises(NotImplementedError, match=r"mixture of experts \(model\.layers\.0\.mlp\.experts.*lora.rank=0"):
        _adapted(moe)


def test_the_sft_export_merges_into_the_base_as_its_folder_holds_it(models):
    """On a GPU a LoRA run's frozen base trains in bf16: the SFT export merged the adapters into that copy and wrote
    an fp32-declared model's every weight rounded through bf16 (embeddings and untouched layers too). The export now
    takes the frozen weights from the folder, as the merger does."""
    from verl.models.lora import merged_state_dict
    from verl.sft.worker import merged_lora_export

    model = _adapted(models["qwen2"])
    with torch.no_grad():
        for name, param in model.named_parameters():
            if ".lora_B." in name:
                param.normal_(0, 0.02, generator=torch.Generator().manual_seed(0))
    state = model.state_dict()
    frozen = {name for name, param in model.named_parameters() if not param.requires_grad}
    expected = merged_state_dict(state, 2.0)  # alpha 8 / rank 4
    on_gpu = {name: tensor.to(torch.bfloat16) if name in frozen else tensor for name, tensor in state.items()}
    exported = merged_lora_export(on_gpu, frozen, ModelConfig(model_path=models["qwen2"]), 2.0)
    assert set(exported) == set(expected)
    assert all(torch.equal(exported[name], expected[name]) for name in expected)
    assert not all(torch.equal(tensor, expected[name]) for name, tensor in merged_state_dict(on_gpu, 2.0).items())
