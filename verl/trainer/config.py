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
"""The PPO configuration tree, its derived values and its validation.

    PPOConfig
      data        DataConfig       where prompts come from and how they are rendered
      algorithm   AlgorithmConfig  advantage estimator, KL, online filtering
      worker      WorkerConfig     actor, critic, ref, reward, rollout (verl/workers/config.py)
      trainer     TrainerConfig    steps, validation, checkpoints, loggers, cluster size

`load_config(argv)` merges dataclass defaults < YAML (`config=FILE`) < dotlist overrides, fills the derived keys and
validates everything that can be checked before Ray starts; each error names the key and what to change.
"""

import json
import logging
import math
import os
import re
from dataclasses import dataclass, field
from typing import Any

from verl.algorithms.schedules import check_response_length_schedule
from verl.models.config import ATTN_IMPLEMENTATIONS, VISION_LANGUAGE_MODEL_TYPES
from verl.rewards.function import RewardFunctionLoadError, check_reward_function
from verl.utils.config import ConfigError, load_yaml, merge_config, parse_dotlist, set_keys
from verl.workers.actor.config import ActorConfig
from verl.workers.config import WorkerConfig


logger = logging.getLogger(__name__)


@dataclass
class DataConfig:
    train_files: str = ""
    """Training data: a local json/jsonl/parquet/csv file or a directory of them, or a Hugging Face dataset name@split."""
    val_files: str = ""
    """Validation data, in the same forms as train_files."""
    prompt_key: str = "prompt"
    """Column holding the prompt text."""
    answer_key: str = "answer"
    """Column holding the ground truth passed to the reward function."""
    image_key: str = "images"
    """Column holding a list of images (paths, bytes, {bytes: ...} dicts or PIL images)."""
    video_key: str = "videos"
    """Column holding a list of video paths."""
    image_dir: str | None = None
    """Directory that relative image and video paths are resolved against."""
    allow_paths_outside_image_dir: bool = False
    """Let image and video paths of the dataset point outside data.image_dir (absolute paths, '..'). Off, such a
    row is a data error, so a dataset cannot make the trainer read files elsewhere on the machine. Without
    data.image_dir, paths are used as given."""
    video_fps: float = 2.0
    """Frames per second sampled from videos."""
    max_prompt_length: int = 512
    """Prompt budget in tokens (image tokens included); prompts are left-padded to it."""
    max_response_length: int = 512
    """Most tokens generated per response (with response_length_schedule: the longest stage)."""
    response_length_schedule: dict[int, int] = field(default_factory=dict)
    """Staged context: {step where a stage starts: its response length}, e.g. {0: 8192, 500: 16384, 1000: 32768}.
    The first stage starts at step 0; every length is at most max_response_length, which sizes the engine. Each
    step generates (and pads, so the micro-batch token budgets follow) to its stage's length; resuming continues in
    the right stage. Empty: every step uses max_response_length."""
    rollout_batch_size: int = 512
    """Prompts per training step."""
    mini_rollout_batch_size: int | None = None
    """Prompts per generation round when online filtering needs several rounds to fill a step."""
    val_batch_size: int = -1
    """Prompts per validation batch; -1 puts the whole validation set in one batch."""
    format_prompt: str | None = None
    """Jinja template file rendered with `content` (the prompt) and every other column of the row."""
    override_chat_template: str | None = None
    """Chat-template file that replaces the tokenizer's and processor's template."""
    shuffle: bool = True
    """Shuffle the training set every epoch (seeded, resumable)."""
    seed: int = 1
    """Seed of the shuffling."""
    min_pixels: int | None = 262144
    """Images smaller than this area (in pixels) are upscaled."""
    max_pixels: int | None = 4194304
    """Images larger than this area (in pixels) are downscaled."""
    filter_overlong_prompts: bool = True
    """Drop prompts longer than max_prompt_length (image tokens counted) and log how many; off rejects them."""
    filter_overlong_prompts_workers: int = 1
    """Processes used to filter long prompts."""
    dataloader_num_workers: int | None = None
    """Processes that read, decode and tokenize the next training batches (images included) while a step runs; 0
    does it in the driver process, between steps. Unset (null): 2 when the data has an image or video column (decoding
    and resizing are worth overlapping with the step), else 0 (rendering and tokenizing text prompts takes
    milliseconds, and each worker process would hold ~160 MB). Validation uses them when it has several batches
    (data.val_batch_size). A resumed run keeps the count its checkpoint's data-loader position was saved with."""
    skip_bad_rows: bool = False
    """Skip rows with a missing key or an unreadable image (counted in a warning) instead of failing."""


