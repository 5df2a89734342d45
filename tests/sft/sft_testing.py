# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Helpers shared by the SFT tests (imported by name: pytest puts tests/sft on sys.path)."""

from types import SimpleNamespace


VL_PIXELS = {"min_pixels": 28 * 28 * 4, "max_pixels": 28 * 28 * 64}
"""The vision-language tests' image bounds: 4 to 64 patches of 28 x 28."""


def data_config(**overrides) -> SimpleNamespace:
    """The data settings SFTDataset reads, with the tests' defaults (tiny images, 256 tokens, errors on overflow)."""
    base = dict(
        prompt_key=None,
        response_key=None,
        messages_key="messages",
        image_key="images",
        tools_key="tools",
        image_dir=None,
        allow_paths_outside_image_dir=False,
        min_pixels=3136,
        max_pixels=3136,
        max_length=256,
        truncation="error",
        chat_template_kwargs={},
    )
    return SimpleNamespace(**{**base, **overrides})


def learned_spans(tokenizer, example: dict) -> list[str]:
    """The runs of an encoded example's tokens that the loss mask learns, decoded."""
    spans, current = [], []
    for token, kept in zip(example["input_ids"] + [None], example["loss_mask"] + [0]):
        if kept:
            current.append(token)
        elif current:
            spans, current = [*spans, tokenizer.decode(current)], []
    return spans
