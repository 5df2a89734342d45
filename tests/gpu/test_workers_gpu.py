# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The worker RPCs on CUDA with nccl: what the CPU suite (gloo, CPU tensors only) cannot see.

The batches go in on the CPU, as the driver sends them, and must come back on the CPU; every collective on the way
(token counts, metric sums, micro-batch counts, FSDP all-gathers) runs on a CUDA rank. World size 1 in this process;
the 2-rank variant needs two GPUs. The vLLM and Ray parts skip, naming the package, where it is not installed.
"""

import json
import os
import pathlib
import socket
import sys
from dataclasses import replace

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp
from families import FAMILIES, vl_kinds

from verl.models.tiny_models import get_or_build_tiny_model
from verl.protocol import DataProto
from verl.utils.torch_functional import log_probs_from_logits, positions_from_mask
from verl.workers.config import UpdateRequest


VOCAB = 2000


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def init_rank(rank: int, world_size: int, port: int) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world_size),
    )
    from verl.utils import device

    device.set_device_type("cuda")
    device.init_distributed(timeout_seconds=120)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpu")
    text_model = get_or_build_tiny_model("qwen2", str(root / "models"))
    vl_model = get_or_build_tiny_model("qwen2_5_vl", str(root / "models"), min_pixels=3136, max_pixels=3136)
    (root / "reward.py").write_text(
        "def compute_score(sample):\n    return {'overall': float(len(sample['response']) % 2)}\n"
    )
    with open(root / "train.jsonl", "w") as f:
        for i in range(16):
            f.write(json.dumps({"prompt": f"What is {i} + 1?", "answer": str(i + 1)}) + "\n")
    if not torch.distributed.is_initialized():
        init_rank(0, 1, free_port())
    return {"root": root, "text_model": text_model, "vl_model": vl_model}


def worker_config(ws, *extra: str):
    from verl.trainer.config import load_config

    root = ws["root"]
    config = load_config(
        [
            f"data.train_files={root / 'train.jsonl'}",
            "data.max_prompt_length=32",
            "data.max_response_length=16",
            "data.rollout_batch_size=4",
            "worker.actor.global_batch_size=4",
            "worker.critic.global_batch_size=4",
            "worker.actor.micro_batch_size_per_device_for_update=2",
            "worker.actor.micro_batch_size_per_device_for_experience=4",
            f"worker.actor.model.model_path={ws['text_model']}",
            f"worker.critic.model.model_path={ws['text_model']}",
            "worker.rollout.n=2",
            "worker.rollout.gpu_memory_utilization=0.3",
            f"worker.reward.reward_function={root / 'reward.py'}:compute_score",
            "trainer.device=cuda",
            "trainer.n_gpus_per_node=1",
            "worker.rollout.tensor_parallel_size=1",  # the default, 2, needs two devices
            *extra,
        ]
    )
    return config.worker


def text_batch(seed: int, rows: int = 8, prompt_len: int = 32, response_len: int = 16) -> DataProto:
    """Left-padded prompts and right-padded responses of varied lengths, with the training columns, on the CPU."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.full((rows, prompt_len + response_len), 0, dtype=torch.long)
    mask = torch.zeros_like(input_ids)
    for row in range(rows):
        p = int(torch.randint(4, prompt_len + 1, (1,), generator=generator))
        r = response_len if row == 0 else int(torch.randint(1, response_len + 1, (1,), generator=generator))
        input_ids[row, prompt_len - p : prompt_len + r] = torch.randint(0, VOCAB, (p + r,), generator=generator)
        mask[row, prompt_len - p : prompt_len + r] = 1
    response_mask = mask[:, prompt_len:].clone()
    shape = response_mask.shape
    tensors = {
        "input_ids": input_ids,
        "attention_mask": mask,
        "position_ids": positions_from_mask(mask),
        "responses": input_ids[:, prompt_len:].clone(),
        "response_mask": response_mask,
        "old_log_probs": -torch.rand(shape, generator=generator) * 8 * response_mask,
        "ref_log_probs": -torch.rand(shape, generator=generator) * 8 * response_mask,
        "advantages": torch.randn(shape, generator=generator) * response_mask,
        "values": torch.randn(shape, generator=generator) * response_mask,
        "returns": torch.randn(shape, generator=generator) * response_mask,
    }
    return DataProto.from_dict(tensors=tensors)