@dataclass
class AlgorithmConfig:
    gamma: float = 1.0
    """Discount factor (gae, reinforce_plus_plus); another value for an estimator without a discount is an error."""
    lam: float = 1.0
    """GAE lambda (gae only); another value for any other estimator is an error."""
    adv_estimator: str = "grpo"
    """gae, grpo, grpo_passk, rloo, opo, gpg, reinforce_plus_plus, reinforce_plus_plus_baseline, remax, or any name
    registered with verl.algorithms.advantages.register_adv_estimator."""
    norm_adv_by_std_in_grpo: bool = True
    """Divide grpo and grpo_passk advantages by the group's standard deviation; false gives Dr.GRPO. Setting it
    false for an estimator that does not normalise is an error."""
    disable_kl: bool = False
    """Train without a reference model and without any KL term; it wins over use_kl_loss (as in EasyR1)."""
    use_kl_loss: bool = False
    """Add the KL to the actor loss (true) or subtract it from the token rewards (false)."""
    kl_penalty: str = "low_var_kl"
    """KL estimator: kl (k1), abs, mse (k2), low_var_kl (k3), their straight-through forms (k1+, k2+, k3+ ...)."""
    kl_coef: float = 1e-3
    """KL coefficient (the initial one for the adaptive controller)."""
    kl_type: str = "fixed"
    """KL-in-reward controller: fixed or adaptive."""
    kl_horizon: float = 10000.0
    """Horizon of the adaptive KL controller."""
    kl_target: float = 0.1
    """Target KL of the adaptive KL controller."""
    online_filtering: bool = False
    """DAPO dynamic sampling: drop groups whose mean reward lies outside (filter_low, filter_high)."""
    filter_key: str = "overall"
    """Reward key averaged per group for online filtering."""
    filter_low: float = 0.01
    """Groups with a mean at or below this are dropped."""
    filter_high: float = 0.99
    """Groups with a mean at or above this are dropped."""
    entropy_control: bool = False
    """Adaptive entropy control (Skywork-OR1): after every step the entropy bonus' coefficient (starting at
    worker.actor.entropy_coeff) moves by entropy_coeff_delta towards keeping the policy's token entropy at
    target_entropy, within [entropy_coeff_min, entropy_coeff_max]. Logged as actor/entropy_coeff."""
    target_entropy: float = 0.2
    """Token entropy (nats) that entropy_control aims for."""
    entropy_coeff_delta: float = 0.005
    """Step of the entropy coefficient per training step under entropy_control."""
    entropy_coeff_min: float = 0.0
    """Lower bound of the entropy coefficient under entropy_control."""
    entropy_coeff_max: float = 0.05
    """Upper bound of the entropy coefficient under entropy_control."""


@dataclass
class TrainerConfig:
    total_epochs: int = 15
    """Passes over the training set."""
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
    max_try_make_batch: int = 20
    """Generation rounds allowed to fill one step under online filtering; <= 0 means unlimited."""
    critic_warmup: int = 0
    """Steps during which only the critic is trained."""
    val_freq: int = -1
    """Validate every this many steps; -1 disables periodic validation."""
    val_before_train: bool = True
    """Validate once before the first step of a new run (a resumed run does not validate again before it resumes;
    validation samples from its own seed stream, so it never shifts the training samples)."""
    val_only: bool = False
    """Validate and exit without training."""
    val_generations_to_log: int = 0
    """Validation samples (prompt, response, score) written to the loggers."""
    rollout_data_dir: str | None = None
    """Where training rollouts are written: one step_N.jsonl per dumped step (prompts, responses, rewards with every
    key of the reward function, advantages, uids) plus its prompt images under images/step_N/; view them with
    scripts/rollout_viewer.py. None writes none."""
    rollout_data_freq: int = 1
    """With rollout_data_dir: dump the rollouts of every this many steps."""
    save_freq: int = -1
    """Checkpoint every this many steps; -1 saves only at the end."""
    save_limit: int = -1
    """Checkpoints kept (the best by validation score is always kept); -1 keeps all."""
    save_model_only: bool = False
    """Save only the model weights, not the optimizer and trainer state."""
    signal_grace_s: float = 300.0
    """On SIGTERM or SIGINT (scheduler preemption, Ctrl-C) the run finishes its current step and, if that happens
    within this many seconds of the signal, saves a checkpoint, then exits non-zero; a second signal stops at once.
    0 stops without saving."""
    save_checkpoint_path: str | None = None
    """Checkpoint root; defaults to checkpoints/<project_name>/<experiment_name>."""
    load_checkpoint_path: str | None = None
    """Resume from this global_step_N directory."""
    find_last_checkpoint: bool = True
    """Resume from the latest checkpoint under save_checkpoint_path when one exists."""


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


