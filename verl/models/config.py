# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Configuration of a trained model: where it comes from, its attention and LoRA adapters, and how FSDP2 shards and
offloads it. The actor, the critic, the reference and reward models and SFT share these sections.

Every field has a docstring right under it; `python -m verl.trainer.main --help-config` prints them. Each section
checks its own values in `validate(prefix)` (and ModelConfig its local files in `check_files(prefix)`), raising
ConfigError with the key as `prefix + field`, so every config that embeds them gets the same checks.
"""

import copy
import glob
import json
import logging
import os
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from verl.utils.config import ConfigError, require_choice, require_path


logger = logging.getLogger(__name__)


ATTN_IMPLEMENTATIONS: tuple[str, ...] = ("auto", "varlen", "flash_attention_2", "flash_attention_3", "sdpa", "eager")
"""Values of model.attn_implementation."""
FLASH_ATTENTION_PACKAGES: dict[str, tuple[str, str]] = {
    "flash_attention_2": ("flash_attn", "flash-attn"),
    "flash_attention_3": ("flash_attn_interface", "flash-attn-3"),
}
"""(module, package) of each flash attention implementation, as transformers imports them."""

VISION_LANGUAGE_MODEL_TYPES: tuple[str, ...] = tuple(
    "qwen2_vl qwen2_5_vl qwen3_vl qwen3_vl_moe qwen3_5 qwen3_5_moe gemma4 glm4v glm4v_moe internvl "
    "llava_onevision mistral3".split()
)
"""Vision-language model types the trainer supports (3-D rope index, vision-tower hooks); others are refused.
qwen3_vl_moe is Qwen3-VL with Qwen3-MoE's experts (its checkpoints' expert layout: transformers_compat); qwen3_5
and qwen3_5_moe are Qwen3.5 (Gated DeltaNet hybrid, Qwen3-VL's processor), dense and mixture of experts; gemma4 is
Gemma 4 with causal attention over image tokens (see refuse_unchecked_gemma4); glm4v and glm4v_moe are GLM-4.1V and
GLM-4.5V (Qwen2-VL's vision pipeline with GLM's tokens and tower); internvl (Hugging Face format, e.g. InternVL3-*-hf)
and llava_onevision take plain 1-D positions, as gemma4 and mistral3 (Mistral Small 3.1, Ministral 3: a Pixtral
tower) do."""

TEXT_ONLY_VISION_LANGUAGE_TYPES: tuple[str, ...] = ("gemma3",)
"""Vision-language model types the trainer supports for text data only; a row with an image or a video is refused.
gemma3 is Gemma 3 4B-27B: its image tokens attend to each other in both directions, which neither the actor's forward
(causal, packed or padded) nor vLLM's CPU attention reproduces."""


def resolve_config_overrides(config: Any, overrides: dict[str, Any], key: str) -> dict[str, Any]:
    """`overrides` (`key`, a model.override_config) as fields of the transformers config `config`: a field of the
    config as given; on a composite (vision-language) config, a field only its language model's config has under that
    sub-config's name; a dict for a sub-config resolved within it. Raises ConfigError for a name neither has."""
    text = config.get_text_config()
    text_name = next(
        (name for name in getattr(config, "sub_configs", {}) if getattr(config, name, None) is text), None
    )
    resolved: dict[str, Any] = {}
    for name, value in overrides.items():
        current = getattr(config, name, None)
        if isinstance(value, dict) and hasattr(current, "to_dict"):  # a sub-config, e.g. text_config
            resolved.setdefault(name, {}).update(resolve_config_overrides(current, value, f"{key}.{name}"))
        elif (
            name in ROPE_FIELDS and isinstance(value, dict) and isinstance(getattr(config, "rope_parameters", 0), dict)
        ):
            resolved["rope_parameters"] = _rope_parameters(config, value, f"{key}.{name}")
        elif hasattr(config, name):
            resolved[name] = value
        elif text_name is not None and name in ROPE_FIELDS and isinstance(getattr(text, "rope_parameters", 0), dict):
            resolved.setdefault(text_name, {})["rope_parameters"] = _rope_parameters(text, value, f"{key}.{name}")
        elif text_name is not None and hasattr(text, name):
            resolved.setdefault(text_name, {})[name] = value
        else:
            where = type(config).__name__ + (f" or its {text_name} ({type(text).__name__})" if text_name else "")
            hint = " (transformers 5 keeps rope settings in rope_parameters)" if name.startswith("rope_") else ""
            if name == "attn_implementation":
                hint = " (the attention is the model section's attn_implementation key)"
            raise ConfigError(f"{key}.{name}: {where} has no field {name!r}{hint}; check the name.")
    return resolved


ROPE_FIELDS = ("rope_scaling", "rope_parameters")
"""Override names of a model's RoPE settings (rope_scaling is transformers 4's name for rope_parameters)."""


def _rope_parameters(config: Any, value: dict[str, Any], key: str) -> dict[str, Any]:
    """The RoPE parameters of `config` with `value`'s keys on top (Qwen's YaRN recipe `{type: yarn, factor: 4,
    original_max_position_embeddings: 32768}` keeps the file's rope_theta; `type` is `rope_type`), checked as
    transformers checks a config.json's: set as they are, they lost rope_theta and the model could not be built in
    the workers (and vLLM refused them), after the config check had passed."""
    merged = {**config.rope_parameters, **value}
    if "type" in value:
        merged["rope_type"] = merged.pop("type")
    checked = copy.deepcopy(config)
    checked.rope_parameters = merged
    try:
        checked.standardize_rope_params()
        checked.validate_rope()
    except (KeyError, ValueError, TypeError) as error:
        raise ConfigError(f"{key}: {error} (the parameters would be {merged}).") from None
    return checked.rope_parameters


def with_overrides(model_config: dict[str, Any] | None, overrides: dict[str, Any]) -> dict[str, Any] | None:
    """A config.json (`read_model_config`'s dict) as the run will read it, with `overrides` (a model.override_config)
    applied: each field where the file has it (at the top, or in its text_config, as `resolve_config_overrides`
    places it), a mapping merged into the sub-config it names. The config-time checks (context length, heads, KV
    cache) then see what the workers and vLLM will."""
    if model_config is None or not overrides:
        return model_config
    result = copy.deepcopy(model_config)
    text = result.get("text_config") if isinstance(result.get("text_config"), dict) else None
    for name, value in overrides.items():
        if isinstance(value, dict) and isinstance(result.get(name), dict):
            result[name] = with_overrides(result[name], value)
        elif text is not None and name not in result and name in text:
            text[name] = value
        else:
            result[name] = value
    return result


def apply_config_overrides(config: Any, resolved: dict[str, Any]) -> None:
    """Set the fields of `resolve_config_overrides`'s answer on `config` (and its sub-configs)."""
    for name, value in resolved.items():
        current = getattr(config, name, None)
        if isinstance(value, dict) and hasattr(current, "to_dict"):
            apply_config_overrides(current, value)
        else:
            setattr(config, name, value)


def text_only_reason(model_type: Any) -> str | None:
    """Why a TEXT_ONLY_VISION_LANGUAGE_TYPES model takes no images or videos (for the message refusing a row that has
    some); None for any other model type."""
    if model_type not in TEXT_ONLY_VISION_LANGUAGE_TYPES:
        return None
    return (
        f"the model ({model_type!r}) is trained on text only: its image tokens attend to each other in both "
        "directions, which the actor's causal forward does not reproduce; leave the images and videos out of the data"
    )


TORCH_DTYPES: tuple[str | None, ...] = (None, "fp32", "bf16", "fp16")
"""Values of fsdp.torch_dtype."""
DTYPE_NAMES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "bfloat16": "bfloat16"}
DTYPE_NAMES.update(float16="float16", float32="float32")
"""The dtype spellings config keys and command lines take (short and torch's) and torch's (and vLLM's) name of each."""
MP_DTYPES: tuple[str, ...] = tuple(DTYPE_NAMES)
"""Values of fsdp.mp_param_dtype, mp_reduce_dtype and mp_buffer_dtype."""


