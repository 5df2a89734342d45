# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Edges of the rollout dump (verl.data.rollout_dump) and of scripts/rollout_viewer.py: message records, a step
dumped again, numbers JSON cannot hold, records files with their own steps and images, and the page's title."""

import json
import math

import pytest
import torch
from PIL import Image
from repo_files import load_repo_file

from verl.data.rollout_dump import (
    conversation_records,
    dump_rollouts,
    finite_or_none,
    message_record,
    transcript_messages,
)
from verl.models.tiny_models import build_tokenizer
from verl.protocol import DataProto


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


@pytest.fixture(scope="module")
def viewer():
    return load_repo_file("scripts/rollout_viewer.py")


def test_numbers_json_cannot_hold_are_none():
    assert [finite_or_none(value) for value in (1, math.inf, -math.inf, math.nan, None)] == [
        1.0,
        None,
        None,
        None,
        None,
    ]


def test_a_message_record_keeps_its_calls_arguments_its_images_and_the_cut():
    call = {"function": {"name": "multiply", "arguments": '{"a": 6}'}}
    assert message_record({"role": "assistant", "content": "x", "tool_calls": [call]}, []) == {
        "role": "assistant",
        "content": "x",
        "tool_calls": [{"name": "multiply", "arguments": {"a": 6}}],
    }
    text = '<tool_call>{"name": "multiply", "arguments": {"a": 6}}</tool_call>'
    assert message_record({"role": "user", "content": text}, []) == {"role": "user", "content": text}
    content = [{"type": "image", "index": -1}, {"type": "image", "index": 1}, {"type": "text", "text": "t"}]
    assert message_record({"role": "tool", "content": content, "cut": True}, ["a.png", "b.png"]) == {
        "role": "tool",
        "content": "t",
        "images": ["b.png"],
        "cut": True,
    }


def test_transcript_messages_keep_the_calls_and_number_the_images():
    calls = [{"function": {"name": "f", "arguments": "{}"}}]
    messages = [
        {"role": "assistant", "content": "c", "tool_calls": calls},
        {"role": "user", "content": [{"type": "image", "image": "x"}, {"type": "image", "image": "y"}]},
    ]
    assert transcript_messages(messages, first_image=2) == [
        {"role": "assistant", "content": "c", "tool_calls": calls},
        {"role": "user", "content": [{"type": "image", "index": 2}, {"type": "image", "index": 3}]},
    ]


def test_the_prompt_message_holds_the_images_no_later_message_shows():
    messages = [{"role": "user", "content": [{"type": "image", "index": 2}]}]
    records = conversation_records("question", messages, ["p0.png", "p1.png", "e2.png"])
    assert records[0] == {"role": "user", "content": "question", "images": ["p0.png", "p1.png"]}
    assert records[1]["images"] == ["e2.png"]


def small_batch(tokenizer, responses: list[str], image=None, prompt_content=None, questions=None) -> DataProto:
    questions = questions or ["What is 2 + 3?"] * len(responses)
    prompt_rows = [tokenizer.encode(question, add_special_tokens=False) for question in questions]
    prompt_width = max(map(len, prompt_rows))
    rows = [tokenizer.encode(text, add_special_tokens=False) for text in responses]
    width = max(map(len, rows))
    pad = tokenizer.pad_token_id
    non_tensors = {"uid": ["u"] * len(rows), "multi_modal_data": [{"images": [image]} if image else None] * len(rows)}
    if prompt_content is not None:
        non_tensors["prompt_content"] = [prompt_content] * len(rows)
        non_tensors["episode_messages"] = [[{"role": "assistant", "content": text}] for text in responses]
    return DataProto.from_dict(
        tensors={
            "prompts": torch.tensor([[pad] * (prompt_width - len(row)) + row for row in prompt_rows]),
            "responses": torch.tensor([row + [pad] * (width - len(row)) for row in rows]),
            "response_mask": torch.tensor([[1] * len(row) + [0] * (width - len(row)) for row in rows]),
            "token_level_scores": torch.zeros(len(rows), width),
        },
        non_tensors=non_tensors,
    )


def test_a_step_dumped_again_replaces_its_file(tokenizer, tmp_path):
    dump_rollouts(small_batch(tokenizer, ["5", "6"]), 3, str(tmp_path), tokenizer)
    path = dump_rollouts(small_batch(tokenizer, ["7"]), 3, str(tmp_path), tokenizer)  # the step redone
    assert [json.loads(line)["response"] for line in open(path)] == ["7"]


def test_each_record_has_its_own_prompt(tokenizer, tmp_path):
    questions = ["Zebra question?", "Apple question?", "Zebra question?", "Mango question?"]
    batch = small_batch(tokenizer, ["a", "b", "c", "d"], questions=questions)
    records = [json.loads(line) for line in open(dump_rollouts(batch, 1, str(tmp_path), tokenizer))]
    assert [record["prompt"] for record in records] == questions