# Keys the loader fills in from another key; setting them is an error that names the key to set instead.
DERIVED_KEYS: dict[str, str] = {
    "worker.rollout.prompt_length": "data.max_prompt_length",
    "worker.rollout.response_length": "data.max_response_length",
    "worker.rollout.trust_remote_code": "worker.actor.model.trust_remote_code",
    "worker.actor.use_kl_loss": "algorithm.use_kl_loss",
    "worker.actor.kl_penalty": "algorithm.kl_penalty",
    "worker.actor.kl_coef": "algorithm.kl_coef",
    "worker.actor.disable_kl": "algorithm.disable_kl",
    "worker.ref.micro_batch_size_per_device_for_experience": "worker.actor.micro_batch_size_per_device_for_experience",
    "worker.ref.padding_free": "worker.actor.padding_free",
    "worker.ref.dynamic_batching": "worker.actor.dynamic_batching",
    "worker.ref.ulysses_size": "worker.actor.ulysses_size",
    "worker.override_chat_template": "data.override_chat_template",
}

LOGGERS = ("console", "file", "tensorboard", "wandb", "swanlab", "mlflow")

EASYR1_LOSS_AVG_MODES: dict[str, str] = {"token": "token-mean", "seq": "seq-mean-token-mean"}
"""EasyR1's values of loss_avg_mode and ours: accepted, with a deprecation warning."""


def _algorithms() -> Any:
    """The algorithm registries (`verl.algorithms.core_algos`), which validation reads.

    They live with the torch code they register, so they are imported on first use: `import verl.trainer.config`
    (and --help-config) stays free of torch.
    """
    from verl.algorithms import core_algos

    return core_algos


