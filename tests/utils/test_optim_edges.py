# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Edges of the optimizer config and the LR schedule (verl.utils.optim): the bounds the config check takes, the
schedules' refusals, and BF16AdamW on parameters without a gradient."""

import pytest
import torch

from tests.utils.test_optim import lrs
from verl.utils.config import ConfigError
from verl.utils.optim import BF16AdamW, OptimConfig, build_optimizer


def test_the_fractions_take_both_ends_of_their_range():
    """lr_warmup_ratio and min_lr_ratio lie in [0, 1]: 1 is a valid value (all warmup; no decay at all)."""
    OptimConfig(lr_warmup_ratio=1.0, min_lr_ratio=1.0, lr_scheduler_type="cosine").validate("worker.actor.optim.")
    OptimConfig(lr_warmup_ratio=0.0, min_lr_ratio=0.0).validate("worker.actor.optim.")
    assert lrs(OptimConfig(lr=1.0, lr_scheduler_type="cosine", training_steps=4, min_lr_ratio=1.0), 4) == [1.0] * 4


@pytest.mark.parametrize("betas", [[0.9, 1.0], [1.0, 0.999], [-0.1, 0.999], [0.9]])
def test_betas_outside_zero_to_one_are_refused(betas):
    """A beta of 1 divides Adam's bias correction by zero (NaN weights at the first step)."""
    with pytest.raises(ConfigError, match=r"worker.actor.optim.betas must be two numbers in \[0, 1\)"):
        OptimConfig(betas=betas).validate("worker.actor.optim.")


def test_a_warmup_ratio_needs_the_number_of_training_steps():
    """A constant schedule with a warmup ratio but no total would warm up for int(ratio x 0) = 0 steps: the warmup the
    user asked for silently gone. It is refused, naming the key; lr_warmup_steps needs no total."""
    with pytest.raises(ValueError, match=r"optim.training_steps=-1"):
        lrs(OptimConfig(lr=1.0, lr_warmup_ratio=0.5), 1)
    assert lrs(OptimConfig(lr=1.0, lr_warmup_steps=2), 3) == [0.5, 1.0, 1.0]
    assert lrs(OptimConfig(lr=1.0, lr_warmup_ratio=0.5, training_steps=4), 3) == [0.5, 1.0, 1.0]


def test_a_negative_warmup_is_refused_by_the_schedule_too():
    with pytest.raises(ValueError, match=r"optim.lr_warmup_steps=-2 must not be negative"):
        lrs(OptimConfig(lr=1.0, lr_warmup_steps=-2, lr_scheduler_type="linear", training_steps=4), 1)


def test_bf16_adamw_leaves_a_parameter_without_a_gradient_alone():
    """A trainable parameter that got no gradient this step (e.g. a part of the model the batch did not use) is
    skipped, as torch's AdamW skips it: no state, no weight decay, unchanged."""
    used = torch.nn.Parameter(torch.ones(3, dtype=torch.bfloat16))
    unused = torch.nn.Parameter(torch.ones(3, dtype=torch.bfloat16))
    optimizer = BF16AdamW([used, unused], lr=0.1, weight_decay=0.1)
    used.grad = torch.ones(3, dtype=torch.bfloat16)
    optimizer.step()
    assert torch.equal(unused, torch.ones(3, dtype=torch.bfloat16)) and unused not in optimizer.state
    assert (used < 1).all()


def test_the_settings_a_schedule_does_not_read_are_named():
    """lr_warmup_ratio is unread once lr_warmup_steps is set (it wins), min_lr_ratio under a constant schedule."""
    prefix = "worker.actor.optim."
    assert OptimConfig(lr_scheduler_type="cosine").inactive(prefix) == []
    assert OptimConfig(lr_scheduler_type="cosine", lr_warmup_steps=2).inactive(prefix) == [
        ((f"{prefix}lr_warmup_ratio",), f"{prefix}lr_warmup_steps is set (it wins)")
    ]
    assert [keys for keys, _ in OptimConfig().inactive(prefix)] == [(f"{prefix}min_lr_ratio",)]


@pytest.mark.parametrize("kwargs", [{"lr": -1e-3}, {"eps": 0.0}, {"betas": (0.9, 1.0)}, {"betas": (-0.1, 0.999)}])
def test_bf16_adamw_refuses_what_torchs_adamw_refuses(kwargs):
    with pytest.raises(ValueError, match=r"BF16AdamW needs lr >= 0, eps > 0 and betas in \[0, 1\)"):
        BF16AdamW([torch.nn.Parameter(torch.zeros(2))], **kwargs)


def test_adamw_bf16_applies_the_configured_weight_decay():
    """optim.weight_decay reaches BF16AdamW: with a zero gradient a step only decays, w <- w x (1 - lr x wd), as
    torch's AdamW does."""
    ours, reference = torch.nn.Linear(2, 2, bias=False), torch.nn.Linear(2, 2, bias=False)
    reference.weight.data.copy_(ours.weight.data)
    optimizer = build_optimizer(ours, OptimConfig(lr=0.1, weight_decay=0.5, strategy="adamw_bf16"))
    default = torch.optim.AdamW(reference.parameters(), lr=0.1, weight_decay=0.5)
    start = ours.weight.detach().clone()
    ours.weight.grad, reference.weight.grad = torch.zeros(2, 2), torch.zeros(2, 2)
    optimizer.step()
    default.step()
    torch.testing.assert_close(ours.weight, start * 0.95)
    torch.testing.assert_close(ours.weight, reference.weight)


def test_a_decaying_schedule_needs_a_positive_number_of_steps():
    for kind in ("cosine", "linear"):
        with pytest.raises(ValueError, match=r"optim.training_steps=0"):
            lrs(OptimConfig(lr_scheduler_type=kind, training_steps=0), 1)


def test_an_unknown_schedule_or_strategy_is_refused_when_the_config_is_checked():
    """Refused at validation, naming the key, not later when the workers build the schedule."""
    with pytest.raises(ConfigError, match=r"worker.actor.optim.lr_scheduler_type.*polynomial"):
        OptimConfig(lr_scheduler_type="polynomial").validate("worker.actor.optim.")
    with pytest.raises(ConfigError, match=r"worker.actor.optim.strategy.*sgd"):
        OptimConfig(strategy="sgd").validate("worker.actor.optim.")
