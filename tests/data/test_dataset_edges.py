# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Edges of RLHFDataset that the main dataset tests leave open (found by a mutation audit of verl/data)."""

import json
import logging

import pytest
from PIL import Image

from verl.data.dataset import DatasetRowError, RLHFDataset
from verl.data.tokenizer import get_processor, get_tokenizer
from verl.models.tiny_models import get_or_build_tiny_model


PIXELS = {"min_pixels": 28 * 28 * 4, "max_pixels": 28 * 28 * 16}
ROWS = [{"prompt": f"What is {i} + {i}?", "answer": str(2 * i), "level": i} for i in range(3)]


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("tiny_models"))
    return {kind: get_or_build_tiny_model(kind, root) for kind in ("qwen2", "qwen2_5_vl")}


@pytest.fixture(scope="module")
def text_tokenizer(model_dirs):
    return get_tokenizer(model_dirs["qwen2"])


@pytest.fixture(scope="module")
def vl25(model_dirs):
    path = model_dirs["qwen2_5_vl"]
    return get_tokenizer(path), get_processor(path)


def _write_jsonl(path: str, rows: list[dict]) -> str:
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(json.dumps(row) for row in rows) + "\n")
    return path


# ----------------------------------------------------------------------------------------------------------------
# format_prompt


def test_python_format_syntax_beside_another_column_is_still_refused(tmp_path, text_tokenizer):
    # {{ level }} is a variable, but the question itself went in as Python's {content}: every prompt lost it
    template = tmp_path / "mixed.jinja"
    template.write_text("Level {{ level }}: {content}")
    with pytest.raises(ValueError, match=r"writes no variable of the row \(\{content\} is Python's format syntax"):
        RLHFDataset(ROWS, text_tokenizer, format_prompt=str(template))


def test_format_prompt_files_leading_and_trailing_blank_lines_are_not_in_the_prompt(tmp_path, text_tokenizer):
    template = tmp_path / "padded.jinja"
    template.write_text("\n\n  Solve: {{ content }}\n\n")
    dataset = RLHFDataset(ROWS[:1], text_tokenizer, format_prompt=str(template))
    assert dataset[0]["prompt_content"] == "Solve: What is 0 + 0?"


# ----------------------------------------------------------------------------------------------------------------
# what an example carries


def test_an_example_passes_other_columns_on_but_not_the_answer_or_media_columns(text_tokenizer, vl25):
    example = RLHFDataset(ROWS, text_tokenizer)[1]
    assert example["level"] == 1 and example["ground_truth"] == "2"
    assert "answer" not in example and "prompt" not in example
    tokenizer, processor = vl25
    image = Image.new("RGB", (56, 56), (200, 30, 30))
    rows = [{"prompt": "<image>What colour?", "answer": "red", "images": [image], "source": "web"}]
    example = RLHFDataset(rows, tokenizer, processor, **PIXELS)[0]
    assert example["source"] == "web" and len(example["multi_modal_data"]["images"]) == 1
    assert "images" not in example and "videos" not in example


def test_agent_loop_fields_name_verls_agent_name_tools_and_interaction_kwargs(text_tokenizer):
    row = {"prompt": "Hi", "answer": "1", "agent_name": "tool_agent"}
    row["extra_info"] = {"index": 0, "tools_kwargs": {}, "interaction_kwargs": {"name": "gsm8k"}}
    assert RLHFDataset([row], text_tokenizer).agent_loop_fields() == ["agent_name", "extra_info.interaction_kwargs"]
    plain = {"prompt": "Hi", "answer": "1", "extra_info": {"index": 0}}
    assert RLHFDataset([plain], text_tokenizer).agent_loop_fields() == []


# ----------------------------------------------------------------------------------------------------------------
# media columns