def _get(config: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        config = getattr(config, part)
    return config


def _set(config: Any, dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    for part in parents:
        config = getattr(config, part)
    setattr(config, last, value)


def _absolutize(path: str | None) -> str | None:
    if path and os.path.exists(os.path.expanduser(path)):
        return os.path.abspath(os.path.expanduser(path))
    return path


def _absolutize_local_paths(config: PPOConfig) -> None:
    """Ray workers may run in another directory: make every existing local path absolute."""
    data = config.data
    for key in ("train_files", "val_files", "image_dir", "format_prompt", "override_chat_template"):
        setattr(data, key, _absolutize(getattr(data, key)))
    for model in (config.worker.actor.model, config.worker.critic.model):
        model.model_path = _absolutize(model.model_path)
        model.tokenizer_path = _absolutize(model.tokenizer_path)
    reward = config.worker.reward
    reward.reward_function = _absolutize_function(reward.reward_function)
    reward.routes = {route: _absolutize_function(spec) for route, spec in reward.routes.items()}
    for part in reward.rubric.values():
        if isinstance(part, dict) and isinstance(part.get("function"), str):
            part["function"] = _absolutize_function(part["function"])
    reward.judge.model_path = _absolutize(reward.judge.model_path)
    reward.model.model_path = _absolutize(reward.model.model_path)
    reward.model.tokenizer_path = _absolutize(reward.model.tokenizer_path)
    reward.judge.template = _absolutize(reward.judge.template)
    config.trainer.load_checkpoint_path = _absolutize(config.trainer.load_checkpoint_path)
    config.worker.override_chat_template = _absolutize(config.worker.override_chat_template)


def _absolutize_function(spec: str | None) -> str | None:
    """ "path/to/file.py:function" with the path made absolute (the function defaults to main)."""
    if not spec or ".py" not in spec:
        return spec
    path, sep, function = spec.rpartition(":")
    if not sep or not path.endswith(".py"):
        path, function = spec, "main"
    return f"{_absolutize(path)}:{function}"


def _rename_easyr1_values(config: PPOConfig) -> None:
    """Map values that EasyR1 spells differently to ours, with a one-line deprecation warning each."""
    for role in ("actor", "critic"):
        section = _get(config.worker, role)
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
    actor = config.worker.actor
    if actor.loss_avg_mode is None:
        actor.loss_avg_mode = _algorithms().default_loss_avg_mode(actor.loss_type)
    for key, source in DERIVED_KEYS.items():
        _set(config, key, _get(config, source))
    for model in (config.worker.actor.model, config.worker.critic.model):
        model.tokenizer_path = model.tokenizer_path or model.model_path
    _absolutize_local_paths(config)
    trainer = config.trainer
    if trainer.save_checkpoint_path is None:
        trainer.save_checkpoint_path = os.path.join("checkpoints", trainer.project_name, trainer.experiment_name)
    trainer.save_checkpoint_path = os.path.abspath(trainer.save_checkpoint_path)
    rollout = config.worker.rollout
    rollout.env = _absolutize_function(rollout.env)
    if rollout.max_model_len is None:
        rollout.max_model_len = rollout.prompt_length + rollout.response_length
    return config


def load_config(argv: list[str]) -> PPOConfig:
    """Build the PPOConfig from `config=FILE` plus dotlist overrides; raise ConfigError on any bad key or value."""
    overrides = parse_dotlist(argv)
    sources: list[tuple[str, dict]] = []
    config_file = overrides.pop("config", None)
    if config_file is not None:
        file_values = load_yaml(str(config_file))
        set_keys(file_values, DERIVED_KEYS, f"config file '{config_file}'")
        sources.append((f"config file '{config_file}'", file_values))
    set_keys(overrides, DERIVED_KEYS, "command line")
    sources.append(("command line", overrides))
    config = fill_derived(merge_config(PPOConfig, sources))
    validate_config(config)
    return config


# ----------------------------------------------------------------------------------------------------------------
# validation


def _choice(key: str, value: Any, choices: tuple) -> None:
    if value not in choices:
        raise ConfigError(f"Config key '{key}' is '{value}'; choose one of: {', '.join(map(str, choices))}.")


def _positive(config: PPOConfig, *keys: str) -> None:
    for key in keys:
        value = _get(config, key)
        if value is not None and value <= 0:
            raise ConfigError(f"Config key '{key}' must be positive, got {value}.")


def _non_negative(config: PPOConfig, *keys: str) -> None:
    for key in keys:
        value = _get(config, key)
        if value is not None and value < 0:
            raise ConfigError(f"Config key '{key}' must be zero or positive, got {value}.")


def _check_numbers(config: PPOConfig) -> None:
    """Values that type-check but make no sense: they would train backwards, train nothing or fail deep in a worker."""
    _positive(
        config,
        "worker.actor.max_grad_norm",
        "worker.critic.max_grad_norm",
        "worker.actor.ppo_epochs",
        "worker.critic.ppo_epochs",
        "worker.rollout.kv_cache_memory_mb",
        "worker.rollout.max_num_seqs",
        "worker.rollout.max_num_batched_tokens",
        "trainer.rollout_data_freq",
    )
    _non_negative(
        config,
        "worker.actor.optim.lr",
        "worker.critic.optim.lr",
        "worker.actor.optim.weight_decay",
        "worker.critic.optim.weight_decay",
        "worker.rollout.seed",
        "data.seed",
        "data.dataloader_num_workers",
    )
    if config.data.val_batch_size == 0 or config.data.val_batch_size < -1:
        raise ConfigError(
            f"Config key 'data.val_batch_size' is {config.data.val_batch_size}; use a positive number of prompts, "
            "or -1 for the whole validation set in one batch."
        )
    rollout = config.worker.rollout
    if rollout.max_num_batched_tokens < rollout.max_num_seqs:
        raise ConfigError(
            f"worker.rollout.max_num_batched_tokens={rollout.max_num_batched_tokens} is below "
            f"worker.rollout.max_num_seqs={rollout.max_num_seqs}; vLLM needs room for one token of every sequence "
            "per step: raise max_num_batched_tokens or lower max_num_seqs."
        )


def _is_hf_dataset(spec: str) -> bool:
    return "@" in spec and not os.path.exists(spec)


def _check_path(key: str, path: str | None, kind: str = "path", allow_hub: bool = False) -> None:
    if not path:
        return
    if allow_hub and not path.startswith((".", "/", "~")) and not os.path.exists(path):
        return  # a hub id such as Qwen/Qwen2.5-7B-Instruct; resolved (or refused) when the model loads
    if not os.path.exists(os.path.expanduser(path)):
        raise ConfigError(f"Config key '{key}' points to '{path}', which does not exist; give an existing {kind}.")
    if kind == "directory" and not os.path.isdir(path):
        raise ConfigError(f"Config key '{key}' points to '{path}', which is not a directory.")
    if kind == "file" and not os.path.isfile(path):
        raise ConfigError(f"Config key '{key}' points to '{path}', which is not a file.")


def _check_names(config: PPOConfig) -> None:
    algo, actor, critic = config.algorithm, config.worker.actor, config.worker.critic
    algorithms = _algorithms()  # the registries: a registered estimator, loss, KL or aggregation is a valid name
    _choice("algorithm.adv_estimator", algo.adv_estimator, algorithms.registered_adv_estimators())
    _choice("algorithm.kl_penalty", algo.kl_penalty, algorithms.registered_kl_penalties())
    _choice("algorithm.kl_type", algo.kl_type, algorithms.KL_CONTROLLER_TYPES)
    _choice("worker.actor.loss_type", actor.loss_type, algorithms.registered_policy_losses())
    _choice("worker.reward.run_in", config.worker.reward.run_in, ("driver", "actor"))
    _choice("worker.actor.loss_avg_mode", actor.loss_avg_mode, algorithms.registered_loss_avg_modes())
    _choice("worker.critic.loss_avg_mode", critic.loss_avg_mode, algorithms.registered_loss_avg_modes())
    for role in ("actor", "critic"):
        section = _get(config.worker, role)
        _choice(f"worker.{role}.strategy", section.strategy, ("fsdp",))
        _choice(f"worker.{role}.optim.strategy", section.optim.strategy, ("adamw", "adamw_bf16"))
        _choice(f"worker.{role}.optim.lr_scheduler_type", section.optim.lr_scheduler_type, ("constant", "cosine"))
        _choice(f"worker.{role}.fsdp.torch_dtype", section.fsdp.torch_dtype, (None, "fp32", "bf16", "fp16"))
        _choice(f"worker.{role}.model.attn_implementation", section.model.attn_implementation, ATTN_IMPLEMENTATIONS)
        if section.fsdp.enable_cpu_offload and section.offload.offload_params:
            raise ConfigError(
                f"worker.{role}.fsdp.enable_cpu_offload and worker.{role}.offload.offload_params both offload the "
                "parameters; keep one (offload_params frees the device between phases, enable_cpu_offload always)."
            )
        if section.ulysses_size != 1:
            _check_ulysses(config, role, section)
        lora = section.model.lora
        if lora.rank < 0 or lora.alpha <= 0:
            raise ConfigError(
                f"worker.{role}.model.lora: rank must be >= 0 and alpha > 0, got rank={lora.rank}, alpha={lora.alpha}."
            )
        if lora.rank > 0 and role == "critic":
            raise NotImplementedError(
                f"worker.critic.model.lora.rank={lora.rank}: LoRA is implemented for the actor only; set it to 0 "
                "(the critic trains all weights)."
            )
        if lora.rank > 0 and lora.exclude_modules is not None:
            try:
                re.compile(lora.exclude_modules)
            except re.error as error:
                raise ConfigError(
                    f"worker.{role}.model.lora.exclude_modules={lora.exclude_modules!r} is not a regular "
                    f"expression: {error}."
                ) from None
    ref = config.worker.ref
    if ref.fsdp.enable_cpu_offload and ref.offload.offload_params:
        raise ConfigError(
            "worker.ref.fsdp.enable_cpu_offload and worker.ref.offload.offload_params both offload the parameters; "
            "keep one."
        )
    if not config.worker.hybrid_engine:
        raise NotImplementedError(
            "worker.hybrid_engine=false (rollout on separate workers) is not implemented; the actor, rollout and "
            "reference share each device. Set it to true."
        )
    _choice("worker.rollout.name", config.worker.rollout.name, ("vllm",))
    _choice(
        "worker.rollout.dtype",
        config.worker.rollout.dtype,
        ("bf16", "fp16", "fp32", "bfloat16", "float16", "float32", "auto"),
    )
    _choice("trainer.device", config.trainer.device, ("auto", "cpu", "cuda"))
    for name in config.trainer.logger:
        _choice("trainer.logger", name, LOGGERS)


def _check_batch_sizes(config: PPOConfig) -> None:
    data, rollout, trainer = config.data, config.worker.rollout, config.trainer
    world = trainer.nnodes * trainer.n_gpus_per_node
    roles = ["actor"] + (["critic"] if config.algorithm.adv_estimator == "gae" else [])
    for role in roles:
        section = _get(config.worker, role)
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
        per_device = samples_per_update // world
        micro = section.micro_batch_size_per_device_for_update
        if micro is not None and not section.dynamic_batching and per_device % micro != 0:
            raise ConfigError(
                f"{key}.micro_batch_size_per_device_for_update={micro} must divide the {per_device} samples each "
                f"device gets per update ({key}.global_batch_size x rollout.n / devices)."
            )
    if (data.rollout_batch_size * rollout.n) % world != 0:
        raise ConfigError(
            f"data.rollout_batch_size x worker.rollout.n = {data.rollout_batch_size * rollout.n} must be divisible "
            f"by the {world} devices (trainer.nnodes x trainer.n_gpus_per_node)."
        )
    mini = data.mini_rollout_batch_size
    if mini is not None and (mini * rollout.n) % world != 0:
        raise ConfigError(
            f"data.mini_rollout_batch_size x worker.rollout.n = {mini * rollout.n} must be divisible "
            f"by the {world} devices (trainer.nnodes x trainer.n_gpus_per_node)."
        )
    if world % rollout.tensor_parallel_size != 0:
        raise ConfigError(
            f"worker.rollout.tensor_parallel_size={rollout.tensor_parallel_size} must divide the "
            f"{world} devices (trainer.nnodes x trainer.n_gpus_per_node)."
        )


def _check_estimator_options(algo: AlgorithmConfig) -> None:
    """An option the estimator does not take would be dropped silently: refuse it unless it holds its default."""
    algorithms = _algorithms()
    defaults = AlgorithmConfig()
    for key in algorithms.ESTIMATOR_OPTIONS:
        value = getattr(algo, key)
        if value == getattr(defaults, key) or key in algorithms.adv_estimator_parameters(algo.adv_estimator):
            continue
        users = [
            name for name in algorithms.registered_adv_estimators() if key in algorithms.adv_estimator_parameters(name)
        ]
        raise ConfigError(
            f"algorithm.{key}={value} has no effect with algorithm.adv_estimator={algo.adv_estimator}, which does not "
            f"take {key}; remove it, or choose an estimator that uses it ({', '.join(users)})."
        )


def _check_loss_avg_mode(actor: ActorConfig) -> None:
    """A policy loss defined with its own aggregation (sapo) may use another one, with a warning."""
    defined = _algorithms().policy_loss_avg_mode(actor.loss_type)
    if defined is not None and actor.loss_avg_mode != defined:
        logger.warning(
            "worker.actor.loss_type=%s is defined with loss_avg_mode=%s (its paper and verl); "
            "worker.actor.loss_avg_mode=%s changes its objective.",
            actor.loss_type,
            defined,
            actor.loss_avg_mode,
        )


def _check_algorithm(config: PPOConfig) -> None:
    algo, rollout, critic = config.algorithm, config.worker.rollout, config.worker.critic
    _check_estimator_options(algo)
    _check_loss_avg_mode(config.worker.actor)
    if _algorithms().is_grouped_adv_estimator(algo.adv_estimator) and rollout.n < 2:
        raise ConfigError(
            f"algorithm.adv_estimator={algo.adv_estimator} compares responses within a group and needs "
            f"worker.rollout.n > 1 (got {rollout.n})."
        )
    if algo.adv_estimator == "gae" and not critic.model.model_path:
        raise ConfigError(
            "algorithm.adv_estimator=gae trains a critic: set worker.critic.model.model_path "
            "(usually the actor's model path)."
        )
    if algo.disable_kl and algo.use_kl_loss:
        logger.warning(
            "algorithm.disable_kl=true wins over algorithm.use_kl_loss=true (as in EasyR1): no reference model, no KL "
            "loss."
        )
    if algo.kl_penalty == "full" and not algo.disable_kl:
        raise ConfigError(
            "algorithm.kl_penalty=full needs whole vocabulary distributions, but the workers compute "
            "one log-prob per token; choose low_var_kl, kl, abs or mse."
        )
    if algo.entropy_control:
        if algo.target_entropy <= 0 or algo.entropy_coeff_delta <= 0:
            raise ConfigError(
                f"algorithm.target_entropy={algo.target_entropy} and algorithm.entropy_coeff_delta="
                f"{algo.entropy_coeff_delta} must be positive under algorithm.entropy_control."
            )
        if not 0 <= algo.entropy_coeff_min <= algo.entropy_coeff_max:
            raise ConfigError(
                f"algorithm.entropy_coeff_min={algo.entropy_coeff_min} and entropy_coeff_max="
                f"{algo.entropy_coeff_max} must satisfy 0 <= min <= max."
            )
    problem = check_response_length_schedule(config.data.response_length_schedule, config.data.max_response_length)
    if problem:
        raise ConfigError(f"data.response_length_schedule={config.data.response_length_schedule} {problem}")
    if algo.online_filtering and not algo.filter_low < algo.filter_high:
        raise ConfigError(
            f"algorithm.filter_low={algo.filter_low} must be below algorithm.filter_high={algo.filter_high}."
        )
    if not 0.0 < rollout.top_p <= 1.0:
        raise ConfigError(f"worker.rollout.top_p must lie in (0, 1], got {rollout.top_p}.")
    if rollout.temperature < 0:
        raise ConfigError(f"worker.rollout.temperature must be >= 0, got {rollout.temperature}.")
    needed = config.data.max_prompt_length + config.data.max_response_length
    if rollout.max_num_batched_tokens < needed:
        raise ConfigError(
            f"worker.rollout.max_num_batched_tokens={rollout.max_num_batched_tokens} must be at least "
            f"data.max_prompt_length + data.max_response_length = {needed}."
        )
    if rollout.max_model_len is not None and rollout.max_model_len < needed:
        raise ConfigError(
            f"worker.rollout.max_model_len={rollout.max_model_len} must be at least "
            f"data.max_prompt_length + data.max_response_length = {needed}."
        )
    if not 0.0 < rollout.gpu_memory_utilization <= 1.0:
        raise ConfigError(
            f"worker.rollout.gpu_memory_utilization must lie in (0, 1], got {rollout.gpu_memory_utilization}."
        )


def _check_paths(config: PPOConfig) -> None:
    data = config.data
    if not data.train_files:
        raise ConfigError("data.train_files is empty; give a local file or directory, or a dataset name@split.")
    for key in ("data.train_files", "data.val_files"):
        spec = _get(config, key)
        if spec and not _is_hf_dataset(spec):
            if not os.path.exists(spec):
                raise ConfigError(
                    f"Config key '{key}' points to '{spec}', which does not exist; give a local "
                    "file or directory, or a Hugging Face dataset as name@split."
                )
    _check_path("data.image_dir", data.image_dir, "directory")
    _check_path("data.format_prompt", data.format_prompt, "file")
    _check_path("data.override_chat_template", data.override_chat_template, "file")
    if not config.worker.actor.model.model_path:
        raise ConfigError("worker.actor.model.model_path is empty; give a local model directory or a hub id.")
    for role in ("actor", "critic"):
        model = _get(config.worker, role).model
        _check_path(f"worker.{role}.model.model_path", model.model_path, "directory", allow_hub=True)
        _check_path(f"worker.{role}.model.tokenizer_path", model.tokenizer_path, "directory", allow_hub=True)
        _check_model_type(f"worker.{role}.model.model_path", model.model_path)
    reward = config.worker.reward
    if reward.reward_function:
        try:  # loads the file once (no torch, no Ray): catches a missing file, function, package or bad kwargs
            check_reward_function(reward.reward_function, reward.reward_function_kwargs)
        except RewardFunctionLoadError as err:
            raise ConfigError(str(err)) from None
    try:
        reward.judge.check()
    except ValueError as err:
        raise ConfigError(str(err)) from None
    _check_rubric(reward)
    if not (
        reward.reward_function
        or reward.routes
        or reward.rubric
        or reward.judge.enabled
        or _reward_model_enabled(reward)
    ):
        raise ConfigError(
            "No reward: set worker.reward.reward_function (or worker.reward.routes), a reward model "
            "(worker.reward.model.model_path) or a judge (worker.reward.judge.model_path)."
        )
    unknown = sorted(set(reward.routes_kwargs) - set(reward.routes))
    if unknown:
        raise ConfigError(
            f"worker.reward.routes_kwargs has route(s) {unknown} that are not in worker.reward.routes "
            f"({sorted(reward.routes)})."
        )
    for route, spec in reward.routes.items():
        try:
            check_reward_function(spec, reward.routes_kwargs.get(route, {}))
        except RewardFunctionLoadError as err:
            raise ConfigError(f"worker.reward.routes.{route}: {err}") from None
    rollout = config.worker.rollout
    if rollout.env:
        from verl.envs.loader import EnvironmentLoadError, load_environment

        if rollout.max_turns < 1:
            raise ConfigError(f"worker.rollout.max_turns={rollout.max_turns} must be at least 1.")
        _positive(config, "worker.rollout.max_tokens_per_turn")
        try:  # imports the file and builds the class once: a missing file, class or bad kwargs is named now
            load_environment(rollout.env, rollout.env_kwargs)
        except EnvironmentLoadError as err:
            raise ConfigError(str(err)) from None
    if config.trainer.load_checkpoint_path:
        path = config.trainer.load_checkpoint_path
        _check_path("trainer.load_checkpoint_path", path, "directory")
        if not os.path.basename(os.path.normpath(path)).startswith("global_step_"):
            raise ConfigError(f"trainer.load_checkpoint_path='{path}' must be a global_step_N directory.")


def _check_rubric(reward: Any) -> None:
    """Each part names a loadable function with a numeric weight; a rubric is not combined with routes."""
    if not reward.rubric:
        return
    if reward.routes:
        raise ConfigError("worker.reward.rubric and worker.reward.routes cannot be combined; use one of them.")
    for name, part in reward.rubric.items():
        key = f"worker.reward.rubric.{name}"
        if not isinstance(part, dict) or not isinstance(part.get("function"), str):
            raise ConfigError(f'{key} must be {{function: "path/to/file.py:function", weight: 1.0, kwargs: {{}}}}.')
        unknown = sorted(set(part) - {"function", "weight", "kwargs"})
        if unknown:
            raise ConfigError(f"{key} has unknown key(s) {unknown}; the keys are function, weight and kwargs.")
        weight = part.get("weight", 1.0)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)):
            raise ConfigError(f"{key}.weight must be a number, got {weight!r}.")
        try:
            check_reward_function(part["function"], dict(part.get("kwargs") or {}))
        except RewardFunctionLoadError as err:
            raise ConfigError(f"{key}: {err}") from None


