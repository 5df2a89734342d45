# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Ulysses sequence parallelism on 2 gloo ranks (one group of 2): the FSDP2 actor's log-probs, entropy and
gradients with every packed row split across the ranks equal the plain single-process forward and the gradient of
the whole batch's loss, for rows of odd and even token counts; the rows of a group are joined and handed back."""

import numpy as np
import pytest
import torch
import torch.distributed as dist
from families import FAMILIES, vl_kinds
from test_dp_actor import TEMPERATURE, actor_config, recording_optimizer, reference_grads

from tests.workers.fsdp_testing import grad_atol, init_rank, make_text_batch, reference_outputs, spawn
from verl.models.tiny_models import get_or_build_tiny_model


WORLD_SIZE = 2
MODES = {"dynamic": (True, True), "rows": (True, False)}  # packed micro-batches by token budget / by row count


def _run(rank: int, world_size: int, port: int, model_dir: str) -> None:
    init_rank(rank, world_size, port)
    from verl.models.config import FSDPConfig, ModelConfig
    from verl.models.fsdp import build_device_mesh, create_fsdp_model
    from verl.models.loading import build_model
    from verl.models.ulysses import gather_rows, new_sequence_parallel_group, own_rows
    from verl.workers.actor.dp_actor import DataParallelPPOActor

    group = new_sequence_parallel_group(world_size)
    model = create_fsdp_model(
        ModelConfig(model_path=model_dir), FSDPConfig(), build_device_mesh(world_size, -1, "cpu"), torch.device("cpu")
    )
    ref_model = build_model(ModelConfig(model_path=model_dir, enable_gradient_checkpointing=False))
    full = make_text_batch(seed=0, batch_size=8)
    lengths = full.batch["attention_mask"].sum(-1).tolist()
    assert any(n % 2 for n in lengths) and any(n % 2 == 0 for n in lengths)  # single rows need padding, or not

    # the trainer hands each rank half of the rows; the group joins them and each rank answers for its own
    joined = gather_rows(full.chunk(world_size)[rank], group)
    assert torch.equal(joined.batch["input_ids"], full.batch["input_ids"])
    assert torch.equal(own_rows(joined, group).batch["input_ids"], full.chunk(world_size)[rank].batch["input_ids"])

    reference = reference_outputs(ref_model, full, TEMPERATURE)
    for loss_avg_mode in ("token-mean", "seq-mean-token-mean"):
        expected = reference_grads(ref_model, full, actor_config(False, False, loss_avg_mode=loss_avg_mode))
        for name, (padding_free, dynamic) in MODES.items():
            config = actor_config(padding_free, dynamic, loss_avg_mode=loss_avg_mode, ulysses_size=world_size)
            config.micro_batch_size_per_device_for_experience = 1 if name == "rows" else 2
            optimizer = recording_optimizer(model)
            actor = DataParallelPPOActor(config, model, optimizer, rollout_n=1, sp_group=group)
            log_probs, entropy = actor.compute_log_probs(full, TEMPERATURE, calculate_entropy=True)
            assert (log_probs - reference["log_probs"]).abs().max().item() <= 1e-5, name
            assert (entropy - reference["entropy"]).abs().max().item() <= 1e-4, name
            metrics = actor.update_policy(full, TEMPERATURE)
            assert np.isfinite(metrics["actor/grad_norm"]) and metrics["actor/kl_loss"] > 0
            got = {key: value for key, value in optimizer.grads.items() if value is not None}
            assert set(got) == set(expected), set(got) ^ set(expected)
            for key, grad in got.items():
                atol = 1e-5 * expected[key].abs().max().item() + 1e-9
                label = f"{name}/{loss_avg_mode} {key}"
                torch.testing.assert_close(
                    grad, expected[key], rtol=1e-4, atol=atol, msg=lambda m, label=label: f"{label}: {m}"
                )
    with pytest.raises(ValueError, match="padding_free=true"):
        DataParallelPPOActor(actor_config(False, False, ulysses_size=world_size), model, sp_group=group)
    _check_critic(model_dir, group, full)
    dist.destroy_process_group()


