# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The hybrid engine end to end on CPU: 2 gloo ranks, each an FSDP2-sharded tiny actor plus its own vLLM engine.

Engine starts are expensive (about 13 s to import vLLM plus 4 s per engine), so the module's two rank processes serve
every run and each run checks many things: the text run covers greedy equality with Hugging Face, log-prob agreement
at two temperatures, seeds, an actor update followed by a new sync, the weight check and the RNG; the VL run covers
images (one and two per prompt), the mrope position ids and log-probs with images.
"""

import os
from dataclasses import replace
from datetime import timedelta
from typing import Any

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from families import vl_kinds

from tests.workers.fsdp_testing import spawn
from verl.data.multimodal import TEXT_INPUTS
from verl.workers.actor.forward import _position_ids_for_model
from verl.workers.rollout.request_loop import RolloutRequest


pytestmark = pytest.mark.slow

WORLD_SIZE = 2
GREEDY = RolloutRequest(sampling={"temperature": 0.0, "n": 1})


def _init_rank(rank: int, world_size: int, port: int) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world_size),
    )
    if not dist.is_initialized():  # the module's rank processes run one test after another
        dist.init_process_group("gloo", rank=rank, world_size=world_size, timeout=timedelta(seconds=600))


def _shard(model: torch.nn.Module, layers: torch.nn.ModuleList) -> torch.nn.Module:
    from torch.distributed.fsdp import fully_shard

    for layer in layers:
        fully_shard(layer)
    fully_shard(model)
    return model


def _full_copy(actor: torch.nn.Module, model_class: Any, model_dir: str) -> torch.nn.Module:
    """A plain (unsharded) model holding the actor's current weights, gathered by DCP (not by our sync)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    state = get_model_state_dict(actor, options=StateDictOptions(full_state_dict=True))
    reference = model_class.from_pretrained(model_dir, dtype=torch.float32)
    missing, unexpected = reference.load_state_dict(state, strict=False)
    assert not unexpected and all("lm_head" in key for key in missing), (missing, unexpected)
    return reference.eval()


def _left_pad(rows: list[list[int]], length: int, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.full((len(rows), length), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), length), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, length - len(row) :] = torch.tensor(row)
        mask[i, length - len(row) :] = 1
    return ids, mask


def _valid_response(output: Any, row: int) -> list[int]:
    length = int(output.batch["response_mask"][row].sum())
    return output.batch["responses"][row, :length].tolist()


def _response_log_probs(logits: torch.Tensor, responses: torch.Tensor, temperature: float) -> torch.Tensor:
    """Log-probs of the response tokens from full-sequence logits (B, P + R, V), as the actor computes them."""
    response_length = responses.shape[1]
    logits = logits[:, -response_length - 1 : -1].float() / temperature
    return F.log_softmax(logits, dim=-1).gather(-1, responses.unsqueeze(-1)).squeeze(-1)


def _check_log_probs(output: Any, actor_log_probs: torch.Tensor) -> float:
    mask = output.batch["response_mask"].bool()
    assert mask.sum() > 0
    gap = (output.batch["rollout_log_probs"] - actor_log_probs).abs()[mask]
    assert gap.mean() <= 1e-3, f"mean abs log-prob gap {gap.mean():.2e} (max {gap.max():.2e})"
    return float(gap.mean())


# ---------------------------------------------------------------------------------------------------- text run


def _text_prompts(tokenizer: Any, rank: int, prompt_length: int) -> Any:
    from verl.protocol import DataProto

    questions = [f"What is {7 * rank + i} + {3 + i}?" for i in range(3)] + ["Count the red squares, please."]
    texts = [
        tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False)
        for q in questions
    ]
    rows = [tokenizer.encode(text, add_special_tokens=False) for text in texts]
    input_ids, mask = _left_pad(rows, prompt_length, tokenizer.pad_token_id)
    position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
    return DataProto.from_dict(
        tensors={"input_ids": input_ids, "attention_mask": mask, "position_ids": position_ids},
        non_tensors={"raw_prompt_ids": rows, "uid": [f"r{rank}-{i}" for i in range(len(rows))]},
    )


