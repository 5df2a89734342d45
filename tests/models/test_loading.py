# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
import dataclasses

import pytest
import torch

from verl.models.config import ModelConfig
from verl.models.loading import (
    ModelLoadError,
    build_model,
    freeze_vision_tower,
    get_vision_tower,
    is_vision_language,
    load_model_config,
    run_vision_tower_in_every_forward,
)
from verl.models.tiny_models import count_parameters, get_or_build_tiny_model


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory) -> dict[str, str]:
    root = str(tmp_path_factory.mktemp("tiny_models"))
    return {kind: get_or_build_tiny_model(kind, root) for kind in ("qwen2", "qwen2_5_vl", "gemma4", "mistral3")}


def test_model_class_is_detected_from_the_config(model_dirs):
    text = build_model(ModelConfig(model_path=model_dirs["qwen2"]))
    vl = build_model(ModelConfig(model_path=model_dirs["qwen2_5_vl"]))
    assert type(text).__name__ == "Qwen2ForCausalLM" and not is_vision_language(text.config)
    assert type(vl).__name__ == "Qwen2_5_VLForConditionalGeneration" and is_vision_language(vl.config)
    assert get_vision_tower(text) is None and get_vision_tower(vl) is not None
    assert not text.config.use_cache and not vl.config.get_text_config().use_cache
    assert text.config._attn_implementation == "varlen"  # auto: the packed-sequence attention
    assert vl.config.get_text_config()._attn_implementation == "varlen"


def test_attn_implementation_is_chosen_by_the_config(model_dirs):
    sdpa = build_model(ModelConfig(model_path=model_dirs["qwen2"], attn_implementation="sdpa"))
    assert sdpa.config._attn_implementation == "sdpa"
    try:
        import flash_attn  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="attn_implementation=flash_attention_2 needs the flash-attn package"):
            build_model(ModelConfig(model_path=model_dirs["qwen2"], attn_implementation="flash_attention_2"))


def test_unsupported_vision_language_families_are_refused(model_dirs):
    from transformers import AutoConfig

    from verl.models.config import refuse_unsupported_model

    config = AutoConfig.from_pretrained(model_dirs["qwen2_5_vl"]).to_dict()
    refuse_unsupported_model("Model 'tiny'", config)  # supported: no error
    config["model_type"] = "ernie4_5_vl_moe"  # not supported
    with pytest.raises(NotImplementedError, match="Model 'tiny' is a 'ernie4_5_vl_moe' vision-language model"):
        refuse_unsupported_model("Model 'tiny'", config)


def test_weights_that_do_not_fit_the_config_are_one_error_naming_a_tensor(model_dirs, tmp_path):
    """A config.json edited after the weights were saved: transformers raised after a report of every layer, which
    the trainer printed as an 86-line traceback from the worker."""
    import json
    import shutil

    folder = tmp_path / "edited"
    shutil.copytree(model_dirs["qwen2"], folder)
    config = json.loads((folder / "config.json").read_text())
    saved = config["intermediate_size"]
    config["intermediate_size"] = 2 * saved
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError) as error:
        build_model(ModelConfig(model_path=str(folder)))
    hidden = config["hidden_size"]
    assert str(error.value) == (
        f"Model '{folder}': its weights do not fit its config.json: model.layers.0.mlp.down_proj.weight is "
        f"[{hidden}, {saved}] in the weights, [{hidden}, {2 * saved}] by the config (and "
        f"{3 * config['num_hidden_layers'] - 1} more tensors); a config.json edited after the weights were saved, or "
        "another model's."
    )


def test_meta_build_has_the_same_tree_without_storage(model_dirs):
    for path in model_dirs.values():
        loaded = build_model(ModelConfig(model_path=path))
        meta = build_model(ModelConfig(model_path=path), device="meta")
        assert all(param.device.type == "meta" for param in meta.parameters())
        shapes = {name: value.shape for name, value in loaded.state_dict().items()}
        assert {name: value.shape for name, value in meta.state_dict().items()} == shapes
        tied = loaded.lm_head.weight is loaded.get_input_embeddings().weight  # (Mistral 3's head is untied)
        assert (meta.lm_head.weight is meta.get_input_embeddings().weight) == tied  # ties survive as loaded


def test_critic_gets_an_untied_deterministic_value_head(model_dirs):
    for kind, path in model_dirs.items():
        causal = build_model(ModelConfig(model_path=path))
        critic = build_model(ModelConfig(model_path=path), value_head=True)
        again = build_model(ModelConfig(model_path=path), value_head=True)
        assert critic.lm_head.out_features == 1 and critic.lm_head.weight is not critic.get_input_embeddings().weight
        assert not critic.config.get_text_config().tie_word_embeddings
        assert torch.equal(critic.lm_head.weight, again.lm_head.weight) and critic.lm_head.weight.abs().sum() > 0
        torch.testing.assert_close(critic.get_input_embeddings().weight, causal.get_input_embeddings().weight)
        ids = torch.randint(0, 2000, (2, 7), generator=torch.Generator().manual_seed(0))
        assert critic(input_ids=ids).logits.shape == (2, 7, 1), kind
        meta = build_model(ModelConfig(model_path=path), value_head=True, device="meta")
        assert meta.lm_head.weight.shape == (1, critic.config.get_text_config().hidden_size)