def _check_critic(model_dir: str, group, full) -> None:
    """The critic split across the group: values and gradients equal a plain single-rank critic's."""
    from verl.models.config import FSDPConfig, ModelConfig
    from verl.models.fsdp import build_device_mesh, create_fsdp_model
    from verl.models.loading import build_model
    from verl.workers.critic.config import CriticConfig
    from verl.workers.critic.dp_critic import DataParallelPPOCritic

    world_size = dist.get_world_size()
    alone = [dist.new_group([rank]) for rank in range(world_size)][dist.get_rank()]  # a data-parallel group of one
    config = CriticConfig(global_batch_size=8, micro_batch_size_per_device_for_update=2, padding_free=True)
    plain = build_model(ModelConfig(model_path=model_dir, enable_gradient_checkpointing=False), value_head=True)
    plain_optimizer = recording_optimizer(plain)
    reference = DataParallelPPOCritic(config, plain, plain_optimizer, group=alone)
    returns = torch.randn(full.batch["response_mask"].shape, generator=torch.Generator().manual_seed(7))
    full.batch["returns"] = returns * full.batch["response_mask"]  # the same on every rank of the group
    expected_values = reference.compute_values(full)
    full.batch["values"] = expected_values + 0.1 * full.batch["response_mask"]
    expected_metrics = reference.update_critic(full)

    model_config = ModelConfig(model_path=model_dir)
    mesh = build_device_mesh(world_size, -1, "cpu")
    sharded = create_fsdp_model(model_config, FSDPConfig(), mesh, torch.device("cpu"), value_head=True)
    optimizer = recording_optimizer(sharded)
    config.ulysses_size = world_size
    critic = DataParallelPPOCritic(config, sharded, optimizer, sp_group=group)
    torch.testing.assert_close(critic.compute_values(full), expected_values, rtol=0, atol=1e-5)
    metrics = critic.update_critic(full)
    assert metrics["critic/vf_loss"] == pytest.approx(expected_metrics["critic/vf_loss"], rel=1e-4), (
        metrics,
        expected_metrics,
    )
    assert set(optimizer.grads) == set(plain_optimizer.grads)
    for name, expected in plain_optimizer.grads.items():
        atol = 1e-5 * expected.abs().max().item() + 1e-9
        torch.testing.assert_close(optimizer.grads[name], expected, rtol=1e-4, atol=atol, msg=name)


def _run_vl(rank: int, world_size: int, port: int, model_dir: str, kind: str) -> None:
    """A tiny VLM: every rank embeds the whole row with its images, the language model runs split."""
    init_rank(rank, world_size, port)
    from tests.workers.fsdp_testing import make_vl_batch
    from verl.data.tokenizer import get_processor
    from verl.models.config import FSDPConfig, ModelConfig
    from verl.models.fsdp import build_device_mesh, create_fsdp_model
    from verl.models.loading import build_model
    from verl.models.ulysses import new_sequence_parallel_group
    from verl.workers.actor.dp_actor import DataParallelPPOActor, process_multi_modal_inputs

    group = new_sequence_parallel_group(world_size)
    processor = get_processor(model_dir)
    mesh = build_device_mesh(world_size, -1, "cpu")
    model = create_fsdp_model(ModelConfig(model_path=model_dir), FSDPConfig(), mesh, torch.device("cpu"))
    ref_model = build_model(ModelConfig(model_path=model_dir, enable_gradient_checkpointing=False))
    placeholder = FAMILIES[kind].image_placeholder
    full = make_vl_batch(
        ref_model, processor, seed=0, batch_size=4, text_only_rows=(3,), image_placeholder=placeholder
    )
    process_multi_modal_inputs(full, processor)
    with torch.no_grad():
        reference = reference_outputs(ref_model, full, TEMPERATURE)
    expected = reference_grads(ref_model, full, actor_config(False, False, loss_avg_mode="token-mean"))
    config = actor_config(True, True, ulysses_size=world_size, loss_avg_mode="token-mean")
    optimizer = recording_optimizer(model)
    actor = DataParallelPPOActor(config, model, optimizer, rollout_n=1, sp_group=group)
    log_probs = actor.compute_log_probs(full, TEMPERATURE)
    gap = (log_probs - reference["log_probs"]).abs().max().item()
    assert gap <= 2e-5, gap  # float32 sums in another order over split heads: up to 1.2e-5 measured (Mistral 3)
    actor.update_policy(full, TEMPERATURE)
    got = {key: value for key, value in optimizer.grads.items() if value is not None}
    assert set(got) == set(expected), set(got) ^ set(expected)
    # the vision tower trains through the split language model
    assert any("visual" in key or "vision_tower" in key for key in got)
    for key, grad in got.items():
        atol = grad_atol(expected, key)
        torch.testing.assert_close(grad, expected[key], rtol=1e-4, atol=atol, msg=lambda m, key=key: f"{key}: {m}")
    dist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.parametrize("kind", vl_kinds("ulysses"))  # Qwen3-VL: deepstack features split with the row
def test_ulysses_vl_two_ranks_equal_one_process(tmp_path, kind):
    spawn(_run_vl, WORLD_SIZE, get_or_build_tiny_model(kind, str(tmp_path / "models")), kind)


@pytest.mark.slow
def test_ulysses_two_ranks_equal_one_process(tmp_path):
    spawn(_run, WORLD_SIZE, get_or_build_tiny_model("qwen2", str(tmp_path / "models")))