def _reward_model_enabled(reward: Any) -> bool:
    return bool(reward.model.model_path)


def _check_reward_model(config: PPOConfig) -> None:
    """The reward model's keys: a local checkpoint must be a one-label sequence classifier (the worker refuses
    anything else too, but only after Ray and the actor have started); sizes and weights must make sense."""
    model = config.worker.reward.model
    _non_negative(config, "worker.reward.model.n_gpus_per_node")
    _positive(config, "worker.reward.model.nnodes")
    for key in ("worker.reward.rule_weight", "worker.reward.model.weight", "worker.reward.judge.weight"):
        value = _get(config, key)
        if not math.isfinite(value):
            raise ConfigError(f"Config key '{key}' must be a finite number, got {value}.")
    if not model.model_path:
        if model.n_gpus_per_node > 0:
            raise ConfigError(
                "worker.reward.model.n_gpus_per_node is set but worker.reward.model.model_path is not; give the "
                "reward model or leave its pool at 0."
            )
        return
    _positive(config, "worker.reward.model.max_length", "worker.reward.model.micro_batch_size")
    _check_path("worker.reward.model.model_path", model.model_path, "directory", allow_hub=True)
    _check_path("worker.reward.model.tokenizer_path", model.tokenizer_path, "directory", allow_hub=True)
    model_config = _read_model_config(model.model_path)
    if model_config is None:
        return  # a hub id: the worker checks it when it loads
    key = "worker.reward.model.model_path"
    if "vision_config" in model_config:
        raise NotImplementedError(
            f"{key}='{model.model_path}' is a vision-language model; reward models are text models (images are "
            "not shown to them)."
        )
    architectures = model_config.get("architectures") or []
    if architectures and not any(name.endswith("ForSequenceClassification") for name in architectures):
        raise ConfigError(
            f"{key}='{model.model_path}' is a {', '.join(architectures)}, not a sequence-classification reward "
            "model; train one from it with `python scripts/train_reward_model.py --init-from-lm --model PATH ...`."
        )
    labels = len(model_config.get("id2label") or {}) or model_config.get("num_labels", 2)
    if labels != 1:
        raise ConfigError(
            f"{key}='{model.model_path}' has {labels} labels; a reward model gives one score (num_labels=1)."
        )


