# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""LoRA on the FSDP2 actor, 2 gloo ranks, the tiny text model (one spawned run checks several things, since process
start-up dominates): only adapters train and get optimizer state; the base weights stay bit for bit; a few PPO epochs
on a fixed batch lower the loss; with adapters off the model is the initial one (the reference policy); the weights
streamed to the engine are the merged ones; an adapter-only checkpoint restores the trained model in a fresh one.
"""

import pytest
import torch
import torch.distributed as dist

from tests.workers.fsdp_testing import init_rank, make_text_batch, spawn
from verl.models.tiny_models import get_or_build_tiny_model


WORLD_SIZE = 2


def _run(rank: int, world_size: int, port: int, model_dir: str, checkpoint_dir: str) -> None:
    init_rank(rank, world_size, port)
    from torch.distributed.device_mesh import init_device_mesh

    from verl.models.config import FSDPConfig, LoraConfig, ModelConfig
    from verl.models.fsdp import create_fsdp_model, get_full_state_dict
    from verl.models.lora import adapters_disabled, is_adapter_param, merged_state_dict
    from verl.utils.checkpoint import FSDPCheckpointManager
    from verl.utils.optim import OptimConfig, build_optimizer
    from verl.workers.actor.config import ActorConfig
    from verl.workers.actor.dp_actor import DataParallelPPOActor
    from verl.workers.weight_sync.gather import checkpoint_names, iter_full_weights

    def build():
        model_config = ModelConfig(
            model_path=model_dir, enable_gradient_checkpointing=True, lora=LoraConfig(rank=4, alpha=8)
        )
        mesh = init_device_mesh("cpu", (world_size,))
        model = create_fsdp_model(model_config, FSDPConfig(), mesh, torch.device("cpu"))
        optimizer = build_optimizer(model, OptimConfig(lr=2e-2, weight_decay=0.0))
        config = ActorConfig(global_batch_size=8, micro_batch_size_per_device_for_update=2, ppo_epochs=1)
        return model, optimizer, DataParallelPPOActor(config, model, optimizer, rollout_n=1)

    model, optimizer, actor = build()
    trainable = {name for name, param in model.named_parameters() if param.requires_grad}
    assert trainable and all(is_adapter_param(name) for name in trainable), sorted(trainable)[:4]
    assert len(optimizer.param_groups[0]["params"]) == len(trainable)  # no state for the frozen base
    initial = get_full_state_dict(model, rank0_only=False)

    data = make_text_batch(seed=rank, batch_size=4)
    before = actor.compute_log_probs(data, 1.0)
    data.batch["old_log_probs"] = before
    data.batch["advantages"] = torch.where(data.batch["response_mask"].bool(), 1.0, 0.0)  # raise every sampled token
    losses = [actor.update_policy(data, 1.0)["actor/pg_loss"] for _ in range(4)]
    assert losses[-1] < losses[0] - 1e-3, losses
    after = actor.compute_log_probs(data, 1.0)
    with adapters_disabled(model):
        base = actor.compute_log_probs(data, 1.0)
    assert torch.equal(base, before), "adapters off must give the initial (base) model"
    assert not torch.allclose(after, before, atol=1e-4), "the adapters changed nothing"
    assert all(p.requires_grad for n, p in model.named_parameters() if n in trainable)  # switched back on

    trained = get_full_state_dict(model, rank0_only=False)
    for name, tensor in trained.items():
        if is_adapter_param(name):
            continue
        assert torch.equal(tensor, initial[name]), f"base weight {name} moved"

    # the engine's weights: merged under the base model's names, equal to W + alpha / rank x B @ A
    stats = {"num_params": 0, "bytes": 0, "max_param_bytes": 0}
    streamed = dict(iter_full_weights(model, torch.float32, checkpoint_names(model), stats))
    expected = merged_state_dict(trained, scaling=8 / 4)
    assert set(streamed) == set(expected) | {"lm_head.weight"}
    untrained = merged_state_dict(initial, scaling=8 / 4)  # lora_B starts at zero: the base model itself
    changed = 0
    for name, tensor in expected.items():
        torch.testing.assert_close(streamed[name], tensor, rtol=0, atol=1e-6)
        changed += not torch.equal(tensor, untrained[name])
    assert changed > 0

    manager = FSDPCheckpointManager(model, optimizer, adapter_only=True)
    manager.save(checkpoint_dir, extra_state={"step": 4})
    if rank == 0:
        import torch.distributed.checkpoint as dcp

        saved = dcp.FileSystemReader(checkpoint_dir).read_metadata().state_dict_metadata
        model_keys = [key for key in saved if key.startswith("model.")]
        assert model_keys and all("lora_" in key for key in model_keys), model_keys[:4]
    dist.barrier()
    fresh_model, fresh_optimizer, fresh_actor = build()
    assert FSDPCheckpointManager(fresh_model, fresh_optimizer, adapter_only=True).load(checkpoint_dir) == {"step": 4}
    torch.testing.assert_close(fresh_actor.compute_log_probs(data, 1.0), after, rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="LoRA adapters only"):
        FSDPCheckpointManager(fresh_model, fresh_optimizer).load(checkpoint_dir)
    dist.destroy_process_group()


@pytest.mark.slow
def test_lora_actor_on_two_ranks(tmp_path):
    model_dir = get_or_build_tiny_model("qwen2", str(tmp_path / "models"))
    spawn(_run, WORLD_SIZE, model_dir, str(tmp_path / "ckpt"))


def _reference_first(rank: int, world_size: int, port: int, model_dir: str) -> None:
    """The GPU precision recipe (frozen base stored in bf16, fp32 adapters, bf16 compute, fp32 gradient reduction),
    whose first forward is the reference's, with the adapters off: the update after it must still work."""
    init_rank(rank, world_size, port)
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    from verl.models.config import LoraConfig, ModelConfig
    from verl.models.loading import build_model
    from verl.models.lora import adapters_disabled, apply_lora

    model = build_model(ModelConfig(model_path=model_dir))
    apply_lora(model, LoraConfig(rank=4, alpha=8), vision_language=False, base_model_path=model_dir)
    for param in model.parameters():
        if not param.requires_grad:
            param.data = param.data.to(torch.bfloat16)
    trainable = {name for name, param in model.named_parameters() if param.requires_grad}
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model.model.layers:
        fully_shard(layer, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    data = make_text_batch(seed=rank, batch_size=2)
    inputs = {"input_ids": data.batch["input_ids"], "attention_mask": data.batch["attention_mask"]}
    with torch.no_grad(), adapters_disabled(model):  # the reference log-probs, before any actor forward
        model(**inputs, use_cache=False)
    assert {name for name, param in model.named_parameters() if param.requires_grad} == trainable
    model(**inputs, use_cache=False).logits.float().mean().backward()
    grads = {name: param.grad for name, param in model.named_parameters() if param.grad is not None}
    assert set(grads) == trainable and all(grad.dtype == torch.float32 for grad in grads.values())
    dist.destroy_process_group()


def test_an_update_after_a_reference_first_forward_in_bf16(tmp_path):
    spawn(_reference_first, 1, get_or_build_tiny_model("qwen2", str(tmp_path / "models")))
