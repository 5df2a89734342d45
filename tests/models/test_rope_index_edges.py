# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Edges of the 3-D rope index (verl/models/rope_index.py) on a Qwen2.5-VL config alone (no weights, no processor):
a video's seconds per temporal patch may come as a list of floats, as the signature allows, as well as a tensor."""

import torch
from transformers import Qwen2_5_VLConfig

from verl.models.rope_index import VIDEO_TOKEN, RopeIndex


def test_seconds_per_grid_given_as_a_list_of_floats_are_not_rounded_to_whole_seconds():
    config = Qwen2_5_VLConfig(vision_config={"tokens_per_second": 2})  # as the released 7B model
    assert config.vision_config.tokens_per_second == 2 and config.vision_config.spatial_merge_size == 2
    video = [config.video_token_id] * 16  # 4 temporal patches of 2 x 2 merged tokens
    ids = torch.tensor([0, 1, 2, config.vision_start_token_id, *video, config.vision_start_token_id + 1, 3, 4])
    mask = torch.ones_like(ids)
    grid = torch.tensor([[4, 4, 4]])
    rope = RopeIndex(config)
    as_list = rope(ids, mask, video_grid_thw=grid, second_per_grid_ts=[0.5])
    as_tensor = rope(ids, mask, video_grid_thw=grid, second_per_grid_ts=torch.tensor([0.5]))
    assert torch.equal(as_list, as_tensor)
    is_video = rope.mm_token_type_ids(ids) == VIDEO_TOKEN
    start = 4  # the video's first position: after 4 text tokens at 0, 1, 2, 3
    # 0.5 s a temporal patch x 2 positions a second: one time position a patch (0 for all of them if 0.5 became 0)
    assert as_list[0, is_video].tolist() == [start + t for t in range(4) for _ in range(4)]
    assert as_list[:, 4 + 16].tolist() == [start + 4] * 3  # the text after the video: past its largest position
