# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Configuration of the actor: its model, optimizer, FSDP2 sharding and offloading.

Every field has a docstring right under it; `python -m verl.trainer.main --help-config` prints them.
The model, FSDP and offload sections are `verl.models.config`'s, the optimizer's `verl.utils.optim`'s: the critic,
the reference model and SFT use the same ones. `validate(prefix)` checks the section's own values, its loss names
against the algorithm registries included; rules that involve other sections are `verl.trainer.config`'s.
"""

import logging
from dataclasses import dataclass, field
from typing import Any

from verl.algorithms.user_functions import require_algorithm
from verl.models.config import (
    FSDPConfig,
    ModelConfig,
    OffloadConfig,
    check_offload,
    check_trained_dtype,
    refuse_mixture_of_experts,
)
from verl.utils.config import ConfigError, require_choice, require_finite, require_positive
from verl.utils.optim import OptimConfig


logger = logging.getLogger(__name__)

STRATEGIES: tuple[str, ...] = ("fsdp",)
"""Training backends of the actor and the critic."""

POSITIVE_UPDATE_FIELDS: tuple[str, ...] = (
    "global_batch_size",
    "micro_batch_size_per_device_for_update",
    "micro_batch_size_per_device_for_experience",
    "max_grad_norm",
    "ppo_epochs",
)
"""The batch sizes, clipping threshold and epochs of a trained model's section (actor and critic): all positive."""


