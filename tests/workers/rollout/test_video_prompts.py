# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""A video prompt reaches the engine as the dataset built it: vLLM expands the one video placeholder into the same
tokens (Qwen3-VL and Qwen3.5: with each frame's timestamp written in) as the dataset's input_ids, so the policy is
trained on the prompt it generated from."""

import os

import pytest
import torch
from families import vl_kinds
from media_files import write_video

from verl.models.rope_index import VIDEO_TOKEN, RopeIndex, load_model_config
from verl.models.tiny_models import get_or_build_tiny_model


os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


def _video_example(kind, tmp_path, num_frames, rate, max_prompt_length):
    """(model folder, tokenizer, processor, the dataset's example) of one prompt with a clip of `num_frames` gray
    frames at `rate` fps, sampled at 4 fps."""
    from verl.data.dataset import RLHFDataset
    from verl.data.tokenizer import get_processor, get_tokenizer

    model_dir = get_or_build_tiny_model(kind, str(tmp_path / "models"))
    tokenizer, processor = get_tokenizer(model_dir), get_processor(model_dir)
    write_video(str(tmp_path / "clip.mp4"), num_frames=num_frames, rate=rate)
    rows = [{"prompt": "What happens in <video>?", "answer": "fade", "videos": ["clip.mp4"]}]
    dataset = RLHFDataset(
        rows, tokenizer, processor, image_dir=str(tmp_path), video_fps=4.0, max_prompt_length=max_prompt_length,
        min_pixels=3136, max_pixels=12544,
    )  # fmt: skip
    return model_dir, tokenizer, processor, dataset[0]


@pytest.mark.parametrize("kind", vl_kinds("engine_video"))
def test_the_engine_expands_a_video_prompt_as_the_dataset_does(kind, tmp_path):
    from vllm import SamplingParams

    from verl.protocol import DataProto, collate_fn
    from verl.workers.rollout import vllm_compat
    from verl.workers.rollout.config import RolloutConfig
    from verl.workers.rollout.vllm_rollout import VLLMRollout

    # 2 s, sampled at 4 fps: 8 frames
    model_dir, tokenizer, processor, example = _video_example(
        kind, tmp_path, num_frames=16, rate=8, max_prompt_length=256
    )
    batch: DataProto = collate_fn([example])
    assert batch.non_tensor_batch["multi_modal_data"][0]["video_fps"] == 4.0  # the rate the engine is told
    config = RolloutConfig(
        n=1, dtype="fp32", kv_cache_memory_mb=32, tensor_parallel_size=1, max_num_batched_tokens=1024,
        prompt_length=256, response_length=4,
    )  # fmt: skip
    vllm_compat.forget_dense_parallel_groups()  # a mixture of experts after a dense engine of this process
    rollout = VLLMRollout(model_dir, config, tokenizer, processor)
    inputs = rollout._engine_inputs(batch)
    [output] = rollout.inference_engine.generate(
        inputs, SamplingParams(max_tokens=1, detokenize=False), use_tqdm=False
    )
    expected = example["input_ids"][example["attention_mask"].bool()].tolist()
    assert list(output.prompt_token_ids) == expected
    _engine_and_actor_agree_after_the_video(kind, model_dir, rollout, inputs, example, processor)
    token_types = RopeIndex(load_model_config(model_dir)).mm_token_type_ids(torch.tensor(expected))
    video_tokens = int((token_types == VIDEO_TOKEN).sum())  # GLM writes a video's frames with the image token
    assert video_tokens == 8 // 2 * 4  # 8 frames in 4 temporal patches of 2, 2x2 merged tokens each at this size
    text = tokenizer.decode(expected)
    if kind in ("glm4v", "glm4v_moe"):  # GLM: each temporal patch is an image followed by its second (0, 0, 1, 1)
        assert text.count("<|end_of_image|>1<|begin_of_image|>") == 1, text
    elif kind != "qwen2_5_vl":  # Qwen3-VL, Qwen3.5: the timestamps of the temporal patches are text in the prompt
        assert "<0.1 seconds>" in text or "<0.2 seconds>" in text, text


@pytest.mark.parametrize("kind", vl_kinds("engine_video"))
def test_the_workers_rebuild_a_videos_pixels_as_the_dataset_built_them(kind, tmp_path):
    """The actor and the environment images rebuild a row's model inputs from `multi_modal_data` (process_media):
    the dataset's frames, not resampled (Qwen3-VL's video processor samples at 2 fps by default and, without the
    frame rate, assumed 24 fps: a 4 s clip got 2 temporal patches for the prompt's 8, and the forward failed)."""
    from verl.data.multimodal import process_media

    # 4 s, sampled at 4 fps: 16 frames
    model_dir, _, processor, example = _video_example(kind, tmp_path, num_frames=16, rate=4, max_prompt_length=512)
    rebuilt = process_media(example["multi_modal_data"], processor)
    assert rebuilt["video_grid_thw"][0, 0].item() == 16 // 2  # 16 frames in temporal patches of 2
    tokens = RopeIndex(load_model_config(model_dir)).mm_token_type_ids(example["input_ids"])
    merged = rebuilt["video_grid_thw"].prod().item() // processor.video_processor.merge_size**2
    assert int((tokens == VIDEO_TOKEN).sum()) == merged  # the features the forward makes fill the prompt's tokens


def _engine_and_actor_agree_after_the_video(kind, model_dir, rollout, inputs, example, processor):
    """The engine, given the model's weights, and the actor's forward on the dataset's row (its position ids, the
    workers' media inputs) give the prompt's tokens the same log-probs. The tokens after a video of more than one
    temporal patch were 0.6 nats a token apart on Qwen2.5-VL: the dataset's positions started that text inside the
    video's (transformers 5's rope index), the engine's past it."""
    import torch.nn.functional as F
    import transformers
    from families import FAMILIES
    from safetensors.torch import load_file
    from vllm import SamplingParams

    from verl.data.multimodal import process_media
    from verl.utils.hub import safetensors_files
    from verl.workers.rollout import vllm_compat

    weights = {name: tensor for path in safetensors_files(model_dir) for name, tensor in load_file(path).items()}
    embedding = next(name for name in weights if name.endswith("embed_tokens.weight"))
    weights.setdefault("lm_head.weight", weights[embedding])  # tied: the engine's head reloads under its own name
    vllm_compat.load_weights(rollout.inference_engine, iter(weights.items()), in_place_reload=True)
    vllm_compat.reset_caches_after_weight_update(rollout.inference_engine)
    params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0, detokenize=False)
    [output] = rollout.inference_engine.generate(inputs, params, use_tqdm=False)
    keep = example["attention_mask"].bool()
    ids = example["input_ids"][keep]
    engine = torch.tensor(
        [vllm_compat.sampled_token_logprob(entry, t) for entry, t in zip(output.prompt_logprobs[1:], ids[1:].tolist())]
    )
    model = getattr(transformers, FAMILIES[kind].hf_class).from_pretrained(model_dir, dtype=torch.float32).eval()
    media = process_media(example["multi_modal_data"], processor)
    with torch.no_grad():
        logits = model(
            input_ids=ids[None], position_ids=example["position_ids"][..., keep][:, None], use_cache=False, **media
        ).logits[0, :-1]
    actor = F.log_softmax(logits, dim=-1).gather(-1, ids[1:, None])[:, 0]
    gap = (engine - actor).abs()
    # fp32: measured 2e-6 mean; Qwen3.5's CPU engine runs in bf16: 0.03
    assert gap.mean() <= (0.1 if kind == "qwen3_5" else 1e-3), (float(gap.mean()), float(gap.max()))


@pytest.mark.parametrize("kind", ["glm4v", "glm4v_moe"])
def test_the_engine_and_the_actor_agree_on_prompts_with_images_and_videos(kind, tmp_path):
    """Dataset rows with an image and a video (either first), and rows with one of them, in one micro-batch: the
    engine expands them into the dataset's tokens, and, given the model's weights, gives the text after the media the
    log-probs of the actor's forward (packed and padded). GLM writes a video's frames with the image token; its
    forward failed on images and videos together until verl.models.glm_video gave the frames as images."""
    import numpy as np
    from PIL import Image
    from safetensors.torch import load_file
    from vllm import SamplingParams

    from verl.data.dataset import RLHFDataset
    from verl.data.tokenizer import get_processor, get_tokenizer
    from verl.models.config import ModelConfig
    from verl.models.loading import build_model
    from verl.protocol import DataProto, collate_fn
    from verl.utils.hub import safetensors_files
    from verl.utils.torch_functional import log_probs_from_logits
    from verl.workers.actor.forward import forward_response, process_multi_modal_inputs
    from verl.workers.rollout import vllm_compat
    from verl.workers.rollout.config import RolloutConfig
    from verl.workers.rollout.vllm_rollout import VLLMRollout

    model_dir = get_or_build_tiny_model(kind, str(tmp_path / "models"))
    tokenizer, processor = get_tokenizer(model_dir), get_processor(model_dir)
    write_video(str(tmp_path / "clip.mp4"), num_frames=16, rate=8)  # 2 s at 4 fps: 4 temporal patches
    pixels = np.random.default_rng(0).integers(0, 256, (56, 84, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(tmp_path / "picture.png")
    rows = [
        {"prompt": "Compare <image> with <video>?", "images": ["picture.png"], "videos": ["clip.mp4"]},
        {"prompt": "What happens in <video>, then <image>?", "images": ["picture.png"], "videos": ["clip.mp4"]},
        {"prompt": "What is in <image>?", "images": ["picture.png"], "videos": []},
        {"prompt": "What happens in <video>?", "images": [], "videos": ["clip.mp4"]},
    ]
    rows = [{**row, "answer": "x"} for row in rows]
    dataset = RLHFDataset(
        rows, tokenizer, processor, image_dir=str(tmp_path), video_fps=4.0, max_prompt_length=256,
        min_pixels=3136, max_pixels=12544,
    )  # fmt: skip
    examples = [dataset[index] for index in range(len(rows))]
    batch = collate_fn(examples)
    config = RolloutConfig(
        n=1, dtype="fp32", kv_cache_memory_mb=32, tensor_parallel_size=1, max_num_batched_tokens=1024,
        prompt_length=256, response_length=4,
    )  # fmt: skip
    vllm_compat.forget_dense_parallel_groups()  # a mixture of experts after a dense engine of this process
    rollout = VLLMRollout(model_dir, config, tokenizer, processor)
    weights = {name: tensor for path in safetensors_files(model_dir) for name, tensor in load_file(path).items()}
    vllm_compat.load_weights(rollout.inference_engine, iter(weights.items()), in_place_reload=True)
    vllm_compat.reset_caches_after_weight_update(rollout.inference_engine)
    params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0, detokenize=False)
    outputs = rollout.inference_engine.generate(rollout._engine_inputs(batch), params, use_tqdm=False)

    tail = 6  # the prompt's last tokens, all text after the media: they see every image and frame
    engine = []
    for example, output in zip(examples, outputs):
        ids = example["input_ids"][example["attention_mask"].bool()].tolist()
        assert list(output.prompt_token_ids) == ids
        engine.append(
            [vllm_compat.sampled_token_logprob(e, t) for e, t in zip(output.prompt_logprobs[-tail:], ids[-tail:])]
        )
    tensors = {key: batch.batch[key] for key in ("input_ids", "attention_mask", "position_ids")}
    data = DataProto.from_dict(
        tensors={**tensors, "responses": tensors["input_ids"][:, -tail:]},
        non_tensors={"multi_modal_data": batch.non_tensor_batch["multi_modal_data"]},
    )
    process_multi_modal_inputs(data, processor)
    model = build_model(ModelConfig(model_path=model_dir, enable_gradient_checkpointing=False)).eval()
    with torch.no_grad():
        for padding_free in (False, True):
            actor = forward_response(
                model, data, padding_free, lambda logits, labels: {"lp": log_probs_from_logits(logits, labels)}
            )["lp"]
            gap = (actor - torch.tensor(engine)).abs().max().item()
            assert gap <= 1e-4, f"padding_free={padding_free}: {gap}"  # fp32: measured 7e-6; the media swapped: 1.4


def test_transformers_still_starts_the_text_after_a_video_inside_its_positions(tmp_path):
    """Why RopeIndex moves the text after a vision block: transformers' own Qwen2.5-VL rope index starts it at the
    video's start + its merged height or width, behind the video's time positions. When this fails, transformers
    follows the released models, and `text_after_vision_past_it` may go."""
    import transformers

    from verl.data.multimodal import process_media
    from verl.models.rope_index import _ModelStandIn

    model_dir, _, processor, example = _video_example(
        "qwen2_5_vl", tmp_path, num_frames=16, rate=8, max_prompt_length=256
    )
    keep = example["attention_mask"].bool()
    ids = example["input_ids"][keep]
    config = load_model_config(model_dir)
    token_types = RopeIndex(config).mm_token_type_ids(ids)
    video = torch.nonzero(token_types == VIDEO_TOKEN).flatten()
    start, after = int(video[0]), int(video[-1]) + 1
    grid = process_media(example["multi_modal_data"], processor)["video_grid_thw"]
    assert grid.tolist() == [[4, 4, 4]]  # 4 temporal patches of 2 frames (0.5 s at 4 fps), 2 x 2 merged tokens
    theirs, _ = transformers.Qwen2_5_VLModel.get_rope_index(
        _ModelStandIn(transformers.Qwen2_5_VLModel, config),
        ids[None],
        mm_token_type_ids=token_types[None],
        video_grid_thw=grid,
        second_per_grid_ts=torch.tensor([0.5]),
        attention_mask=torch.ones_like(ids)[None],
    )
    ours = example["position_ids"][..., keep]
    assert int(ours[0, after - 1]) == start + 3  # the last temporal patch: time position 3
    assert ours[:, after].tolist() == [start + 4] * 3  # the text after it: past the video, as vLLM
    assert theirs[:, 0, after].tolist() == [start + 2] * 3  # transformers: the merged width (2) past its start
