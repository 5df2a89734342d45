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
"""The CPU quickstart's builders: the synthetic counting data and the format-only warm start (`make demo` runs them)."""

import collections
import importlib.util
import json
import os
import random
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
from PIL import Image

from verl.utils.tiny_models import get_or_build_tiny_model


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_example(name: str):
    spec = importlib.util.spec_from_file_location(name, os.path.join(REPO, "examples", "cpu_quickstart", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("quickstart_data")
    load_example("make_data").write_split(str(root), "train", 42, seed=0)
    return root


def read_rows(data_dir):
    with open(data_dir / "train.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_answers_are_balanced_and_shuffled(data_dir):
    answers = [row["answer"] for row in read_rows(data_dir)]
    counts = collections.Counter(answers)
    assert sorted(counts) == ["1", "2", "3", "4"]
    assert max(counts.values()) - min(counts.values()) <= 1  # 42 rows: 11, 11, 10, 10
    assert answers != sorted(answers) and answers[:4] != ["1", "2", "3", "4"]


def test_each_picture_shows_as_many_squares_as_its_answer(data_dir):
    for row in read_rows(data_dir):
        pixels = np.asarray(Image.open(data_dir / "images" / row["images"][0]).convert("RGB"))
        assert pixels.shape == (56, 56, 3)
        coloured = (pixels != 255).any(-1)
        cells = [coloured[y : y + 28, x : x + 28].sum() for y in (0, 28) for x in (0, 28)]
        # one square of side 14..22 per occupied cell, nothing in the others
        assert sum(196 <= c <= 23 * 23 for c in cells) == int(row["answer"]), (row, cells)
        assert sum(c == 0 for c in cells) == 4 - int(row["answer"]), (row, cells)


def test_warm_start_teaches_the_format_but_not_the_answer(data_dir, tmp_path):
    from transformers import AutoModelForImageTextToText, AutoProcessor

    warm_start = load_example("warm_start")
    built = get_or_build_tiny_model("qwen2_5_vl", str(tmp_path / "cache"), min_pixels=3136, max_pixels=3136)
    model_dir = tmp_path / "model"
    shutil.copytree(built, model_dir)
    script = os.path.join(REPO, "examples", "cpu_quickstart", "warm_start.py")
    cmd = [sys.executable, script, "--model", str(model_dir), "--data", str(data_dir / "train.jsonl")]
    subprocess.run([*cmd, "--steps", "20", "--batch-size", "8"], check=True, capture_output=True)

    processor = AutoProcessor.from_pretrained(model_dir)
    processor.tokenizer.padding_side = "right"
    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32).eval()
    rows = read_rows(data_dir)[:16]
    batch, digit_pos = warm_start.build_batch(processor, rows, str(data_dir / "images"), random.Random(0))
    with torch.no_grad():
        logits = model(**batch).logits
    index = torch.arange(len(rows))
    answer_ids = processor.tokenizer.convert_tokens_to_ids(list(warm_start.ANSWERS))
    digit_probs = torch.softmax(logits[index, digit_pos - 1], dim=-1)[:, answer_ids]
    assert (digit_probs.sum(-1) > 0.8).all()  # it answers with a digit from 1 to 4 ...
    per_answer = digit_probs.mean(0) / digit_probs.sum(-1).mean()
    assert ((per_answer > 0.15) & (per_answer < 0.35)).all(), per_answer  # ... each about as often (chance level)
    end_id = processor.tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert (batch["input_ids"][index, digit_pos + 1] == end_id).all()
    assert (torch.softmax(logits[index, digit_pos], dim=-1)[:, end_id] > 0.9).all()  # ... and stops after it