def test_a_text_only_vision_model_is_not_told_to_show_a_media_column_it_cannot_take(tmp_path, caplog):
    """gemma3 has a processor but trains on text only: an `image_path` column is no column the user forgot to name."""
    path = get_or_build_tiny_model("gemma3", str(tmp_path / "models"))
    tokenizer, processor = get_tokenizer(path), get_processor(path)
    rows = [{"prompt": "1+1?", "answer": "2", "image_path": "a.png"}]
    with caplog.at_level(logging.WARNING, logger="verl.data.dataset"):
        assert len(RLHFDataset(rows, tokenizer, processor, max_prompt_length=64)) == 1
    assert "image_path" not in caplog.text


# ----------------------------------------------------------------------------------------------------------------
# format_prompt's columns, a row's response cap


def test_format_prompts_content_is_the_prompt_even_where_a_column_is_named_content(tmp_path, text_tokenizer):
    template = tmp_path / "format.jinja"
    template.write_text("{{ content }} ({{ source }})")
    rows = [{"prompt": "What is 1 + 1?", "answer": "2", "content": "a column", "source": "gsm8k"}]
    assert (
        RLHFDataset(rows, text_tokenizer, format_prompt=str(template))[0]["prompt_content"] == "What is 1 + 1? (gsm8k)"
    )


def test_a_column_only_some_rows_have_is_that_rows_error_and_can_be_skipped(tmp_path, text_tokenizer):
    """In-memory rows may lack a key other rows have: skipping helps there, so the error offers it."""
    template = tmp_path / "hint.jinja"
    template.write_text("{{ content }} Hint: {{ hint }}")
    rows = [{"prompt": "a", "answer": "1", "hint": "think"}, {"prompt": "b", "answer": "1"}]
    with pytest.raises(DatasetRowError, match=r"row 1, key 'prompt': .*'hint' is undefined; fix the row") as error:
        RLHFDataset(rows, text_tokenizer, format_prompt=str(template))
    assert "the dataset's columns are" not in str(error.value)


def test_a_missing_response_cap_read_as_nan_is_no_cap(tmp_path, text_tokenizer):
    """An int column with a missing value is stored as floats, the missing one NaN (pandas' missing value)."""
    rows = [{**ROWS[0], "max_response_tokens": 16.0}, {**ROWS[1], "max_response_tokens": float("nan")}]
    assert len(RLHFDataset(rows, text_tokenizer)) == 2


# ----------------------------------------------------------------------------------------------------------------
# what a prompt may be


def test_messages_written_as_json_text_are_refused_after_leading_whitespace_and_other_json_is_a_prompt(text_tokenizer):
    as_text = "\n " + json.dumps([{"role": "user", "content": "What is 2 + 2?"}])
    with pytest.raises(
        DatasetRowError, match=r"row 0, key 'prompt': the prompt is a list of messages written as JSON"
    ):
        RLHFDataset([{"prompt": as_text, "answer": "4"}], text_tokenizer)
    table = json.dumps([{"x": 1, "y": 2}, {"x": 2, "y": 4}])  # a question about JSON data is plain text
    dataset = RLHFDataset([{"prompt": table, "answer": "2"}], text_tokenizer)
    assert dataset[0]["prompt_content"] == table


def test_a_text_models_prompt_may_hold_the_media_markers_as_plain_text(text_tokenizer):
    rows = [{"prompt": "What does the HTML tag <image> or <video> do?", "answer": "1"}]
    assert RLHFDataset(rows, text_tokenizer)[0]["prompt_content"] == rows[0]["prompt"]


def test_a_video_given_as_an_empty_list_of_frames_is_named(text_tokenizer):
    rows = [{"prompt": "What happens?", "answer": "1", "videos": [[]]}]
    with pytest.raises(DatasetRowError, match=r"row 0, key 'videos': video 0 must be a path or a list of its frames"):
        RLHFDataset(rows, text_tokenizer)


