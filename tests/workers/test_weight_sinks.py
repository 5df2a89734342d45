# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The broadcast to the rollout pool (verl.workers.weight_sync.sinks): a sender and two receivers in their own gloo
group, in fresh processes, outside any torch.distributed world, as the trainer and rollout processes are."""

import io

import torch
import torch.multiprocessing as mp

from tests.workers.fsdp_testing import free_port


def _weights() -> list[tuple[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    shapes = [(4, 3), (7,), (64, 64), (2, 3, 5), (1,), (300, 10)]  # (64, 64) and (300, 10) exceed the bucket
    weights = [(f"layer.{i}.weight", torch.randn(shape, generator=generator)) for i, shape in enumerate(shapes)]
    weights.append(("half.weight", torch.randn(5, 5, generator=generator).to(torch.bfloat16)))  # a dtype change
    weights.append(("last.bias", torch.randn(3, generator=generator)))
    return weights


def _member(rank: int, port: int, queue: "mp.Queue") -> None:
    torch.set_num_threads(1)
    from verl.workers.weight_sync.sinks import PoolBroadcast, create_group, receive_weights

    group = create_group("127.0.0.1", port, rank, 3, "gloo", timeout_s=60)
    for _ in range(2):  # a second transfer over the same group (every sync after the first)
        if rank == 0:
            sent = PoolBroadcast(group, 4096, torch.device("cpu")).load(iter(_weights()))
            queue.put((rank, sent["broadcast_buckets"], sent["broadcast_bytes"], None))
        else:
            received, stats = receive_weights(group, torch.device("cpu"))
            # as bytes: a tensor put in the queue travels as a handle into this process, gone once it exits
            buffer = io.BytesIO()
            torch.save([(name, tensor.clone()) for name, tensor in received], buffer)
            queue.put((rank, stats.buckets, stats.bytes, buffer.getvalue()))


def test_buckets_arrive_whole_in_order_with_their_dtypes_at_every_receiver():
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    processes = [ctx.Process(target=_member, args=(rank, port, queue)) for rank in range(3)]
    for process in processes:
        process.start()
    results = [queue.get(timeout=120) for _ in range(6)]
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    expected = _weights()
    total = sum(tensor.numel() * tensor.element_size() for _, tensor in expected)
    senders = [result for result in results if result[0] == 0]
    assert len(senders) == 2 and all(bytes_ == total for _, _, bytes_, _ in senders)
    buckets = senders[0][1]
    assert buckets >= 4  # the two tensors above 4 KiB go alone, the dtype change starts a bucket
    for rank, got_buckets, got_bytes, received in results:
        if rank == 0:
            continue
        assert (got_buckets, got_bytes) == (buckets, total)
        received = torch.load(io.BytesIO(received))
        assert [name for name, _ in received] == [name for name, _ in expected]
        for (_, got), (_, want) in zip(received, expected):
            assert got.dtype == want.dtype and got.shape == want.shape
            assert torch.equal(got, want)
