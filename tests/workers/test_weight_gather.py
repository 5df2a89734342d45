# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The weights streamed into the rollout engine, gathered one FSDP unit at a time on two gloo ranks: the same tensors
as gathering each parameter on its own, bit for bit, with and without a bf16 mixed-precision policy."""

from unittest import mock

import pytest
import torch
import torch.distributed as dist

from tests.workers.fsdp_testing import init_rank, make_text_batch, spawn
from verl.models.tiny_models import get_or_build_tiny_model


def _per_parameter(model: torch.nn.Module, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """The reference: every parameter's own all-gather (`full_tensor`), cast to `dtype`, under each of its names."""
    return {
        name: (param.full_tensor() if hasattr(param, "full_tensor") else param).detach().to(dtype)
        for name, param in model.named_parameters(remove_duplicate=False)
    }


def _streamed(model: torch.nn.Module, dtype: torch.dtype) -> tuple[dict[str, torch.Tensor], int]:
    """iter_full_weights' output by checkpoint name, and how many single-parameter all-gathers it made."""
    from torch.distributed.tensor import DTensor

    from verl.workers.weight_sync.gather import checkpoint_names, iter_full_weights

    stats = {"num_params": 0, "bytes": 0, "max_param_bytes": 0}
    with mock.patch.object(DTensor, "full_tensor", autospec=True, side_effect=DTensor.full_tensor) as per_param:
        # kept tensors must survive the reshard of their unit (the engine may hold a layer's tensors a while)
        streamed = dict(iter_full_weights(model, dtype, checkpoint_names(model), stats))
    assert stats["num_params"] == len(streamed)
    return streamed, per_param.call_count


def _check(model: torch.nn.Module, dtype: torch.dtype, expected_per_param_gathers: int) -> None:
    from torch.distributed.tensor import DTensor

    reference = _per_parameter(model, dtype)
    streamed, per_param_gathers = _streamed(model, dtype)
    assert set(streamed) == set(reference)  # the tied lm_head.weight too, under its own name
    for name, tensor in reference.items():
        assert streamed[name].dtype == dtype and torch.equal(streamed[name], tensor), name
    assert per_param_gathers == expected_per_param_gathers
    assert all(isinstance(param, DTensor) for param in model.parameters())  # every unit resharded afterwards


def _run(rank: int, world_size: int, port: int, model_dir: str) -> None:
    init_rank(rank, world_size, port)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from transformers import AutoModelForCausalLM

    from verl.models.config import FSDPConfig, ModelConfig
    from verl.models.fsdp import create_fsdp_model

    mesh = init_device_mesh("cpu", (world_size,))
    model = create_fsdp_model(ModelConfig(model_path=model_dir), FSDPConfig(), mesh, torch.device("cpu"))
    assert model.config.tie_word_embeddings
    _check(model, torch.float32, expected_per_param_gathers=0)  # one all-gather per unit, none per parameter
    # after a forward without backward the root unit stays gathered; the stream still sees the same weights
    data = make_text_batch(seed=rank, batch_size=2)
    with torch.no_grad():
        model(input_ids=data.batch["input_ids"], attention_mask=data.batch["attention_mask"], use_cache=False)
    _check(model, torch.float32, expected_per_param_gathers=0)

    # bf16 compute (the GPU default): a bf16 engine gets the all-gathered bf16 tensors, the same rounding as casting
    # the float32 master weights; a float32 engine gets each master weight gathered on its own, never a rounded one
    torch.manual_seed(0)
    plain = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16)
    for layer in plain.model.layers:
        fully_shard(layer, mesh=mesh, mp_policy=policy)
    fully_shard(plain, mesh=mesh, mp_policy=policy)
    _check(plain, torch.bfloat16, expected_per_param_gathers=0)
    _check(plain, torch.float32, expected_per_param_gathers=len(list(plain.named_parameters(remove_duplicate=False))))
    dist.destroy_process_group()


def test_unit_gathers_equal_per_parameter_gathers(tmp_path):
    spawn(_run, 2, get_or_build_tiny_model("qwen2", str(tmp_path / "models")))