def test_images_given_as_a_tuple_are_read_as_a_list(vl25):
    tokenizer, processor = vl25
    image = Image.new("RGB", (56, 56), (200, 30, 30))
    rows = [{"prompt": "<image><image>Same colour?", "answer": "yes", "images": (image, image)}]
    example = RLHFDataset(rows, tokenizer, processor, **PIXELS)[0]
    assert [picture.size for picture in example["multi_modal_data"]["images"]] == [(56, 56), (56, 56)]


def _frames(tmp_path, count: int) -> list[str]:
    for i in range(count):
        Image.new("RGB", (64, 48), (15 * i, 15 * i, 15 * i)).save(tmp_path / f"f{i}.png")
    return [f"f{i}.png" for i in range(count)]


def test_a_video_of_exactly_video_max_frames_frames_is_read(tmp_path, vl25):
    tokenizer, processor = vl25
    rows = [{"prompt": "What happens in <video>?", "answer": "fade", "videos": [_frames(tmp_path, 4)]}]
    options = {"image_dir": str(tmp_path), "video_fps": 1.0, "max_prompt_length": 256}
    example = RLHFDataset(rows, tokenizer, processor, video_max_frames=4, **options)[0]
    assert example["multi_modal_data"]["videos"][0].shape == (4, 48, 64, 3)
    assert example["multi_modal_data"]["video_fps"] == 1.0  # the rate the rollout reads (2.0 without it)


def test_an_image_and_a_video_without_markers_both_go_before_the_text_image_first(tmp_path, vl25):
    tokenizer, processor = vl25
    Image.new("RGB", (56, 56), (200, 30, 30)).save(tmp_path / "a.png")
    rows = [{"prompt": "Compare them.", "answer": "same", "images": ["a.png"], "videos": [_frames(tmp_path, 2)]}]
    options = {"image_dir": str(tmp_path), "video_fps": 2.0, "max_prompt_length": 256, **PIXELS}
    example = RLHFDataset(rows, tokenizer, processor, **options)[0]
    text = example["prompt_text"]
    assert text.count("<|image_pad|>") == 1 and text.count("<|video_pad|>") == 1
    assert text.index("<|image_pad|>") < text.index("<|video_pad|>") < text.index("Compare them.")
    assert len(example["multi_modal_data"]["images"]) == 1 and len(example["multi_modal_data"]["videos"]) == 1


def test_a_datasets_parquets_images_and_videos_stored_by_path_are_read_from_the_image_dir(tmp_path, vl25, monkeypatch):
    """A parquet file written by `datasets` with Image and Video columns (EasyR1's export) holding paths relative to
    data.image_dir: datasets opened each from the working directory on every read, a traceback naming no row
    (FileNotFoundError: 'a.png'; for a video, ImportError: install torchcodec)."""
    import datasets
    import numpy as np
    import torch
    from media_files import write_video

    tokenizer, processor = vl25
    media = tmp_path / "media"
    media.mkdir()
    Image.new("RGB", (56, 84), (200, 30, 30)).save(media / "a.png")
    write_video(str(media / "v.mp4"))
    features = datasets.Features(
        {
            "prompt": datasets.Value("string"),
            "answer": datasets.Value("string"),
            "images": datasets.List(datasets.Image()),
            "videos": datasets.List(datasets.Video()),
        }
    )
    row = {"prompt": "<image> then <video>?", "answer": "red", "images": ["a.png"], "videos": ["v.mp4"]}
    stored = {**row, "images": [{"bytes": None, "path": "a.png"}], "videos": [{"bytes": None, "path": "v.mp4"}]}
    monkeypatch.chdir(media)  # datasets reads a video's size as it stores it
    datasets.Dataset.from_list([stored], features=features).to_parquet(str(tmp_path / "data.parquet"))
    monkeypatch.chdir(tmp_path)
    options = {"image_dir": str(media), "max_prompt_length": 512, **PIXELS}
    example = RLHFDataset(str(tmp_path / "data.parquet"), tokenizer, processor, **options)[0]
    expected = RLHFDataset([row], tokenizer, processor, **options)[0]
    assert torch.equal(example["input_ids"], expected["input_ids"])
    for kind in ("images", "videos"):
        got, want = example["multi_modal_data"][kind], expected["multi_modal_data"][kind]
        assert len(got) == len(want) == 1 and np.array_equal(np.asarray(got[0]), np.asarray(want[0])), kind
    embedded = [{**row, "videos": [{"bytes": (media / "v.mp4").read_bytes(), "path": "v.mp4"}]}]  # a Hub upload's
    with pytest.raises(DatasetRowError, match=r"row 0, key 'videos': video 0 .* got its bytes .* write the videos to"):
        RLHFDataset(embedded, tokenizer, processor, **options)
    (media / "a.png").unlink()  # a missing picture is the row's error
    with pytest.raises(DatasetRowError, match=r"data.parquet', row 0, key 'images': image 0 cannot be read"):
        RLHFDataset(str(tmp_path / "data.parquet"), tokenizer, processor, **options)