@dataclass
class LoraConfig:
    rank: int = 0
    """LoRA rank; 0 trains all weights. With a rank > 0 (the actor, or the SFT model) the base weights are frozen and
    only peft LoRA adapters train: the optimizer holds states for them alone, checkpoints hold the adapters (and their
    optimizer state) only, and an export (scripts/model_merger.py, SFT's huggingface/ folder) merges them into the
    base weights. In RL the reference policy is the same model with its adapters switched off (no second copy) and
    the rollout engine receives merged weights (or the adapters alone: worker.rollout.lora_sync)."""
    alpha: int = 64
    """LoRA scaling numerator (scale = alpha / rank)."""
    target_modules: str = "all-linear"
    """Modules that receive adapters: "all-linear" (every linear layer but the LM head and an audio tower's, which no
    data here reaches, and on a Mamba hybrid such as Falcon-H1 but its mixers' out_proj, which peft does not adapt) or a comma-separated list
    of module names such as "q_proj,v_proj" (linear layers; not the embeddings, nor an LM head tied to them). A name
    matches a module's whole name or its last parts, in the model as transformers builds it (not regular expressions,
    and not the checkpoint's weight names where they differ: a Qwen2.5-VL layer is
    "model.language_model.layers.0.self_attn.q_proj", stored as "model.layers.0.self_attn.q_proj")."""
    exclude_modules: str | None = None
    """Regular expression that a module's whole name (e.g. "model.layers.0.mlp.up_proj") must match to be left
    without adapters, e.g. ".*mlp.*" (a bare "mlp" matches no module)."""
    vision_tower: bool = False
    """Give a VLM's vision side adapters too: its vision tower and the projector that feeds the language model; by
    default they have none (they stay frozen, as the base weights do)."""

    def validate(self, prefix: str) -> None:
        if self.rank < 0 or self.alpha <= 0:
            raise ConfigError(
                f"{prefix.rstrip('.')}: rank must be >= 0 and alpha > 0, got rank={self.rank}, alpha={self.alpha}."
            )
        names = [name.strip() for name in self.target_modules.split(",") if name.strip()]
        if self.rank > 0 and not names:
            raise ConfigError(f"{prefix}target_modules is empty; name the layers, or give 'all-linear'.")
        if self.rank > 0 and (embeddings := [name for name in names if "embed" in name or name == "wte"]):
            raise ConfigError(
                f"{prefix}target_modules names {', '.join(embeddings)}: LoRA adapters on an embedding layer are not "
                "trained, synced or exported here; leave it out."
            )
        if self.rank > 0 and self.exclude_modules is not None:
            try:
                re.compile(self.exclude_modules)
            except re.error as error:
                raise ConfigError(
                    f"{prefix}exclude_modules={self.exclude_modules!r} is not a regular expression: {error}."
                ) from None


