# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The CPU quickstart's builders: the synthetic counting data and the format-only warm start, a supervised fine-tuning
run (`make demo` runs them)."""

import collections
import importlib.util
import json
import os

import numpy as np
import pytest
import torch
from PIL import Image

from verl.models.tiny_models import get_or_build_tiny_model


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


def test_sft_data_holds_every_answer_of_each_picture_in_a_group(data_dir):
    load_example("make_data").write_sft_split(str(data_dir), "train")
    rows = read_rows(data_dir)
    with open(data_dir / "train_sft.jsonl", encoding="utf-8") as f:
        sft = [json.loads(line) for line in f]
    assert len(sft) == 4 * len(rows)
    for index, row in enumerate(rows):
        group = sft[4 * index : 4 * index + 4]
        assert [item["messages"][1]["content"] for item in group] == ["1", "2", "3", "4"]
        assert all(
            item["images"] == row["images"] and item["messages"][0]["content"] == row["problem"] for item in group
        )


@pytest.mark.slow
def test_warm_start_sft_teaches_the_format_but_not_the_answer(data_dir, tmp_path, local_ray):
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from verl.sft.config import load_sft_config
    from verl.sft.main import run_sft

    load_example("make_data").write_sft_split(str(data_dir), "train")
    model = get_or_build_tiny_model("qwen2_5_vl", str(tmp_path / "cache"), min_pixels=3136, max_pixels=3136)
    save = tmp_path / "warm_start"
    config = load_sft_config(
        [
            f"config={REPO}/examples/cpu_quickstart/sft.yaml",
            f"data.train_files={data_dir / 'train_sft.jsonl'}",
            f"data.image_dir={data_dir / 'images'}",
            f"worker.model.model_path={model}",
            f"trainer.save_checkpoint_path={save}",
            "trainer.max_steps=20",
            "data.batch_size=32",
            "worker.micro_batch_size_per_device=16",
        ]
    )
    run_sft(config)

    processor = AutoProcessor.from_pretrained(save / "huggingface")
    warm = AutoModelForImageTextToText.from_pretrained(save / "huggingface", dtype=torch.float32).eval()
    rows = read_rows(data_dir)[:16]
    texts, images = [], []
    for row in rows:
        content = [{"type": "image"}, {"type": "text", "text": row["problem"].replace("<image>", "")}]
        messages = [{"role": "user", "content": content}]
        texts.append(processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False))
        images.append(Image.open(data_dir / "images" / row["images"][0]).convert("RGB"))
    processor.tokenizer.padding_side = "left"
    batch = processor(text=texts, images=images, return_tensors="pt", padding=True)
    with torch.no_grad():
        next_token = torch.softmax(warm(**batch).logits[:, -1].float(), dim=-1)
    answer_ids = processor.tokenizer.convert_tokens_to_ids(list("1234"))
    digit_probs = next_token[:, answer_ids]
    assert (digit_probs.sum(-1) > 0.8).all()  # it answers with a digit from 1 to 4 ...
    per_answer = digit_probs.mean(0) / digit_probs.sum(-1).mean()
    assert ((per_answer > 0.15) & (per_answer < 0.35)).all(), per_answer  # ... each about as often (chance level)