@pytest.mark.parametrize(
    "kind, transform",
    [
        ("granitemoe", {"logits_scaling": 6.0}),
        ("falcon_h1", {"lm_head_multiplier": 4.0}),
        ("cohere", {"logit_scale": 0.0625}),
        ("gemma4", {}),
    ],
)
def test_a_value_is_the_value_heads_output_without_the_familys_logit_transform(tmp_path, model_dirs, kind, transform):
    """Granite divides logits by logits_scaling, Falcon-H1 and Cohere (Command R) multiply them, Gemma 4 soft-caps them
    at 30: a critic's value is the head's output itself (the actor keeps its family's transform; Cohere's values were
    scaled by 1/16)."""
    tokenizer = None
    if kind == "cohere":  # no tiny Cohere of its own: a small random one, with the tiny Qwen2's tokenizer
        from transformers import CohereConfig, CohereForCausalLM

        path, tokenizer = str(tmp_path / "cohere"), model_dirs["qwen2"]
        sizes = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128}
        CohereForCausalLM(CohereConfig(vocab_size=2100, max_position_embeddings=256, **sizes)).save_pretrained(path)
    else:
        path = model_dirs.get(kind) or get_or_build_tiny_model(kind, str(tmp_path))
    config = ModelConfig(
        model_path=path, tokenizer_path=tokenizer, enable_gradient_checkpointing=False, override_config=transform
    )
    critic = build_model(config, value_head=True).eval()
    head_outputs = []
    critic.lm_head.register_forward_hook(lambda module, args, output: head_outputs.append(output))
    with torch.no_grad():
        critic.lm_head.bias.fill_(100.0)  # beyond Gemma's cap of 30
        values = critic(input_ids=torch.arange(3, 9)[None], use_cache=False).logits[..., 0]
    torch.testing.assert_close(values, head_outputs[0][..., 0])
    assert values.min() > 50
    actor_config = build_model(config).config.get_text_config().to_dict()
    assert actor_config.items() >= (transform or {"final_logit_softcapping": 30.0}).items()  # the actor keeps it


def test_a_critic_built_from_a_reward_model_starts_from_its_score_head(tmp_path):
    from transformers import AutoModelForSequenceClassification

    path = get_or_build_tiny_model("qwen2_rm", str(tmp_path))
    critic = build_model(ModelConfig(model_path=path, enable_gradient_checkpointing=False), value_head=True).eval()
    reward_model = AutoModelForSequenceClassification.from_pretrained(path, dtype=torch.float32).eval()
    ids = torch.arange(3, 12)[None]
    with torch.no_grad():
        values = critic(input_ids=ids, use_cache=False).logits[..., 0]
        score = reward_model(input_ids=ids).logits[0, 0]  # the last token's
    torch.testing.assert_close(values[0, -1], score)
    assert values.std() > 0


def test_freeze_vision_tower_freezes_exactly_the_tower(model_dirs):
    model = build_model(ModelConfig(model_path=model_dirs["qwen2_5_vl"]))
    frozen = freeze_vision_tower(model)
    assert frozen == count_parameters(model_dirs["qwen2_5_vl"])["vision"]
    tower = {id(param) for param in get_vision_tower(model).parameters()}
    assert all(param.requires_grad == (id(param) not in tower) for param in model.parameters())
    with pytest.raises(ValueError, match="no vision tower"):
        freeze_vision_tower(build_model(ModelConfig(model_path=model_dirs["qwen2"])))


@pytest.mark.parametrize("disable", [True, False])
def test_dropout_is_off_in_the_built_model_and_kept_in_its_config(model_dirs, disable):
    """A model whose config has dropout (as Seed-OSS's or GPT-2's) trains without it by default, so two forwards in
    training mode agree, as the rollout's and the old log-probs do; the config (saved with checkpoints) keeps it."""
    dropout = {"attention_dropout": 0.5}
    model = build_model(ModelConfig(model_path=model_dirs["qwen2"], override_config=dropout, disable_dropout=disable))
    vl = build_model(
        ModelConfig(model_path=model_dirs["qwen2_5_vl"], override_config={"text_config": dropout}),
        device="meta",
    )
    assert model.config.attention_dropout == vl.config.text_config.attention_dropout == 0.5
    assert model.model.layers[0].self_attn.attention_dropout == (0.0 if disable else 0.5)
    assert vl.model.language_model.layers[0].self_attn.attention_dropout == 0.0
    model.train()
    ids = torch.arange(1, 40).unsqueeze(0)
    with torch.no_grad():
        first, second = model(ids).logits, model(ids).logits
    assert torch.equal(first, second) == disable


