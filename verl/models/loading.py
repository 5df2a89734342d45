# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Build the Hugging Face models the workers train: policy / reference (causal LM or image-text-to-text) and critic
(the same model with a scalar value head in the LM head slot, so text and VLM critics share one path). Models can be
built on the meta device for `verl.models.fsdp` to fill from rank 0."""

import contextlib
import copy
import importlib.util
import logging
import os
import re
from typing import Any

import torch
from torch import nn
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForImageTextToText,
    GenerationConfig,
    PretrainedConfig,
)
from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

from verl.models.config import (
    FLASH_ATTENTION_PACKAGES,
    TEXT_ONLY_VISION_LANGUAGE_TYPES,
    ModelConfig,
    apply_config_overrides,
    refuse_unsupported_model,
    resolve_config_overrides,
)
from verl.models.gated_deltanet import use_packed_linear_attention
from verl.models.packed_attention import PACKED_ATTENTION, register_packed_attention
from verl.models.structure import get_language_model, get_vision_tower
from verl.utils.hub import safetensors_files, safetensors_shapes


logger = logging.getLogger(__name__)

VALUE_HEAD = "lm_head"
"""The critic's value head sits in the LM head slot, so the forward returns (B, L, 1) "logits"."""

VALUE_HEAD_SEED = 0
"""Every rank that builds the critic itself gets the same head."""


def load_model_config(model_config: ModelConfig) -> PretrainedConfig:
    """AutoConfig of `model_config.model_path` with `override_config` applied (`resolve_config_overrides`)."""
    path = model_config.model_path
    if not path:
        raise ValueError("model.model_path is not set; point it at a Hugging Face model directory or Hub id.")
    if (os.path.isabs(path) or path.startswith(".")) and not os.path.isdir(path):
        raise FileNotFoundError(f"model.model_path {path!r} is not a directory; give an existing model directory.")
    config = AutoConfig.from_pretrained(path, trust_remote_code=model_config.trust_remote_code)
    overrides = resolve_config_overrides(config, dict(model_config.override_config), "model.override_config")
    apply_config_overrides(config, overrides)
    return config


def is_vision_language(config: PretrainedConfig) -> bool:
    """True for image-text-to-text models, judged from the config."""
    return config.model_type in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES and hasattr(config, "vision_config")


def resolve_attn_implementation(requested: str = "auto") -> str:
    """The transformers attention implementation for `model.attn_implementation`: auto and varlen give the project's
    packed-sequence attention (registered on first use); flash_attention_2/3 need flash-attn / flash-attn-3; others
    pass through."""
    if requested in ("auto", "varlen"):
        register_packed_attention()
        return PACKED_ATTENTION
    if requested in FLASH_ATTENTION_PACKAGES:
        module, package = FLASH_ATTENTION_PACKAGES[requested]
        if importlib.util.find_spec(module) is None:
            raise ImportError(
                f"model.attn_implementation={requested} needs the {package} package, which is not installed; "
                "install it or use auto (exact packed attention without flash-attn)."
            )
    return requested


class ModelLoadError(ValueError):
    """A model folder whose weights do not fit its config.json (a config edited after the weights were saved, or
    another model's): one line naming the tensors, where transformers raised after a report of every layer."""


def weights_config_mismatch(path: str, trust_remote_code: bool = False, config: Any = None) -> str | None:
    """Which saved tensor of the model folder `path` has another shape than its config.json (or `config`) builds, on
    the meta device (the weights' names as saved; a name the loader maps to another is left out); None where all
    fit. For the error of a load that failed: it builds the model's module tree."""
    config = config if config is not None else AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    model_class = AutoModelForImageTextToText if is_vision_language(config) else AutoModelForCausalLM
    with torch.device("meta"):
        model = model_class.from_config(config, trust_remote_code=trust_remote_code)
    built = {name: list(tensor.shape) for name, tensor in model.state_dict().items()}
    saved = safetensors_shapes(path)
    differ = [(name, shape, built[name]) for name, shape in sorted(saved.items()) if built.get(name, shape) != shape]
    if not differ:
        return None
    name, shape, wanted = differ[0]
    more = f" (and {len(differ) - 1} more tensors)" if len(differ) > 1 else ""
    return f"its weights do not fit its config.json: {name} is {shape} in the weights, {wanted} by the config{more}"