def _hf_greedy(model: torch.nn.Module, prompts: Any, max_new_tokens: int, eos_ids: list[int], pad_id: int) -> list:
    results = []
    for ids in prompts.non_tensor_batch["raw_prompt_ids"]:
        with torch.no_grad():
            out = model.generate(
                torch.tensor([ids]),
                attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                max_new_tokens=max_new_tokens,
                do_sample=False,
                eos_token_id=eos_ids,
                pad_token_id=pad_id,
            )
        results.append(out[0, len(ids) :].tolist())
    return [_strip_after_eos(row, eos_ids) for row in results]


def _strip_after_eos(row: list[int], eos_ids: list[int]) -> list[int]:
    for i, token in enumerate(row):
        if token in eos_ids:
            return row[: i + 1]
    return row


def _actor_log_probs(actor: torch.nn.Module, output: Any, temperature: float) -> torch.Tensor:
    with torch.no_grad():
        logits = actor(
            input_ids=output.batch["input_ids"],
            attention_mask=output.batch["attention_mask"],
            position_ids=output.batch["position_ids"],
            use_cache=False,
        ).logits
    return _response_log_probs(logits, output.batch["responses"], temperature)


def _text_worker(rank: int, world_size: int, port: int, model_dir: str) -> None:
    from transformers import AutoTokenizer, Qwen2ForCausalLM

    from verl.workers.rollout.config import RolloutConfig
    from verl.workers.rollout.vllm_rollout import VLLMRollout
    from verl.workers.weight_sync import sync
    from verl.workers.weight_sync.colocated import FSDPVLLMShardingManager
    from verl.workers.weight_sync.gather import iter_full_weights
    from verl.workers.weight_sync.sinks import EngineLoader

    _init_rank(rank, world_size, port)
    torch.manual_seed(1234)
    actor = Qwen2ForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    actor = _shard(actor, actor.model.layers)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    prompt_length, response_length = 48, 24
    config = RolloutConfig(
        n=4,
        temperature=1.0,
        seed=7,
        dtype="fp32",
        kv_cache_memory_mb=32,
        tensor_parallel_size=1,
        max_num_batched_tokens=1024,
        calculate_log_probs=True,
        verify_weight_sync=True,
        val_override_config={"temperature": 0.0, "n": 1},
        prompt_length=prompt_length,
        response_length=response_length,
    )
    threads = torch.get_num_threads()
    rollout = VLLMRollout(model_dir, config, tokenizer, None)
    # The engine must leave the trainer's threads and its set_num_threads alone.
    assert torch.get_num_threads() == threads and torch.set_num_threads.__name__ != "skip_set_num_threads"
    manager = FSDPVLLMShardingManager(actor, rollout)
    eos_ids = sorted(rollout.eos_token_ids)
    prompts = _text_prompts(tokenizer, rank, prompt_length)

    # 1. After a sync, greedy decoding equals Hugging Face generate with the actor's weights.
    rng_before = torch.get_rng_state()
    metrics = manager.prepare()
    assert metrics["rollout/weight_sync_mean_gap"] < 1e-4, metrics
    greedy = rollout.generate_sequences(prompts, GREEDY)
    reference = _full_copy(actor, Qwen2ForCausalLM, model_dir)
    expected = _hf_greedy(reference, prompts, response_length, eos_ids, tokenizer.pad_token_id)
    assert [_valid_response(greedy, i) for i in range(len(prompts))] == expected
    cut = [not row or row[-1] not in eos_ids for row in expected]  # no end-of-sequence token: the budget cut it
    assert greedy.batch["rollout_truncated"].tolist() == cut
    assert greedy.non_tensor_batch["uid"].tolist() == prompts.non_tensor_batch["uid"].tolist()
    validation = rollout.generate_sequences(prompts, RolloutRequest(validate=True))  # val_override_config: greedy, n=1
    assert torch.equal(validation.batch["responses"], greedy.batch["responses"])
    # A stage of data.response_length_schedule: responses stop at (and are padded to) the stage's length.
    staged = rollout.generate_sequences(prompts, replace(GREEDY, response_length=5))
    assert staged.batch["responses"].shape[-1] == 5 and staged.batch["input_ids"].shape[-1] == prompt_length + 5
    assert torch.equal(staged.batch["responses"], greedy.batch["responses"][:, :5])
    assert staged.batch["rollout_truncated"].tolist() == [
        not (eos_ids and set(row[:5]) & set(eos_ids)) for row in expected
    ]
    # A stop by stop_token_ids (as val_override_config may set) ends a response: it is not cut by the budget.
    stop = expected[0][2]
    assert stop not in eos_ids
    stopped = rollout.generate_sequences(
        prompts, replace(GREEDY, sampling={**GREEDY.sampling, "stop_token_ids": [stop]})
    )
    for i, row in enumerate(expected):
        end = row.index(stop) + 1 if stop in row else len(row)
        assert _valid_response(stopped, i) == row[:end]
        assert stopped.batch["rollout_truncated"][i].item() == (stop not in row and cut[i])
    with pytest.raises(ValueError, match=r"response_length.*rollout.response_length=24"):
        rollout.generate_sequences(prompts, replace(GREEDY, response_length=response_length + 1))

    # 2. Sampled tokens: vLLM's log-probs equal the actor's recomputed ones, at temperature 1 and 0.7.
    sampled_call = rollout.generate_calls
    sampled = rollout.generate_sequences(prompts)
    assert len(sampled) == 4 * len(prompts)
    assert sampled.non_tensor_batch["uid"].tolist() == np.repeat(prompts.non_tensor_batch["uid"], 4).tolist()
    assert torch.equal(sampled.batch["prompts"], prompts.batch["input_ids"].repeat_interleave(4, dim=0))
    _check_log_probs(sampled, _actor_log_probs(actor, sampled, 1.0))
    cooled = rollout.generate_sequences(prompts, RolloutRequest(sampling={"temperature": 0.7}))
    _check_log_probs(cooled, _actor_log_probs(actor, cooled, 0.7))

    # 3. Seeds: the same call index reproduces the samples; samples of one prompt differ; later calls differ.
    responses = sampled.batch["responses"].view(len(prompts), 4, -1)
    assert all(len({tuple(r.tolist()) for r in group}) > 1 for group in responses)
    rollout.generate_calls = sampled_call
    again = rollout.generate_sequences(prompts)
    assert torch.equal(again.batch["responses"], sampled.batch["responses"])
    assert not torch.equal(cooled.batch["responses"], sampled.batch["responses"])
    other_rank = [None] * WORLD_SIZE
    dist.all_gather_object(other_rank, sampled.batch["responses"][:4])
    assert not torch.equal(other_rank[0], other_rank[1])  # ranks draw different seeds (and have other prompts)
    manager.release()
    assert torch.equal(torch.get_rng_state(), rng_before)

    # 4. An actor update (a few AdamW steps towards the sampled responses), a new sync: outputs follow new weights.
    optimizer = torch.optim.AdamW(actor.parameters(), lr=3e-3)
    for _ in range(3):
        logits = actor(
            input_ids=sampled.batch["input_ids"],
            attention_mask=sampled.batch["attention_mask"],
            position_ids=sampled.batch["position_ids"],
            use_cache=False,
        ).logits
        log_probs = _response_log_probs(logits, sampled.batch["responses"], 1.0)
        loss = -(log_probs * sampled.batch["response_mask"]).sum() / sampled.batch["response_mask"].sum()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    metrics = manager.prepare()
    assert metrics["rollout/weight_sync_mean_gap"] < 1e-4, metrics
    assert 0 < metrics["timing_s/sync_weights_gather"] < metrics["timing_s/sync_weights"]  # the rest is the engine's
    greedy_after = rollout.generate_sequences(prompts, GREEDY)
    reference_after = _full_copy(actor, Qwen2ForCausalLM, model_dir)
    expected_after = _hf_greedy(reference_after, prompts, response_length, eos_ids, tokenizer.pad_token_id)
    assert [_valid_response(greedy_after, i) for i in range(len(prompts))] == expected_after
    assert expected_after != expected  # the update changed the greedy answers, so the check above means something
    sampled_after = rollout.generate_sequences(prompts)
    _check_log_probs(sampled_after, _actor_log_probs(actor, sampled_after, 1.0))

    # 5. A second, fresh engine given the same weights samples the same tokens: a run is reproducible from
    #    rollout.seed alone, whatever the engine's history.
    fresh = VLLMRollout(model_dir, config, tokenizer, None)
    sync(EngineLoader(fresh.inference_engine), iter_full_weights, actor, torch.float32, manager.names)
    rollout.generate_calls = fresh.generate_calls = 5
    first, second = rollout.generate_sequences(prompts), fresh.generate_sequences(prompts)
    assert torch.equal(first.batch["responses"], second.batch["responses"])
    manager.release()