def test_mixtral_router_jitter_is_off_in_the_built_model(tmp_path):
    """Mixtral's router_jitter_noise scales each token's router input by random factors in training mode, as dropout
    does: off by default, so two training-mode forwards agree."""
    mixtral = get_or_build_tiny_model("mixtral", str(tmp_path))
    for disable in (True, False):
        config = ModelConfig(model_path=mixtral, override_config={"router_jitter_noise": 0.5}, disable_dropout=disable)
        model = build_model(config).train()
        assert model.config.router_jitter_noise == 0.5
        ids = torch.arange(1, 40).unsqueeze(0)
        with torch.no_grad():
            assert torch.equal(model(ids).logits, model(ids).logits) == disable


def test_config_overrides_and_path_errors(model_dirs, tmp_path):
    config = load_model_config(ModelConfig(model_path=model_dirs["qwen2"], override_config={"attention_dropout": 0.1}))
    assert config.attention_dropout == 0.1
    with pytest.raises(FileNotFoundError, match="missing_model"):
        load_model_config(ModelConfig(model_path=str(tmp_path / "missing_model")))
    with pytest.raises(ValueError, match="model_path is not set"):
        load_model_config(ModelConfig())


def test_a_rope_override_keeps_the_files_other_rope_settings_and_is_checked_when_the_config_loads(model_dirs):
    """Qwen's YaRN recipe as an override (`rope_scaling: {type: yarn, ...}`) replaced the file's RoPE parameters
    (rope_theta lost, `type` never read as `rope_type`): the config check passed and every worker failed to build the
    actor (KeyError 'rope_type'), vLLM too. It is merged and checked as transformers checks a config.json."""
    from verl.utils.config import ConfigError

    yarn = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
    for name in ("rope_scaling", "rope_parameters"):
        model_config = ModelConfig(model_path=model_dirs["qwen2"], override_config={name: yarn})
        model_config.check_files("worker.actor.model.")
        rope = load_model_config(model_config).rope_parameters
        assert rope["rope_type"] == "yarn" and rope["factor"] == 4.0 and rope["rope_theta"] == 1e6
        model = build_model(dataclasses.replace(model_config, enable_gradient_checkpointing=False))
        assert torch.isfinite(model(input_ids=torch.tensor([[5, 6, 7]])).logits).all()
    bad = ModelConfig(model_path=model_dirs["qwen2"], override_config={"rope_scaling": {"type": "yarn"}})
    with pytest.raises(ConfigError, match=r"override_config.rope_scaling: .*factor"):
        bad.check_files("worker.actor.model.")


def test_untying_a_tied_checkpoint_without_an_output_layer_is_refused(model_dirs):
    """The tiny Qwen2 ties lm_head to the embeddings and stores no lm_head.weight: untied by an override, transformers
    started a random head (a LOAD REPORT line in a worker's log), and the run trained a model that outputs noise."""
    from verl.utils.config import ConfigError

    untied = ModelConfig(model_path=model_dirs["qwen2"], override_config={"tie_word_embeddings": False})
    with pytest.raises(ConfigError, match=r"tie_word_embeddings=false: .*no lm_head.weight"):
        untied.check_files("worker.actor.model.")
    ModelConfig(model_path=model_dirs["qwen2"], override_config={"tie_word_embeddings": True}).check_files("m.")


@pytest.mark.parametrize("kind", ["qwen2_5_vl", "gemma4", "mistral3"])
def test_text_only_forward_runs_the_vision_tower_without_changing_the_output(model_dirs, kind):
    """The FSDP lockstep hook: a text-only forward still runs the tower (zero gradient), with identical logits; Gemma
    4's image embedder and Mistral 3's projector, outside their towers, run too."""
    text = build_model(ModelConfig(model_path=model_dirs["qwen2"], enable_gradient_checkpointing=False))
    assert not run_vision_tower_in_every_forward(text)
    model = build_model(ModelConfig(model_path=model_dirs[kind], enable_gradient_checkpointing=False))
    tower = get_vision_tower(model)
    calls = []
    tower.register_forward_hook(lambda module, args, output: calls.append(1))
    input_ids = torch.randint(0, 2000, (2, 7), generator=torch.Generator().manual_seed(0))
    expected = model(input_ids=input_ids).logits
    assert calls == []
    assert run_vision_tower_in_every_forward(model)
    logits = model(input_ids=input_ids).logits
    assert len(calls) == 1 and torch.equal(logits, expected)
    logits.sum().backward()
    outside = {"gemma4": "embed_vision", "mistral3": "multi_modal_projector"}.get(kind)
    vision = [*tower.parameters(), *(getattr(model.model, outside).parameters() if outside else ())]
    grads = [param.grad for param in vision]
    assert all(grad is not None and not grad.any() for grad in grads)  # every vision weight took part, with 0
    assert model.get_input_embeddings().weight.grad.abs().sum() > 0