def build_model(
    model_config: ModelConfig,
    *,
    value_head: bool = False,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
    attn_implementation: str | None = None,
) -> nn.Module:
    """The policy (or, with `value_head`, the critic) model described by `model_config`.
    `device="cpu"` loads the weights; `"meta"` builds the module tree only (rank-0 init). The KV cache is switched off:
    with it on, packed sequences silently attend across their boundaries. Gated DeltaNet layers get the packed-exact
    forward (`verl.models.gated_deltanet`)."""
    config = load_model_config(model_config)
    refuse_unsupported_model(f"Model '{model_config.model_path}'", config.to_dict())  # a hub model's first read
    model_class = AutoModelForImageTextToText if is_vision_language(config) else AutoModelForCausalLM
    attn = resolve_attn_implementation(attn_implementation or model_config.attn_implementation)
    kwargs = {"dtype": dtype, "attn_implementation": attn, "trust_remote_code": model_config.trust_remote_code}
    if device not in ("cpu", "meta"):
        raise ValueError(f"build_model device must be 'cpu' or 'meta', got {device!r}; FSDP moves it later.")
    dropout = dropout_fields(config) if model_config.disable_dropout else {}
    set_fields(config, dict.fromkeys(dropout, 0.0))  # the modules copy these values as they are built
    if device == "meta":
        with torch.device("meta"):
            model = model_class.from_config(config, **kwargs)
        with contextlib.suppress(OSError):  # the folder's stop tokens and sampling defaults, as from_pretrained
            model.generation_config = GenerationConfig.from_pretrained(model_config.model_path)
    else:
        try:
            model = model_class.from_pretrained(model_config.model_path, config=config, **kwargs)
        except RuntimeError as error:  # transformers' "ignore_mismatched_sizes" error, after its load report
            if "mismatched_sizes" not in str(error):
                raise
            problem = weights_config_mismatch(model_config.model_path, model_config.trust_remote_code, config) or (
                "its weights do not fit its config.json (transformers' load report above names them)"
            )
            raise ModelLoadError(
                f"Model '{model_config.model_path}': {problem}; a config.json edited after the weights were saved, "
                "or another model's."
            ) from None
    set_fields(model.config, dropout)  # the saved and exported config keeps the model's own
    text_config = model.config.get_text_config()
    model.use_cache_as_loaded = (getattr(model.config, "use_cache", None), getattr(text_config, "use_cache", None))
    model.config.use_cache = False
    model.config.get_text_config().use_cache = False
    use_packed_linear_attention(model)
    if value_head:
        add_value_head(model)
        if device == "cpu" and is_reward_model(model.config):
            start_from_score_head(model, model_config.model_path)
    return model


def is_reward_model(config: PretrainedConfig) -> bool:
    """A one-label sequence classifier (a reward model's checkpoint)."""
    architectures = getattr(config, "architectures", None) or []
    return config.num_labels == 1 and any(name.endswith("ForSequenceClassification") for name in architectures)


def start_from_score_head(model: nn.Module, model_path: str) -> None:
    """A critic built from a reward model starts its value head from the reward model's score head (as a token
    classifier would load it), so its first values are the reward model's per-token scores."""
    from safetensors import safe_open

    found = {}
    for path in safetensors_files(model_path):  # a Hub id: from_pretrained has just put it in the cache
        with safe_open(path, framework="pt") as f:
            found.update({name: f.get_tensor(name) for name in ("score.weight", "score.bias") if name in f.keys()})
    head = getattr(model, VALUE_HEAD)
    if found.get("score.weight") is None or found["score.weight"].shape != head.weight.shape:
        raise ValueError(
            f"'{model_path}' is a reward model, but its safetensors files have no score.weight of shape "
            f"{tuple(head.weight.shape)} to start the critic's value head from."
        )
    with torch.no_grad():
        head.weight.copy_(found["score.weight"])
        head.bias.copy_(found.get("score.bias", torch.zeros(1)))
    logger.info("The critic's value head starts from the score head of the reward model '%s'.", model_path)


def declared_dtype(config: PretrainedConfig) -> torch.dtype:
    """The dtype a model folder's config declares for its weights (its text config's where the top level has none),
    float16, bfloat16 or float32; float32 where it declares none."""
    for part in (config, config.get_text_config()):
        dtype = vars(part).get("dtype")
        if isinstance(dtype, str):
            dtype = getattr(torch, dtype, None)
        if dtype in (torch.float16, torch.bfloat16, torch.float32):
            return dtype
    return torch.float32


def exported_config(model: nn.Module) -> PretrainedConfig:
    """A copy of `model.config` as its folder had it, to save with its weights: `use_cache`, which training switches
    off, as it was loaded (an export with it off makes transformers' generate recompute every token)."""
    config = copy.deepcopy(model.config)
    loaded = getattr(model, "use_cache_as_loaded", None)
    for part, value in zip((config, config.get_text_config()), loaded or ()):
        if value is None:  # a config without the field (a VL model's top level): none written
            vars(part).pop("use_cache", None)
        else:
            part.use_cache = value
    return config