def validate_trained_section(section: Any, prefix: str) -> None:
    """The checks the actor's and the critic's sections (ActorConfig, CriticConfig) share: positive
    POSITIVE_UPDATE_FIELDS, a known strategy and loss_avg_mode (unset: the loader fills in the policy loss's own),
    and their model, optimizer, FSDP and offload sections."""
    from verl.algorithms import core_algos  # the registries, with their torch code: imported on first use

    require_positive(section, prefix, *POSITIVE_UPDATE_FIELDS)
    require_choice(section, prefix, "strategy", STRATEGIES)
    if section.loss_avg_mode is not None:
        require_algorithm(section, prefix, "loss_avg_mode", "loss_avg_mode", core_algos.registered_loss_avg_modes())
    section.model.validate(f"{prefix}model.")
    section.optim.validate(f"{prefix}optim.")
    section.fsdp.validate(f"{prefix}fsdp.")
    check_offload(prefix, section.fsdp, section.offload)
    check_trained_dtype(prefix, section.fsdp, section.optim.strategy)


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
    """Lower PPO clip epsilon: the ratio is clipped at 1 - clip_ratio_low, in [0, 1); cispo also takes 1 or more (its
    importance weights then have no floor, as MiniMax-M1's)."""
    clip_ratio_high: float = 0.3
    """Upper PPO clip epsilon (clip-higher, DAPO): the ratio is clipped at 1 + clip_ratio_high."""
    clip_ratio_dual: float = 3.0
    """Dual-clip constant C bounding the loss of negative-advantage tokens (Ye et al. 2020)."""
    loss_avg_mode: str | None = None
    """Aggregation of the actor's loss terms: token-mean, token-sum, seq-mean-token-mean, seq-mean-token-sum,
    seq-mean-token-sum-norm (Dr.GRPO), or your own as 'path/to/file.py:function'. Unset (null), it is the policy
    loss's own: seq-mean-token-mean for gspo, gspo_token, sapo and geo_mean (their papers' objectives, and verl's),
    token-mean for the others (a loss from a file included); another mode for those is allowed, with a warning.
    EasyR1's token and seq are accepted as token-mean and seq-mean-token-mean, with a deprecation warning."""
    loss_type: str = "default"
    """Policy loss: default (PPO clip), gspo, gspo_token, cispo, gpg (-A log pi, for adv_estimator=gpg), sapo or
    geo_mean (GMPO, whose clip ratios bound the log-ratio; see verl.algorithms.policy_losses), or your own as
    'path/to/file.py:function' (README.md, "Your own algorithm")."""
    tau_positive: float = 1.0
    """SAPO gate temperature for tokens with a positive advantage."""
    tau_negative: float = 1.05
    """SAPO gate temperature for the other tokens (a negative advantage; at 0 the loss is 0 either way)."""
    entropy_coeff: float = 0.0
    """Weight of the entropy bonus subtracted from the policy loss; 0 disables it."""
    top_entropy_quantile: float = 1.0
    """Fraction of response tokens, the highest-entropy ones, that the policy-gradient loss keeps ("Beyond the 80/20
    Rule", arXiv 2506.01939, which keeps 0.2; TRL's top_entropy_quantile): in each mini-batch (one optimizer step),
    over every rank, the tokens whose entropy (at the rollout temperature) is below the (1 - this) quantile of its
    response tokens' entropies get no policy gradient (through gspo's and geo_mean's sequence ratio neither). The
    selection takes a forward pass of its own over the mini-batch (no gradient), so the micro-batch size, dynamic
    batching and the number of ranks do not change it (TRL selects within each micro-batch). The tokens left out
    still count in the loss's normaliser (as in TRL), the entropy bonus and the KL loss. 1 keeps every token (no
    pass is added); 0 keeps only the mini-batch's highest-entropy token."""
    skip_zero_advantage_rows: bool = True
    """Leave out of the update's forward and backward the rows whose advantage is 0 on every token (GRPO's groups
    that scored alike), where nothing else in the loss reads them: every built-in policy loss is the advantage times a
    function of the ratio, so with no KL loss, entropy_coeff=0 (no entropy control), top_entropy_quantile=1 and a
    built-in loss_avg_mode their gradient is exactly 0. They still count in the loss's normaliser, so the gradient is
    the same (up to summation order); each rank runs as many rows (the most any rank keeps, at least one). The
    actor's token metrics (entropy, clip fractions, ppo_kl) then cover the rows with a gradient, whatever the
    data-parallel layout (0 for a mini-batch without any, as a mean over no token elsewhere), a MoE's router statistics (moe/*)
    the rows that ran; actor/entropy_loss (no loss term then) is not logged, and actor/skipped_token_share says how
    much was left out. false runs every row."""
    ppo_epochs: int = 1
    """Passes over each rollout batch. With 1 and global_batch_size = data.rollout_batch_size (one on-policy
    mini-batch) the old log-probs are the update forward's own, detached, and their separate forward is skipped,
    unless the KL penalty in the reward needs them first (algorithm.use_kl_loss=false without disable_kl) or an
    off-policy correction compares them with the engine's."""
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

    def validate(self, prefix: str) -> None:
        from verl.algorithms import core_algos  # the registries, with their torch code: imported on first use
        from verl.algorithms.policy_losses import check_clip_ratios

        validate_trained_section(self, prefix)
        require_finite(self, prefix, "entropy_coeff", "tau_positive", "tau_negative")
        require_positive(self, prefix, "tau_positive", "tau_negative")
        if not 0.0 <= self.top_entropy_quantile <= 1.0:
            raise ConfigError(
                f"{prefix}top_entropy_quantile={self.top_entropy_quantile} must be in [0, 1]: the fraction of response "
                "tokens (the highest-entropy ones) that keep their policy gradient; 1 keeps them all."
            )
        try:
            check_clip_ratios(self.clip_ratio_low, self.clip_ratio_high, self.clip_ratio_dual, prefix, self.loss_type)
        except ValueError as err:
            raise ConfigError(str(err)) from None
        require_algorithm(self, prefix, "loss_type", "policy_loss", core_algos.registered_policy_losses())
        self._check_loss_options(prefix)
        defined = core_algos.policy_loss_avg_mode(self.loss_type)
        if defined is not None and self.loss_avg_mode is not None and self.loss_avg_mode != defined:
            logger.warning(  # a policy loss defined with its own aggregation (sapo) may use another one
                "%sloss_type=%s is defined with loss_avg_mode=%s (its paper and verl); %sloss_avg_mode=%s changes its "
                "objective.",
                prefix,
                self.loss_type,
                defined,
                prefix,
                self.loss_avg_mode,
            )

    def _check_loss_options(self, prefix: str) -> None:
        """An option the policy loss does not read would be dropped silently: refuse it unless it holds its default
        (the estimators' options are checked alike)."""
        from verl.algorithms.policy_losses import POLICY_LOSS_OPTIONS, policy_loss_options

        reads, defaults = policy_loss_options(self.loss_type), ActorConfig()
        unread = [
            f"{prefix}{key}={getattr(self, key)}"
            for key in POLICY_LOSS_OPTIONS
            if key not in reads and getattr(self, key) != getattr(defaults, key)
        ]
        if unread:
            raise ConfigError(
                f"{prefix}loss_type={self.loss_type} does not read {', '.join(unread)} (it reads "
                f"{', '.join(reads) or 'none of them'}): remove the key, or choose the loss that takes it."
            )

    def check_files(self, prefix: str) -> None:
        if not self.model.model_path:
            raise ConfigError(f"{prefix}model.model_path is empty; give a local model directory or a hub id.")
        self.model.check_files(f"{prefix}model.")
        refuse_mixture_of_experts(f"{prefix}model.model_path", self.model.model_path, self.model.lora)
        from verl.models.lora import check_lora_injection  # torch and peft: imported on first use

        check_lora_injection(self.model, f"{prefix}model.")