# ----------------------------------------------------------------------------------------------------------------
# skip_bad_rows at load time


def test_a_row_that_fails_when_loaded_is_skipped_and_named_once(text_tokenizer, caplog):
    rows = [dict(row) for row in ROWS]
    dataset = RLHFDataset(rows, text_tokenizer, skip_bad_rows=True)
    rows[1]["prompt"] = ""  # in-memory rows are the caller's dicts: changed after the scan
    with caplog.at_level(logging.WARNING, logger="verl.data.dataset"):
        answers = [dataset[i]["ground_truth"] for i in (0, 1, 2, 1)]
    assert answers == ["0", "4", "4", "4"]  # the next good row takes the bad one's place
    skipped = [record for record in caplog.records if "Skipped a bad row" in record.getMessage()]
    assert len(skipped) == 1 and "row 1, key 'prompt': the prompt is empty" in skipped[0].getMessage()


def test_a_marker_in_a_row_without_images_of_an_image_dataset_names_that_row(vl25):
    """The column exists (other rows have images): the row is wrong, not data.image_key."""
    tokenizer, processor = vl25
    image = Image.new("RGB", (56, 56), (200, 30, 30))
    rows = [
        {"prompt": "<image>What colour?", "answer": "red", "images": [image]},
        {"prompt": "<image>What colour?", "answer": "red", "images": []},
    ]
    with pytest.raises(DatasetRowError) as error:
        RLHFDataset(rows, tokenizer, processor, **PIXELS)
    assert "row 1, key 'images': the prompt has 1 <image> marker(s) but the row has 0 item(s) under 'images'" in str(
        error.value
    )


def test_a_message_prompts_earlier_reasoning_reaches_a_template_that_renders_it(tmp_path, text_tokenizer):
    """A few-shot assistant turn's reasoning (`reasoning_content`, or vLLM's newer `reasoning`) is passed to the chat
    template, which may keep it (GLM-4.5's with clear_thinking=false): the prompt is the conversation as the template
    renders it (the reasoning was dropped)."""
    template = tmp_path / "keeps_thinking.jinja"
    template.write_text(
        "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
        "{% set thought = message.get('reasoning_content') or message.get('reasoning') %}"
        "{% if message['role'] == 'assistant' and thought %}<think>{{ thought }}</think>{% endif %}"
        "{{ message['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    messages = [
        {"role": "user", "content": "What is 1 + 1?"},
        {"role": "assistant", "content": "2", "reasoning_content": "one and one"},
        {"role": "user", "content": "And 2 + 2?"},
        {"role": "assistant", "content": "4", "reasoning": "two and two"},
        {"role": "user", "content": "And 3 + 3?"},
    ]
    dataset = RLHFDataset([{"prompt": messages, "answer": "6"}], text_tokenizer, override_chat_template=str(template))
    expected = text_tokenizer.apply_chat_template(
        messages, chat_template=template.read_text(), add_generation_prompt=True, tokenize=False
    )
    assert "<think>one and one</think>" in expected and "<think>two and two</think>" in expected
    assert dataset[0]["prompt_text"] == expected