@dataclass
class ModelConfig:
    model_path: str | None = None
    """Local directory of the model, or a Hugging Face hub id (a ModelScope id with USE_MODELSCOPE_HUB=1)."""
    tokenizer_path: str | None = None
    """Tokenizer (and processor) location; defaults to model_path."""
    override_config: dict[str, Any] = field(default_factory=dict)
    """Fields of the model's config to change, e.g. {attention_dropout: 0.0} or {max_position_embeddings: 65536}: the
    actor's (critic's, SFT model's) config and the rollout engine's get the same values. On a vision-language model a
    field of its language model's config goes there ({text_config: {...}} names it outright); a name that neither
    config has is an error (transformers would ignore it)."""
    enable_gradient_checkpointing: bool = True
    """Recompute activations in the backward pass to save memory (non-reentrant)."""
    trust_remote_code: bool = False
    """Allow model code from the checkpoint directory or hub; off by default for safety."""
    freeze_vision_tower: bool = False
    """Keep the vision encoder of a VLM frozen (no gradients, no optimizer state)."""
    disable_dropout: bool = True
    """Build the model with every dropout, stochastic-depth and router-noise amount of its config at 0 (attention,
    hidden and residual dropout, GPT-2's *_pdrop, vision towers' drop_path_rate, Mixtral's router_jitter_noise), as
    TRL does with dropout by default: with them, an update's log-probs differ from the rollout's and from the old
    log-probs (computed in eval mode, without them), which the clipped ratio then treats as drift. The saved and
    exported config keeps the model's own values. SFT's default is false (the model's dropout kept). Kept dropout
    draws its masks from (worker.rollout.seed in RL, data.seed in SFT; the rank; the step): each rank draws its own,
    and a resumed run the ones the unbroken run drew."""
    attn_implementation: str = "auto"
    """Attention of the trained models. auto (and varlen) is the project's exact kernel for packed sequences: torch's
    varlen_attn on CUDA, one sdpa call per sequence otherwise, sdpa for padded rows; flash_attention_2 needs the
    flash-attn package; sdpa or eager make padding_free fall back to padded rows (their packed path is a dense mask)."""
    lora: LoraConfig = field(default_factory=LoraConfig)
    """Low-rank adapters."""

    def validate(self, prefix: str) -> None:
        require_choice(self, prefix, "attn_implementation", ATTN_IMPLEMENTATIONS)
        self.lora.validate(f"{prefix}lora.")
        if self.freeze_vision_tower and self.lora.rank > 0 and self.lora.vision_tower:
            raise ConfigError(
                f"{prefix}freeze_vision_tower freezes the vision tower, its LoRA adapters ({prefix}lora.vision_tower) "
                "too: keep one of them."
            )

    def check_files(self, prefix: str) -> None:
        """The model and tokenizer exist (or are hub ids), and a local vision-language model is of a supported type."""
        require_path(self, prefix, "model_path", "directory", allow_hub=True)
        require_path(self, prefix, "tokenizer_path", "directory", allow_hub=True)
        key = f"{prefix}model_path"
        problem = os.path.isdir(self.model_path or "") and unexported_checkpoint(self.model_path)
        if problem:
            raise ConfigError(f"{key}: {problem}.")
        require_model_files(key, self.model_path)
        model_config = read_model_config(key, self.model_path)
        if model_config is None:
            return  # a hub id: the worker checks it when it loads the config
        # as the workers will load it (override_config may fix what the file has, e.g. Gemma 4's pad_token_id)
        refuse_unsupported_model(
            f"{key}='{self.model_path}'", with_overrides(model_config, dict(self.override_config))
        )
        for name, value in (
            ("freeze_vision_tower", self.freeze_vision_tower),
            ("lora.vision_tower", self.lora.rank > 0 and self.lora.vision_tower),
        ):
            if value and "vision_config" not in model_config:
                raise ConfigError(
                    f"{prefix}{name} is set, and {key}='{self.model_path}' is a text model (its config.json has no "
                    "vision_config); unset it."
                )
        if self.lora.rank > 0 and "lm_head" in [name.strip() for name in self.lora.target_modules.split(",")]:
            from transformers import AutoConfig

            try:
                config = AutoConfig.from_pretrained(self.model_path, trust_remote_code=self.trust_remote_code)
            except (OSError, ValueError) as error:
                raise ConfigError(f"{prefix}lora: the config of {key} cannot be read: {error}") from None
            if getattr(config, "tie_word_embeddings", False):  # the model's own (a VL model ties at its top level)
                raise ConfigError(
                    f"{prefix}lora.target_modules names lm_head, which {key}='{self.model_path}' ties to its input "
                    "embeddings (tie_word_embeddings): an adapter on it would not reach the rollout engine or the "
                    "export. Leave lm_head out."
                )
        if self.override_config:  # a misspelt field now, not a config transformers silently keeps
            from transformers import AutoConfig

            try:
                config = AutoConfig.from_pretrained(self.model_path, trust_remote_code=self.trust_remote_code)
            except (OSError, ValueError) as error:
                raise ConfigError(f"{prefix}override_config: the config of {key} cannot be read: {error}") from None
            resolved = resolve_config_overrides(config, dict(self.override_config), f"{prefix}override_config")
            untied = resolved.get("tie_word_embeddings") is False or any(
                isinstance(value, dict) and value.get("tie_word_embeddings") is False for value in resolved.values()
            )
            if untied and getattr(config.get_text_config(), "tie_word_embeddings", False):
                from verl.utils.hub import safetensors_shapes

                try:
                    names = set(safetensors_shapes(self.model_path))
                except Exception:  # an unreadable file, a hub id not downloaded: the workers load what there is
                    names = set()
                if names and not any(name.endswith("lm_head.weight") for name in names):
                    raise ConfigError(
                        f"{prefix}override_config.tie_word_embeddings=false: {key}='{self.model_path}' ties its output "
                        "layer to its input embeddings and its weights hold no lm_head.weight, so the untied head "
                        "would start random (a model that outputs noise, in the actor and the engine alike). Keep the "
                        "head tied, or untie it in a copy of the model whose lm_head.weight is the embeddings'."
                    )


VISION_SIDE_PATTERN = r".*(visual|vision_tower|vision_model|multi_modal_projector|embed_vision).*"
"""The vision side of a VLM: its tower and the projector into the language model (inside `visual` for Qwen and GLM,
beside it for InternVL, LLaVA, Mistral 3 and Gemma 4), without adapters unless lora.vision_tower: the engine's
adapter sync (vLLM) serves language-model adapters only."""


def vision_side_targets(target_modules: str, modules: set[str]) -> list[str]:
    """The names in `target_modules` that only the vision side (VISION_SIDE_PATTERN) of a VLM whose modules are
    `modules` (dotted names each starting with a dot) has; [] for "all-linear"."""
    language = {module for module in modules if not re.fullmatch(VISION_SIDE_PATTERN, module[1:])}
    nowhere = set(unmatched_names(target_modules, modules))
    return [name for name in unmatched_names(target_modules, language) if name not in nowhere]


def unmatched_names(target_modules: str, modules: set[str]) -> list[str]:
    """The comma-separated `target_modules` names that match none of `modules` (dotted names each starting with a
    dot) as peft matches them: the whole name, or its last parts; [] for "all-linear"."""
    if target_modules == "all-linear":
        return []
    names = [name.strip() for name in target_modules.split(",") if name.strip()]
    return [name for name in names if not any(module.endswith("." + name) for module in modules)]


