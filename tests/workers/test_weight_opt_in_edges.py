# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Edges of the opt-in sinks (verl/workers/weight_sync/opt_in.py) without an engine: the direct copy's layout checks
(an untied head, parts that leave rows out, tensors of another width) and the adapters-only LoRA sync's bookkeeping
against a stand-in engine (a new id per sync, the previous adapter dropped, no folder left behind)."""

import os
from types import SimpleNamespace

import pytest
import torch

from verl.workers.weight_sync.opt_in import (
    EngineAdapter,
    EngineCopy,
    LayoutError,
    Placement,
    engine_placements,
    layout_gaps,
    peft_config_of,
    write_peft_adapter,
)


def test_an_untied_head_the_engine_lacks_is_refused():
    """Only a tied head may have no engine parameter (vLLM shares the embedding): an untied one that lands nowhere
    would never reach the engine."""
    shapes = {"model.embed_tokens.weight": (16, 4), "lm_head.weight": (16, 4)}
    assert "lm_head.weight" not in engine_placements(shapes, ["model.embed_tokens.weight"], {}, tied_head=True)
    with pytest.raises(KeyError, match=r"lm_head.weight lands on no parameter of the engine"):
        engine_placements(shapes, ["model.embed_tokens.weight"], {}, tied_head=False)


def test_parts_that_leave_rows_unfilled_are_gaps():
    """Rows before the first part, or after the last, would keep the engine's old values."""
    late = layout_gaps({"a.q.weight": Placement("a.qkv.weight", 2, 6)}, {"a.qkv.weight": (8, 4)})
    short = layout_gaps({"a.q.weight": Placement("a.qkv.weight", 0, 6)}, {"a.qkv.weight": (8, 4)})
    assert late == ["a.qkv.weight: rows [(2, 6)] do not tile its 8 rows"]
    assert short == ["a.qkv.weight: rows [(0, 6)] do not tile its 8 rows"]
    assert layout_gaps({"a.q.weight": Placement("a.qkv.weight", 0, 8)}, {"a.qkv.weight": (8, 4)}) == []


def test_a_tensor_of_another_width_is_refused_even_where_its_rows_fit():
    engine = {"a.weight": torch.zeros(8, 4)}
    with pytest.raises(LayoutError, match=r"a.weight \(shape \[8, 4\]\) cannot take the actor's a.weight"):
        EngineCopy(lambda: engine, {}, {"a.weight": (8, 3)}, tied_head=False)


def test_engine_copy_of_a_tied_actor_skips_its_head(monkeypatch):
    """engine_copy reads the actor's tie_word_embeddings: the tied head has no engine parameter and is not copied."""
    from verl.workers.rollout import vllm_compat
    from verl.workers.weight_sync.opt_in import engine_copy

    module = torch.nn.Module()
    module.embed = torch.nn.Embedding(16, 4)
    module.head = torch.nn.Linear(4, 16, bias=False)
    module.head.weight = module.embed.weight
    module.config = SimpleNamespace(tie_word_embeddings=True)
    names = {"embed.weight": "model.embed_tokens.weight", "head.weight": "lm_head.weight"}
    engine = {"model.embed_tokens.weight": torch.zeros(16, 4)}
    monkeypatch.setattr(vllm_compat, "engine_parameters", lambda llm: engine)
    monkeypatch.setattr(vllm_compat, "packed_modules", lambda llm: {})
    copy = engine_copy(module, object(), names)
    assert copy.skipped == {"lm_head.weight"}
    copy.load([(names[name], param.detach()) for name, param in module.named_parameters(remove_duplicate=False)])
    assert torch.equal(engine["model.embed_tokens.weight"], module.embed.weight.detach())


def test_an_adapter_without_tensors_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"No LoRA adapter tensors to write.*worker.actor.model.lora.rank"):
        write_peft_adapter(str(tmp_path / "adapter"), {"r": 8}, [])


def test_an_actor_without_lora_has_no_adapter_config():
    with pytest.raises(ValueError, match=r"lora_sync=adapters needs an actor with LoRA adapters"):
        peft_config_of(torch.nn.Linear(2, 2))


class _Engine:
    """Stands in for vLLM's LLMEngine's LoRA calls: records what it loads (reading the folder then) and drops."""

    def __init__(self) -> None:
        self.loaded: list[tuple[int, str, list[str]]] = []
        self.removed: list[int] = []

    def add_lora(self, request) -> bool:
        self.loaded.append((request.lora_int_id, request.lora_path, sorted(os.listdir(request.lora_path))))
        return True

    def remove_lora(self, lora_id: int) -> None:
        self.removed.append(lora_id)


def test_each_adapter_sync_loads_a_new_id_drops_the_previous_and_leaves_no_folder():
    """vLLM keys its adapter and prefix caches by the adapter id: a sync under an old id would keep serving the old
    adapter. Each sync loads a new id, removes the one before, and deletes its folder (vLLM holds it in memory)."""
    engine = _Engine()
    adapter = EngineAdapter(SimpleNamespace(llm_engine=engine), {"r": 2, "lora_alpha": 4})
    assert adapter.request is None
    name = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
    for step in range(3):
        adapter.load(iter([(name, torch.full((2, 4), float(step)))]))
        assert adapter.request.lora_int_id == step + 1
    assert [lora_id for lora_id, _, _ in engine.loaded] == [1, 2, 3]
    assert all(files == ["adapter_config.json", "adapter_model.safetensors"] for _, _, files in engine.loaded)
    assert engine.removed == [1, 2]
    assert not any(os.path.exists(path) for _, path, _ in engine.loaded)