def hf_log_probs(model_path: str, data: DataProto) -> torch.Tensor:
    """fp32 Hugging Face forward on the padded batch: the ground truth for the workers' log-probs."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).cuda()
    batch = data.batch.to("cuda")
    response_len = batch["responses"].shape[-1]
    with torch.no_grad():
        logits = model(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], position_ids=batch["position_ids"]
        ).logits[:, -response_len - 1 : -1]
    return (log_probs_from_logits(logits, batch["responses"]) * batch["response_mask"]).cpu()


def test_offload_moves_shards_off_the_device_and_back(workspace):
    from verl.models.config import FSDPConfig, ModelConfig
    from verl.models.fsdp import build_device_mesh, create_fsdp_model, load_fsdp_model, offload_fsdp_model

    device = torch.device("cuda", torch.cuda.current_device())
    mesh = build_device_mesh(1, -1, "cuda")
    model = create_fsdp_model(ModelConfig(model_path=workspace["text_model"]), FSDPConfig(), mesh, device)
    ids = torch.randint(0, VOCAB, (2, 16), device=device)
    with torch.no_grad():
        before = model(input_ids=ids).logits.float()
    allocated = torch.cuda.memory_allocated()
    offload_fsdp_model(model)
    assert all(param.device.type == "cpu" for param in model.parameters())
    assert torch.cuda.memory_allocated() < allocated
    load_fsdp_model(model, device)
    assert all(param.device == device for param in model.parameters())
    with torch.no_grad():
        after = model(input_ids=ids).logits.float()
    assert torch.equal(before, after)


def test_gather_once_per_pass_accumulates_in_the_reduce_dtype_on_cuda(workspace):
    """bf16 compute with fp32 gradient reduction: gradients accumulated unsharded over a pass (reduced once) equal
    those reduced after every micro-batch, and the parameters are sharded again afterwards."""
    from torch.distributed.tensor import DTensor

    from verl.models.config import FSDPConfig, ModelConfig
    from verl.models.fsdp import build_device_mesh, create_fsdp_model

    sys.path.insert(0, str(pathlib.Path(__file__).parent.parent / "workers"))
    from fsdp_testing import accumulate_over_pass

    device = torch.device("cuda", torch.cuda.current_device())
    model_config = ModelConfig(model_path=workspace["text_model"], enable_gradient_checkpointing=False)
    model = create_fsdp_model(model_config, FSDPConfig(), build_device_mesh(1, -1, "cuda"), device)
    micro_batches = [torch.randint(0, VOCAB, (2, 16), device=device) for _ in range(4)]
    grads = {}
    for gather_once in (False, True):
        grads[gather_once] = accumulate_over_pass(model, micro_batches, gather_once)
        assert all(isinstance(param, DTensor) for param in model.parameters())
    for name, grad in grads[False].items():
        assert grads[True][name].dtype == torch.float32, name
        torch.testing.assert_close(
            grads[True][name], grad, rtol=1e-2, atol=1e-4, msg=lambda m, name=name: f"{name}: {m}"
        )


def test_critic_and_reference_rpcs_on_cuda(workspace):
    from verl.workers.fsdp_workers import FSDPWorker

    config = worker_config(workspace, "worker.critic.offload.offload_params=true")
    data = text_batch(0)
    ref = FSDPWorker(config, "ref", device="cuda")
    ref.init_model()
    assert {param.dtype for param in ref.ref_module.parameters()} == {torch.bfloat16}  # no fp32 copy of a frozen model
    out = ref.compute_ref_log_probs(data)
    assert out.batch["ref_log_probs"].device.type == "cpu"
    gap = (out.batch["ref_log_probs"] - hf_log_probs(workspace["text_model"], data)).abs()
    assert gap.mean() < 0.05, f"bf16 reference log-probs differ from fp32 by {gap.mean():.3g} on average"

    critic = FSDPWorker(config, "critic", device="cuda")
    critic.init_model()
    assert all(param.device.type == "cpu" for param in critic.critic_module.parameters())  # offloaded between phases
    values = critic.compute_values(data).batch["values"]
    assert values.device.type == "cpu" and torch.isfinite(values).all()
    metrics = critic.update_critic(data, UpdateRequest(1)).meta_info["metrics"]
    assert all(torch.isfinite(torch.tensor(value)) for value in metrics.values()), metrics
    assert all(param.device.type == "cpu" for param in critic.critic_module.parameters())


def test_weights_streamed_to_the_engine_equal_per_parameter_gathers_on_cuda(workspace):
    """The weight sync gathers one FSDP unit at a time in the unit's bf16 compute dtype: for a bf16 engine that must
    be bit for bit the master weights cast to bf16; for a float32 engine the float32 masters themselves."""
    from verl.models.config import FSDPConfig, ModelConfig
    from verl.models.fsdp import build_device_mesh, create_fsdp_model
    from verl.workers.weight_sync.gather import checkpoint_names, iter_full_weights

    device = torch.device("cuda", torch.cuda.current_device())
    model = create_fsdp_model(
        ModelConfig(model_path=workspace["text_model"]), FSDPConfig(), build_device_mesh(1, -1, "cuda"), device
    )
    names = checkpoint_names(model)
    for dtype in (torch.bfloat16, torch.float32):
        stats = {"num_params": 0, "bytes": 0, "max_param_bytes": 0}
        streamed = dict(iter_full_weights(model, dtype, names, stats))
        for name, param in model.named_parameters(remove_duplicate=False):
            expected = param.full_tensor().to(dtype)
            assert streamed[names[name]].dtype == dtype and torch.equal(streamed[names[name]], expected), name


@pytest.mark.parametrize("kind", ["qwen3_moe", "mixtral", "qwen2_moe", "olmoe", "granitemoe", "glm4_moe"])
def test_mixture_of_experts_weights_reach_the_engine_on_cuda(workspace, kind):
    """A tiny mixture-of-experts actor (fused experts in transformers, per-expert tensors in the checkpoint): the sync
    streams every expert's projections, and vLLM's MoE layers then compute what the actor computes (the weight check,
    before and after the experts change). These families are accepted on the strength of the CPU's check
    (tests/workers/rollout/test_moe_engine_sync.py); until this has passed a GPU run checks its first sync."""
    pytest.importorskip("vllm", reason="needs vLLM's GPU build (pip install vllm)")
    pytest.importorskip("vllm._moe_C", reason="needs vLLM's MoE kernels (vllm/_moe_C), missing from this install")
    from verl.data.tokenizer import get_tokenizer
    from verl.models.config import FSDPConfig, ModelConfig
    from verl.models.fsdp import build_device_mesh, create_fsdp_model
    from verl.workers.rollout.config import RolloutConfig
    from verl.workers.rollout.vllm_rollout import VLLMRollout
    from verl.workers.weight_sync.colocated import FSDPVLLMShardingManager

    model_dir = get_or_build_tiny_model(kind, str(workspace["root"] / "models"))
    device = torch.device("cuda", torch.cuda.current_device())
    actor = create_fsdp_model(
        ModelConfig(model_path=model_dir), FSDPConfig(), build_device_mesh(1, -1, "cuda"), device
    )
    config = RolloutConfig(
        dtype="bf16", gpu_memory_utilization=0.3, tensor_parallel_size=1, prompt_length=32, response_length=16
    )
    rollout = VLLMRollout(model_dir, config, get_tokenizer(model_dir), None)
    manager = FSDPVLLMShardingManager(actor, rollout, verify=True)
    first = manager.prepare()
    assert first["rollout/weight_sync_mean_gap"] < 0.1, first
    manager.release()
    with torch.no_grad():  # new expert weights: a stale MoE layer in the engine would now fail the check
        for name, param in actor.named_parameters():
            if ".mlp.experts." in name:
                param.mul_(-1.5)
    second = manager.prepare()
    assert second["rollout/weight_sync_mean_gap"] < 0.1, second
    manager.release()


def test_the_compiled_token_head_builds_no_cpu_kernel_on_cuda(monkeypatch):
    """The update's compiled head (forward and backward, bf16 logits) runs on the GPU alone: a CPU kernel would make
    Inductor probe the host's C++ toolchain, which stalled or hung the first update (docs/gpu.md). The probe is made
    to fail here, so the test fails at once instead of waiting."""
    import torch._inductor.cpu_vec_isa as cpu_vec_isa

    from verl.workers.actor.dp_actor import token_head

    def no_cpu_kernel():
        raise AssertionError("Inductor built a CPU kernel for the compiled token head")

    monkeypatch.setattr(cpu_vec_isa, "pick_vec_isa", no_cpu_kernel)
    torch._dynamo.reset()
    head, eager = token_head(True), token_head(False)
    generator = torch.Generator(device="cuda").manual_seed(0)
    for rows in (96, 130):
        logits = torch.randn(rows, 1024, device="cuda", dtype=torch.bfloat16, generator=generator)
        labels = torch.randint(0, 1024, (rows,), device="cuda", generator=generator)
        got_logits, want_logits = logits.clone().requires_grad_(), logits.clone().requires_grad_()
        got, want = head(got_logits, labels, 0.7, True), eager(want_logits, labels, 0.7, True)
        (got["log_probs"].sum() + got["entropy"].sum()).backward()
        (want["log_probs"].sum() + want["entropy"].sum()).backward()
        torch.testing.assert_close(got["log_probs"], want["log_probs"], rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(got_logits.grad.float(), want_logits.grad.float(), rtol=2e-2, atol=2e-3)
    torch._dynamo.reset()


def test_lora_update_after_a_reference_first_forward_on_cuda(workspace):
    """An on-policy LoRA step computes the reference log-probs (adapters off) before any other forward of the actor:
    FSDP2 then sets up the bf16 compute / fp32 gradients of the adapters, and the update must still work."""
    from verl.models.config import FSDPConfig, LoraConfig, ModelConfig
    from verl.models.fsdp import build_device_mesh, create_fsdp_model
    from verl.models.lora import adapters_disabled
    from verl.utils.optim import OptimConfig, build_optimizer
    from verl.workers.actor.config import ActorConfig
    from verl.workers.actor.dp_actor import DataParallelPPOActor

    device = torch.device("cuda", torch.cuda.current_device())
    model_config = ModelConfig(model_path=workspace["text_model"], lora=LoraConfig(rank=4, alpha=8))
    model = create_fsdp_model(model_config, FSDPConfig(), build_device_mesh(1, -1, "cuda"), device)
    optimizer = build_optimizer(model, OptimConfig(lr=1e-2, weight_decay=0.0))
    config = ActorConfig(global_batch_size=8, micro_batch_size_per_device_for_update=4, ppo_epochs=1)
    actor = DataParallelPPOActor(config, model, optimizer, rollout_n=1)
    data = text_batch(0).select(batch_keys=["input_ids", "attention_mask", "position_ids", "responses"])
    data.batch["response_mask"] = text_batch(0).batch["response_mask"]
    data = data.to(device)
    with adapters_disabled(model):
        reference = actor.compute_log_probs(data, 1.0)
    data.batch["advantages"] = data.batch["response_mask"].float()  # raise every sampled token
    metrics = actor.update_policy(data, 1.0)  # on-policy: the old log-probs are the forward's own
    assert torch.isfinite(torch.tensor(metrics["actor/grad_norm"])) and metrics["actor/grad_norm"] > 0, metrics
    after = actor.compute_log_probs(data, 1.0)
    gain = ((after - reference) * data.batch["response_mask"]).sum()
    assert gain > 0, "one step towards the sampled tokens should raise their log-probs"


def test_actor_checkpoint_round_trip_on_cuda(workspace, tmp_path):
    """An actor updated on CUDA (bf16 compute, fp32 masters and Adam states), saved, and loaded into a fresh one: the
    same log-probs, and the same next update (the optimizer state came back too)."""
    from verl.models.config import FSDPConfig, ModelConfig
    from verl.models.fsdp import build_device_mesh, create_fsdp_model
    from verl.utils.checkpoint import FSDPCheckpointManager
    from verl.utils.optim import OptimConfig, build_optimizer
    from verl.workers.actor.config import ActorConfig
    from verl.workers.actor.dp_actor import DataParallelPPOActor

    device = torch.device("cuda", torch.cuda.current_device())

    def build():
        model = create_fsdp_model(
            ModelConfig(model_path=workspace["text_model"]), FSDPConfig(), build_device_mesh(1, -1, "cuda"), device
        )
        optimizer = build_optimizer(model, OptimConfig(lr=1e-3, weight_decay=0.0))
        config = ActorConfig(global_batch_size=8, micro_batch_size_per_device_for_update=4, ppo_epochs=1)
        return model, optimizer, DataParallelPPOActor(config, model, optimizer, rollout_n=1)

    data = text_batch(0).to(device)
    model, optimizer, actor = build()
    actor.update_policy(data, 1.0)
    FSDPCheckpointManager(model, optimizer).save(str(tmp_path / "ckpt"), extra_state={"step": 1})
    expected = actor.compute_log_probs(data, 1.0)
    next_metrics = actor.update_policy(data, 1.0)

    fresh_model, fresh_optimizer, fresh_actor = build()
    assert FSDPCheckpointManager(fresh_model, fresh_optimizer).load(str(tmp_path / "ckpt")) == {"step": 1}
    assert torch.equal(fresh_actor.compute_log_probs(data, 1.0), expected)
    fresh_metrics = fresh_actor.update_policy(data, 1.0)
    assert fresh_metrics["actor/pg_loss"] == next_metrics["actor/pg_loss"]  # the same weights, the same forward
    # CUDA's embedding backward adds with atomics, in any order: gradients agree to rounding, not bit for bit
    assert fresh_metrics["actor/grad_norm"] == pytest.approx(next_metrics["actor/grad_norm"], rel=1e-4)
    after, fresh_after = actor.compute_log_probs(data, 1.0), fresh_actor.compute_log_probs(data, 1.0)
    torch.testing.assert_close(fresh_after, after, rtol=0, atol=1e-3)
    assert not torch.allclose(after, expected, atol=1e-3)  # the second update moved the policy


def test_actor_rollout_ref_step_on_cuda(workspace, tmp_path):
    """Wake, sync (checked against the actor), generate, sleep, log-probs, update, checkpoint, with offloading."""
    pytest.importorskip("vllm", reason="needs vLLM's GPU build (pip install vllm)")
    from verl.workers.fsdp_workers import FSDPWorker

    config = worker_config(
        workspace,
        "worker.actor.offload.offload_params=true",
        "worker.actor.offload.offload_optimizer=true",
        "worker.ref.offload.offload_params=true",
        "worker.rollout.verify_weight_sync=true",
        "algorithm.use_kl_loss=true",
    )
    worker = FSDPWorker(config, "actor_rollout_ref", device="cuda")
    worker.init_model()
    metrics = worker.prepare_rollout_engine()
    assert metrics["rollout/weight_sync_mean_gap"] < 0.1  # the engine holds the actor's weights (bf16 engine)
    rows = text_batch(1, rows=4).batch  # its first 32 columns are the left-padded prompts
    prompts = DataProto.from_dict(
        tensors={key: rows[key][:, :32] for key in ("input_ids", "attention_mask", "position_ids")}
    )
    rollout = worker.generate_sequences(prompts)
    released = worker.release_rollout_engine()
    assert released.get("perf/vllm_freed_gb", 0) > 0, released
    assert rollout.batch["responses"].device.type == "cpu" and len(rollout) == 8
    old = worker.compute_log_probs(rollout).batch["old_log_probs"]
    ref = worker.compute_ref_log_probs(rollout).batch["ref_log_probs"]
    assert (old - ref).abs().max() < 0.1  # nothing trained yet: actor (bf16 compute) and ref (bf16) agree
    rollout = rollout.union(DataProto.from_dict(tensors={"old_log_probs": old, "ref_log_probs": ref}))
    rollout.batch["advantages"] = torch.randn(old.shape) * rollout.batch["response_mask"]
    update = worker.update_actor(rollout, UpdateRequest(1)).meta_info["metrics"]
    assert update["actor/grad_norm"] > 0 and torch.isfinite(torch.tensor(update["actor/pg_loss"]))
    optimizer_devices = {
        value.device.type
        for state in worker.actor_optimizer.state.values()
        for value in state.values()
        if isinstance(value, torch.Tensor) and value.dim() > 0
    }
    assert optimizer_devices == {"cpu"}  # Adam states offloaded after the update
    worker.save_checkpoint(str(tmp_path / "global_step_1"))
    worker.load_checkpoint(str(tmp_path / "global_step_1"))
    after = worker.compute_log_probs(rollout).batch["old_log_probs"]
    assert (after - old).abs().max() > 0  # the update changed the policy
    # algorithm.ref_sync_steps: the bf16 reference takes the fp32 actor's weights, both offloaded before and after
    worker.sync_reference(1.0)
    assert all(param.device.type == "cpu" for param in worker.ref_module.parameters())
    synced = worker.compute_ref_log_probs(rollout).batch["ref_log_probs"]
    assert (synced - after).abs().max() < 0.1 and (synced - ref).abs().max() > 0
    worker.save_checkpoint(str(tmp_path / "step_2" / "actor"), reference_path=str(tmp_path / "step_2" / "ref"))
    from verl.utils.checkpoint import has_checkpoint

    assert has_checkpoint(str(tmp_path / "step_2" / "ref"))


def test_lora_actor_rollout_ref_on_cuda(workspace, tmp_path):
    """LoRA on CUDA: bf16 frozen base, fp32 adapters, merged weights in the engine, reference = adapters off."""
    pytest.importorskip("vllm", reason="needs vLLM's GPU build (pip install vllm)")
    from verl.models.lora import is_adapter_param
    from verl.workers.fsdp_workers import FSDPWorker

    config = worker_config(
        workspace,
        "worker.actor.model.lora.rank=8",
        "worker.actor.optim.lr=1e-2",
        "worker.rollout.verify_weight_sync=true",
        "algorithm.use_kl_loss=true",
    )
    worker = FSDPWorker(config, "actor_rollout_ref", device="cuda")
    worker.init_model()
    dtypes = {is_adapter_param(name): param.dtype for name, param in worker.actor_module.named_parameters()}
    assert dtypes == {True: torch.float32, False: torch.bfloat16}, dtypes
    assert worker.ref_module is worker.actor_module  # no second copy of the weights
    rows = text_batch(1, rows=4).batch
    prompts = DataProto.from_dict(
        tensors={key: rows[key][:, :32] for key in ("input_ids", "attention_mask", "position_ids")}
    )
    synced = worker.prepare_rollout_engine()
    assert synced["rollout/weight_sync_mean_gap"] < 0.1, synced
    rollout = worker.generate_sequences(prompts)
    worker.release_rollout_engine()
    old = worker.compute_log_probs(rollout).batch["old_log_probs"]
    ref = worker.compute_ref_log_probs(rollout).batch["ref_log_probs"]
    assert torch.equal(old, ref), (old - ref).abs().max()  # zero-initialised lora_B: the adapted model is the base
    rollout = rollout.union(DataProto.from_dict(tensors={"old_log_probs": old, "ref_log_probs": ref}))
    rollout.batch["advantages"] = torch.randn(old.shape) * rollout.batch["response_mask"]
    update = worker.update_actor(rollout, UpdateRequest(1)).meta_info["metrics"]
    assert update["actor/grad_norm"] > 0, update
    after = worker.compute_log_probs(rollout).batch["old_log_probs"]
    assert (after - old).abs().max() > 0
    ref_after = worker.compute_ref_log_probs(rollout).batch["ref_log_probs"]
    assert torch.equal(ref_after, ref), (ref_after - ref).abs().max()  # the base is untouched
    synced = worker.prepare_rollout_engine()
    assert synced["rollout/weight_sync_mean_gap"] < 0.1, synced  # merged weights in the engine
    worker.release_rollout_engine()
    worker.save_checkpoint(str(tmp_path / "global_step_1"))
    worker.load_checkpoint(str(tmp_path / "global_step_1"))
    reloaded = worker.compute_log_probs(rollout).batch["old_log_probs"]
    assert torch.equal(reloaded, after), (reloaded - after).abs().max()


def test_direct_weight_copy_equals_vllms_loader_on_cuda(workspace):
    """rollout.weight_sync=direct on CUDA: the first sync copies into the engine's own parameters and is checked
    against the actor without verify_weight_sync; every engine parameter then equals, bit for bit, what vLLM's loader
    writes from the same actor."""
    pytest.importorskip("vllm", reason="needs vLLM's GPU build (pip install vllm)")
    from verl.workers.fsdp_workers import FSDPWorker
    from verl.workers.rollout import vllm_compat
    from verl.workers.weight_sync import sync
    from verl.workers.weight_sync.gather import iter_full_weights
    from verl.workers.weight_sync.opt_in import EngineCopy
    from verl.workers.weight_sync.sinks import EngineLoader

    config = worker_config(workspace, "worker.rollout.weight_sync=direct")
    worker = FSDPWorker(config, "actor_rollout", device="cuda")
    worker.init_model()
    manager = worker.sharding_manager
    assert isinstance(manager.sink, EngineCopy) and not manager.verify
    synced = worker.prepare_rollout_engine()
    assert synced["rollout/weight_sync_mean_gap"] < 0.1, synced  # the check of the first direct copy
    llm = worker.rollout.inference_engine
    direct = {name: param.detach().clone() for name, param in vllm_compat.engine_parameters(llm).items()}
    sync(EngineLoader(llm), iter_full_weights, manager.module, worker.rollout.torch_dtype, manager.names)
    loaded = vllm_compat.engine_parameters(llm)
    assert direct.keys() == loaded.keys()
    for name, tensor in direct.items():
        assert torch.equal(tensor, loaded[name]), name
    worker.release_rollout_engine()
    second = worker.prepare_rollout_engine()
    assert "rollout/weight_sync_mean_gap" not in second  # checked once per run
    worker.release_rollout_engine()


def test_lora_adapter_sync_on_cuda(workspace):
    """rollout.lora_sync=adapters on CUDA: the bf16 base goes to the engine once and survives its sleep (level 1),
    the adapters follow every update; the weight check (engine probe with the LoRA request) passes before and after
    an update, and the second sync sends the adapters alone."""
    pytest.importorskip("vllm", reason="needs vLLM's GPU build (pip install vllm)")
    from verl.workers.fsdp_workers import FSDPWorker

    config = worker_config(
        workspace,
        "worker.actor.model.lora.rank=8",
        "worker.actor.optim.lr=1e-2",
        "worker.rollout.verify_weight_sync=true",
        "worker.rollout.lora_sync=adapters",
        "algorithm.disable_kl=true",
    )
    worker = FSDPWorker(config, "actor_rollout", device="cuda")
    worker.init_model()
    assert worker.rollout.sleep_level == 1
    rows = text_batch(2, rows=4).batch
    prompts = DataProto.from_dict(
        tensors={key: rows[key][:, :32] for key in ("input_ids", "attention_mask", "position_ids")}
    )
    first = worker.prepare_rollout_engine()
    assert first["rollout/weight_sync_mean_gap"] < 0.1, first
    rollout = worker.generate_sequences(prompts)
    worker.release_rollout_engine()
    old = worker.compute_log_probs(rollout).batch["old_log_probs"]
    rollout = rollout.union(DataProto.from_dict(tensors={"old_log_probs": old}))
    rollout.batch["advantages"] = torch.randn(old.shape) * rollout.batch["response_mask"]
    worker.update_actor(rollout, UpdateRequest(1))
    assert (worker.compute_log_probs(rollout).batch["old_log_probs"] - old).abs().max() > 0  # the adapters moved
    second = worker.prepare_rollout_engine()
    assert second["rollout/weight_sync_mean_gap"] < 0.1, second  # base kept through sleep, new adapter loaded
    assert second["perf/sync_weights_gb"] < first["perf/sync_weights_gb"] / 5, (first, second)
    worker.generate_sequences(prompts)
    worker.release_rollout_engine()


@pytest.mark.parametrize("kind", vl_kinds("grpo"))
def test_grpo_step_on_the_tiny_vl_model(workspace, kind):
    """One end-to-end GRPO step through Ray on one GPU: images in prompts, vLLM sleep/wake, FSDP update (every family
    of tests/families.py with a GRPO run on the CPU; pick some with -k, each takes minutes)."""
    pytest.importorskip("vllm", reason="needs vLLM's GPU build (pip install vllm)")
    ray = pytest.importorskip("ray", reason="needs Ray (pip install ray)")
    import importlib.util

    from verl.trainer.config import load_config
    from verl.trainer.runner import run_ppo

    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    spec = importlib.util.spec_from_file_location(
        "make_data", os.path.join(repo, "examples/cpu_quickstart/make_data.py")
    )
    make_data = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_data)
    root = workspace["root"]
    data_dir = str(root / f"vl_data_{kind}")
    make_data.write_split(data_dir, "train", 8, seed=0)
    pixels = FAMILIES[kind].pixels  # a few image tokens
    vl_model = (
        workspace["vl_model"]
        if kind == "qwen2_5_vl"
        else get_or_build_tiny_model(kind, str(root / "models"), min_pixels=pixels, max_pixels=pixels)
    )
    ray.init(address="local", num_gpus=1, include_dashboard=False, log_to_driver=False)
    try:
        config = load_config(
            [
                f"data.train_files={data_dir}/train.jsonl",
                "data.prompt_key=problem",
                f"data.image_dir={data_dir}/images",
                f"data.min_pixels={pixels}",
                f"data.max_pixels={pixels}",
                f"data.max_prompt_length={max(128, FAMILIES[kind].max_prompt_length)}",
                "data.max_response_length=16",
                "data.rollout_batch_size=4",
                "worker.actor.global_batch_size=4",
                f"worker.actor.model.model_path={vl_model}",
                "worker.actor.offload.offload_params=true",
                "worker.actor.offload.offload_optimizer=true",
                "worker.rollout.n=2",
                "worker.rollout.limit_images=1",
                "worker.rollout.gpu_memory_utilization=0.3",
                f"worker.reward.reward_function={repo}/examples/reward_function/count_shapes.py:compute_score",
                "algorithm.use_kl_loss=true",
                "trainer.device=cuda",
                "trainer.n_gpus_per_node=1",
                "worker.rollout.tensor_parallel_size=1",
                "trainer.max_steps=1",
                "trainer.val_before_train=false",
                "trainer.logger=[file]",
                f"trainer.save_checkpoint_path={root / 'grpo_vl'}",
            ]
        )
        run_ppo(config)
    finally:
        ray.shutdown()
    with open(root / "grpo_vl" / "experiment_log.jsonl") as f:
        steps = [row for row in map(json.loads, f) if "actor/pg_loss" in row]
    assert [row["step"] for row in steps] == [1]
    assert torch.isfinite(torch.tensor(steps[0]["actor/grad_norm"]))
    # the step allocated CUDA memory, and what torch reserved covers it
    assert 0 < steps[0]["perf/max_memory_allocated_gb"] <= steps[0]["perf/max_memory_reserved_gb"]


def _two_rank_rpcs(rank: int, world_size: int, port: int, text_model: str, root: str) -> None:
    init_rank(rank, world_size, port)
    from verl.workers.fsdp_workers import FSDPWorker

    ws = {"root": pathlib.Path(root), "text_model": text_model}
    config = worker_config(ws, "trainer.n_gpus_per_node=2")
    data = text_batch(0).chunk(world_size)[rank]
    critic = FSDPWorker(config, "critic", device="cuda")
    critic.init_model()
    metrics = critic.update_critic(data, UpdateRequest(1)).meta_info["metrics"]
    assert all(torch.isfinite(torch.tensor(value)) for value in metrics.values())
    ref = FSDPWorker(config, "ref", device="cuda")
    ref.init_model()
    assert ref.compute_ref_log_probs(data).batch["ref_log_probs"].device.type == "cpu"


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_two_rank_rpcs_with_nccl(workspace):
    mp.spawn(
        _two_rank_rpcs,
        args=(2, free_port(), workspace["text_model"], str(workspace["root"])),
        nprocs=2,
        join=True,
    )


def _two_rank_ulysses(rank: int, world_size: int, port: int, text_model: str, root: str) -> None:
    """Ulysses over NCCL: a group of 2 GPUs shares each row; its log-probs equal the unsplit worker's (bf16 noise)."""
    init_rank(rank, world_size, port)
    from verl.workers.fsdp_workers import FSDPWorker

    ws = {"root": pathlib.Path(root), "text_model": text_model}
    data = text_batch(0).chunk(world_size)[rank]
    split = FSDPWorker(worker_config(ws, "trainer.n_gpus_per_node=2", "worker.actor.ulysses_size=2"), "ref", "cuda")
    split.init_model()
    plain = FSDPWorker(worker_config(ws, "trainer.n_gpus_per_node=2"), "ref", "cuda")
    plain.init_model()
    got = split.compute_ref_log_probs(data).batch["ref_log_probs"]
    expected = plain.compute_ref_log_probs(data).batch["ref_log_probs"]
    assert got.shape == expected.shape and (got - expected).abs().max() < 0.05


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_two_rank_ulysses_with_nccl(workspace):
    mp.spawn(
        _two_rank_ulysses,
        args=(2, free_port(), workspace["text_model"], str(workspace["root"])),
        nprocs=2,
        join=True,
    )


