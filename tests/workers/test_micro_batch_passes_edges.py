# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Edges of the update's passes (verl/workers/micro_batch_passes.py) on a one-weight module in one process: gradient
clipping at max_grad_norm, and the skipped-token share over mini-batches of different sizes."""

import dataclasses

import pytest
import torch

from verl.protocol import DataProto


def passes(max_grad_norm: float, global_batch_size: int = 2, rollout_n: int = 2):
    from verl.workers.actor.config import ActorConfig
    from verl.workers.micro_batch_passes import MicroBatchPasses

    module = torch.nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        module.weight.fill_(1.0)
    config = dataclasses.replace(
        ActorConfig(),
        global_batch_size=global_batch_size,
        micro_batch_size_per_device_for_update=2,
        dynamic_batching=False,
        padding_free=False,
        max_grad_norm=max_grad_norm,
    )
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
    return MicroBatchPasses("actor", config, module, optimizer, rollout_n, None, None), module


def rows(lengths: list[int], width: int = 4) -> DataProto:
    mask = (torch.arange(width) < torch.tensor(lengths)[:, None]).long()
    values = torch.arange(1.0, len(lengths) + 1.0)
    return DataProto.from_dict(tensors={"v": values, "attention_mask": mask, "response_mask": mask})


def test_the_step_applies_the_gradient_clipped_to_max_grad_norm():
    """A gradient of norm 100 with max_grad_norm=1: SGD moves the weight by lr x 1 (not lr x 100); grad_norm reports
    the norm before clipping."""
    mbp, module = passes(max_grad_norm=1.0, global_batch_size=1)  # one mini-batch of 2 rows

    def loss(micro, tokens, seqs):
        value = module.weight.sum() * 50.0 * len(micro)  # the two rows' shares add up to 100 x weight
        return value, {"actor/pg_loss": value.detach()}

    metrics = mbp.update(rows([4, 4]), loss, [("actor/pg_loss", None)])
    assert metrics["actor/grad_norm"] == pytest.approx(100.0)
    assert module.weight.item() == pytest.approx(1.0 - 0.1 * 1.0)


def test_the_skipped_token_share_is_over_every_token_not_a_mean_of_the_mini_batches_shares():
    """Mini-batch 1 leaves out 4 of its 16 tokens, mini-batch 2 2 of its 4: 6 of 20 tokens were skipped (0.3), not
    the mean of 0.25 and 0.5."""
    mbp, module = passes(max_grad_norm=1e6)  # mini-batches of 4 rows
    data = rows([4, 4, 4, 4, 1, 1, 1, 1])

    def skip(mini):  # row 1 of the first mini-batch, rows 5 and 7 of the second
        return torch.isin(mini.batch["v"], torch.tensor([2.0, 6.0, 8.0]))

    def loss(micro, tokens, seqs):
        value = module.weight.sum() * 0.0
        return value, {"actor/pg_loss": value.detach()}

    metrics = mbp.update(data, loss, [("actor/pg_loss", None)], no_gradient=skip)
    assert metrics["actor/skipped_token_share"] == pytest.approx(6 / 20)


def test_token_metrics_cover_the_rows_with_a_gradient_not_the_row_run_to_keep_ranks_in_step():
    """skip_zero_advantage_rows runs at least one row a mini-batch (every rank runs as many as the most any keeps):
    such a row has no response tokens in the metrics, so a token mean covers the rows with a gradient alone, whatever
    the layout (a mini-batch with none reports 0, as over no token elsewhere). The loss's normaliser still counts
    every row of the mini-batch."""
    from verl.algorithms.masked_ops import masked_mean
    from verl.workers.micro_batch_passes import RESPONSE_TOKENS

    mbp, module = passes(max_grad_norm=1e6)  # mini-batches of 4 rows
    data = rows([4, 4, 4, 4, 2, 2, 2, 2])
    normalisers = []

    def skip(mini):  # every row of the first mini-batch, rows 6 and 8 of the second
        return torch.isin(mini.batch["v"], torch.tensor([1.0, 2.0, 3.0, 4.0, 6.0, 8.0]))

    def loss(micro, tokens, seqs):
        normalisers.append(tokens)
        value = module.weight.sum() * 0.0
        per_token = micro.batch["v"][:, None].expand_as(micro.batch["response_mask"])
        return value, {"actor/pg_loss": value.detach(), "m": masked_mean(per_token, micro.batch["response_mask"])}

    metrics = mbp.update(data, loss, [("actor/pg_loss", None), ("m", RESPONSE_TOKENS)], no_gradient=skip)
    assert metrics["m"] == pytest.approx((0.0 + 6.0) / 2)  # rows 5 and 7 (the filler row 1 counted before: 1.0)
    assert normalisers == [16, 8]
    alone, _ = passes(max_grad_norm=1e6)
    metrics = alone.update(data[:4], loss, [("actor/pg_loss", None), ("m", RESPONSE_TOKENS)], no_gradient=skip)
    assert metrics["m"] == 0.0 and metrics["actor/pg_loss"] == 0.0
