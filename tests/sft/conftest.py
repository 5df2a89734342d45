# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The SFT data tests' tiny models (a text and a vision-language one, built once per module) and the text model's
tokenizer; test_sft.py builds its own, with smaller images."""

import pytest

from verl.data.tokenizer import get_tokenizer
from verl.models.tiny_models import get_or_build_tiny_model


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, str]:
    root = str(tmp_path_factory.mktemp("sft_models"))
    return {"text": get_or_build_tiny_model("qwen2", root), "vl": get_or_build_tiny_model("qwen2_5_vl", root)}


@pytest.fixture(scope="module")
def tokenizer(models):
    return get_tokenizer(models["text"])
