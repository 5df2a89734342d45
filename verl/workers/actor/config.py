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
"""Configuration of the actor: its model, optimizer, FSDP2 sharding and offloading.

Every field has a docstring right under it; `python -m verl.trainer.main --help-config` prints them.
The critic and the reference model reuse ModelConfig, OptimConfig, FSDPConfig and OffloadConfig.
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
class OptimConfig:
    lr: float = 1e-6
    """Peak learning rate."""
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    """AdamW betas (beta1, beta2)."""
    weight_decay: float = 1e-2
    """AdamW decoupled weight decay."""
    strategy: str = "adamw"
    """adamw (fp32 states) or adamw_bf16 (bf16 parameters and states, for pure-bf16 training on GPU)."""
    lr_warmup_ratio: float = 0.0
    """Fraction of the training steps spent in linear warmup."""
    lr_warmup_steps: int | None = None
    """Warmup steps; overrides lr_warmup_ratio when set."""
    min_lr_ratio: float | None = None
    """Floor of the cosine schedule as a fraction of lr (None means 0)."""
    lr_scheduler_type: str = "constant"
    """constant or cosine (after the warmup)."""
    training_steps: int = -1
    """Total optimizer steps for the schedule; derived by the trainer from epochs or max_steps."""


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


@dataclass
class ActorConfig:
    strategy: str = "fsdp"
    """Training backend; fsdp (FSDP2) is the one implemented."""
    global_batch_size: int = 256
    """Prompts per optimizer step (multiplied by rollout.n at runtime)."""
    micro_batch_size_per_device_for_update: int | None = None
    """Samples per forward/backward in the update; with dynamic_batching the token budget is this x max length.
    Unset (null), each worker picks for its device: 8 on the CPU (with the parameters gathered once per mini-batch,
    fsdp.gather_once_per_pass; 16 without it, where every micro-batch pays its own all-gathers and reduce-scatter), 4
    on CUDA (the float32 logits of a micro-batch grow with it: tokens x vocabulary x 4 bytes); without
    dynamic_batching, the largest size up to that which divides the samples a device gets per update."""
    micro_batch_size_per_device_for_experience: int = 16
    """Samples per forward when computing log-probs; same token-budget rule with dynamic_batching."""
    max_grad_norm: float = 1.0
    """Gradient clipping threshold; a step with a non-finite norm is skipped."""
    clip_ratio_low: float = 0.2
    """Lower PPO clip epsilon: the ratio is clipped at 1 - clip_ratio_low."""
    clip_ratio_high: float = 0.3
    """Upper PPO clip epsilon (clip-higher, DAPO): the ratio is clipped at 1 + clip_ratio_high."""
    clip_ratio_dual: float = 3.0
    """Dual-clip constant C bounding the loss of negative-advantage tokens (Ye et al. 2020)."""
    loss_avg_mode: str | None = None
    """Aggregation of the actor's loss terms: token-mean, token-sum, seq-mean-token-mean, seq-mean-token-sum or
    seq-mean-token-sum-norm (Dr.GRPO). Unset (null), it is the policy loss's own: seq-mean-token-mean for sapo (its
    paper's objective, and verl's), token-mean for the others; another mode for sapo is allowed, with a warning.
    EasyR1's token and seq are accepted as token-mean and seq-mean-token-mean, with a deprecation warning."""
    loss_type: str = "default"
    """Policy loss: default (PPO clip), gspo, gspo_token, cispo or sapo (see verl.trainer.policy_losses)."""
    tau_positive: float = 1.0
    """SAPO gate temperature for tokens with a non-negative advantage."""
    tau_negative: float = 1.05
    """SAPO gate temperature for tokens with a negative advantage."""
    entropy_coeff: float = 0.0
    """Weight of the entropy bonus subtracted from the policy loss; 0 disables it."""
    ppo_epochs: int = 1
    """Passes over each rollout batch. With 1 and global_batch_size = data.rollout_batch_size (one on-policy
    mini-batch) the old log-probs are the update forward's own, detached, and their separate forward is skipped."""
    padding_free: bool = True
    """Pack the sequences of a micro-batch into one row without padding, where model.attn_implementation has a varlen
    kernel (auto, varlen, flash_attention_2); otherwise the forward runs on padded rows."""
    dynamic_batching: bool = True
    """Build micro-batches by a token budget (micro-batch size x max length) instead of a fixed sample count: packed
    rows count their valid tokens, padded rows count rows x their micro-batch's trimmed width."""
    ulysses_size: int = 1
    """Ulysses sequence-parallel degree: every packed row of the actor's (and reference's) forward is split across
    this many ranks, with all-to-all around attention; it must divide the devices and the attention and key/value
    heads, and needs padding_free with attn_implementation auto. A VLM embeds the whole row (images included) on each
rank and splits it before its language model."""
    use_torch_compile: bool = True
    """Compile the logits -> log-prob/entropy computation with torch.compile on CUDA; on the CPU it runs eagerly
    (compiling costs more there than it saves)."""
    model: ModelConfig = field(default_factory=ModelConfig)
    """The policy model."""
    optim: OptimConfig = field(default_factory=OptimConfig)
    """Optimizer and learning-rate schedule."""
    fsdp: FSDPConfig = field(default_factory=FSDPConfig)
    """FSDP2 sharding and precision."""
    offload: OffloadConfig = field(default_factory=OffloadConfig)
    """Offloading between phases."""
    use_kl_loss: bool = False
    """Derived from algorithm.use_kl_loss."""
    kl_penalty: str = "low_var_kl"
    """Derived from algorithm.kl_penalty."""
    kl_coef: float = 1e-3
    """Derived from algorithm.kl_coef."""
    disable_kl: bool = False
    """Derived from algorithm.disable_kl."""
