# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""An architecture vLLM cannot run ends the engine's start with one EngineSettingError naming the model, which the
trainer reports as a SetupError (no worker's stack): here Bamba, which vLLM 0.32 no longer implements and whose Mamba
layers its Transformers backend cannot take."""

import pytest
import torch


@pytest.fixture(scope="module")
def bamba_dir(tmp_path_factory) -> str:
    import transformers

    from verl.models.tiny_models import build_tokenizer

    path = tmp_path_factory.mktemp("bamba")
    tokenizer = build_tokenizer(vocab_size=2048)
    sizes = {"vocab_size": len(tokenizer), "hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4}
    sizes.update(num_key_value_heads=2, intermediate_size=256, head_dim=32, max_position_embeddings=512)
    mamba = {"mamba_n_heads": 8, "mamba_d_head": 32, "mamba_chunk_size": 16, "attn_layer_indices": [1]}
    config = transformers.BambaConfig(**sizes, **mamba, eos_token_id=tokenizer.eos_token_id)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        transformers.BambaForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def test_an_architecture_vllm_cannot_run_is_one_error_naming_the_model(bamba_dir) -> None:
    import vllm

    from verl.data.tokenizer import get_tokenizer
    from verl.workers.rollout.config import RolloutConfig
    from verl.workers.rollout.vllm_compat import EngineSettingError
    from verl.workers.rollout.vllm_rollout import VLLMRollout

    config = RolloutConfig(n=1, prompt_length=64, response_length=8, kv_cache_memory_mb=32, enforce_eager=True)
    with pytest.raises(EngineSettingError) as raised:
        VLLMRollout(bamba_dir, config, get_tokenizer(bamba_dir))
    message = str(raised.value)
    assert message.startswith(f"vLLM {vllm.__version__} cannot run the model {bamba_dir}: "), message
    assert "Layer 0 (linear_attention) does not dispatch through the Transformers attention interface" in message, (
        message
    )
    assert message.endswith('Train a model family vLLM supports (docs/gpu.md, "Supported models").'), message
    assert "\n" not in message