@pytest.fixture(scope="module")
def model_root(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("rollout_models"))


def _model_dir(kind: str, root: str) -> str:
    from verl.models.tiny_models import get_or_build_tiny_model

    return get_or_build_tiny_model(kind, os.path.join(root, kind))


def test_text_rollout_hybrid_engine(model_root: str) -> None:
    spawn(_text_worker, WORLD_SIZE, _model_dir("qwen2", model_root))


# ---------------------------------------------------------------------------------------------------- VL run


def _images(rank: int, sizes: list[tuple[int, int]]) -> list[Any]:
    from PIL import Image

    rng = np.random.default_rng(rank * 100 + len(sizes))
    return [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for w, h in sizes]


def _vl_prompts(processor: Any, actor: torch.nn.Module, rank: int, prompt_length: int) -> tuple[Any, list[dict]]:
    """Prompts with one image, two images and none, built as the dataset does; plus each row's HF model inputs."""
    from verl.protocol import DataProto

    cases = [
        ([(56, 56)], "What color is the square?"),
        ([(112, 84), (56, 84)], "Which picture shows more red?"),
        ([], f"Count to {rank + 3}."),
    ]
    rows, hf_inputs, multi_modal, positions = [], [], [], []
    for sizes, question in cases:
        images = _images(rank, sizes)
        content = [{"type": "image"} for _ in images] + [{"type": "text", "text": question}]
        text = processor.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True)
        inputs = processor(text=[text], images=images or None, return_tensors="pt")
        rows.append(inputs["input_ids"][0].tolist())
        positions.append(_model_positions(actor, inputs["input_ids"], inputs["attention_mask"], inputs))
        hf_inputs.append(dict(inputs))
        multi_modal.append({"images": images} if images else None)
    input_ids, mask = _left_pad(rows, prompt_length, processor.tokenizer.pad_token_id)
    position_ids = torch.zeros(len(rows), *positions[0].shape[:-1], prompt_length, dtype=torch.long)
    for i, pos in enumerate(positions):
        position_ids[i, ..., prompt_length - pos.shape[-1] :] = pos
    raw_prompt_ids = [
        processor.tokenizer.encode(
            processor.apply_chat_template(
                [{"role": "user", "content": [{"type": "image"}] * len(sizes) + [{"type": "text", "text": q}]}],
                add_generation_prompt=True,
            ),
            add_special_tokens=False,
        )
        for sizes, q in cases
    ]
    prompts = DataProto.from_dict(
        tensors={"input_ids": input_ids, "attention_mask": mask, "position_ids": position_ids},
        non_tensors={"raw_prompt_ids": raw_prompt_ids, "multi_modal_data": multi_modal},
    )
    return prompts, hf_inputs