def test_an_image_png_cannot_store_is_written_as_rgb(tokenizer, tmp_path):
    cmyk = Image.new("CMYK", (4, 4), (0, 255, 255, 0))
    path = dump_rollouts(small_batch(tokenizer, ["5"], image=cmyk), 1, str(tmp_path), tokenizer)
    (record,) = [json.loads(line) for line in open(path)]
    with Image.open(tmp_path / record["images"][0]) as image:
        assert image.mode == "RGB" and image.getpixel((1, 1)) == (255, 0, 0)


def test_a_multi_turn_record_starts_with_the_prompt_as_the_user_wrote_it(tokenizer, tmp_path):
    batch = small_batch(tokenizer, ["5"], prompt_content="What is 2 + 3?  (as written)")
    (record,) = [json.loads(line) for line in open(dump_rollouts(batch, 1, str(tmp_path), tokenizer))]
    assert record["messages"][0] == {"role": "user", "content": "What is 2 + 3?  (as written)"}


def write_records(path, records: list[dict]) -> None:
    path.write_text("".join(json.dumps(record) + "\n" for record in records))


def test_a_records_file_keeps_its_own_steps_or_takes_its_names(viewer, tmp_path):
    write_records(tmp_path / "episodes.jsonl", [{"step": 3, "response": "a"}, {"response": "b"}])
    assert [r["step"] for r in viewer.read_records(str(tmp_path / "episodes.jsonl"))] == [3, 0]
    write_records(tmp_path / "step_5.jsonl", [{"response": "c"}])
    assert [r["step"] for r in viewer.read_records(str(tmp_path / "step_5.jsonl"))] == [5]


def test_a_step_that_is_a_boolean_or_images_that_are_no_paths_are_refused(viewer, tmp_path):
    write_records(tmp_path / "step_1.jsonl", [{"step": True, "response": "a"}])
    with pytest.raises(ValueError, match="its step is True, not an integer"):
        viewer.read_records(str(tmp_path))
    write_records(tmp_path / "step_1.jsonl", [{"response": "a", "images": [1, 2]}])
    with pytest.raises(ValueError, match=r"its images are \[1, 2\], not a list of paths"):
        viewer.read_records(str(tmp_path))


def test_a_response_that_closes_the_script_element_stays_data(viewer, tmp_path):
    text = "</script><script>alert(1)</script> & <!-- done"
    write_records(tmp_path / "step_1.jsonl", [{"response": text}])
    assert viewer.main([str(tmp_path)]) == 0
    page = (tmp_path / "index.html").read_text()
    assert page.count("</script>") == 2
    data = json.loads(page.split('id="rollout-data">', 1)[1].split("</script>", 1)[0])
    assert data["records"][0]["response"] == text


def test_a_records_file_elsewhere_embeds_its_images_and_a_nan_reward_is_no_value(
    viewer, tmp_path, monkeypatch, capsys
):
    folder = tmp_path / "eval"
    (folder / "images").mkdir(parents=True)
    Image.new("RGB", (2, 2), (0, 0, 255)).save(folder / "images" / "a.png")
    (folder / "episodes.jsonl").write_text('{"response": "r", "reward": NaN, "images": ["images/a.png"]}\n')
    monkeypatch.chdir(tmp_path)
    assert viewer.main([str(folder / "episodes.jsonl"), "--title", "a&b <run>"]) == 0
    out, err = capsys.readouterr()
    assert "1 responses over 1 steps, 1 images" in out and "missing" not in err
    page = (folder / "episodes.html").read_text()
    assert "<title>Rollouts: a&amp;b &lt;run&gt;</title>" in page
    data = json.loads(page.split('id="rollout-data">', 1)[1].split("</script>", 1)[0])
    assert data["records"][0]["reward"] is None and data["images"]["images/a.png"].startswith("data:image/png;base64,")


@pytest.mark.parametrize("name", ["run[1]", "exp[a]", "lr*2?"])
def test_a_folder_named_with_glob_characters_is_read_as_named(viewer, tmp_path, name):
    """A run folder `run[1]` is not the pattern `run1`: its own records are read, not another folder's (or none)."""
    (tmp_path / "run1").mkdir()
    write_records(tmp_path / "run1" / "step_1.jsonl", [{"response": "another run's"}])
    (tmp_path / name).mkdir()
    write_records(tmp_path / name / "step_2.jsonl", [{"response": "its own"}])
    assert [r["response"] for r in viewer.read_records(str(tmp_path / name))] == ["its own"]
    assert viewer.main([str(tmp_path / name)]) == 0
    assert "its own" in (tmp_path / name / "index.html").read_text()