def _run_moe(rank: int, world_size: int, port: int, model_dir: str) -> None:
    """A mixture-of-experts actor (transformers fuses each layer's experts into two tensors): the stream sends what
    `save_pretrained` writes, every expert's gate, up and down projection under its checkpoint name (the names
    vLLM's Qwen3-MoE loads), bit for bit; Qwen3-VL-MoE's fused experts as its checkpoints store them (transposed)."""
    init_rank(rank, world_size, port)
    from safetensors.torch import load_file
    from torch.distributed.device_mesh import init_device_mesh

    from verl.models.config import FSDPConfig, ModelConfig
    from verl.models.fsdp import create_fsdp_model

    checkpoint = load_file(f"{model_dir}/model.safetensors")
    # per-expert tensors, or (Granite) the checkpoint's own fused ones under other names than the module's
    assert any(".experts." in name or ".input_linear." in name for name in checkpoint)
    mesh = init_device_mesh("cpu", (world_size,))
    model = create_fsdp_model(ModelConfig(model_path=model_dir), FSDPConfig(), mesh, torch.device("cpu"))
    assert any(name.endswith("experts.gate_up_proj") for name, _ in model.named_parameters())
    streamed, _ = _streamed(model, torch.float32)
    (embedding,) = [name for name in checkpoint if name.endswith("embed_tokens.weight")]
    expected = {"lm_head.weight": checkpoint[embedding], **checkpoint}  # tied: streamed under both names
    assert set(streamed) == set(expected), sorted(set(streamed) ^ set(expected))[:6]
    for name, tensor in expected.items():
        assert torch.equal(streamed[name], tensor), name
    # to a bf16 engine: what the model keeps in float32 (GLM-4.5's router correction bias) goes in float32, exact
    in_bf16, _ = _streamed(model, torch.bfloat16)
    fp32 = set(getattr(model, "_keep_in_fp32_modules_strict", None) or ())
    kept = [name for name in in_bf16 if fp32.intersection(name.split("."))]
    assert bool(kept) == (model.config.model_type == "glm4_moe")
    for name, tensor in in_bf16.items():
        assert tensor.dtype == (torch.float32 if name in kept else torch.bfloat16), name
        assert torch.equal(tensor, expected[name].to(tensor.dtype)), name
    dist.destroy_process_group()


@pytest.mark.parametrize(
    "kind", ["qwen3_moe", "qwen3_vl_moe", "mixtral", "glm4_moe", "qwen2_moe", "olmoe", "granitemoe", "qwen3_next"]
)
def test_a_mixture_of_experts_actor_streams_every_experts_checkpoint_tensor(tmp_path, kind):
    spawn(_run_moe, 2, get_or_build_tiny_model(kind, str(tmp_path / "models")))


def _run_mix(rank: int, world_size: int, port: int, model_dir: str) -> None:
    """mix_parameters (algorithm.ref_sync_steps): target <- alpha x source + (1 - alpha) x target, whether the two
    are sharded alike (shard by shard), or one is sharded and the other a plain module (through full tensors)."""
    init_rank(rank, world_size, port)
    from torch.distributed.device_mesh import init_device_mesh
    from transformers import AutoModelForCausalLM

    from verl.models.config import FSDPConfig, ModelConfig
    from verl.models.fsdp import create_fsdp_model, mix_parameters

    mesh = init_device_mesh("cpu", (world_size,))
    build = lambda: create_fsdp_model(ModelConfig(model_path=model_dir), FSDPConfig(), mesh, torch.device("cpu"))  # noqa: E731
    actor, reference = build(), build()
    with torch.no_grad():
        for index, param in enumerate(actor.parameters()):  # the same change on every rank's shard
            param.to_local().mul_(1.5).add_(0.01 * index)
    full = lambda module: {name: p.full_tensor().clone() for name, p in module.named_parameters()}  # noqa: E731
    before, moved = full(reference), full(actor)
    mix_parameters(reference, actor, 0.6)
    after = full(reference)
    for name, value in after.items():
        torch.testing.assert_close(value, 0.6 * moved[name] + 0.4 * before[name], rtol=1e-6, atol=1e-7)
    assert any(not torch.equal(after[name], before[name]) for name in after)

    plain = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    mix_parameters(plain, actor, 1.0)  # a sharded source into a plain module: copied whole
    assert all(torch.equal(param, moved[name]) for name, param in plain.named_parameters())
    fresh = build()
    mix_parameters(fresh, plain, 1.0)  # a plain source into a sharded module: each rank keeps its shard
    assert all(torch.equal(value, moved[name]) for name, value in full(fresh).items())
    with pytest.raises(ValueError, match="two different models"):
        mix_parameters(plain.model, actor, 1.0)
    # on CUDA the reference is stored in bf16 (a frozen model needs no fp32 master): the mix is rounded to it
    bf16 = create_fsdp_model(
        ModelConfig(model_path=model_dir), FSDPConfig(), mesh, torch.device("cpu"), dtype=torch.bfloat16
    )
    start = full(bf16)
    mix_parameters(bf16, actor, 0.6)
    for name, value in full(bf16).items():
        assert value.dtype == torch.bfloat16
        expected = start[name].lerp(moved[name].to(torch.bfloat16), 0.6)
        assert torch.equal(value, expected), name
    dist.destroy_process_group()


def test_mixing_the_actor_into_the_reference_shard_by_shard(tmp_path):
    spawn(_run_mix, 2, get_or_build_tiny_model("qwen2", str(tmp_path / "models")))
