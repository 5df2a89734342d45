# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The typed config of supervised fine-tuning (`python -m verl.sft.main`): defaults < YAML < command line.

The model, optimizer and FSDP sections are the RL actor's own classes, and the trainer section extends the RL
trainer's shared keys (`BaseTrainerConfig`), so a model that fine-tunes here trains under RL with the same keys, and
both check them the same way. Each section validates its own fields; `validate_sft_config` adds the one rule across
sections (the batch over the devices).
"""

from dataclasses import dataclass, field
from typing import Any

from verl.models.config import (
    FSDPConfig,
    ModelConfig,
    check_attention_available,
    check_trained_dtype,
    refuse_lora_on_experts,
)
from verl.trainer.config import BaseTrainerConfig, without_copies
from verl.utils.config import (
    ConfigError,
    absolute_path,
    command_line_sources,
    merge_config,
    require_dataset_files,
    require_pixel_range,
    require_positive,
    require_seed,
    set_keys,
    warn_inactive_settings,
)
from verl.utils.device import is_cuda_available
from verl.utils.hub import offline_unless_reachable
from verl.utils.optim import OptimConfig


TRUNCATIONS = ("error", "right")


@dataclass
class SFTDataConfig:
    train_files: str = ""
    """Training conversations: a local file or directory (jsonl, json, parquet, csv; a folder of `save_to_disk`; one
    split of a folder whose file names carry splits as `dir@split`, README.md) or a hub dataset name@split."""
    val_files: str | None = None
    """Validation conversations, same forms; their mean loss is logged as val/loss."""
    messages_key: str = "messages"
    """Column with the conversation: a list of {"role": "system"|"user"|"assistant"|"tool", "content": str} (or
    ShareGPT's {"from", "value"}); a row's `system` column, where the conversation opens without one, is its system
    message."""
    prompt_key: str | None = None
    """Instead of messages_key: a column with the user's prompt (with response_key: a one-turn conversation), or with
    the prompt's messages (TRL's conversational prompt-completion rows; assistant turns in them are not learned).
    `instruction` reads LLaMA-Factory's alpaca rows: their `input`, `system` and `history` columns join in."""
    response_key: str | None = None
    """With prompt_key: the column with the assistant's answer (a string, or its messages: TRL's `completion`), the
    only part learned."""
    image_key: str = "images"
    """Column with the row's images (paths, base64 data URLs, bytes or PIL images); a <image> marker in a message
    places one."""
    tools_key: str = "tools"
    """Column with the tools' JSON schemas (a list, or a JSON string of one), which the chat template describes in the
    conversation, as it does in the prompts of an RL run (data.tools_key there; a ToolEnv's `tool_schemas()`); a
    missing or empty column: none. Messages may have the role "tool" (a tool's result)."""
    image_dir: str | None = None
    """Directory that relative image paths are resolved against."""
    allow_paths_outside_image_dir: bool = False
    """Let image paths of the dataset point outside data.image_dir (absolute paths, '..', symlinks out), as in RL.
    Off, such a row is a data error. Without data.image_dir, paths are used as given."""
    min_pixels: int | None = 3136
    """Images are resized to at least this many pixels (Qwen2-VL's default minimum)."""
    max_pixels: int | None = 1003520
    """Images are resized to at most this many pixels."""
    max_length: int = 2048
    """Most tokens per conversation (chat template and image tokens included)."""
    truncation: str = "error"
    """A longer conversation: error (names the row), or right (its tail is cut; a cut assistant turn still trains
    on the tokens it keeps)."""
    batch_size: int = 32
    """Conversations per optimizer step, over all devices."""
    val_batch_size: int = 32
    """Conversations per validation batch."""
    shuffle: bool = True
    """Shuffle the training conversations every epoch."""
    seed: int = 1
    """Seed of the shuffle and of the dropout masks (each rank and step draws its own; the model's dropout is kept
    in SFT unless worker.model.disable_dropout)."""
    override_chat_template: str | None = None
    """A Jinja chat template (file path or text) replacing the tokenizer's."""
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    """Variables the chat template is rendered with, e.g. {enable_thinking: false} for Qwen3 (as the RL trainer's
    data.chat_template_kwargs); each must be one the template reads."""

    def validate(self, prefix: str) -> None:
        require_seed(self, prefix, "seed")
        if (self.prompt_key is None) != (self.response_key is None):
            raise ConfigError(
                f"{prefix}prompt_key and {prefix}response_key go together (a one-turn conversation); set both."
            )
        if self.truncation not in TRUNCATIONS:
            raise ConfigError(f"{prefix}truncation is '{self.truncation}'; choose one of: {', '.join(TRUNCATIONS)}.")
        require_positive(self, prefix, "max_length", "batch_size", "val_batch_size")
        require_pixel_range(self, prefix)

    def check_files(self, prefix: str) -> None:
        require_dataset_files(self, prefix)


