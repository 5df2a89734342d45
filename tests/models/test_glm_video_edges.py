# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Edges of verl.models.glm_video: only GLM-4.1V / 4.5V get their videos as frames' images; every other family places
images and videos by tokens of their own, and its videos must reach the model as videos."""

import pytest
import torch
import transformers

from verl.models.glm_video import needs_frames_as_images


IMAGE_ROW = {"pixel_values": torch.zeros(16, 8), "image_grid_thw": torch.tensor([[1, 4, 4]])}
VIDEO_ROW = {"pixel_values_videos": torch.zeros(32, 8), "video_grid_thw": torch.tensor([[2, 4, 4]])}


@pytest.mark.parametrize(("model_type", "expected"), [("glm4v", True), ("glm4v_moe", True), ("qwen2_5_vl", False)])
def test_only_glm_videos_become_images_and_only_beside_images(model_type, expected):
    """The rows are process_media's dicts (an image row, a video row) and the configs transformers' own."""
    config = transformers.AutoConfig.for_model(model_type)
    assert needs_frames_as_images(config, [IMAGE_ROW, None, VIDEO_ROW]) is expected
    assert needs_frames_as_images(config, [{**IMAGE_ROW, **VIDEO_ROW}]) is expected  # one row with both
    assert not needs_frames_as_images(config, [IMAGE_ROW, None])
    assert not needs_frames_as_images(config, [VIDEO_ROW])
