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
"""Where a Hugging Face model keeps its parts: the vision tower and the language model of a vision-language model.

Kept apart from model loading so that the attention and sequence-parallel code can find the parts without importing
the loaders (which import them)."""

from torch import nn


_VISION_TOWER_NAMES = ("visual", "vision_tower", "vision_model")


def get_vision_tower(model: nn.Module) -> nn.Module | None:
    """The vision encoder of a vision-language model (`visual` in Qwen2-VL), or None for a text model."""
    for owner in (model, getattr(model, "model", None)):
        for name in _VISION_TOWER_NAMES:
            tower = getattr(owner, name, None) if owner is not None else None
            if isinstance(tower, nn.Module):
                return tower
    return None


def get_language_model(model: nn.Module) -> nn.Module | None:
    """The text decoder a vision-language model feeds its image embeddings into (`language_model`), or None."""
    for owner in (getattr(model, "model", None), model):
        language_model = getattr(owner, "language_model", None) if owner is not None else None
        if isinstance(language_model, nn.Module):
            return language_model
    return None
