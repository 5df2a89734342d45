# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Edges of the actor's and the critic's section checks (verl/workers/actor/config.py, verl/workers/critic/config.py),
called directly: every positive field of a trained section, the strategy, top_entropy_quantile's bounds (0 allowed),
SAPO's temperatures and the critic's value clip."""

import math

import pytest

from verl.utils.config import ConfigError
from verl.workers.actor.config import ActorConfig
from verl.workers.critic.config import CriticConfig


SECTIONS = {"worker.actor.": ActorConfig, "worker.critic.": CriticConfig}
POSITIVE = (
    "global_batch_size",
    "micro_batch_size_per_device_for_update",
    "micro_batch_size_per_device_for_experience",
    "max_grad_norm",
    "ppo_epochs",
)
"""Named here, not imported: a field dropped from verl's list must fail this test."""


@pytest.mark.parametrize("prefix", SECTIONS)
@pytest.mark.parametrize("name", POSITIVE)
def test_every_batch_size_epoch_count_and_clip_threshold_must_be_positive(prefix: str, name: str) -> None:
    section = SECTIONS[prefix]
    section().validate(prefix)
    with pytest.raises(ConfigError, match=rf"'{prefix}{name}' must be positive, got 0"):
        section(**{name: 0}).validate(prefix)


@pytest.mark.parametrize("prefix", SECTIONS)
def test_an_unknown_strategy_is_refused(prefix: str) -> None:
    with pytest.raises(ConfigError, match=rf"'{prefix}strategy' is 'megatron'; choose one of: fsdp"):
        SECTIONS[prefix](strategy="megatron").validate(prefix)


def test_top_entropy_quantile_takes_zero_and_one_but_nothing_outside() -> None:
    """0 keeps only the highest-entropy token (documented), 1 every token; below 0 or above 1 is refused."""
    for quantile in (0.0, 0.2, 1.0):
        ActorConfig(top_entropy_quantile=quantile).validate("worker.actor.")
    for quantile in (-0.1, 1.01):
        with pytest.raises(ConfigError, match=rf"top_entropy_quantile={quantile} must be in \[0, 1\]"):
            ActorConfig(top_entropy_quantile=quantile).validate("worker.actor.")


@pytest.mark.parametrize("name", ["tau_positive", "tau_negative"])
def test_sapo_temperatures_must_be_finite(name: str) -> None:
    config = ActorConfig(loss_type="sapo", loss_avg_mode="seq-mean-token-mean", **{name: math.inf})
    with pytest.raises(ConfigError, match=rf"'worker.actor.{name}' must be a finite number, got inf"):
        config.validate("worker.actor.")


def test_the_critics_value_clip_must_be_positive() -> None:
    CriticConfig(cliprange_value=0.2).validate("worker.critic.")
    with pytest.raises(ConfigError, match=r"'worker.critic.cliprange_value' must be positive, got 0"):
        CriticConfig(cliprange_value=0.0).validate("worker.critic.")
