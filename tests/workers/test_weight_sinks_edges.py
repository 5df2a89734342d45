# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Edges of the broadcast to the rollout pool (verl.workers.weight_sync.sinks), over an in-process stand-in for the
transfer group that records what the sender broadcasts and replays it to a receiver: ranks without the group still
take part in the gathers, an empty transfer arrives as one, and the transfer group refuses a backend it has not."""

import pytest
import torch

from tests.workers.fsdp_testing import free_port
from verl.workers.weight_sync.sinks import PoolBroadcast, create_group, receive_weights


class _Done:
    def wait(self) -> None:
        pass


class _Recorder:
    """A sender's group: keeps a copy of each broadcast tensor."""

    def __init__(self) -> None:
        self.sent: list[torch.Tensor] = []

    def broadcast(self, tensor: torch.Tensor, root: int) -> _Done:
        assert root == 0
        self.sent.append(tensor.clone())
        return _Done()


class _Replay:
    """A receiver's group: fills each broadcast tensor with what the sender sent, in order, shape and dtype alike."""

    def __init__(self, sent: list[torch.Tensor]) -> None:
        self.sent = list(sent)

    def broadcast(self, tensor: torch.Tensor, root: int) -> _Done:
        sent = self.sent.pop(0)
        assert (sent.shape, sent.dtype) == (tensor.shape, tensor.dtype)
        tensor.copy_(sent)
        return _Done()


def _transfer(weights: list[tuple[str, torch.Tensor]], bucket_bytes: int) -> tuple[dict, list, _Replay]:
    sender = _Recorder()
    sent = PoolBroadcast(sender, bucket_bytes, torch.device("cpu")).load(iter(weights))
    replay = _Replay(sender.sent)
    received, _ = receive_weights(replay, torch.device("cpu"))
    return sent, received, replay


def test_a_rank_without_the_group_still_consumes_the_stream():
    """Ranks > 0 of the trainer hold no transfer group, but the stream is collective (FSDP all-gathers): they must
    draw every tensor, or rank 0 waits for them in its next all-gather forever."""
    taken = []

    def stream():
        for index in range(3):
            taken.append(index)
            yield f"w.{index}", torch.ones(2)

    assert PoolBroadcast(None, 1024, torch.device("cpu")).load(stream()) == {"broadcast_seconds": 0.0}
    assert taken == [0, 1, 2]


def test_an_empty_transfer_arrives_as_one_and_the_next_transfer_is_whole():
    """Nothing to send still sends one last (empty) bucket, which the receivers take as the end; the group is then
    in step for the next transfer (no broadcast left over on either side)."""
    sent, received, replay = _transfer([], 1024)
    assert received == [] and replay.sent == []
    assert (sent["broadcast_buckets"], sent["broadcast_bytes"]) == (1, 0)
    weights = [("a.weight", torch.arange(6.0).reshape(2, 3)), ("b.bias", torch.tensor([7.0]))]
    sent, received, replay = _transfer(weights, 1024)
    assert replay.sent == [] and [name for name, _ in received] == ["a.weight", "b.bias"]
    assert all(torch.equal(got, want) for (_, got), (_, want) in zip(received, weights))


def test_buckets_hold_at_most_the_bucket_size_and_a_larger_tensor_goes_alone():
    """Four float32 tensors of 16 bytes in buckets of 32 bytes: two buckets of two (a bucket may be filled exactly);
    a 64-byte tensor goes in a bucket of its own, after the one before it."""
    weights = [(f"w.{index}", torch.full((4,), float(index))) for index in range(4)]
    sent, received, _ = _transfer(weights, 32)
    assert (sent["broadcast_buckets"], sent["broadcast_bytes"]) == (2, 64)
    assert all(torch.equal(got, want) for (_, got), (_, want) in zip(received, weights))
    sent, received, _ = _transfer([("small", torch.ones(4)), ("big", torch.ones(16)), ("tail", torch.ones(2))], 32)
    assert sent["broadcast_buckets"] == 3 and [name for name, _ in received] == ["small", "big", "tail"]
    sent, _, _ = _transfer([("big", torch.ones(16)), ("tail", torch.ones(2))], 32)
    assert sent["broadcast_buckets"] == 2  # no empty bucket before a first tensor that is larger than a bucket


def test_a_weight_of_a_dtype_no_engine_takes_is_refused_by_name():
    with pytest.raises(TypeError, match=r"Cannot send weight step.count of dtype torch.int64"):
        _transfer([("w", torch.ones(2)), ("step.count", torch.ones(2, dtype=torch.long))], 1024)


def test_an_unknown_transfer_backend_is_refused():
    with pytest.raises(ValueError, match=r"must be gloo or nccl, got 'mpi'"):
        create_group("127.0.0.1", free_port(), 0, 1, "mpi", timeout_s=5)