def unexported_checkpoint(path: str) -> str | None:
    """Where `path` is part of a training checkpoint rather than a Hugging Face model (an actor's sharded weights, a
    global_step_N, the actor's huggingface/ folder before `scripts/model_merger.py` wrote the weights into it, or a
    run's save folder of global_step_N folders): the message saying how to export it, or where its export is (an SFT
    run's huggingface/); else None."""
    path = os.path.normpath(os.path.abspath(os.path.expanduser(path)))
    if os.path.isfile(os.path.join(path, ".metadata")):
        actor, what = path, "a training checkpoint's sharded weights"
    elif os.path.isfile(os.path.join(path, "actor", ".metadata")):
        actor, what = os.path.join(path, "actor"), "a training checkpoint"
    elif os.path.isfile(os.path.join(os.path.dirname(path), ".metadata")) and not any(
        name.endswith(WEIGHT_FILE_SUFFIXES) for name in os.listdir(path)
    ):
        actor, what = os.path.dirname(path), "a training checkpoint's config and tokenizer, without its weights"
    elif steps := sorted(
        int(match.group(1))
        for match in map(re.compile(r"global_step_(\d+)").fullmatch, os.listdir(path))
        if match and os.path.isfile(os.path.join(path, match.group(0), "actor", ".metadata"))
    ):  # a run's save folder (trainer.save_checkpoint_path): it said only "a folder without config.json or weights"
        export = os.path.join(path, "huggingface")
        if os.path.isdir(export) and not missing_model_files(export):
            return (
                f"'{path}' is a training run's checkpoint folder, not a Hugging Face model: its model is exported to "
                f"{export} (an SFT run's export); use that"
            )
        actor, what = os.path.join(path, f"global_step_{steps[-1]}", "actor"), "a training run's checkpoint folder"
        return f"'{path}' is {what}, not a Hugging Face model: {export_advice(actor, 'its newest step', 'use')}"
    else:
        return None
    return f"'{path}' is {what}, not a Hugging Face model: {export_advice(actor, 'it', 'use')}"


WEIGHT_FILE_SUFFIXES = (".safetensors", ".safetensors.index.json", ".bin", ".bin.index.json")
"""How the weight files of a Hugging Face model folder end (one file, or shards with their index)."""


DAMAGED_WEIGHTS_ADVICE = "a download or copy that stopped leaves such files: copy or download the model again."


def missing_model_files(path: str | None) -> str | None:
    """What the local model folder `path` lacks of what transformers and vLLM load ("config.json", "weights
    (...)"); None where nothing is missing or `path` is no local folder (a hub id)."""
    if not path or not os.path.isdir(os.path.expanduser(path)):
        return None
    names = os.listdir(os.path.expanduser(path))
    missing = [] if "config.json" in names else ["config.json"]
    if not any(name.endswith(WEIGHT_FILE_SUFFIXES) for name in names):
        missing.append("weights (*.safetensors or *.bin)")
    return " or ".join(missing) or None


def weights_problem(path: str | None) -> str | None:
    """What is wrong with the safetensors weights of the local model folder `path` (their headers alone are read): a
    shard its index names that is not there, or a file that is cut short or no safetensors file, as a download or copy
    that stopped leaves it. None where they open, or `path` is no local folder."""
    if not path or not os.path.isdir(os.path.expanduser(path)):
        return None
    folder = os.path.expanduser(path)
    names = set(os.listdir(folder))
    index = "model.safetensors.index.json"
    if index in names:
        try:
            with open(os.path.join(folder, index), encoding="utf-8") as f:
                shards = set(json.load(f)["weight_map"].values())
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
            return f"{index} cannot be read ({type(error).__name__}: {error})"
        if missing := sorted(str(shard) for shard in shards - names):
            return f"{index} names {len(missing)} file(s) that are not there ({', '.join(missing[:3])})"
    from safetensors import SafetensorError, safe_open

    for name in sorted(name for name in names if name.endswith(".safetensors")):
        try:
            with safe_open(os.path.join(folder, name), framework="numpy"):
                pass
        except (SafetensorError, OSError) as error:
            return f"{name} cannot be read ({error})"
    return None


def adapter_folder(path: str) -> str | None:
    """What to say of a folder holding a peft adapter (adapter_config.json) but no model's config.json, else None."""
    try:
        with open(os.path.join(os.path.expanduser(path), "adapter_config.json"), encoding="utf-8") as f:
            base = json.load(f).get("base_model_name_or_path")
    except (OSError, ValueError, AttributeError):
        return None
    of = f" of {base}" if isinstance(base, str) and base else ""
    actor = os.path.dirname(os.path.normpath(os.path.expanduser(path)))
    shards = glob.glob(os.path.join(glob.escape(actor), "*.distcp"))  # (a run folder `lr[1e-6]` is no pattern)
    if os.path.basename(os.path.normpath(path)) == "lora_adapter" and shards:
        # what model_merger.py --adapter_only writes beside a LoRA run's checkpoint
        merge = f"python scripts/model_merger.py --local_dir {actor} writes the merged model to {actor}/huggingface"
    else:
        merge = "peft's merge_and_unload, then save_pretrained"
    return (
        f"holds a LoRA adapter{of} (adapter_config.json), not a model: merge it into its base model first ({merge}) "
        "and give that folder."
    )


def require_model_files(key: str, path: str | None) -> None:
    """A local model folder (config key `key`) holds a config.json and weights that open, which the workers load; a
    hub id is left to them."""
    missing = missing_model_files(path)
    if missing and (adapter := adapter_folder(path)):
        raise ConfigError(f"{key}='{path}' {adapter}")
    if missing:
        raise ConfigError(
            f"{key}='{path}' is a folder without {missing}; give a Hugging Face model folder (a training checkpoint "
            "is exported to one by scripts/model_merger.py)."
        )
    if problem := weights_problem(path):
        raise ConfigError(f"{key}='{path}': {problem}; {DAMAGED_WEIGHTS_ADVICE}")


