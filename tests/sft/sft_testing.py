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
"""Helpers shared by the SFT tests (imported by name: pytest puts tests/sft on sys.path)."""

from types import SimpleNamespace


def data_config(**overrides) -> SimpleNamespace:
    """The data settings SFTDataset reads, with the tests' defaults (tiny images, 256 tokens, errors on overflow)."""
    base = dict(
        prompt_key=None,
        response_key=None,
        messages_key="messages",
        image_key="images",
        tools_key="tools",
        image_dir=None,
        min_pixels=3136,
        max_pixels=3136,
        max_length=256,
        truncation="error",
    )
    return SimpleNamespace(**{**base, **overrides})