def _read_model_config(path: str | None) -> dict[str, Any] | None:
    config_file = os.path.join(path, "config.json") if path else ""
    if not os.path.isfile(config_file):
        return None  # a hub id: the worker checks it when it loads the config
    try:
        with open(config_file, encoding="utf-8") as file:
            return json.load(file)
    except (OSError, ValueError):
        return None  # _check_model_type names the unreadable file


def _check_ulysses(config: PPOConfig, role: str, section: Any) -> None:
    """Ulysses splits the actor's (and reference's) packed rows over groups of ulysses_size ranks."""
    size, key = section.ulysses_size, f"worker.{role}.ulysses_size"
    world = config.trainer.nnodes * config.trainer.n_gpus_per_node
    if size < 1 or world % size != 0:
        raise ConfigError(f"{key}={size} must divide the {world} devices (trainer.nnodes x trainer.n_gpus_per_node).")
    if not section.padding_free or section.model.attn_implementation not in ("auto", "varlen"):
        raise ConfigError(
            f"{key}={size} splits packed rows: set worker.{role}.padding_free=true and "
            f"worker.{role}.model.attn_implementation=auto (it is {section.model.attn_implementation!r})."
        )
    model_config = _read_model_config(section.model.model_path)
    if model_config is None:
        return  # a hub id: the worker checks the heads when it loads the config
    text = model_config.get("text_config", model_config)
    for name in ("num_attention_heads", "num_key_value_heads"):
        heads = text.get(name)
        if heads is not None and heads % size != 0:
            raise ConfigError(
                f"{key}={size} must divide the model's {name}={heads} (each rank attends with a share of the heads)."
            )