@dataclass
class SFTWorkerConfig:
    model: ModelConfig = field(default_factory=lambda: ModelConfig(disable_dropout=False))
    """The model to fine-tune (with its config's dropout, as supervised trainers keep it: model.disable_dropout is
    false here)."""
    optim: OptimConfig = field(default_factory=OptimConfig)
    """Optimizer and learning-rate schedule."""
    fsdp: FSDPConfig = field(default_factory=FSDPConfig)
    """FSDP2 sharding."""
    micro_batch_size_per_device: int = 4
    """Conversations per forward/backward; with dynamic_batching the token budget is this x data.max_length."""
    padding_free: bool = True
    """Pack the conversations of a micro-batch into one row without attention across them (only where the
    attention kernel is varlen, as for the RL actor); else padded rows."""
    dynamic_batching: bool = True
    """Form micro-batches by a token budget instead of a fixed row count."""
    max_grad_norm: float = 1.0
    """Gradient clipping threshold; a step with a non-finite norm is skipped."""

    def validate(self, prefix: str) -> None:
        require_positive(self, prefix, "micro_batch_size_per_device", "max_grad_norm")
        self.model.validate(f"{prefix}model.")
        self.optim.validate(f"{prefix}optim.")
        self.fsdp.validate(f"{prefix}fsdp.")
        check_trained_dtype(prefix, self.fsdp, self.optim.strategy)

    def check_files(self, prefix: str) -> None:
        if not self.model.model_path:
            raise ConfigError(f"{prefix}model.model_path is empty; give a local model directory or a hub id.")
        self.model.check_files(f"{prefix}model.")
        refuse_lora_on_experts(f"{prefix}model.model_path", self.model.model_path, self.model.lora)
        from verl.models.lora import check_lora_injection  # torch and peft: imported on first use

        check_lora_injection(self.model, f"{prefix}model.")


@dataclass
class SFTTrainerConfig(BaseTrainerConfig):
    # SFT's own defaults of shared keys; their docstrings are BaseTrainerConfig's
    total_epochs: int = 3
    n_gpus_per_node: int = 1
    logger: list[str] = field(default_factory=lambda: ["console", "file"])
    project_name: str = "verl_sft"
    experiment_name: str = "sft"

    val_freq: int = -1
    """Validate every this many steps (and at the end when there is a validation set); <= 0 only at the end."""
    export_hf_model: bool = True
    """At the end, also write the trained model as a Hugging Face directory (weights, config, tokenizer) to
    <save_checkpoint_path>/huggingface: give it to the RL trainer as worker.actor.model.model_path. Its weights have
    the dtype the base model's config declares (bf16 for the released Qwen models; fp32 where it declares none)."""


@dataclass
class SFTConfig:
    data: SFTDataConfig = field(default_factory=SFTDataConfig)
    """The conversations."""
    worker: SFTWorkerConfig = field(default_factory=SFTWorkerConfig)
    """The model and how it trains."""
    trainer: SFTTrainerConfig = field(default_factory=SFTTrainerConfig)
    """Devices, steps, logging and checkpoints."""


def validate_sft_config(config: SFTConfig) -> None:
    """Every check that needs no model and no cluster: each section's values, the batch over the devices, then the
    files the sections name; raises ConfigError naming the key."""
    data, worker, trainer = config.data, config.worker, config.trainer
    data.validate("data.")
    worker.validate("worker.")
    trainer.validate("trainer.")
    world = trainer.world_size()
    if data.batch_size % world != 0:
        raise ConfigError(
            f"data.batch_size={data.batch_size} must split evenly over trainer.nnodes x trainer.n_gpus_per_node = "
            f"{world} devices."
        )
    worker.fsdp.check_world("worker.fsdp.", world)
    on_cpu = trainer.device == "cpu" or not is_cuda_available()
    check_attention_available("worker.model.", worker.model, on_cpu, single_machine=trainer.nnodes == 1)
    data.check_files("data.")
    worker.check_files("worker.")
    trainer.check_files("trainer.")


RUN_DERIVED_KEYS = {"worker.optim.training_steps": "trainer.max_steps or trainer.total_epochs"}
"""Keys the run fills in (the lr schedule's length); setting them is an error."""


def load_sft_config(argv: list[str]) -> SFTConfig:
    """Build the SFTConfig from `config=FILE` plus dotlist overrides; raise ConfigError on any bad key or value."""
    sources = without_copies(command_line_sources(argv), SFTConfig(), {}, RUN_DERIVED_KEYS)
    for source_name, values in sources:
        set_keys(values, RUN_DERIVED_KEYS, source_name)
    config = merge_config(SFTConfig, sources)
    data, model, trainer = config.data, config.worker.model, config.trainer
    for key in ("train_files", "val_files", "image_dir", "override_chat_template"):
        setattr(data, key, absolute_path(getattr(data, key)))
    model.model_path = absolute_path(model.model_path)
    model.tokenizer_path = absolute_path(model.tokenizer_path) or model.model_path
    trainer.load_checkpoint_path = absolute_path(trainer.load_checkpoint_path)
    trainer.fill_checkpoint_path()
    offline_unless_reachable(config)  # before validation reads a Hub id's cached config (huggingface_hub's import)
    validate_sft_config(config)
    warn_inactive_settings(config, SFTConfig(), sources, _inactive_settings(config))
    return config


def _inactive_settings(config: SFTConfig) -> list[tuple[tuple[str, ...], str]]:
    """(keys or key prefixes, why the run does not read them) for the features this config leaves off."""
    inactive: list[tuple[tuple[str, ...], str]] = []
    if config.worker.model.lora.rank == 0:
        inactive.append((("worker.model.lora.",), "worker.model.lora.rank=0 (LoRA off)"))
    if not config.data.val_files:
        inactive.append((("data.val_batch_size", "trainer.val_freq"), "data.val_files is empty"))
    if config.data.prompt_key:
        inactive.append((("data.messages_key",), "data.prompt_key is set (prompt and response columns)"))
    on_cpu = config.trainer.device == "cpu" or not is_cuda_available()
    return (
        inactive + config.worker.optim.inactive("worker.optim.") + config.worker.fsdp.inactive("worker.fsdp.", on_cpu)
    )
