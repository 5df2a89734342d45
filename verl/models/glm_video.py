# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""GLM-4.1V and GLM-4.5V videos given to the model as their frames' images, where the model cannot place both kinds.

These models write a video's frames with the image token (between video-start and video-end markers), and
transformers' Glm4vModel finds the places of both images and videos by that one token (`get_placeholder_mask`, 5.19):
given `pixel_values` and `pixel_values_videos` together (a micro-batch with an image row and a video row, or a row
with both) each mask covers both kinds and the forward fails ("Image features and image tokens do not match"). Its
`get_video_features` runs the vision tower on every frame as on an image of grid (1, h, w), so the frames given as
images, in the order their tokens stand, are one image stream that the model's own placement fills correctly: the
same tower on the same patches, no patched transformers code."""

from typing import Any

import torch

from verl.models.rope_index import IMAGE_TOKEN, VIDEO_TOKEN, RopeIndex


FRAMES_WRITTEN_AS_IMAGES: frozenset[str] = frozenset({"glm4v", "glm4v_moe"})
"""Model types whose videos' frames are image tokens in the prompt, placed by the image token in the forward."""

VIDEO_KEYS = ("pixel_values_videos", "video_grid_thw")

ONE_VIDEO_A_PROMPT: frozenset[str] = FRAMES_WRITTEN_AS_IMAGES
"""Model types whose vLLM model takes at most one video a prompt (its GLM-4.1V processing info: `{"video": 1}`): the
dataset refuses a row with more, naming it; the engine refused it at the first rollout ("At most 1 video(s) may be
provided in one prompt") and the run stopped there."""


def needs_frames_as_images(model_config: Any, rows: list[dict[str, torch.Tensor] | None]) -> bool:
    """Whether a micro-batch of these rows' vision inputs has images and videos that the model would mix up."""
    if getattr(model_config, "model_type", None) not in FRAMES_WRITTEN_AS_IMAGES:
        return False
    return any("pixel_values" in (row or {}) for row in rows) and any(
        "pixel_values_videos" in (row or {}) for row in rows
    )


def frames_as_images(
    model_config: Any, input_ids: torch.Tensor, inputs: dict[str, torch.Tensor], row: int = 0
) -> dict[str, torch.Tensor]:
    """One row's vision `inputs` (`process_media`'s) with its videos' frames as images of grid (1, h, w), the images
    and videos in the order their tokens stand in `input_ids` (the row's valid tokens, padding is never an image
    token); ValueError naming `row` when the row's media tokens do not match its images and videos."""
    if "pixel_values_videos" not in inputs:
        return inputs
    merge = model_config.vision_config.spatial_merge_size**2
    token_types = RopeIndex(model_config).mm_token_type_ids(input_ids)
    items = []  # (first token position, patches, grids of its images), per image and video
    for kind, pixels_key, grid_key in ((IMAGE_TOKEN, "pixel_values", "image_grid_thw"), (VIDEO_TOKEN, *VIDEO_KEYS)):
        if grid_key not in inputs:
            continue
        grids, pixels = inputs[grid_key], inputs[pixels_key]
        positions = torch.nonzero(token_types == kind).flatten()
        sizes = grids.prod(dim=-1)
        tokens = (sizes // merge).tolist()
        if sum(tokens) != len(positions):
            name = "image" if kind == IMAGE_TOKEN else "video"
            raise ValueError(
                f"Row {row} has {len(positions)} {name} tokens but its {name}s make {sum(tokens)} features; the "
                "prompt's tokens and its multi_modal_data must come from the same processor call."
            )
        starts = [0, *torch.cumsum(torch.tensor(tokens), 0).tolist()[:-1]]
        for grid, start, patches in zip(grids, starts, torch.split(pixels, sizes.tolist())):
            frames, height, width = grid.tolist()
            frame_grids = grid.new_tensor([[1, height, width]]).expand(frames, 3)
            items.append((int(positions[start]), patches, frame_grids))
    items.sort(key=lambda item: item[0])
    merged = {key: value for key, value in inputs.items() if key not in VIDEO_KEYS}
    merged["pixel_values"] = torch.cat([patches for _, patches, _ in items])
    merged["image_grid_thw"] = torch.cat([grids for _, _, grids in items])
    return merged