def model_folder_problem(path: str, name: str) -> str | None:
    """Why `path` (the argument `name`, e.g. "--model") is no model folder a command can load: a local path that
    does not exist, a training checkpoint, or a folder without config.json or weights; None for a model folder or a
    hub id."""
    if not path.strip():
        return f"{name} is empty; give a Hugging Face model directory or hub id."
    if not (path.startswith((".", "/", "~")) or os.path.exists(path)):
        if _hub_id_problem(path) is None:
            return None
        return (
            f"{name} '{path}' does not exist here (from {os.getcwd()}) and is no hub id ({_hub_id_problem(path)}); "
            "give a Hugging Face model directory or a hub id like Qwen/Qwen2.5-7B-Instruct."
        )
    if not os.path.isdir(os.path.expanduser(path)):
        what = "is a file, not a folder" if os.path.exists(os.path.expanduser(path)) else "does not exist"
        return f"{name} '{path}' {what}; give a Hugging Face model directory."
    problem = unexported_checkpoint(path)
    if problem is None and (missing := missing_model_files(path)):
        if adapter := adapter_folder(path):
            return f"{name} '{path}' {adapter}"
        return f"{name} '{path}' is a folder without {missing}; give a Hugging Face model directory."
    if problem is None and (damaged := weights_problem(path)):
        return f"{name} '{path}': {damaged}; {DAMAGED_WEIGHTS_ADVICE}"
    if problem is None:
        try:
            read_model_config(name, os.path.expanduser(path))
        except ConfigError as error:  # a damaged config.json: a traceback from wherever it is read first
            return str(error)
    return problem


def _hub_id_problem(name: str) -> str | None:
    """Why `name` is no Hugging Face repository id ('name' or 'namespace/name' of letters, digits, '-', '_' and '.';
    huggingface_hub's rule, without importing it before a command has set up its offline mode), or None."""
    if name.count("/") > 1:
        return "a hub id is 'name' or 'namespace/name'"
    if not re.fullmatch(r"[\w.-]+(/[\w.-]+)?", name, flags=re.ASCII):
        return "a hub id has only letters, digits, '-', '_' and '.'"
    return None


def tokenizer_beyond_model(tokenizer: Any, model_config: Any) -> str | None:
    """Why `tokenizer` gives token ids that the model (`model_config`: a transformers config, or config.json's dict)
    has no embedding row for: its base vocabulary (the ids any text tokenizes to; added special tokens left out, as
    some tokenizers reserve ones past the embedding that no text produces) larger than the language model's
    vocab_size. None where it fits, or the config has no vocab_size. (Qwen's embeddings have more rows: fine.)"""
    text = model_config.get_text_config() if hasattr(model_config, "get_text_config") else model_config
    if isinstance(text, dict):
        text = text.get("text_config") if isinstance(text.get("text_config"), dict) else text
        size = text.get("vocab_size")
    else:
        size = getattr(text, "vocab_size", None)
    if not isinstance(size, int) or isinstance(size, bool):
        return None
    tokens = getattr(tokenizer, "vocab_size", None)
    if not isinstance(tokens, int) or tokens <= size:
        return None
    return (
        f"the tokenizer's vocabulary has {tokens} tokens, and the model's embedding {size} rows (vocab_size in its "
        f"config.json): an id from {size} on indexes past it, in a traceback from the first generation"
    )


def vocabulary_refusal(prefix: str, model_path: str, tokenizer_path: str, problem: str) -> str:
    """The error for `tokenizer_beyond_model`'s `problem`, naming the keys under `prefix` (worker.actor.model.)."""
    if os.path.abspath(os.path.expanduser(tokenizer_path)) == os.path.abspath(os.path.expanduser(model_path)):
        return f"{prefix}model_path={model_path}: {problem}. The folder's tokenizer files are another model's."
    return (
        f"{prefix}tokenizer_path={tokenizer_path} does not fit {prefix}model_path={model_path}: {problem}. Give the "
        "model's own tokenizer (unset tokenizer_path)."
    )


def export_advice(actor: str, it: str = "it", then: str = "use") -> str:
    """How to turn a checkpoint's actor folder into a model directory: the merger command, then the folder to
    `then` (one wording for every message that says it)."""
    return (
        f"export {it} with `python scripts/model_merger.py --local_dir {shlex.quote(actor)}`, then {then} "
        f"{os.path.join(actor, 'huggingface')}"
    )


def refuse_unsupported_model(what: str, model_config: dict[str, Any]) -> None:
    """Raise NotImplementedError naming `what` for a config.json of a vision-language family without position-id and
    vision-tower support, or of a Gemma 4 that `refuse_unchecked_gemma4` refuses."""
    model_type = model_config.get("model_type")
    supported = VISION_LANGUAGE_MODEL_TYPES + TEXT_ONLY_VISION_LANGUAGE_TYPES
    if "vision_config" in model_config and model_type not in supported:
        raise NotImplementedError(
            f"{what} is a {model_type!r} vision-language model, which is not supported yet (its position ids and "
            f"vision tower differ){nearest(model_type, supported)}; supported vision-language models: "
            f"{', '.join(VISION_LANGUAGE_MODEL_TYPES)}, and on text data {', '.join(TEXT_ONLY_VISION_LANGUAGE_TYPES)}."
        )
    if model_type == "gemma4":
        refuse_unchecked_gemma4(what, model_config)


def refuse_unchecked_gemma4(what: str, model_config: dict[str, Any]) -> None:
    """Raise NotImplementedError naming `what` where a Gemma 4 config.json's content needs what the trainer does not do:
    bidirectional attention over image tokens (the actor's forward is causal, so its log-probs would not be the
    engine's), or per-layer input embeddings with a pad token other than 0 (transformers embeds the pad token at
    image positions, vLLM token 0, so the two would differ)."""
    text = model_config.get("text_config") or {}
    bidirectional = text.get("use_bidirectional_attention")
    if bidirectional:
        raise NotImplementedError(
            f"{what} is a Gemma 4 model with use_bidirectional_attention={bidirectional!r}: its image tokens attend "
            "to each other in both directions, which the actor's forward (causal, packed or padded) does not "
            "reproduce. Use a Gemma 4 model with causal attention (E2B, E4B)."
        )
    pad_token_id = text.get("pad_token_id", 0)
    if text.get("hidden_size_per_layer_input") and pad_token_id != 0:
        raise NotImplementedError(
            f"{what} is a Gemma 4 model with per-layer input embeddings and text_config.pad_token_id={pad_token_id}: "
            "at image positions transformers embeds the pad token and vLLM token 0, so the actor's log-probs would "
            "not be the engine's. Set text_config.pad_token_id to 0 (Gemma's <pad>)."
        )


