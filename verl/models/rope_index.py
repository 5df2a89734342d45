# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The 3-D rope index (time, height, width) of Qwen2-VL, Qwen2.5-VL, Qwen3-VL and GLM-4.1V, by the model's own code.
Dataset position ids must equal the model's, so rather than re-implement that arithmetic (which changes across
transformers releases) the model class's `get_rope_index` runs on a weightless stand-in, with one correction: the text
after a vision block starts at the block's largest position + 1, as in the released models' code and vLLM's."""

from typing import Any

import torch


# model_type of the config -> name of the transformers class that owns get_rope_index.
MROPE_MODEL_CLASSES: dict[str, str] = {
    "qwen2_vl": "Qwen2VLModel",
    "qwen2_5_vl": "Qwen2_5_VLModel",
    "qwen3_vl": "Qwen3VLModel",
    "qwen3_vl_moe": "Qwen3VLMoeModel",  # Qwen3-VL's rope index, MoE text model
    "qwen3_5": "Qwen3_5Model",  # Qwen3.5: Qwen3-VL's rope index (timestamps between video frames)
    "qwen3_5_moe": "Qwen3_5MoeModel",
    "glm4v": "Glm4vModel",  # GLM-4.1V: one rope group per video frame (timestamps between frames)
    "glm4v_moe": "Glm4vMoeModel",
}
# Values of mm_token_type_ids, as the processors emit them.
TEXT_TOKEN, IMAGE_TOKEN, VIDEO_TOKEN = 0, 1, 2


def uses_mrope(model_config: Any) -> bool:
    """Whether the model takes (3, L) position ids."""
    return getattr(model_config, "model_type", None) in MROPE_MODEL_CLASSES


class _ModelStandIn:
    """What get_rope_index uses of a model: `config` and `get_vision_position_ids`; picklable, no weights."""

    def __init__(self, model_class: type, config: Any) -> None:
        self.model_class, self.config = model_class, config

    def get_vision_position_ids(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        return self.model_class.get_vision_position_ids(self, *args, **kwargs)


class RopeIndex:
    """The (3, L) position ids of one left-padded prompt, as the model's get_rope_index gives them."""

    def __init__(self, model_config: Any) -> None:
        import transformers

        model_type = getattr(model_config, "model_type", None)
        if model_type not in MROPE_MODEL_CLASSES:
            raise ValueError(
                f"No 3-D rope index for model_type {model_type!r}; supported: {', '.join(MROPE_MODEL_CLASSES)}."
            )
        self._model = _ModelStandIn(getattr(transformers, MROPE_MODEL_CLASSES[model_type]), model_config)
        self.image_token_id = model_config.image_token_id
        self.video_token_id = model_config.video_token_id
        # GLM-4.1V writes a video's frames with the image token, between these two markers
        self.video_span = (
            getattr(model_config, "video_start_token_id", None),
            getattr(model_config, "video_end_token_id", None),
        )

    def mm_token_type_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        """The processor's mm_token_type_ids: 0 text, 1 image, 2 video."""
        types = torch.full_like(input_ids, TEXT_TOKEN)
        types[input_ids == self.image_token_id] = IMAGE_TOKEN
        types[input_ids == self.video_token_id] = VIDEO_TOKEN
        start, end = self.video_span
        if start is not None and end is not None:
            in_video = torch.cumsum(input_ids == start, dim=-1) > torch.cumsum(input_ids == end, dim=-1)
            types[(input_ids == self.image_token_id) & in_video] = VIDEO_TOKEN
        return types

    def __call__(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        image_grid_thw: torch.Tensor | None = None,
        video_grid_thw: torch.Tensor | None = None,
        second_per_grid_ts: torch.Tensor | list[float] | None = None,
    ) -> torch.Tensor:
        """Position ids (3, L) for one sequence (L,); padding gets 0, as in the model."""
        if second_per_grid_ts is not None and not isinstance(second_per_grid_ts, torch.Tensor):
            second_per_grid_ts = torch.tensor(second_per_grid_ts, dtype=torch.float32)
        position_ids, _ = self._model.model_class.get_rope_index(
            self._model,
            input_ids.unsqueeze(0),
            mm_token_type_ids=self.mm_token_type_ids(input_ids).unsqueeze(0),
            image_grid_thw=image_grid_thw,
            video_grid_thw=video_grid_thw,
            second_per_grid_ts=second_per_grid_ts,
            attention_mask=attention_mask.unsqueeze(0),
        )
        position_ids = position_ids[:, 0, :]
        keep = attention_mask.bool()
        position_ids[:, keep] = text_after_vision_past_it(
            position_ids[:, keep], self.mm_token_type_ids(input_ids[keep])
        )
        return position_ids


def text_after_vision_past_it(positions: torch.Tensor, token_types: torch.Tensor) -> torch.Tensor:
    """`positions` (3, n) of one unpadded sequence with each text span that follows a vision block moved (and all
    after it) to start at the largest position before it + 1. transformers 5 starts it at the block's start + its
    merged height or width, whichever is larger: right for an image (its time row is 0), but behind the positions of
    a video whose time row grows past that (Qwen2-VL and Qwen2.5-VL: a video of 4 temporal patches of 2 x 2 merged
    tokens has time positions up to 3, and the text after it started at start + 2, reusing the video's positions;
    the engine, as the released models, starts it at start + 4)."""
    positions = positions.clone()
    after_vision = (token_types[1:] == TEXT_TOKEN) & (token_types[:-1] != TEXT_TOKEN)
    for index in (torch.nonzero(after_vision).flatten() + 1).tolist():
        positions[:, index:] += int(positions[:, :index].max()) + 1 - int(positions[0, index])
    return positions


def load_model_config(path: str, trust_remote_code: bool = False) -> Any:
    """The config of a model directory or Hub id; raises naming the path."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as error:
        raise OSError(
            f"Could not load the model config from {path!r} to compute position ids: {error}. Pass model_config "
            "(the config of worker.actor.model.model_path) to the dataset."
        ) from error