def _check_model_type(key: str, path: str | None) -> None:
    """Refuse a local vision-language model whose family the trainer does not support (e.g. Qwen3-VL)."""
    config_file = os.path.join(path, "config.json") if path else ""
    if not os.path.isfile(config_file):
        return  # a hub id: the worker checks it when it loads the config
    try:
        with open(config_file, encoding="utf-8") as file:
            model_config = json.load(file)
    except (OSError, ValueError) as err:
        raise ConfigError(f"{key}: cannot read '{config_file}' as JSON: {err}.") from None
    model_type = model_config.get("model_type")
    if "vision_config" in model_config and model_type not in VISION_LANGUAGE_MODEL_TYPES:
        raise NotImplementedError(
            f"{key}='{path}' is a {model_type!r} vision-language model, which is not supported yet (its position ids "
            f"and vision tower differ); supported vision-language models: {', '.join(VISION_LANGUAGE_MODEL_TYPES)}."
        )


def validate_config(config: PPOConfig) -> None:
    """Every check that needs no model and no cluster; raises ConfigError naming the key to change."""
    _positive(
        config,
        "data.max_prompt_length",
        "data.max_response_length",
        "data.rollout_batch_size",
        "data.mini_rollout_batch_size",
        "worker.actor.global_batch_size",
        "worker.actor.micro_batch_size_per_device_for_update",
        "worker.actor.micro_batch_size_per_device_for_experience",
        "worker.critic.global_batch_size",
        "worker.critic.micro_batch_size_per_device_for_update",
        "worker.critic.micro_batch_size_per_device_for_experience",
        "worker.rollout.n",
        "worker.rollout.tensor_parallel_size",
        "worker.reward.num_cpus",
        "trainer.total_epochs",
        "trainer.max_steps",
        "trainer.nnodes",
        "trainer.n_gpus_per_node",
    )
    _check_names(config)
    _check_numbers(config)
    _check_algorithm(config)
    _check_batch_sizes(config)
    _check_paths(config)
    _check_reward_model(config)