def nearest(model_type: Any, supported: tuple[str, ...]) -> str:
    """ ", the nearest supported one is X" for a model type whose name is close to a supported one's, else ""."""
    import difflib

    close = difflib.get_close_matches(str(model_type), supported, n=1, cutoff=0.5)
    return f", the nearest supported one is {close[0]!r}" if close else ""


@dataclass
class FSDPConfig:
    enable_full_shard: bool = True
    """Shard parameters between forward and backward (ZeRO-3); False keeps them gathered (ZeRO-2)."""
    gather_once_per_pass: bool | None = None
    """Gather the parameters once per pass of micro-batches (one mini-batch of an update, or one log-prob, value or
    reward-score pass) and keep them gathered until it ends, with gradients accumulated unsharded and reduce-scattered
    once, after the last micro-batch's backward: one all-gather and one reduce-scatter per layer per pass instead of up
    to two all-gathers and a reduce-scatter per layer per micro-batch. Costs the full parameters and gradients on
    every rank during the pass. None: on for the CPU (where gloo collectives cost more than a small model's compute),
    off on accelerators (where memory is scarcer and the collectives overlap the compute)."""
    enable_cpu_offload: bool = False
    """FSDP2 CPU offload policy: parameters, gradients and the optimizer step live in host memory all the time (each
    layer is copied to the device for its forward and backward). Excludes offload.offload_params."""
    enable_rank0_init: bool = True
    """Build the model on the meta device and load the weights once, then shard (saves host memory); with more than
    one process."""
    torch_dtype: str | None = None
    """Parameter dtype: None keeps fp32 master weights (mixed precision on GPU, computing in mp_param_dtype); set, the
    weights are stored and computed in it (fp32 too). A trained model in bf16 needs optim.strategy=adamw_bf16, and fp16
    is for frozen models only (no loss scaling). A frozen model (reference, reward model) is stored in it when set,
    else in fp32 on the CPU and mp_param_dtype on GPUs."""
    fsdp_size: int = -1
    """Shard group size; smaller than the world size gives HSDP (replicate across groups). -1 shards over all, as
    does a size above the devices (warned)."""
    mp_param_dtype: str = "bf16"
    """Compute dtype of the mixed-precision policy on GPU (ignored on CPU, which computes in fp32, and where
    torch_dtype is set)."""
    mp_reduce_dtype: str = "fp32"
    """Gradient reduction dtype of the mixed-precision policy on GPU (of a trained model: a frozen one has no
    gradients)."""
    mp_buffer_dtype: str = "fp32"
    """Dtype of buffers such as rotary caches, on GPU."""

    def inactive(self, prefix: str, on_cpu: bool, frozen: bool = False) -> list[tuple[tuple[str, ...], str]]:
        """(keys, why) of the mixed-precision settings this device (and a `frozen` model, which has no gradients)
        does not read, for `warn_inactive_settings`."""
        keys = tuple(f"{prefix}{name}" for name in ("mp_param_dtype", "mp_reduce_dtype", "mp_buffer_dtype"))
        if on_cpu:
            return [(keys, "on the CPU (FSDP computes and reduces in the weights' dtype)")]
        inactive = []
        if self.torch_dtype is not None:
            inactive.append(
                (keys[:1], f"{prefix}torch_dtype={self.torch_dtype} (the weights are stored and computed in it)")
            )
        if frozen:
            inactive.append((keys[1:2], "a frozen model has no gradients to reduce"))
        return inactive

    def validate(self, prefix: str) -> None:
        require_choice(self, prefix, "torch_dtype", TORCH_DTYPES)
        for name in ("mp_param_dtype", "mp_reduce_dtype", "mp_buffer_dtype"):
            require_choice(self, prefix, name, MP_DTYPES)
        if self.fsdp_size == 0 or self.fsdp_size < -1:
            raise ConfigError(
                f"{prefix}fsdp_size must be -1 (shard over all devices) or positive, got {self.fsdp_size}."
            )

    def check_world(
        self, prefix: str, world: int, counted_by: str = "trainer.nnodes x trainer.n_gpus_per_node"
    ) -> None:
        """An HSDP shard group (0 < fsdp_size < the `world` devices, which `counted_by` names) must divide the
        devices; one larger than the devices shards over all of them, as -1 does (warned: a recipe written for more
        devices runs as plain FSDP here)."""
        if self.fsdp_size > world:
            logger.warning(
                "%sfsdp_size=%d is more than the %d devices (%s): the model is sharded over all of them (as -1).",
                prefix,
                self.fsdp_size,
                world,
                counted_by,
            )
        if 0 < self.fsdp_size < world and world % self.fsdp_size:
            raise ConfigError(
                f"{prefix}fsdp_size={self.fsdp_size} must divide the {world} devices ({counted_by}) for HSDP, or be -1 "
                "to shard over all of them."
            )


@dataclass
class OffloadConfig:
    offload_params: bool = False
    """Keep the parameters in host memory between phases: on the device only for the weight sync, log-probs and the
    update, so the rollout engine can use that memory. Host and device are the same memory on the CPU."""
    offload_optimizer: bool = False
    """Keep the optimizer states in host memory except during the update. Host and device are the same on the CPU."""


def check_offload(prefix: str, fsdp: FSDPConfig, offload: OffloadConfig) -> None:
    """The FSDP CPU-offload policy moves the parameters, gradients and optimizer step to the host for good, which
    offload.* does between phases: a section keeps one of them."""
    for name in ("offload_params", "offload_optimizer"):
        if fsdp.enable_cpu_offload and getattr(offload, name):
            raise ConfigError(
                f"{prefix}fsdp.enable_cpu_offload and {prefix}offload.{name} both offload; keep one (offload.* frees "
                "the device between phases, enable_cpu_offload keeps parameters, gradients and optimizer states on "
                "the host all the time)."
            )