DROPOUT_NAME = re.compile(r"dropout|pdrop|drop_path|layerdrop|jitter")
"""Config fields of a dropout, stochastic-depth or router-noise amount (attention_dropout, resid_pdrop, drop_path_rate,
Mixtral's router_jitter_noise, ...): each makes a training-mode forward random."""


def dropout_fields(config: PretrainedConfig) -> dict[tuple[str, ...], float]:
    """The positive DROPOUT_NAME fields of `config` and its sub-configs, by attribute path."""
    found: dict[tuple[str, ...], float] = {}
    sections: list[tuple[tuple[str, ...], PretrainedConfig]] = [((), config)]
    while sections:
        path, section = sections.pop()
        for name, value in vars(section).items():
            if isinstance(value, PretrainedConfig):
                sections.append(((*path, name), value))
            elif DROPOUT_NAME.search(name) and type(value) in (int, float) and value > 0:
                found[(*path, name)] = value
    return found


def set_fields(config: PretrainedConfig, values: dict[tuple[str, ...], Any]) -> None:
    for (*path, name), value in values.items():
        section = config
        for step in path:
            section = getattr(section, step)
        setattr(section, name, value)


class ValueHead(nn.Linear):
    """Linear(hidden, 1) whose output is its own tensor: with a bias, nn.Linear returns a batched input's result as a
    view, and FSDP2 warns about a view from the model's last layer (an in-place op on it would drop gradients)."""

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return super().forward(hidden).clone()


LOGIT_TRANSFORMS: dict[str, Any] = {
    "logits_scaling": 1.0,
    "lm_head_multiplier": 1.0,
    "logit_scale": 1.0,
    "final_logit_softcapping": None,
}
"""What a family's forward does to the LM head's output (Granite divides by logits_scaling, Falcon-H1 multiplies by
lm_head_multiplier, Cohere by logit_scale, Gemma caps with 30 tanh(x / 30)), set to the identity for a value head: a
value is the head's output itself."""


def add_value_head(model: nn.Module) -> nn.Module:
    """Replace the LM head by a Linear(hidden, 1) value head, untied from the embeddings, initialised like the model's
    linear layers from a fixed seed so independently building ranks agree (left empty on the meta device); the
    family's LOGIT_TRANSFORMS are switched off."""
    text_config = model.config.get_text_config()
    for config in (model.config, text_config):
        config.tie_word_embeddings = False  # a later tie_weights() must not re-tie the head to the embeddings
        for name, identity in LOGIT_TRANSFORMS.items():
            if hasattr(config, name):
                setattr(config, name, identity)
    for module in model.modules():  # Falcon-H1 keeps its multiplier on the decoder, Cohere its scale on the model
        for name, identity in LOGIT_TRANSFORMS.items():
            if name in vars(module) and not isinstance(vars(module)[name], (nn.Module, torch.Tensor)):
                setattr(module, name, identity)
    old_head = getattr(model, VALUE_HEAD, None)
    if not isinstance(old_head, nn.Linear):
        raise TypeError(
            f"{type(model).__name__} has no Linear {VALUE_HEAD!r} to turn into a value head; the critic supports "
            "causal LM and image-text-to-text models with an LM head."
        )
    device, dtype = old_head.weight.device, old_head.weight.dtype
    head = ValueHead(text_config.hidden_size, 1, bias=True, device=device, dtype=dtype)
    if device.type != "meta":
        generator = torch.Generator().manual_seed(VALUE_HEAD_SEED)
        std = getattr(text_config, "initializer_range", 0.02)
        with torch.no_grad():
            head.weight.copy_(torch.randn(head.weight.shape, generator=generator) * std)
            head.bias.zero_()
    setattr(model, VALUE_HEAD, head)
    return model


