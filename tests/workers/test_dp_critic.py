# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The FSDP2 critic on 2 gloo ranks: values equal a plain forward of the value model, and PPO with GAE trains it.

One spawned run covers the text and the VL critic (process start-up dominates the cost).
"""

import dataclasses
import warnings

import pytest
import torch
import torch.distributed as dist

from tests.workers.fsdp_testing import init_rank, make_text_batch, make_vl_batch, reference_outputs, spawn
from verl.algorithms.core_algos import compute_gae_advantage_return
from verl.models.tiny_models import get_or_build_tiny_model


pytestmark = pytest.mark.slow

WORLD_SIZE = 2
MODES = {"padded": (False, False), "padding_free": (True, False), "dynamic": (True, True)}


def critic_config(padding_free: bool, dynamic: bool, **overrides):
    from verl.workers.critic.config import CriticConfig

    base = CriticConfig(
        global_batch_size=8,
        micro_batch_size_per_device_for_update=2,
        micro_batch_size_per_device_for_experience=2,
        padding_free=padding_free,
        dynamic_batching=dynamic,
        cliprange_value=0.5,
    )
    return dataclasses.replace(base, **overrides)


def check_values(model, local, ref_model) -> torch.Tensor:
    """Every batching mode gives the plain value model's outputs at the response-predicting positions."""
    from verl.workers.critic.dp_critic import DataParallelPPOCritic

    with torch.no_grad():
        expected = reference_outputs(ref_model, local, temperature=1.0)["values"]
    for name, (padding_free, dynamic) in MODES.items():
        critic = DataParallelPPOCritic(critic_config(padding_free, dynamic), model)
        values = critic.compute_values(local)
        assert values.shape == local.batch["responses"].shape
        diff = (values - expected).abs().max().item()
        assert diff <= 1e-5, f"{name}: values differ from the plain forward by {diff}"
    return values


def _run_critic(rank: int, world_size: int, port: int, text_dir: str, vl_dir: str) -> None:
    init_rank(rank, world_size, port)
    from verl.data.tokenizer import get_processor
    from verl.models.config import FSDPConfig, ModelConfig
    from verl.models.fsdp import build_device_mesh, create_fsdp_model
    from verl.models.loading import build_model
    from verl.utils.optim import OptimConfig, build_optimizer
    from verl.workers.actor.dp_actor import process_multi_modal_inputs
    from verl.workers.critic.dp_critic import DataParallelPPOCritic

    cpu = torch.device("cpu")
    mesh = build_device_mesh(world_size, -1, "cpu")

    # Text critic: values, then PPO with GAE on a fixed batch; HSDP (shard groups of 1) so replicas are comparable.
    model_config = ModelConfig(model_path=text_dir)
    model = create_fsdp_model(model_config, FSDPConfig(), mesh, cpu, value_head=True)
    ref_model = build_model(ModelConfig(model_path=text_dir, enable_gradient_checkpointing=False), value_head=True)
    local = make_text_batch(seed=3, batch_size=8).chunk(world_size)[rank]
    values = check_values(model, local, ref_model)

    hsdp_mesh = build_device_mesh(world_size, 1, "cpu")
    hsdp = create_fsdp_model(model_config, FSDPConfig(fsdp_size=1), hsdp_mesh, cpu, value_head=True)
    critic = DataParallelPPOCritic(critic_config(True, True), hsdp, build_optimizer(hsdp, OptimConfig(lr=1e-4)))
    mask = local.batch["response_mask"]
    rewards = torch.zeros_like(values)
    last = mask.sum(dim=-1) - 1
    rewards[torch.arange(len(local)), last] = torch.linspace(-1.0, 1.0, len(local)) + rank  # outcome reward
    advantages, returns = compute_gae_advantage_return(rewards, values, mask, gamma=1.0, lam=0.95)
    assert torch.isfinite(advantages).all()
    local.batch["values"], local.batch["returns"] = values, returns
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        losses = [critic.update_critic(local)["critic/vf_loss"] for _ in range(4)]
    views = [str(w.message) for w in caught if "returned a view tensor" in str(w.message)]
    assert not views, views  # FSDP2's warning about the value head's output, once a view
    assert losses[-1] < 0.8 * losses[0], losses
    metrics = critic.update_critic(local)
    assert 0.0 <= metrics["critic/vf_clipfrac"] <= 1.0 and metrics["critic/grad_norm"] > 0
    flat = torch.cat([param.to_local().detach().reshape(-1) for param in hsdp.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(world_size)]
    dist.all_gather(gathered, flat)
    assert torch.equal(gathered[0], gathered[1]), "critic replicas diverged"

    # VL critic: the same value head on a vision-language model, fed with images.
    processor = get_processor(vl_dir)
    vl_model = create_fsdp_model(ModelConfig(model_path=vl_dir), FSDPConfig(), mesh, cpu, value_head=True)
    vl_ref = build_model(ModelConfig(model_path=vl_dir, enable_gradient_checkpointing=False), value_head=True)
    vl_full = make_vl_batch(vl_ref, processor, seed=1, batch_size=4)
    process_multi_modal_inputs(vl_full, processor)
    check_values(vl_model, vl_full.chunk(world_size)[rank], vl_ref)
    dist.destroy_process_group()


def test_critic_values_match_hf_and_gae_updates_train(tmp_path_factory) -> None:
    root = str(tmp_path_factory.mktemp("tiny_models"))
    text_dir = get_or_build_tiny_model("qwen2", root)
    vl_dir = get_or_build_tiny_model("qwen2_5_vl", root)
    spawn(_run_critic, WORLD_SIZE, text_dir, vl_dir)