def test_a_vision_language_models_overrides_reach_its_language_model_in_the_actor_and_the_engine(tmp_path):
    """Gemma 3's config keeps attention settings in text_config: model.override_config names them as for a text model
    (or under text_config), the actor's config gets them there, and the engine the same fields, nested as vLLM
    applies them; a name neither config has is refused, not left aside as transformers would."""
    from verl.utils.config import ConfigError
    from verl.workers.rollout.config import RolloutConfig
    from verl.workers.rollout.vllm_rollout import build_engine_kwargs

    gemma3 = get_or_build_tiny_model("gemma3", str(tmp_path))
    overrides = {"attention_dropout": 0.25, "text_config": {"sliding_window": 8}, "mm_tokens_per_image": 4}
    config = load_model_config(ModelConfig(model_path=gemma3, override_config=overrides))
    text = config.get_text_config()
    assert (text.attention_dropout, text.sliding_window) == (0.25, 8) and not hasattr(config, "attention_dropout")
    with pytest.raises(ConfigError, match=r"override_config.rope_theta: Gemma3Config or its text_config \(Gemma3Tex"):
        load_model_config(ModelConfig(model_path=gemma3, override_config={"rope_theta": 1e6}))
    rollout = RolloutConfig(prompt_length=16, response_length=16, model_overrides=overrides)
    kwargs = build_engine_kwargs(gemma3, rollout, multimodal=False)
    nested = {"text_config": {"attention_dropout": 0.25, "sliding_window": 8}, "mm_tokens_per_image": 4}
    assert kwargs["hf_overrides"] == nested
    assert kwargs["limit_mm_per_prompt"] == {"image": 0, "video": 0}  # trained on text only: no encoder budget


def test_a_frozen_models_dtype_follows_fsdp_torch_dtype_when_set() -> None:
    """The reference and the reward model: fsdp.torch_dtype when set, on every device; else fp32 on the CPU and the
    compute dtype (mp_param_dtype) on accelerators."""
    import torch

    from verl.models.config import FSDPConfig
    from verl.models.fsdp import frozen_param_dtype

    assert frozen_param_dtype(FSDPConfig(), "cpu") == torch.float32
    assert frozen_param_dtype(FSDPConfig(), "cuda") == torch.bfloat16
    assert frozen_param_dtype(FSDPConfig(mp_param_dtype="fp16"), "cuda") == torch.float16
    for device in ("cpu", "cuda"):
        assert frozen_param_dtype(FSDPConfig(torch_dtype="bf16"), device) == torch.bfloat16
        assert frozen_param_dtype(FSDPConfig(torch_dtype="fp32"), device) == torch.float32


def test_model_flops_per_token_count_the_weights_a_token_goes_through(tmp_path, model_dirs):
    """MFU's numerator: 6 per trained weight, 4 per frozen one, a mixture-of-experts layer's routed share of its
    experts, and no untied input embedding (a lookup); Qwen3-30B-A3B's 30.5B parameters made MFU ~10x too high."""
    from verl.models.structure import matmul_flops_per_token

    dense = build_model(ModelConfig(model_path=model_dirs["qwen2"]))
    embedding = dense.get_input_embeddings().weight
    everything = sum(param.numel() for param in dense.parameters())
    head = dense.get_output_embeddings().weight
    body = everything - embedding.numel() - (0 if head is embedding else head.numel())  # the head: response tokens
    assert matmul_flops_per_token(dense) == (6 * body, 6 * head.numel())
    dense.model.layers[0].mlp.down_proj.weight.requires_grad_(False)  # frozen (LoRA's base): no weight gradient
    frozen = dense.model.layers[0].mlp.down_proj.weight.numel()
    assert matmul_flops_per_token(dense) == (6 * body - 2 * frozen, 6 * head.numel())

    moe = build_model(ModelConfig(model_path=get_or_build_tiny_model("qwen3_moe", str(tmp_path))), device="meta")
    config = moe.config.get_text_config()
    experts = sum(param.numel() for name, param in moe.named_parameters() if ".experts." in name)
    head = moe.get_output_embeddings().weight
    others = sum(param.numel() for param in moe.parameters()) - experts - moe.get_input_embeddings().weight.numel()
    if head is not moe.get_input_embeddings().weight:
        others -= head.numel()
    routed = experts * config.num_experts_per_tok / config.num_experts
    assert experts > 0 and matmul_flops_per_token(moe) == pytest.approx((6 * (others + routed), 6 * head.numel()))