def test_colocated_async_rollout_across_sleep_and_wake_on_cuda(workspace):
    """worker.rollout.mode=colocated on CUDA: samples stopped at a step's end survive the engine's sleep (KV cache
    freed) and continue after the next wake and sync; every group comes back once, within the staleness bound."""
    pytest.importorskip("vllm", reason="needs vLLM's GPU build (pip install vllm)")
    from verl.workers.fsdp_workers import FSDPWorker
    from verl.workers.rollout.request_loop import RolloutRequest

    config = worker_config(workspace, "worker.rollout.mode=colocated", "worker.rollout.max_staleness=1")
    worker = FSDPWorker(config, "actor_rollout_ref", device="cuda")
    worker.init_model()
    rows = text_batch(2, rows=4).batch
    tensors = {key: rows[key][:, :32] for key in ("input_ids", "attention_mask", "position_ids")}
    prompts = DataProto.from_dict(tensors=tensors, non_tensors={"uid": np.array([f"g{i}" for i in range(4)])})
    eos = {"logit_bias": {int(worker.tokenizer.eos_token_id): 4.0}}  # the random model stops early, at random
    request = RolloutRequest(quota=2, version=0, max_staleness=1, sampling=eos)
    worker.prepare_rollout_engine()
    first = worker.generate_sequences_async(prompts, request)["batch"]
    released = worker.release_rollout_engine()
    assert released.get("perf/vllm_freed_gb", 0) > 0, released
    assert len(first) == 4 and worker.rollout.request_loop.in_flight == 2
    rest = DataProto.from_dict(
        tensors={key: value[:0] for key, value in tensors.items()}, non_tensors={"uid": np.array([], dtype=object)}
    )
    worker.prepare_rollout_engine()
    second = worker.generate_sequences_async(rest, replace(request, version=1))["batch"]
    worker.release_rollout_engine()
    uids = list(first.non_tensor_batch["uid"]) + list(second.non_tensor_batch["uid"])
    assert sorted(uids) == sorted([f"g{i}" for i in range(4)] * 2)
    for batch, version in ((first, 0), (second, 1)):
        mask = batch.batch["response_mask"].bool()
        versions = batch.batch["rollout_versions"]
        assert bool((versions[mask] >= 0).all()) and bool((versions[mask] <= version).all())
        assert bool(torch.isfinite(batch.batch["rollout_log_probs"][mask]).all())
