# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""worker.rollout.mode=disaggregated on GPUs: the weight broadcast over NCCL, and GRPO steps with the trainer on one
GPU and its engine on another, or one engine over two GPUs (two or three CUDA devices; never run yet)."""

import io
import json
import os

import pytest
import torch
import torch.multiprocessing as mp

from verl.models.tiny_models import get_or_build_tiny_model


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")


def _weights(device: str) -> list[tuple[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    shapes = [(256, 64), (64,), (1024, 512), (3, 5)]
    weights = [(f"w{i}", torch.randn(shape, generator=generator).to(torch.bfloat16)) for i, shape in enumerate(shapes)]
    weights.append(("fp32.bias", torch.randn(7, generator=generator)))
    return [(name, tensor.to(device)) for name, tensor in weights]


def _member(rank: int, port: int, queue: "mp.Queue") -> None:
    from verl.workers.weight_sync.sinks import PoolBroadcast, create_group, receive_weights

    device = torch.device("cuda", rank)
    torch.cuda.set_device(device)
    group = create_group("127.0.0.1", port, rank, 2, "nccl", timeout_s=120)
    if rank == 0:
        PoolBroadcast(group, 2**20, device).load(iter(_weights(f"cuda:{rank}")))
        queue.put(None)
    else:
        received, stats = receive_weights(group, device)
        buffer = io.BytesIO()  # as bytes: a queued tensor is a handle into this process, gone once it exits
        torch.save([(name, tensor.cpu()) for name, tensor in received], buffer)
        queue.put(buffer.getvalue())


@two_gpus
def test_weight_transfer_over_nccl():
    from verl.single_controller.base.worker import get_free_port

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = get_free_port()
    processes = [ctx.Process(target=_member, args=(rank, port, queue)) for rank in range(2)]
    for process in processes:
        process.start()
    results = [queue.get(timeout=180) for _ in range(2)]
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    (received,) = [torch.load(io.BytesIO(result)) for result in results if result is not None]
    expected = _weights("cpu")
    assert [name for name, _ in received] == [name for name, _ in expected]
    for (_, got), (_, want) in zip(received, expected):
        assert got.dtype == want.dtype and torch.equal(got, want)


@two_gpus
def test_disaggregated_grpo_steps_on_two_gpus(tmp_path):
    """One trainer GPU, one engine GPU, one version of staleness: the engine generates while the trainer trains and
    gets each update's weights over NCCL."""
    _disaggregated_run(tmp_path, 2, "worker.rollout.n_gpus_per_node=1", "worker.rollout.tensor_parallel_size=1")


@pytest.mark.skipif(torch.cuda.device_count() < 3, reason="needs three CUDA devices")
def test_a_tensor_parallel_engine_on_two_gpus_of_the_rollout_pool(tmp_path):
    """One trainer GPU and one engine over two GPUs (the first steps the request loop, the other repeats its engine
    calls, weight loads and validation): the same checks, as tests/trainer/test_disaggregated_e2e.py on the CPU."""
    _disaggregated_run(tmp_path, 3, "worker.rollout.n_gpus_per_node=2", "worker.rollout.tensor_parallel_size=2")


def _disaggregated_run(tmp_path, gpus: int, *pool: str) -> None:
    pytest.importorskip("vllm", reason="needs vLLM's GPU build (pip install vllm)")
    ray = pytest.importorskip("ray", reason="needs Ray (pip install ray)")
    from verl.trainer.config import load_config
    from verl.trainer.runner import run_ppo

    model = get_or_build_tiny_model("qwen2", str(tmp_path / "models"))
    (tmp_path / "reward.py").write_text(
        "def compute_score(sample):\n    return {'overall': float(len(sample['response']) % 2)}\n"
    )
    with open(tmp_path / "train.jsonl", "w") as f:
        for i in range(32):
            f.write(json.dumps({"prompt": f"What is {i} + 1?", "answer": str(i + 1)}) + "\n")
    ray.init(address="local", num_gpus=gpus, include_dashboard=False, log_to_driver=False)
    try:
        config = load_config(
            [
                f"data.train_files={tmp_path / 'train.jsonl'}",
                "data.max_prompt_length=32",
                "data.max_response_length=16",
                "data.rollout_batch_size=4",
                "worker.actor.global_batch_size=4",
                f"worker.actor.model.model_path={model}",
                "worker.rollout.n=2",
                "worker.rollout.gpu_memory_utilization=0.3",
                "worker.rollout.mode=disaggregated",
                *pool,
                "worker.rollout.max_staleness=1",
                f"worker.reward.reward_function={tmp_path / 'reward.py'}:compute_score",
                "trainer.device=cuda",
                "trainer.n_gpus_per_node=1",
                "trainer.max_steps=3",
                "trainer.val_before_train=false",
                "trainer.logger=[file]",
                f"trainer.save_checkpoint_path={tmp_path / 'run'}",
            ]
        )
        run_ppo(config)
    finally:
        ray.shutdown()
    with open(tmp_path / "run" / "experiment_log.jsonl") as f:
        steps = [row for row in map(json.loads, f) if "actor/pg_loss" in row]
    assert [row["step"] for row in steps] == [1, 2, 3]
    assert all(row["async/staleness_max"] <= 1 and row["perf/sync_weights_gb"] > 0 for row in steps)
    assert all(row["rollout_corr/k3_kl"] < 0.1 for row in steps)  # bf16 engine against the trainer's bf16 compute