def dummy_image_features(model: nn.Module, tower: nn.Module, device: torch.device) -> torch.Tensor:
    """Vision features of the smallest image, through every weight image features use: a Qwen-VL tower (and merger)
    on one merged token of black patches, a tiling model's tower and projector on one black tile, or Gemma 4's tower
    and embedder on one soft token."""
    dtype = next(tower.parameters()).dtype
    if all(hasattr(tower, name) for name in ("patch_embed", "spatial_merge_size")):
        embed, merge = tower.patch_embed, tower.spatial_merge_size
        patch_dim = embed.in_channels * embed.temporal_patch_size * embed.patch_size**2
        pixels = torch.zeros(merge * merge, patch_dim, dtype=dtype, device=device)
        output = tower(pixels, grid_thw=torch.tensor([[1, merge, merge]], dtype=torch.long, device=device))
    elif model.config.model_type in TILING_MODEL_TYPES:
        vision = model.config.vision_config
        size = vision.image_size if isinstance(vision.image_size, (list, tuple)) else (vision.image_size,) * 2
        kwargs, tiles = {}, 1
        if model.config.model_type == "mistral3":  # Pixtral takes any size: two merged tokens' patches (with one,
            side = vision.patch_size * model.config.spatial_merge_size  # transformers squeezes the features to 1-D)
            size = (side, 2 * side)
            kwargs["image_sizes"] = torch.tensor([size], device=device)
        if model.config.model_type == "llava_onevision":  # a tile-sized image: its anyres grid and the base tile
            from transformers.models.llava_onevision.modeling_llava_onevision import image_size_to_num_patches

            kwargs["image_sizes"] = torch.tensor([size], device=device)
            tiles = image_size_to_num_patches(size, model.config.image_grid_pinpoints, size[0])
        pixels = torch.zeros(tiles, vision.num_channels, *size, dtype=dtype, device=device)
        output = model.get_image_features(pixel_values=pixels, **kwargs)
    else:  # Gemma 4 (checked when the hooks are installed)
        size, kernel = tower.config.patch_size, tower.config.pooling_kernel_size
        pixels = torch.zeros(1, kernel * kernel, 3 * size * size, dtype=dtype, device=device)
        steps = torch.arange(kernel, device=device)
        rows, columns = torch.meshgrid(steps, steps, indexing="ij")
        positions = torch.stack([columns, rows], dim=-1).reshape(1, kernel * kernel, 2)
        output = getattr(model, "model", model).get_image_features(pixels, positions)
    features = getattr(output, "pooler_output", output)  # after the merger / projector, so every weight is used
    return torch.cat([part.flatten() for part in features]) if isinstance(features, (list, tuple)) else features


TILING_MODEL_TYPES = ("internvl", "llava_onevision", "mistral3")
"""Vision-language models whose images (tiles; Pixtral's: whole images) go through a tower and a projector
(`get_image_features`)."""


def run_vision_tower_in_every_forward(model: nn.Module) -> bool:
    """Make every forward of a vision-language model run its vision tower, on a dummy image if it has none.
    Under FSDP a rank with a text-only micro-batch would skip the tower's all-gathers while others wait: a hang. A
    hook before the language model runs the tower on a dummy image if it has not run and adds 0 x its output, so all
    ranks issue the same collectives in the same order. Returns False (nothing done) for a text model, and for a
    model trained on text only (TEXT_ONLY_VISION_LANGUAGE_TYPES: no rank ever runs its tower)."""
    tower, language_model = get_vision_tower(model), get_language_model(model)
    if tower is None or language_model is None or model.config.model_type in TEXT_ONLY_VISION_LANGUAGE_TYPES:
        return False
    qwen = all(hasattr(tower, name) for name in ("patch_embed", "spatial_merge_size"))
    tiling = getattr(model.config, "model_type", None) in TILING_MODEL_TYPES
    if not (qwen or tiling or hasattr(tower, "patch_embedder")):
        raise NotImplementedError(
            f"{type(model).__name__}: mixing text-only and image batches across ranks needs a dummy input for the "
            f"vision tower {type(tower).__name__}, which is only written for the Qwen2-VL family, InternVL, "
            "LLaVA-OneVision, Mistral 3 and Gemma 4."
        )
    ran = {"tower": False}

    def on_model(module: nn.Module, args: tuple) -> None:
        ran["tower"] = False

    def on_tower(module: nn.Module, args: tuple) -> None:
        ran["tower"] = True

    def on_language_model(module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        if ran["tower"]:
            return None
        embeds = kwargs.get("inputs_embeds")
        if embeds is None:
            raise NotImplementedError(
                f"{type(model).__name__} calls its language model without inputs_embeds, so a text-only batch cannot "
                "run the vision tower on a dummy image; FSDP ranks with and without images would deadlock."
            )
        features = dummy_image_features(model, tower, embeds.device)
        kwargs["inputs_embeds"] = embeds + 0.0 * features.sum().to(embeds.dtype)
        return args, kwargs

    model.register_forward_pre_hook(on_model)
    tower.register_forward_pre_hook(on_tower)
    language_model.register_forward_pre_hook(on_language_model, with_kwargs=True)
    return True


def freeze_vision_tower(model: nn.Module) -> int:
    """Stop gradients into the vision encoder; returns the number of frozen parameters."""
    tower = get_vision_tower(model)
    if tower is None:
        raise ValueError(
            f"model.freeze_vision_tower is set but {type(model).__name__} has no vision tower; unset it for text "
            "models."
        )
    tower.requires_grad_(False)
    return sum(param.numel() for param in tower.parameters())


def enable_gradient_checkpointing(model: nn.Module) -> None:
    """Recompute each decoder layer in backward (non-reentrant: works with FSDP2 and frozen inputs)."""
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
