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
    rollout = VLLMRollout(model_dir, config, tokenizer, processor)
    inputs = rollout._engine_inputs(batch)
    [output] = rollout.inference_engine.generate(
        inputs, SamplingParams(max_tokens=1, detokenize=False), use_tqdm=False
    )
    expected = example["input_ids"][example["attention_mask"].bool()].tolist()
    assert list(output.prompt_token_ids) == expected
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
