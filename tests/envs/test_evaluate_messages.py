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
"""How `verl.envs.evaluate` puts images into the messages it sends: a row's images at the prompt's markers, and
image parts as OpenAI image_url parts with PNG data URLs."""

import base64
import io

import pytest
from PIL import Image

from verl.envs.evaluate import _row_images, prompt_message, to_openai_messages


def _picture(colour):
    return Image.new("RGB", (8, 6), colour)


def test_a_rows_images_go_at_the_markers_or_first():
    red, blue = _picture((255, 0, 0)), _picture((0, 0, 255))
    assert prompt_message("Plain.", []) == {"role": "user", "content": "Plain."}
    marked = prompt_message("Left <image> right <image>", [red, blue])["content"]
    assert [part["type"] for part in marked] == ["text", "image", "text", "image"]
    assert marked[1]["image"] is red and marked[3]["image"] is blue and marked[2]["text"] == " right "
    first = prompt_message("Which is bigger?", [red, blue])["content"]
    assert [part["type"] for part in first] == ["image", "image", "text"] and first[2]["text"] == "Which is bigger?"
    with pytest.raises(ValueError, match="1 <image> markers but the row has 2 images"):
        prompt_message("Only <image> one", [red, blue])


def test_image_parts_become_png_data_urls_once_per_image():
    red = _picture((255, 0, 0))
    messages = [
        {"role": "user", "content": [{"type": "image", "image": red}, {"type": "text", "text": "And?"}]},
        {"role": "assistant", "content": "red"},
        {"role": "user", "content": [{"type": "image", "image": red}]},
    ]
    cache = {}
    wire = to_openai_messages(messages, cache)
    url = wire[0]["content"][0]["image_url"]["url"]
    assert wire[0]["content"][0]["type"] == "image_url" and wire[0]["content"][1] == {"type": "text", "text": "And?"}
    assert wire[1] == messages[1] and wire[2]["content"][0]["image_url"]["url"] is url and len(cache) == 1
    assert url.startswith("data:image/png;base64,")
    decoded = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
    assert decoded.size == (8, 6) and decoded.convert("RGB").getpixel((3, 3)) == (255, 0, 0)  # PNG: lossless
    assert messages[0]["content"][0]["image"] is red  # the conversation itself keeps the PIL image
    with pytest.raises(TypeError, match="must hold a PIL image, got str"):
        to_openai_messages([{"role": "user", "content": [{"type": "image", "image": "red.png"}]}])


def test_row_images_are_read_relative_to_the_image_folder(tmp_path):
    _picture((0, 255, 0)).save(tmp_path / "green.png")
    (image,) = _row_images(["green.png"], str(tmp_path), 0)
    assert image.mode == "RGB" and image.getpixel((0, 0)) == (0, 255, 0)
    assert _row_images(None, str(tmp_path), 0) == []
    with pytest.raises(
        ValueError, match=r"row 3: image 0 cannot be read: image file .*missing.png' does not exist \(--image-dir\)"
    ):
        _row_images("missing.png", str(tmp_path), 3)
