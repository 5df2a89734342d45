# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The update's loop over mini- and micro-batches (verl/workers/micro_batch_passes.py) on a one-weight module in one
process: its epochs and mini-batch split, how metrics average, the skipped-token share, and a non-finite gradient
that must not move the weights."""

import math

import pytest
import torch

from verl.protocol import DataProto


def passes(ppo_epochs=1, global_batch_size=2, rollout_n=2):
    import dataclasses

    from verl.workers.actor.config import ActorConfig
    from verl.workers.micro_batch_passes import MicroBatchPasses

    module = torch.nn.Linear(1, 1, bias=False)
    config = dataclasses.replace(
        ActorConfig(),
        global_batch_size=global_batch_size,
        ppo_epochs=ppo_epochs,
        micro_batch_size_per_device_for_update=2,
        dynamic_batching=False,
        padding_free=False,
        max_grad_norm=1e6,
    )
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
    return MicroBatchPasses("actor", config, module, optimizer, rollout_n, None, None), module, optimizer


def rows8():
    ones = torch.ones(8, 2, dtype=torch.long)
    return DataProto.from_dict(tensors={"v": torch.arange(1.0, 9.0), "attention_mask": ones, "response_mask": ones})


def test_each_epoch_steps_once_a_mini_batch_and_metrics_average_over_them():
    mbp, module, optimizer = passes(ppo_epochs=2)  # 2 prompts x 2 samples: mini-batches of 4 rows
    steps, seen = [], []
    optimizer.step = lambda *a, **k: steps.append(1)

    def loss(micro, tokens, seqs):
        seen.append(micro.batch["v"].tolist())
        return module.weight.sum() * 0 + micro.batch["v"].sum() * 0, {"actor/v": micro.batch["v"].sum()}

    metrics = mbp.update(rows8(), loss, [("actor/v", None)])
    assert len(steps) == 4  # 2 epochs x 2 mini-batches, one optimizer step each
    assert seen == [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]] * 2
    assert metrics["actor/v"] == pytest.approx((10 + 26) / 2)  # mean over the mini-batches of their sums


def test_a_non_finite_gradient_leaves_the_weights_as_they_were():
    mbp, module, _ = passes()
    before = module.weight.detach().clone()

    def loss(micro, tokens, seqs):
        value = module.weight.sum() * float("inf")
        return value, {"actor/pg_loss": value.detach()}

    metrics = mbp.update(rows8(), loss, [("actor/pg_loss", None)])
    assert not math.isfinite(metrics["actor/grad_norm"]) and torch.equal(module.weight.detach(), before)


def test_the_skipped_token_share_counts_every_mini_batch():
    mbp, module, _ = passes()

    def skip(mini):  # rows 1, 3 of each 4-row mini-batch have no gradient
        return mini.batch["v"] % 2 == 1

    def loss(micro, tokens, seqs):
        value = module.weight.sum() * 0.0
        return value, {"actor/pg_loss": value.detach()}

    metrics = mbp.update(rows8(), loss, [("actor/pg_loss", None)], no_gradient=skip)
    assert metrics["actor/skipped_token_share"] == pytest.approx(0.5)  # 8 of the 16 tokens, over both mini-batches
