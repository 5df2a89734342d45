# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The rollout section's own checks at their bounds: what vLLM accepts is accepted (the last value in range), what it
refuses is refused when the config loads (the first value out of range), and the values derived from the section."""

import dataclasses
import os

import pytest

from verl.utils.config import ConfigError
from verl.workers.rollout.config import CPU_DEFAULT_KV_CACHE_MB, RolloutConfig


PREFIX = "worker.rollout."


def _config(**fields) -> RolloutConfig:
    return dataclasses.replace(RolloutConfig(prompt_length=64, response_length=32), **fields)


def _check(**fields) -> None:
    config = _config(**fields)
    config.validate(PREFIX)
    config.check_files(PREFIX)


@pytest.mark.parametrize(
    "overrides",
    [
        {"n": 1},
        {"min_p": 0},
        {"min_p": 1},
        {"presence_penalty": -2, "frequency_penalty": 2},
        {"repetition_penalty": 0.01},
        {"min_tokens": 0},
        {"min_tokens": 32},  # the whole response length
        {"seed": None},
        {"seed": 0},
        {"logprobs": 20, "prompt_logprobs": 0},
        {"stop_token_ids": [3, 4]},
        {"top_k": -1},
        {"top_k": 0},
        {"top_p": 1},
        {"temperature": 2},
        {"temperature": 0, "n": 1},
    ],
)
def test_validation_overrides_vllm_accepts_are_accepted(overrides) -> None:
    _check(val_override_config=overrides)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"min_p": -0.01}, r"min_p must be a number in \[0, 1\]"),
        ({"presence_penalty": 2.5}, r"presence_penalty must be a number in \[-2, 2\]"),
        ({"frequency_penalty": -2.5}, r"frequency_penalty must be a number in \[-2, 2\]"),
        ({"repetition_penalty": 0}, r"repetition_penalty must be a positive number"),
        ({"min_tokens": -1}, r"min_tokens must be an integer of at least 0"),
        ({"min_tokens": 33}, r"min_tokens=33 is above the response length \(32"),
        ({"logprobs": 21}, r"logprobs must be at most 20"),
        ({"prompt_logprobs": 21}, r"prompt_logprobs must be at most 20"),
        ({"stop_token_ids": [3, "x"]}, r"stop_token_ids must be a list of token ids"),
        ({"top_k": -2}, r"top_k must be -1 or 0 \(no top-k\) or at least 1, got -2"),
        ({"top_p": 0}, r"top_p must lie in \(0, 1\], got 0"),
        ({"top_p": 1.01}, r"top_p must lie in \(0, 1\], got 1.01"),
        ({"temperature": 2.01}, r"temperature must lie in \[0, 2\], got 2.01"),
        ({"temperature": 0, "n": 2}, r"val_override_config.n=2 > 1"),
        ({"output_kind": 1}, r"cannot change per call"),
        ({"include_stop_str_in_output": True}, r"need the responses as text"),
    ],
)
def test_validation_overrides_vllm_refuses_are_refused_when_the_config_loads(overrides, message) -> None:
    with pytest.raises(ConfigError, match=message):
        _check(val_override_config=overrides)


@pytest.mark.parametrize(
    "fields",
    [
        {"top_p": 1.0, "top_k": -1, "temperature": 2.0},
        {"top_k": 0},
        {"max_num_seqs": 8192, "max_num_batched_tokens": 8192},
        {"gpu_memory_utilization": 1.0},
        {"seed": 2**32 - 1},
        {"mode": "disaggregated", "nnodes": 2, "n_gpus_per_node": 3},
        {"mode": "colocated", "max_staleness": 3},
        {"env": "env.py:Env", "max_turns": 1, "max_tokens_per_turn": 1},
    ],
)
def test_rollout_settings_at_their_bounds_are_accepted(fields) -> None:
    _config(**fields).validate(PREFIX)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"n": 0}, r"'worker.rollout.n' must be positive, got 0"),
        ({"top_k": -2}, r"top_k must be -1 or 0"),
        ({"top_p": 1.5}, r"top_p must lie in \(0, 1\]"),
        ({"temperature": 2.5}, r"temperature must lie in \[0, 2\]"),
        ({"temperature": 0.0}, r"temperature=0 samples greedily"),
        ({"max_num_seqs": 8193}, r"max_num_batched_tokens=8192 is below worker.rollout.max_num_seqs=8193"),
        ({"gpu_memory_utilization": 1.01}, r"gpu_memory_utilization must lie in \(0, 1\]"),
        ({"seed": 2**32}, r"must lie in \[0, 2\*\*32\)"),
        ({"max_staleness": -1}, r"max_staleness"),
        ({"mode": "colocated", "n_gpus_per_node": 2}, r"n_gpus_per_node sizes the rollout pool of mode=disaggregated"),
        ({"mode": "disaggregated", "verify_weight_sync": True}, r"verify_weight_sync compares the engine"),
        ({"max_turns": 2}, r"worker.rollout.max_turns set\(s\) the episodes of an environment"),
        ({"max_tokens_per_turn": 8}, r"worker.rollout.max_tokens_per_turn set\(s\) the episodes"),
        ({"env_step_timeout_s": 30.0}, r"worker.rollout.env_step_timeout_s set\(s\) the episodes"),
        ({"env": "env.py:Env", "max_turns": 0}, r"max_turns=0 must be at least 1"),
        ({"env": "env.py:Env", "max_tokens_per_turn": 0}, r"'worker.rollout.max_tokens_per_turn' must be positive"),
    ],
)
def test_rollout_settings_past_their_bounds_are_refused(fields, message) -> None:
    with pytest.raises(ConfigError, match=message):
        _config(**fields).validate(PREFIX)


def test_the_rollout_pool_size_and_the_defaults_users_rely_on() -> None:
    assert _config(mode="disaggregated", nnodes=2, n_gpus_per_node=3).pool_size() == 6
    assert _config(mode="disaggregated").pool_size() == 1
    assert _config(mode="colocated").pool_size() == 0
    defaults = RolloutConfig()
    assert (defaults.n, defaults.temperature, defaults.top_p, defaults.top_k, defaults.seed) == (1, 1.0, 1.0, -1, 1)
    assert (defaults.max_turns, defaults.max_tokens_per_turn, defaults.env_step_timeout_s) == (4, None, 600.0)
    assert (defaults.mode, defaults.max_staleness, defaults.ignore_eos) == ("sync", 0, False)
    assert (defaults.gpu_memory_utilization, defaults.max_num_batched_tokens) == (0.6, 8192)
    assert CPU_DEFAULT_KV_CACHE_MB == 256


def test_a_turns_tool_calls_must_fit_the_step_timeout_unless_it_waits_forever() -> None:
    """Multiplier: 16 calls per turn (max_calls_per_turn); at 60 s each a turn may take 960 s."""
    import verl

    env = os.path.join(os.path.dirname(os.path.dirname(verl.__file__)), "examples/envs/calculator.py:Multiplier")
    slow = {"tool_timeout_s": 60}
    for timeout in (960.0, 0.0, -1.0):  # exactly the turn's worst case; <= 0 waits forever
        _config(env=env, env_kwargs=slow, env_step_timeout_s=timeout).check_files(PREFIX)
    with pytest.raises(ConfigError, match=r"may take 960 s, more than worker.rollout.env_step_timeout_s=959.5"):
        _config(env=env, env_kwargs=slow, env_step_timeout_s=959.5).check_files(PREFIX)