def _model_positions(
    actor: torch.nn.Module, input_ids: torch.Tensor, mask: torch.Tensor, inputs: dict
) -> torch.Tensor:
    """The model's own positions of one sequence (1, L): its 3-D rope index (3, L), or 0, 1, 2, ... over the valid
    tokens (L,) for a model with 1-D rope (InternVL)."""
    if not hasattr(actor.model, "get_rope_index"):
        return (mask[0].cumsum(-1) - 1).clamp(min=0)
    image_tokens = (input_ids == actor.config.image_token_id).int()
    positions, _ = actor.model.get_rope_index(
        input_ids, image_tokens, image_grid_thw=inputs.get("image_grid_thw"), attention_mask=mask
    )
    return positions[:, 0]


def _vl_actor_log_probs(
    actor: torch.nn.Module, output: Any, hf_inputs: list[dict], n: int, banned: list[int]
) -> torch.Tensor:
    """Actor log-probs row by row (each row has its own images), with the rollout's position ids; the `banned`
    placeholder tokens get the engine's -100 logit bias, so both normalise over the same tokens (a tiny random model
    puts about 1e-3 of its mass on them)."""
    log_probs = []
    for row in range(len(output)):
        vision = {k: v for k, v in hf_inputs[row // n].items() if k not in TEXT_INPUTS}
        with torch.no_grad():
            logits = actor(
                input_ids=output.batch["input_ids"][row : row + 1],
                attention_mask=output.batch["attention_mask"][row : row + 1],
                position_ids=_position_ids_for_model(output.batch["position_ids"][row : row + 1]),
                use_cache=False,
                **vision,
            ).logits
        logits[..., banned] -= 100.0
        log_probs.append(_response_log_probs(logits, output.batch["responses"][row : row + 1], 1.0))
    return torch.cat(log_probs)


def _vl_worker(rank: int, world_size: int, port: int, model_dir: str) -> None:
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from verl.workers.rollout import vllm_compat
    from verl.workers.rollout.config import RolloutConfig
    from verl.workers.rollout.vllm_rollout import VLLMRollout
    from verl.workers.weight_sync.colocated import FSDPVLLMShardingManager

    _init_rank(rank, world_size, port)
    actor = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32)
    actor = _shard(actor, actor.model.language_model.layers)
    processor = AutoProcessor.from_pretrained(model_dir)
    tokenizer = processor.tokenizer
    prompt_length, response_length = 192, 16  # Gemma 4: two images of up to 70 soft tokens
    config = RolloutConfig(
        n=2,
        seed=3,
        dtype="fp32",
        kv_cache_memory_mb=32,
        tensor_parallel_size=1,
        max_num_batched_tokens=1024,
        limit_images=2,
        calculate_log_probs=True,
        verify_weight_sync=True,
        prompt_length=prompt_length,
        response_length=response_length,
    )
    rollout = VLLMRollout(model_dir, config, tokenizer, processor)
    # no persistent buffer of the engine is left to the dummy loader's noise: the sync sends each (Gemma 4's
    # per-layer layer_scalar is a checkpoint tensor), and against no checkpoint (a hub id) each would be named
    assert vllm_compat.dummy_initialized_buffers(rollout.inference_engine, model_dir) == []
    unknown = vllm_compat.dummy_initialized_buffers(rollout.inference_engine, "no-org/no-model")
    assert all(name.endswith("layer_scalar") for name in unknown) and bool(unknown) == ("gemma4" in model_dir)
    manager = FSDPVLLMShardingManager(actor, rollout)
    prompts, hf_inputs = _vl_prompts(processor, actor, rank, prompt_length)
    metrics = manager.prepare()
    assert metrics["rollout/weight_sync_mean_gap"] < 1e-4, metrics

    # Greedy with one and two images per prompt equals Hugging Face generate with the actor's weights.
    greedy = rollout.generate_sequences(prompts, GREEDY)
    reference = _full_copy(actor, AutoModelForImageTextToText, model_dir)
    eos_ids = sorted(rollout.eos_token_ids)
    for row, inputs in enumerate(hf_inputs):
        with torch.no_grad():
            out = reference.generate(
                **inputs, max_new_tokens=response_length, do_sample=False, eos_token_id=eos_ids, pad_token_id=0
            )
        expected = _strip_after_eos(out[0, inputs["input_ids"].shape[1] :].tolist(), eos_ids)
        assert _valid_response(greedy, row) == expected, row

    # Position ids over prompt + response equal the model's own rope index of the whole sequence.
    image_token = actor.config.image_token_id
    for row, inputs in enumerate(hf_inputs):
        full_ids, mask = greedy.batch["input_ids"][row : row + 1], greedy.batch["attention_mask"][row : row + 1]
        expected_positions = _model_positions(actor, full_ids, mask, inputs)
        valid = mask[0].bool()
        assert torch.equal(greedy.batch["position_ids"][row][..., valid], expected_positions[..., valid]), row

    # Sampled log-probs (with images) match the actor's.
    sampled = rollout.generate_sequences(prompts)
    assert len(sampled) == 2 * len(prompts)
    assert not (torch.isin(sampled.batch["responses"], torch.tensor([image_token]))).any()
    video_token = getattr(processor, "video_token", None)  # Pixtral's has none
    banned = [image_token, *([tokenizer.convert_tokens_to_ids(video_token)] if video_token else [])]
    _check_log_probs(sampled, _vl_actor_log_probs(actor, sampled, hf_inputs, 2, banned))
    manager.release()


@pytest.mark.parametrize("kind", vl_kinds("hybrid_engine"))
def test_vl_rollout_hybrid_engine(model_root: str, kind: str) -> None:
    spawn(_vl_worker, WORLD_SIZE, _model_dir(kind, model_root))


def test_llava_onevision_engine_maps_the_tower_names_transformers_saves() -> None:
    """vLLM's own mapper leaves transformers 5's SigLIP names (no `vision_model.` level) unmapped, to no module of its
    model; with vllm_compat's rule they, the published names and the module names all reach the right modules."""
    from vllm.model_executor.models.llava_onevision import LlavaOnevisionForConditionalGeneration
    from vllm.model_executor.models.utils import WeightsMapper

    from verl.workers.rollout import vllm_compat

    vllm_compat.load_transformers_tower_names()
    mapper = LlavaOnevisionForConditionalGeneration.hf_to_vllm_mapper
    assert set(mapper.orig_to_new_regex) == {vllm_compat.SIGLIP_WITHOUT_VISION_MODEL}  # vLLM has no regex of its own
    own = WeightsMapper(orig_to_new_prefix=mapper.orig_to_new_prefix, orig_to_new_substr=mapper.orig_to_new_substr)
    saved = "vision_tower.encoder.layers.0.mlp.fc1.weight"
    assert own.map_name(saved) == saved  # vLLM alone: a name no module of its model has
    expected = {
        saved: "vision_tower.vision_model.encoder.layers.0.mlp.fc1.weight",
        "model.vision_tower.embeddings.patch_embedding.weight": "vision_tower.vision_model.embeddings.patch_embedding.weight",
        "vision_tower.vision_model.post_layernorm.bias": "vision_tower.vision_model.post_layernorm.bias",  # published
        "model.language_model.layers.0.mlp.up_proj.weight": "language_model.model.layers.0.mlp.up_proj.weight",
        "model.image_newline": "image_newline",
        "lm_head.weight": "language_model.lm_head.weight",
    }
    assert {name: mapper.map_name(name) for name in expected} == expected
    vllm_compat.load_transformers_tower_names()
    assert LlavaOnevisionForConditionalGeneration.hf_to_vllm_mapper is mapper  # once


def test_the_cpu_head_sizes_the_config_allows_are_vllms():
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

    from verl.workers.rollout.vllm_compat import CPU_ATTENTION_HEAD_SIZES

    assert list(CPU_ATTENTION_HEAD_SIZES) == CPUAttentionBackend.get_supported_head_sizes()
