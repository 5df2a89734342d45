# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Edges of the actor's forward helpers (verl/workers/actor/forward.py): the update micro-batch default under dynamic
batching, and Ulysses keeping dense micro-batches packed where the device would run them padded."""

import pytest
import torch.distributed as dist

from tests.workers.fsdp_testing import free_port, make_text_batch
from verl.models import ulysses
from verl.workers.actor import forward


def test_dynamic_batching_keeps_the_devices_update_micro_batch_default(monkeypatch) -> None:
    """With dynamic batching the default is a token budget (size x max length): it is not lowered to a divisor of
    the rank's samples, as fixed splits are."""
    from verl.utils import device as device_utils

    monkeypatch.setattr(device_utils, "_device_type", "cpu")
    assert forward.update_micro_batch_size(None, 12, dynamic=True) == 8
    assert forward.update_micro_batch_size(None, 12, dynamic=False) == 6
    assert forward.update_micro_batch_size(None, 20, dynamic=True, gather_once=False) == 16
    monkeypatch.setattr(device_utils, "_device_type", "cuda")
    assert forward.update_micro_batch_size(None, 6, dynamic=True) == 4


@pytest.fixture
def single_rank_group():
    """A real one-process gloo group (torch.distributed as it is, nothing stood in for it)."""
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        yield dist.new_group([0])
    finally:
        dist.destroy_process_group()


def test_a_sequence_parallel_micro_batch_stays_packed_on_a_dense_rows_device(monkeypatch, single_rank_group) -> None:
    """Ulysses splits the packed row across its ranks: a micro-batch without padding runs padded on a
    DENSE_ROWS_RUN_PADDED device only outside a sequence-parallel group."""
    monkeypatch.setattr(forward, "DENSE_ROWS_RUN_PADDED", frozenset({"cpu"}))
    dense = make_text_batch(seed=3, batch_size=4, aligned_prompt_len=9)
    assert forward.runs_padded(dense, True)
    with ulysses.sequence_parallel(single_rank_group):
        assert not forward.runs_padded(dense, True)
        assert forward.runs_padded(dense, False)  # padded rows stay padded
    assert forward.runs_padded(dense, True)