def check_trained_dtype(prefix: str, fsdp: FSDPConfig, optimizer_strategy: str) -> None:
    """A trained model's fsdp.torch_dtype against its optimizer: plain AdamW on bf16 weights rounds RL's small
    updates away (a weight near 0.02 does not move at lr 1e-6), and fp16 weights need a loss scaler, which is not
    built."""
    if fsdp.torch_dtype == "fp16":
        raise ConfigError(
            f"{prefix}fsdp.torch_dtype=fp16 trains in pure fp16, which needs loss scaling (not built): use bf16 with "
            f"{prefix}optim.strategy=adamw_bf16, or leave torch_dtype unset (fp32 weights, bf16 compute on GPU)."
        )
    if fsdp.torch_dtype == "bf16" and optimizer_strategy == "adamw":
        raise ConfigError(
            f"{prefix}fsdp.torch_dtype=bf16 with {prefix}optim.strategy=adamw: plain AdamW on bf16 weights rounds "
            f"small updates away; set {prefix}optim.strategy=adamw_bf16 (compensated bf16 updates), or leave "
            "torch_dtype unset (fp32 weights, bf16 compute on GPU)."
        )


EXPERT_COUNT_KEYS: tuple[str, ...] = ("num_experts", "num_local_experts", "n_routed_experts")
"""config.json keys that give a mixture-of-experts model's expert count (Qwen-MoE, Mixtral, DeepSeek)."""

MIXTURE_OF_EXPERTS_MODEL_TYPES: tuple[str, ...] = tuple(
    "qwen3_moe qwen3_vl_moe qwen3_5_moe glm4v_moe glm4_moe mixtral qwen2_moe olmoe granitemoe qwen3_next".split()
)
"""Mixture-of-experts model types an actor may be: the engine after a weight sync computes what the actor computes
and routes as it does (tests/workers/rollout/test_moe_engine_sync.py on the CPU; on a GPU the first sync of a run is
checked). GLM-4.5 and GLM-4.5V have a shared expert and an expert-score correction bias (a buffer the weight sync
sends too), Qwen2-MoE a gated shared expert, Granite 3.0 MoE scaled embeddings, residuals and logits; Qwen3-Next
has Qwen3.5-MoE's hybrid decoder (its engine's check: tests/workers/rollout/test_hybrid_engine.py). Others are refused: their expert layouts (DeepSeek's latent attention,
GPT-OSS's expert biases and attention sinks, ...) have not been checked."""


def expert_count(model_config: dict[str, Any]) -> tuple[str, int] | None:
    """(config key, experts per layer) of a mixture-of-experts config (its text_config's for a VLM); None if dense."""
    for section in (model_config, model_config.get("text_config") or {}):
        for name in EXPERT_COUNT_KEYS:
            count = section.get(name)
            if isinstance(count, int) and count > 1:
                return name, count
    return None


def refuse_mixture_of_experts(key: str, path: str | None, lora: LoraConfig) -> None:
    """Raise NotImplementedError where the local model at `path` is a mixture of experts of a type not in
    MIXTURE_OF_EXPERTS_MODEL_TYPES (a hub id is checked by the weight sync, when the actor is loaded), or one whose
    experts `lora` would adapt (`refuse_lora_on_experts`)."""
    model_config = read_model_config(key, path)
    if model_config is not None:
        refuse_unchecked_experts(f"{key}='{path}'", model_config)
        refuse_lora_on_experts(key, path, lora)


EXPERT_LORA_TARGETS = frozenset("gate_proj up_proj down_proj gate_up_proj experts mlp w1 w2 w3".split())
"""lora.target_modules names that reach a mixture of experts' fused expert tensors (peft maps the projections' names
onto them; w1, w2, w3: Mixtral's checkpoint names for them)."""


def refuse_lora_on_experts(key: str, path: str | None, lora: LoraConfig) -> None:
    """Raise NotImplementedError where the local model at `path` is a mixture of experts and `lora` targets every
    linear layer: peft then adapts the fused expert tensors (3-D, one slice per expert), which neither the merge
    (weight sync, export, model_merger) nor the adapter sync handles (`apply_lora` refuses them too, for a hub id).
    Adapters on named layers outside the experts (attention) are merged as in a dense model."""
    model_config = read_model_config(key, path) if lora.rank > 0 else None
    experts = expert_count(model_config) if model_config is not None else None
    if experts is None:
        return
    named = sorted({name.strip() for name in lora.target_modules.split(",")} & EXPERT_LORA_TARGETS)
    if lora.target_modules == "all-linear" or named:
        adapted = "every linear layer" if lora.target_modules == "all-linear" else ", ".join(named)
        raise NotImplementedError(
            f"{key}='{path}' is a mixture-of-experts model ({model_config.get('model_type')!r}, {experts[0]}="
            f"{experts[1]}) and the run gives {adapted} LoRA adapters (lora.rank={lora.rank}, "
            f"target_modules={lora.target_modules}): {FUSED_EXPERTS_LORA}"
        )


FUSED_EXPERTS_LORA = (
    "peft adapts its fused expert tensors, which the merge into the engine's and the exported weights does not "
    "handle. Name the layers outside the experts in lora.target_modules (the attention's: q_proj,k_proj,v_proj,o_proj), "
    "or train all weights (lora.rank=0)."
)


def refuse_unchecked_experts(what: str, model_config: dict[str, Any]) -> None:
    """Raise NotImplementedError naming `what` where `model_config` (a config.json's content) is a mixture of experts
    of a type not in MIXTURE_OF_EXPERTS_MODEL_TYPES."""
    experts = expert_count(model_config)
    model_type = model_config.get("model_type")
    if experts is not None and model_type not in MIXTURE_OF_EXPERTS_MODEL_TYPES:
        name, count = experts
        raise NotImplementedError(
            f"{what} is a mixture-of-experts model ({model_type!r}, {name}={count}), which the actor does not support "
            "yet: the rollout engine's weight sync is checked for "
            f"{', '.join(MIXTURE_OF_EXPERTS_MODEL_TYPES)} only (its experts, router and layout)"
            f"{nearest(model_type, MIXTURE_OF_EXPERTS_MODEL_TYPES)}. Use one of those or a dense model."
        )


