# Copyright 2026 The verl-compact Authors. All rights reserved.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
"""Configuration of a trained model: where it comes from, its attention and LoRA adapters, and how FSDP2 shards and
offloads it. The actor, the critic, the reference and reward models and SFT share these sections.

Every field has a docstring right under it; `python -m verl.trainer.main --help-config` prints them.
"""

from dataclasses import dataclass, field
from typing import Any


ATTN_IMPLEMENTATIONS: tuple[str, ...] = ("auto", "varlen", "flash_attention_2", "flash_attention_3", "sdpa", "eager")
"""Values of model.attn_implementation."""

VISION_LANGUAGE_MODEL_TYPES: tuple[str, ...] = ("qwen2_vl", "qwen2_5_vl")
"""Vision-language model types the trainer supports (3-D rope index, vision-tower hooks); others are refused."""


@dataclass
class LoraConfig:
    rank: int = 0
    """LoRA rank; 0 trains all weights. With a rank > 0 (actor only) the base weights are frozen and only peft LoRA
    adapters train: the optimizer holds states for them alone, the reference policy is the same model with its
    adapters switched off (no second copy), the rollout engine receives merged weights, and checkpoints hold the
    adapters (and their optimizer state) only."""
    alpha: int = 64
    """LoRA scaling numerator (scale = alpha / rank)."""
    target_modules: str = "all-linear"
    """Modules that receive adapters: "all-linear" (every linear layer but the LM head) or a comma-separated list
    of module names such as "q_proj,v_proj"."""
    exclude_modules: str | None = None
    """Regular expression of module names left without adapters, e.g. ".*mlp.*"."""
    vision_tower: bool = False
    """Give a VLM's vision tower adapters too; by default it has none (it stays frozen, as the base weights do)."""


@dataclass
class ModelConfig:
    model_path: str | None = None
    """Hugging Face hub id or local directory of the model."""
    tokenizer_path: str | None = None
    """Tokenizer (and processor) location; defaults to model_path."""
    override_config: dict[str, Any] = field(default_factory=dict)
    """Keyword overrides passed to AutoConfig.from_pretrained, e.g. {attention_dropout: 0.0}."""
    enable_gradient_checkpointing: bool = True
    """Recompute activations in the backward pass to save memory (non-reentrant)."""
    trust_remote_code: bool = False
    """Allow model code from the checkpoint directory or hub; off by default for safety."""
    freeze_vision_tower: bool = False
    """Keep the vision encoder of a VLM frozen (no gradients, no optimizer state)."""
    attn_implementation: str = "auto"
    """Attention of the trained models. auto (and varlen) is the project's exact kernel for packed sequences: torch's
    varlen_attn on CUDA, one sdpa call per sequence otherwise, sdpa for padded rows; flash_attention_2 needs the
    flash-attn package; sdpa or eager make padding_free fall back to padded rows (their packed path is a dense mask)."""
    lora: LoraConfig = field(default_factory=LoraConfig)
    """Low-rank adapters."""


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
    """Build the model on the meta device and load the weights once, then shard (saves host memory)."""
    torch_dtype: str | None = None
    """Parameter dtype: None keeps fp32 master weights (mixed precision on GPU); bf16 trains in pure bf16."""
    fsdp_size: int = -1
    """Shard group size; smaller than the world size gives HSDP (replicate across groups). -1 shards over all."""
    mp_param_dtype: str = "bf16"
    """Compute dtype of the mixed-precision policy on GPU (ignored on CPU, which computes in fp32)."""
    mp_reduce_dtype: str = "fp32"
    """Gradient reduction dtype of the mixed-precision policy."""
    mp_buffer_dtype: str = "fp32"
    """Dtype of buffers such as rotary caches."""


@dataclass
class OffloadConfig:
    offload_params: bool = False
    """Keep the parameters in host memory between phases: on the device only for the weight sync, log-probs and the
    update, so the rollout engine can use that memory. Host and device are the same memory on the CPU."""
    offload_optimizer: bool = False
    """Keep the optimizer states in host memory except during the update. Host and device are the same on the CPU."""
