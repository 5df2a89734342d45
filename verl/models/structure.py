# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Where a Hugging Face VLM keeps its vision tower and language model; apart from the loaders so that attention and
sequence-parallel code can use it without importing them (they import those)."""

from torch import nn


_VISION_TOWER_NAMES = ("visual", "vision_tower", "vision_model")


def get_vision_tower(model: nn.Module) -> nn.Module | None:
    """The vision encoder of a vision-language model, or None for a text model."""
    owners = (model, getattr(model, "model", None))
    towers = (getattr(owner, name, None) for owner in owners for name in _VISION_TOWER_NAMES)
    return next((tower for tower in towers if isinstance(tower, nn.Module)), None)


def get_language_model(model: nn.Module) -> nn.Module | None:
    """The text decoder a vision-language model feeds its image embeddings into, or None."""
    found = (getattr(owner, "language_model", None) for owner in (getattr(model, "model", None), model))
    return next((language_model for language_model in found if isinstance(language_model, nn.Module)), None)