def check_attention_available(prefix: str, model: "ModelConfig", on_cpu: bool, single_machine: bool) -> None:
    """model.attn_implementation=flash_attention_*: flash-attn runs on CUDA only, and on one machine the driver sees
    the workers' packages (a multi-node driver may run where flash-attn is not installed: not checked)."""
    import importlib.util

    requested = model.attn_implementation
    if not requested.startswith("flash_attention"):
        return
    key = f"{prefix}attn_implementation={requested}"
    if on_cpu:
        raise ConfigError(f"{key} runs on CUDA only; on the CPU use auto (exact packed attention) or sdpa.")
    module, package = FLASH_ATTENTION_PACKAGES[requested]
    if single_machine and importlib.util.find_spec(module) is None:
        raise ConfigError(
            f"{key} needs the {package} package, which is not installed: install it or use auto (exact packed "
            "attention without flash-attn)."
        )


PRE_SCALED_ROPE_TYPES = ("su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling")
"""RoPE types whose max_position_embeddings is the scaled length already (vLLM 0.32's `_get_and_verify_max_len`
applies their `factor` no further; transformers' YaRN assumes the same)."""


def trained_positions(model_config: dict[str, Any]) -> int | None:
    """The positions a RoPE model takes, as vLLM derives them: max_position_embeddings of its text config, times the
    RoPE scaling factor of a type that scales it (linear, dynamic; the PRE_SCALED_ROPE_TYPES' limit is the scaled one
    already, and Gemma 3's is never scaled); None where its config names none."""
    text = model_config.get("text_config", model_config)
    limit = text.get("max_position_embeddings")
    if not isinstance(limit, int):
        return None
    rope = [text.get("rope_scaling"), text.get("rope_parameters")]
    rope += [value for value in rope if isinstance(value, dict) for value in value.values()]  # per layer type
    if "gemma3" in str(model_config.get("model_type", "")):  # vLLM applies no factor to Gemma 3
        return limit
    factor = 1.0
    for parameters in rope:
        if not isinstance(parameters, dict):
            continue
        kind = parameters.get("rope_type", parameters.get("type"))
        if kind not in PRE_SCALED_ROPE_TYPES and parameters.get("factor") is not None:
            factor = float(parameters["factor"])
    return int(limit * factor)


def read_model_config(key: str, path: str | None) -> dict[str, Any] | None:
    """The config.json of the model named by config key `key`: a local directory, or a Hub id whose config.json is in
    the local Hugging Face cache (downloaded before, or by `huggingface-cli download`); None where neither has one (a
    Hub id not yet downloaded: the worker checks it when it loads the config). Reads the cache only: call it after
    `verl.utils.hub.offline_unless_reachable`, which must run before huggingface_hub is imported."""
    config_file = os.path.join(path, "config.json") if path else ""
    if path and not os.path.isdir(path):
        try:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(path, "config.json")
        except ValueError:  # not a repository id
            cached = None
        config_file = cached if isinstance(cached, str) else ""
    if not os.path.isfile(config_file):
        return None
    try:
        with open(config_file, encoding="utf-8") as file:
            return json.load(file)
    except (OSError, ValueError) as err:
        raise ConfigError(f"{key}: cannot read '{config_file}' as JSON: {err}.") from None


# ---------------------------------------------------------------------------------------------- hybrid models

RECURRENT_LAYER_TYPES = ("linear_attention", "mamba")
"""Entries of a text config's `layer_types` whose layers carry state along the row."""

SEQUENCE_PARALLEL_REFUSAL = (
    "Ulysses sequence parallelism gives each rank a slice of the packed row, but a Gated DeltaNet (linear "
    "attention) layer's convolution and recurrence run along the whole sequence, and this project's Ulysses only "
    "exchanges the full-attention layers' heads"
)
"""Why a model with recurrent layers cannot be split; the config check and the worker both name it."""

SLIDING_WINDOW_SEQUENCE_PARALLEL_REFUSAL = (
    "Ulysses sequence parallelism gives each rank a slice of the packed row, and a sliding-window layer's mask "
    "(Gemma, Mistral 7B v0.1, Phi-3) would be built for that slice while its attention runs over the whole row"
)
"""Why a model with sliding-window layers cannot be split; the config check and the worker both name it."""


def uses_sliding_window(text_config: dict[str, Any]) -> bool:
    """Whether a text config (as transformers reads it: `transformers_text_config`) has sliding-window attention:
    `layer_types` naming sliding layers (Gemma, Qwen2 with use_sliding_window), or, without `layer_types`, a
    `sliding_window` every layer applies (Mistral 7B v0.1, Phi-3, Starcoder2)."""
    layer_types = text_config.get("layer_types")
    if layer_types:
        return "sliding_attention" in layer_types
    return text_config.get("use_sliding_window") is not False and text_config.get("sliding_window") is not None


def transformers_text_config(model_config: dict[str, Any]) -> dict[str, Any]:
    """The text part of a config.json as transformers reads it, its defaults filled in and derived fields computed
    (Mistral's sliding_window of 4096 when the file leaves it out, Qwen2's layer_types); the raw text part where
    transformers does not know the model_type (remote code)."""
    try:
        from transformers import AutoConfig

        return AutoConfig.for_model(**model_config).get_text_config().to_dict()
    except Exception:  # unknown type, or a file transformers' validators refuse: the worker's load says why
        return model_config.get("text_config", model_config)


def recurrent_layer_types(layer_types: Any) -> list[str]:
    """The recurrent entries (linear attention, mamba) of a text config's `layer_types` (None for none)."""
    return sorted({kind for kind in layer_types or () if kind in RECURRENT_LAYER_TYPES})


def has_mamba_mixers(text_config: dict[str, Any]) -> bool:
    """Whether a text config (its dict) describes Mamba mixers beside every layer's attention, without `layer_types`
    (Falcon-H1: its `mamba_*` fields)."""
    return any(name.startswith("mamba_") for name in text_config)


def model_recurrent_layer_types(path: str | None) -> list[str]:
    """The recurrent layer types of the model at `path` (`read_model_config`); [] for none or no config found."""
    model_config = read_model_config("model_path", path) or {}
    text = model_config.get("text_config") or model_config
    return recurrent_layer_types(text.get("layer_types"))
