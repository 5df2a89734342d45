# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Edges of the critic's update (verl/workers/critic/dp_critic.py) in one process on the tiny Qwen2 value model: the
configured value clip, loss aggregation and response-length constant reach the loss, and its token-mean metrics do
not depend on the micro-batches."""

import dataclasses

import pytest
import torch

from tests.workers.fsdp_testing import make_text_batch, reference_outputs
from verl.algorithms.core_algos import compute_value_loss
from verl.models.tiny_models import get_or_build_tiny_model


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from verl.models.config import ModelConfig
    from verl.models.loading import build_model

    path = get_or_build_tiny_model("qwen2", str(tmp_path_factory.mktemp("tiny_models")))
    return build_model(ModelConfig(model_path=path, enable_gradient_checkpointing=False), value_head=True)


def critic_config(**overrides):
    from verl.workers.critic.config import CriticConfig

    base = CriticConfig(
        global_batch_size=8,
        micro_batch_size_per_device_for_update=8,
        micro_batch_size_per_device_for_experience=8,
        padding_free=False,
        dynamic_batching=False,
        max_grad_norm=1e6,
    )
    return dataclasses.replace(base, **overrides)


def first_update(model, data, config, **kwargs) -> dict[str, float]:
    """The metrics of one update with lr=0 (the real SGD optimizer): the loss of the values before any step."""
    from verl.workers.critic.dp_critic import DataParallelPPOCritic

    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    return DataParallelPPOCritic(config, model, optimizer, **kwargs).update_critic(data)


def value_batch(model, seed: int):
    data = make_text_batch(seed=seed, batch_size=8)
    mask = data.batch["response_mask"]
    with torch.no_grad():
        vpreds = reference_outputs(model, data, temperature=1.0)["values"]
    noise = torch.randn(mask.shape, generator=torch.Generator().manual_seed(seed))
    data.batch["values"] = (vpreds + 0.3 * noise) * mask  # old values near the new ones: the clip holds some tokens
    return data, vpreds


@pytest.mark.parametrize(
    ("loss_avg_mode", "cliprange_value", "max_response_length"),
    [("token-mean", 0.1, None), ("seq-mean-token-sum", 0.5, None), ("seq-mean-token-sum-norm", 0.2, 40)],
)
def test_the_value_loss_uses_the_configured_clip_aggregation_and_length(
    model, loss_avg_mode: str, cliprange_value: float, max_response_length: int | None
) -> None:
    data, vpreds = value_batch(model, seed=3)
    mask = data.batch["response_mask"]
    expected, expected_metrics = compute_value_loss(
        vpreds,
        data.batch["returns"],
        data.batch["values"],
        mask,
        cliprange_value,
        loss_avg_mode,
        max_response_length=max_response_length or mask.shape[-1],
    )
    config = critic_config(loss_avg_mode=loss_avg_mode, cliprange_value=cliprange_value)
    metrics = first_update(model, data, config, max_response_length=max_response_length)
    assert 0 < expected_metrics["vf_clipfrac"] < 1
    assert metrics["critic/vf_loss"] == pytest.approx(expected.item(), rel=1e-4)
    assert metrics["critic/vf_clipfrac"] == pytest.approx(expected_metrics["vf_clipfrac"].item(), rel=1e-4)


def test_the_critics_token_means_do_not_depend_on_the_micro_batches(model) -> None:
    """vf_clipfrac and vpred_mean are token means over the mini-batch: micro-batches of 8, 3 or 1 rows (or dynamic
    ones) weigh each by its response tokens and give the same values."""
    data, vpreds = value_batch(model, seed=4)
    mask = data.batch["response_mask"]
    _, expected = compute_value_loss(vpreds, data.batch["returns"], data.batch["values"], mask, 0.5, "token-mean")
    for micro, dynamic in ((8, False), (3, False), (1, False), (2, True)):
        config = critic_config(micro_batch_size_per_device_for_update=micro, dynamic_batching=dynamic)
        metrics = first_update(model, data, config)
        for name in ("vf_clipfrac", "vpred_mean"):
            assert metrics[f"critic/{name}"] == pytest.approx(expected[name].item(), rel=1e-4, abs=1e-6), (micro, name)
