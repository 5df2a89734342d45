# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The merged LoRA weights a bf16 engine gets from a bf16 mixed-precision FSDP2 actor (the GPU recipe: frozen base in
bf16, fp32 adapters, bf16 compute), here on one gloo rank: each merged weight is W + scaling x B @ A from the fp32
adapter factors, rounded once to bf16, never from the factors the bf16 all-gather already rounded."""

import torch
import torch.distributed as dist

from tests.workers.fsdp_testing import init_rank, spawn
from verl.models.tiny_models import get_or_build_tiny_model


def _run(rank: int, world_size: int, port: int, model_dir: str) -> None:
    init_rank(rank, world_size, port)
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    from verl.models.config import LoraConfig, ModelConfig
    from verl.models.loading import build_model
    from verl.models.lora import apply_lora, lora_merge_plan, merge_weight
    from verl.workers.weight_sync.gather import checkpoint_names, iter_full_weights

    model = build_model(ModelConfig(model_path=model_dir, enable_gradient_checkpointing=False))
    apply_lora(model, LoraConfig(rank=4, alpha=8), vision_language=False, base_model_path=model_dir)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in model.parameters():
            if param.requires_grad:  # trained adapters: B is no longer zero, and neither factor is a bf16 number
                param.copy_(torch.randn(param.shape, generator=generator) * 0.3)
            else:
                param.data = param.data.to(torch.bfloat16)
    plan = lora_merge_plan(model)
    assert plan
    params = dict(model.named_parameters())
    assert all(params[a].dtype == params[b].dtype == torch.float32 for a, b, _ in plan.values())
    expected = {base: merge_weight(params[base], params[a], params[b], s) for base, (a, b, s) in plan.items()}
    rounded = {  # what merging the factors the bf16 all-gather rounded would give
        base: merge_weight(params[base], params[a].bfloat16(), params[b].bfloat16(), s)
        for base, (a, b, s) in plan.items()
    }
    assert any(not torch.equal(expected[base], rounded[base]) for base in plan)  # the test can tell them apart

    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model.model.layers:
        fully_shard(layer, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    names = checkpoint_names(model)
    stats = {"num_params": 0, "bytes": 0, "max_param_bytes": 0}
    streamed = dict(iter_full_weights(model, torch.bfloat16, names, stats))
    assert not any("lora_" in name for name in streamed)
    for base, tensor in expected.items():
        got = streamed[names[base]]
        assert got.dtype == torch.bfloat16 and torch.equal(got, tensor), names[base]
    dist.destroy_process_group()


def test_a_bf16_engine_gets_lora_merged_from_the_fp32_adapter_factors(tmp_path):
    spawn(_run, 1, get_or_build_tiny_model("qwen2", str(tmp_path / "models")))
